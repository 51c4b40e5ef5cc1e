-- transformer.model: Model -- default_model_path, configurations, creating,
-- loading and saving models, logits, losses and their backward.

local U = require("transformer._util")
local M, VARIANT_KEYS, check_activation = U.M, U.VARIANT_KEYS, U.check_activation
local check_bool, check_int, check_number = U.check_bool, U.check_int, U.check_number
local check_options, core, fail, fmt = U.check_options, U.core, U.fail, U.fmt
local ids_shape, is_options, shape_of = U.ids_shape, U.is_options, U.shape_of
local shape_string, tensor_table, to_tensor = U.shape_string, U.tensor_table, U.to_tensor
local variant_of = U.variant_of
local mod = require("transformer.module")
local Object, class, constructor = mod.Object, mod.class, mod.constructor
local handle, keep, new_object = mod.handle, mod.keep, mod.new_object
local saved = mod.saved
local Tokenizer = require("transformer.tokenizer").Tokenizer
local load_handle = require("transformer.weights").load_handle

---------------------------------------------------------------------------
-- Models
---------------------------------------------------------------------------

-- Whether a regular file is at path (after following links), asked without
-- opening it: io.open of a FIFO blocks forever (files.h).
local function file_exists(path)
  return core.file_kind(path) == "file"
end

local function this_dir()
  local src = debug.getinfo(1, "S").source
  if src:sub(1, 1) ~= "@" then return nil end
  local dir = src:sub(2):match("^(.*)[/\\][^/\\]*$")
  return dir or "."
end

--- default_model_path() -> path of the default model, or nil and the list
-- of places tried.  In order: $TRANSFORMER_MODEL (when set and not empty),
-- the installed data directory (<datadir>/transformer/kjv-char.safetensors,
-- as configured at build time, then /usr/share and /usr/local/share), then
-- relative to this file: the source tree's models/kjv-char.safetensors, or
-- <prefix>/share/transformer/ next to an installed share/lua/5.4/.
function M.default_model_path()
  local env = os.getenv("TRANSFORMER_MODEL")
  if env and env ~= "" then return env end
  local candidates = {}
  if core.INSTALLED_MODEL ~= "" then candidates[#candidates + 1] = core.INSTALLED_MODEL end
  for _, p in ipairs({ "/usr/share/transformer/kjv-char.safetensors",
                       "/usr/local/share/transformer/kjv-char.safetensors" }) do
    if p ~= core.INSTALLED_MODEL then candidates[#candidates + 1] = p end
  end
  local dir = this_dir()
  if dir then
    -- <root>/bindings/lua/transformer/model.lua ->
    -- <root>/models/kjv-char.safetensors
    local root = dir:match("^(.-)/?bindings/lua/transformer$")
    if root then
      candidates[#candidates + 1] = (root == "" and "" or root .. "/") .. "models/kjv-char.safetensors"
    else
      -- installed as <prefix>/share/lua/5.4/transformer/model.lua, with the
      -- model in <prefix>/share/transformer (an installation moved elsewhere)
      local share = dir:match("^(.*)/lua/5%.4/transformer$")
      if share then
        candidates[#candidates + 1] = share .. "/transformer/kjv-char.safetensors"
      end
    end
  end
  for _, p in ipairs(candidates) do
    if file_exists(p) then return p end
  end
  return nil, candidates
end

-- Model configuration: the flat table of Model.config <-> the core's.
local CONFIG_KEYS = { "architecture", "vocab_size", "d_model", "n_heads", "d_ff", "activation",
                      "layer_norm_eps", "norm_first", "n_layers", "n_encoder_layers",
                      "n_decoder_layers", "context_length", "positional", "tied_embeddings",
                      "embedding_scale", "positional_base", "attention", "bias" }
local DEFAULT_POSITIONAL_BASE = 10000.0

-- The options of a config (positional_base, attention): the core's options
-- table, or nil when they are the defaults.
local function core_options(cfg)
  local base = cfg.positional_base
  if base ~= nil then base = check_number("positional_base", base) end
  local variant
  if cfg.attention ~= nil then
    if not is_options(cfg.attention) then
      fail("the model config's attention must be a table of named variant fields")
    end
    check_options("the model config's attention", cfg.attention, VARIANT_KEYS)
    variant = variant_of(cfg.attention)
  end
  if variant ~= nil then
    local defaults = core.tfm_attention_config_init()
    local same = true
    for k, v in pairs(variant) do
      if defaults[k] ~= v then same = false end
    end
    if same then variant = nil end
  end
  if variant == nil and (base == nil or base == 0 or base == DEFAULT_POSITIONAL_BASE) then
    return nil
  end
  return { positional_base = base, attention = variant }
end

local function core_config(cfg)
  check_options("model config", cfg, CONFIG_KEYS)
  for _, k in ipairs({ "vocab_size", "d_model", "n_heads", "context_length" }) do
    if cfg[k] == nil then fail("the model config needs '%s'", k) end
  end
  local d = check_int("d_model", cfg.d_model, 1)
  local function get(k, default) if cfg[k] == nil then return default end return cfg[k] end
  return {
    architecture = get("architecture", "decoder_only"),
    layer = { d_model = d, n_heads = check_int("n_heads", cfg.n_heads, 1),
              d_ff = check_int("d_ff", get("d_ff", 4 * d), 1),
              activation = check_activation(get("activation", "relu")),
              layer_norm_eps = check_number("layer_norm_eps", get("layer_norm_eps", 1e-5)),
              norm_first = check_bool("norm_first", get("norm_first", false)) },
    vocab_size = check_int("vocab_size", cfg.vocab_size, 1),
    n_layers = check_int("n_layers", get("n_layers", 1), 1),
    n_encoder_layers = check_int("n_encoder_layers", get("n_encoder_layers", 1), 1),
    n_decoder_layers = check_int("n_decoder_layers", get("n_decoder_layers", 1), 1),
    context_length = check_int("context_length", cfg.context_length, 1),
    positional = get("positional", "learned"),
    tied_embeddings = check_bool("tied_embeddings", get("tied_embeddings", true)),
    embedding_scale = check_bool("embedding_scale", get("embedding_scale", false)),
  }, core_options(cfg)
end

local function flat_config(c, o)
  local out = {
    architecture = c.architecture, vocab_size = c.vocab_size, d_model = c.layer.d_model,
    n_heads = c.layer.n_heads, d_ff = c.layer.d_ff, activation = c.layer.activation,
    layer_norm_eps = c.layer.layer_norm_eps, norm_first = c.layer.norm_first,
    context_length = c.context_length, positional = c.positional,
    tied_embeddings = c.tied_embeddings, embedding_scale = c.embedding_scale,
  }
  if c.architecture == "encoder_decoder" then
    out.n_encoder_layers, out.n_decoder_layers = c.n_encoder_layers, c.n_decoder_layers
  else
    out.n_layers = c.n_layers
  end
  -- the options, only where they are not the defaults
  if o.positional_base ~= 0 and o.positional_base ~= DEFAULT_POSITIONAL_BASE then
    out.positional_base = o.positional_base
  end
  local defaults, variant = core.tfm_attention_config_init(), nil
  for _, k in ipairs(VARIANT_KEYS) do
    local v = o.attention[k]
    if v ~= defaults[k] and not (k == "n_kv_heads" and v == c.layer.n_heads) then
      variant = variant or {}
      variant[k] = v
    end
  end
  out.attention = variant
  return out
end

local Model = class("Model")
M.Model = Model

-- An image model's (ViT's) patch_size, image_size and num_channels into
-- cfg, read off its "patch_embedding.weight" [d, C, P, P] and its
-- position table (the class token and (image_size / P)^2 patches).
local function image_config(h, cfg)
  local ok, shape = pcall(core.tfm_module_parameter_shape, h, "patch_embedding.weight")
  if not ok then return end
  cfg.num_channels, cfg.patch_size = shape[2], shape[3]
  local side = math.floor(math.sqrt(cfg.context_length - 1) + 0.5)
  cfg.image_size = side * cfg.patch_size
end

local function wrap_model(h, tok, path)
  local cfg = flat_config(core.tfm_model_get_config(h), core.tfm_model_get_options(h))
  if core.tfm_model_has_bias(h) == 0 then cfg.bias = false end
  image_config(h, cfg)
  return new_object(Model, h, {
    config = cfg, architecture = cfg.architecture, vocab_size = cfg.vocab_size,
    context_length = cfg.context_length, path = path, tokenizer = tok, _caches = setmetatable({}, { __mode = "k" }),
    _repr = fmt("%s, vocab_size=%d, d_model=%d, n_heads=%d, context_length=%d%s",
      cfg.architecture, cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.context_length,
      path and (", path=\"" .. path .. "\"") or ""),
  })
end

--- Model(config [, vocab]) -> a model with zero weights.  config has the
-- keys of model.config: architecture ("decoder_only" (default),
-- "encoder_only", "encoder_decoder"), vocab_size, d_model, n_heads,
-- context_length (required), d_ff (4 d_model), activation ("relu"),
-- layer_norm_eps (1e-5), norm_first (false), n_layers or n_encoder_layers
-- and n_decoder_layers (1), positional ("learned", "sinusoidal", "none"),
-- tied_embeddings (true), embedding_scale (false); and the options:
-- positional "sinusoidal_concat" (sin | cos halves), positional_base
-- (10000), attention (a table of Attention's variant fields, used by every
-- block's self-attention and by the KV cache; decoder-only and
-- encoder-only models), bias (true; false builds every block without
-- biases, as PyTorch 2.x's bias=False: tfm_model_create_v2; model.config
-- holds bias = false only then).  model.config holds the options only where they
-- are not the defaults; model:attention_config() has every field.  vocab:
-- optional tokenizer vocabulary (the characters in id order).
local function new_model(config, vocab)
  if not is_options(config) then fail("Model: config must be a table of named values") end
  local c, o = core_config(config)
  local h
  if config.bias ~= nil and not check_bool("bias", config.bias) then
    h = core.tfm_model_create_v2(c, o, { bias = false })
  elseif o then
    h = core.tfm_model_create_ex(c, o)
  else
    h = core.tfm_model_create(c)
  end
  local tok
  if vocab ~= nil then tok = Tokenizer(vocab) end
  return wrap_model(h, tok, nil):reset_parameters()
end
constructor(Model, new_model)
M.create_model = new_model

-- The tokenizer files a checkpoint directory may hold (tokenizer_files.c):
-- one of these, or both files of a pair.
local TOKENIZER_FILES = { "tokenizer.json", "tokenizer.model", "spiece.model",
                          "sentencepiece.bpe.model", "source.spm", "vocab.txt" }
local TOKENIZER_PAIRS = { { "encoder.json", "vocab.bpe" },
                          { "vocab.json", "merges.txt" } }

-- Whether something other than a directory is at path (after following
-- links), as the library's tokenizer_files.c asks, without opening it (a
-- FIFO would block io.open forever): a FIFO or a device named like a
-- tokenizer file counts, so that Tokenizer.load refuses it by name.
local function is_present(path)
  local kind = core.file_kind(path)
  return kind ~= nil and kind ~= "directory"
end

-- Whether checkpoint directory dir holds a tokenizer file.
local function has_tokenizer_files(dir)
  for _, n in ipairs(TOKENIZER_FILES) do
    if is_present(dir .. "/" .. n) then return true end
  end
  for _, pair in ipairs(TOKENIZER_PAIRS) do
    if is_present(dir .. "/" .. pair[1]) and is_present(dir .. "/" .. pair[2]) then
      return true
    end
  end
  return false
end

--- Model.load([path]) / load_model([path]) / Model.from_pretrained(path)
-- -> Model: a model file (safetensors with the libtransformer metadata)
-- and, when its metadata has one, its tokenizer; a GGUF file (GPT-2,
-- Llama) with its tokenizer; or a Hugging Face
-- checkpoint directory (config.json and model.safetensors or its shards;
-- GPT-2, Llama, BERT, Marian and ViT, model.h: tfm_model_load; a ViT runs
-- with model:image_logits) with the tokenizer its
-- files give (tokenizer.json, vocab.json + merges.txt, vocab.txt, ...), nil
-- when it has none;
-- path defaults to default_model_path().  opts: nil, or {dtype =
-- "auto" (each weight in the type its file stores it in) or a name of
-- module:quantize ("f32" (the default), "bf16", "f16", "q8_0", "q4_0"),
-- mmap = true (the default: weights kept in the file's type are used
-- where they lie in a mapping of the file) or false} (weights.h:
-- tfm_model_load_v2).  Weights used from the mapping are read-only,
-- float32 ones included: such a model does not train.  Without opts every
-- weight is float32 in the model's own memory (tfm_model_load).  A GGUF
-- file (.gguf) brings its own tokenizer.
function Model.load(path, opts)
  if path == nil then
    local tried
    path, tried = M.default_model_path()
    if not path then
      fail("no model file found (set TRANSFORMER_MODEL or pass a path); tried: %s",
           table.concat(tried, ", "))
    end
  end
  if type(path) ~= "string" then fail("path must be a string, got %s", type(path)) end
  local h = load_handle(path, opts)
  local tok
  if path:lower():sub(-5) == ".gguf" then  -- tokenizer.ggml.* keys
    local ok, t = pcall(Tokenizer.load, path)
    if not ok then core.close(h); error(t, 0) end
    return wrap_model(h, t, path)
  end
  if core.file_kind(path) == "directory" then  -- a checkpoint directory
    if has_tokenizer_files(path) then
      local ok, t = pcall(Tokenizer.load, path)
      if not ok then core.close(h); error(t, 0) end
      tok = t
    end
    return wrap_model(h, tok, path)
  end
  local okf, f = pcall(core.tfm_safetensors_open, path)
  if not okf then
    -- The library loaded it, yet it is no safetensors file: a GGUF file,
    -- whose tokenizer is its tokenizer.ggml.* keys (tfm_tokenizer_load).
    local ok, t = pcall(Tokenizer.load, path)
    if not ok then core.close(h); error(t, 0) end
    return wrap_model(h, t, path)
  end
  local has_tok = core.tfm_safetensors_metadata(f, "tfm.tokenizer") ~= nil
  core.close(f)
  if has_tok then tok = Tokenizer.load(path) end
  return wrap_model(h, tok, path)
end
M.load_model = Model.load
Model.from_pretrained = Model.load
M.from_pretrained = Model.load

--- model:attention_config() -> every block's self-attention variant (every
-- field, as MultiheadAttention:attention_config()).
function Model:attention_config()
  return core.tfm_model_get_options(handle(self)).attention
end

local function tokenizer(self)
  handle(self)
  local tok = rawget(self, "tokenizer")
  if tok == nil then fail("this model has no tokenizer (its file has no tfm.tokenizer metadata): pass token ids") end
  return tok
end

--- model:encode(text), model:decode(ids): shortcuts for model.tokenizer's.
function Model:encode(text)
  return tokenizer(self):encode(text)
end

function Model:decode(ids)
  return tokenizer(self):decode(ids)
end

local function model_ids(self, ids, what)
  if type(ids) == "string" then return tokenizer(self):encode(ids) end
  return ids
end

--- model:logits(ids [, tgt_ids]) -> logits of every position, all at once.
-- Decoder-only (causal) and encoder-only (bidirectional) models: ids [L]
-- (or a string) -> [L][vocab_size]; ids [B][L] -> [B][L][vocab_size].
-- Encoder-decoder models: ids are the source [B][S] (or [S]), tgt_ids the
-- target [B][L] (or [L]) -> [B][L][vocab_size] (or [L][vocab_size]).
-- L must not exceed context_length.
function Model:logits(ids, tgt_ids)
  local h = handle(self)
  local nested, B, L
  ids, nested, B, L = ids_shape(model_ids(self, ids), "ids")
  if L < 1 then fail("ids must not be empty") end
  local out
  if self.architecture == "encoder_decoder" then
    if tgt_ids == nil then fail("an encoder-decoder model needs tgt_ids: logits(src_ids, tgt_ids)") end
    local tn, tb, tl
    tgt_ids, tn, tb, tl = ids_shape(model_ids(self, tgt_ids), "tgt_ids")
    if tn ~= nested then fail("ids and tgt_ids must both be flat or both nested") end
    if tl < 1 then fail("tgt_ids must not be empty") end
    out = core.tfm_tensor_create({ tb, tl, self.vocab_size })
    core.model_seq2seq_logits(h, ids, tgt_ids, out)
  else
    if tgt_ids ~= nil then fail("tgt_ids is only for encoder-decoder models") end
    out = core.tfm_tensor_create({ B, L, self.vocab_size })
    core.tfm_model_logits(h, ids, out)
  end
  local t = tensor_table(out)
  return nested and t or t[1]
end

function Model:forward(ids, tgt_ids)
  return self:logits(ids, tgt_ids)
end

--- model:image_logits(pixels) -> an image model's (a ViT checkpoint's)
-- class logits (tfm_model_image_logits): pixels [B][C][H][W] (numbers,
-- normalised as the checkpoint's image processor does; H = W = image_size)
-- -> [B][num_labels]; pixels [C][H][W] -> [num_labels].  model.config has
-- patch_size, image_size and num_channels for such a model.
function Model:image_logits(pixels)
  local h = handle(self)
  if self.config.patch_size == nil then
    fail("this model takes token ids, not images (it has no patch embedding)")
  end
  local shape = shape_of(pixels)
  local single = #shape == 3
  if single then pixels, shape = { pixels }, { 1, shape[1], shape[2], shape[3] } end
  if #shape ~= 4 then
    fail("pixels must be [B][C][H][W] or [C][H][W], got %s", shape_string(shape))
  end
  local x = to_tensor(pixels, "pixels")
  local out = core.tfm_tensor_create({ shape[1], self.vocab_size })
  core.tfm_model_image_logits(h, x, out)
  local t = tensor_table(out)
  return single and t[1] or t
end

--- model:image_backward(pixels, grad_logits): the backward of
-- model:image_logits(pixels) (tfm_model_image_backward), given the
-- gradient of a loss with respect to its logits (the logits' shape):
-- accumulates every parameter's gradient (model:grad(name)); the model
-- must be in training mode (model:train()).
function Model:image_backward(pixels, grad_logits)
  local h = handle(self)
  if self.config.patch_size == nil then
    fail("this model takes token ids, not images (it has no patch embedding)")
  end
  local shape = shape_of(pixels)
  if #shape == 3 then
    pixels, grad_logits = { pixels }, { grad_logits }
  end
  core.tfm_model_image_backward(h, (to_tensor(pixels, "pixels")),
                                (to_tensor(grad_logits, "grad_logits")))
end

--- model:loss(ids, targets, {tgt_ids, ignore_index = -100,
-- label_smoothing = 0}): the mean cross-entropy of the logits of ids
-- (encoder-decoder: of tgt_ids given the source ids) against targets
-- [B][L] (for a causal LM the ids shifted left, ignore_index where there
-- is none), as torch.nn.functional.cross_entropy; in training mode it
-- keeps what model:backward() needs.  Returns a number.
function Model:loss(ids, targets, opts)
  local h = handle(self)
  opts = check_options("Model:loss", opts, { "tgt_ids", "ignore_index", "label_smoothing" })
  local ignore = opts.ignore_index == nil and -100 or check_int("ignore_index", opts.ignore_index)
  local smoothing = opts.label_smoothing == nil and 0.0
    or check_number("label_smoothing", opts.label_smoothing)
  local _, nested, B, L = ids_shape(model_ids(self, ids), "ids")
  local src = model_ids(self, ids)
  local tgt, rows = nil, L
  if self.architecture == "encoder_decoder" then
    if opts.tgt_ids == nil then fail("an encoder-decoder model needs {tgt_ids = ...}") end
    local tn
    tgt, tn, B, rows = ids_shape(model_ids(self, opts.tgt_ids), "tgt_ids")
    if tn ~= nested then fail("ids and tgt_ids must both be flat or both nested") end
  elseif opts.tgt_ids ~= nil then
    fail("tgt_ids is only for encoder-decoder models")
  end
  local logits = core.tfm_tensor_create({ B, rows, self.vocab_size })
  if tgt then core.model_seq2seq_logits(h, src, tgt, logits)
  else core.tfm_model_logits(h, src, logits) end
  local dlogits = core.tfm_tensor_create({ B, rows, self.vocab_size })
  local value = core.cross_entropy(logits, targets, ignore, smoothing, dlogits)
  keep(self, { src = src, tgt = tgt, dlogits = dlogits })
  return value
end

--- model:loss_backward(ids, targets [, {ignore_index = -100,
-- label_smoothing = 0, grad_scale = 1}]) -> loss: model:loss(ids, targets)
-- then model:backward() in one forward (tfm_model_loss_backward;
-- decoder-only and encoder-only models in training mode): returns the mean
-- cross-entropy and accumulates grad_scale times its gradient into every
-- parameter's (grad_scale = 1 / n for n accumulated micro-batches).  A
-- failed call changes no gradient.
function Model:loss_backward(ids, targets, opts)
  local h = handle(self)
  opts = check_options("Model:loss_backward", opts, { "ignore_index", "label_smoothing", "grad_scale" })
  if self.architecture == "encoder_decoder" then
    fail("loss_backward takes decoder-only and encoder-only models; use loss{tgt_ids = ...} and backward()")
  end
  local ignore = opts.ignore_index == nil and -100 or check_int("ignore_index", opts.ignore_index)
  local smoothing = opts.label_smoothing == nil and 0.0
    or check_number("label_smoothing", opts.label_smoothing)
  local scale = opts.grad_scale == nil and 1.0 or check_number("grad_scale", opts.grad_scale)
  return core.model_loss_backward(h, model_ids(self, ids), targets, ignore, smoothing, scale)
end

--- Back from the last training-mode loss(): accumulates the gradient of
-- every parameter (tfm_model_backward / tfm_model_seq2seq_backward), as
-- loss.backward() does in torch.
function Model:backward()
  local h = handle(self)
  local sv = saved(self, "Model")
  if sv.tgt then core.model_seq2seq_backward(h, sv.src, sv.tgt, sv.dlogits)
  else core.tfm_model_backward(h, sv.src, sv.dlogits) end
end


--- model:save(path [, metadata]): writes a model file: configuration,
-- parameters and, when the model has one, the tokenizer.
function Model:save(path, metadata)
  local h = handle(self)
  local extra = {}
  for k, v in pairs(metadata or {}) do extra[tostring(k)] = tostring(v) end
  local tok = rawget(self, "tokenizer")
  if tok ~= nil then
    extra["tfm.tokenizer"] = "char"
    extra["tfm.vocab"] = tok:vocab()
  end
  core.tfm_model_save(h, path, extra)
end

--- model:close(): frees the model, its KV caches and its tokenizer.
function Model:close()
  for cache in pairs(rawget(self, "_caches") or {}) do cache:close() end
  Object.close(self)
  local tok = rawget(self, "tokenizer")
  if tok ~= nil then tok:close() end
end
Model.__close = function(self) Model.close(self) end

return {
  Model = Model, model_ids = model_ids
}
