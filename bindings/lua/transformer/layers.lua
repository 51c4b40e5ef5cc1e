-- transformer.layers: TransformerEncoderLayer, TransformerDecoderLayer,
-- their stacks TransformerEncoder and TransformerDecoder, and Transformer.

local U = require("transformer._util")
local M, block_masks, check_activation = U.M, U.block_masks, U.check_activation
local check_bool, check_int, check_number = U.check_bool, U.check_int, U.check_number
local check_options, core, fail, fmt = U.check_options, U.core, U.fail, U.fmt
local parse_args, to_tensor, variant_of = U.parse_args, U.to_tensor, U.variant_of
local variant_repr, with_variant_args = U.variant_repr, U.with_variant_args
local mod = require("transformer.module")
local batched, class, constructor = mod.batched, mod.class, mod.constructor
local get_parameter_tensor, handle = mod.get_parameter_tensor, mod.handle
local keep, mask_arg, new_object = mod.keep, mod.mask_arg, mod.new_object
local saved, unbatched = mod.saved, mod.unbatched
local MultiheadAttention = require("transformer.attention").MultiheadAttention
local LayerNorm = require("transformer.nn").LayerNorm

---------------------------------------------------------------------------
-- Encoder and decoder layers
---------------------------------------------------------------------------

local LAYER_ARGS = { "d_model", "nhead", "dim_feedforward", "dropout", "activation",
                     "layer_norm_eps", "batch_first", "norm_first", "bias" }
local LAYER_DEFAULTS = { dim_feedforward = 2048, dropout = 0.1, activation = "relu",
                         layer_norm_eps = 1e-5, batch_first = true, norm_first = false,
                         bias = true }

-- The layer configuration table of the arguments, and their bias flag
-- (false: PyTorch 2.x's bias=False, layers without any bias).
local function layer_config(what, a)
  local d = check_int("d_model", a.d_model, 1)
  local nhead = check_int("nhead", a.nhead, 1)
  check_number("dropout", a.dropout)
  local bias = check_bool("bias", a.bias)
  return {
    d_model = d, n_heads = nhead, d_ff = check_int("dim_feedforward", a.dim_feedforward, 1),
    activation = check_activation(a.activation),
    layer_norm_eps = check_number("layer_norm_eps", a.layer_norm_eps),
    norm_first = check_bool("norm_first", a.norm_first),
  }, bias
end

local function layer_repr(c)
  return fmt("d_model=%d, nhead=%d, dim_feedforward=%d, activation=\"%s\", layer_norm_eps=%g, norm_first=%s",
    c.d_model, c.n_heads, c.d_ff, c.activation, c.layer_norm_eps, tostring(c.norm_first))
end

local TransformerEncoderLayer = class("TransformerEncoderLayer")
M.TransformerEncoderLayer = TransformerEncoderLayer

--- TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048,
--  dropout=0.1, activation="relu", layer_norm_eps=1e-5, batch_first=true,
--  norm_first=false, bias=true, {variant...}): self-attention and
--  feed-forward, each with residual and LayerNorm (post-norm, or pre-norm
--  with norm_first).  bias=false: PyTorch 2.x's bias=False, no bias in the
--  attention, the linears or the norms (no "*.bias" parameter).
--  Activations: "relu", "gelu" (exact), "gelu_tanh", "silu".  The attention
--  variant fields of Attention (score, n_kv_heads, rope, relative,
--  sparsity, ...) set the self-attention's variant (parameters
--  self_attn.*); such a layer cannot be a TransformerEncoder's template.
local ENC_LAYER_ARGS = with_variant_args(LAYER_ARGS)
local function new_encoder_layer(...)
  local a = parse_args("TransformerEncoderLayer", ENC_LAYER_ARGS, LAYER_DEFAULTS,
                       { "d_model", "nhead" }, ...)
  local c, bias = layer_config("TransformerEncoderLayer", a)
  local variant = variant_of(a)
  local h
  if not bias then
    h = core.tfm_encoder_layer_create_v2(c, { bias = false, attention = variant })
  elseif variant then
    h = core.tfm_encoder_layer_create_ex(c, variant)
  else
    h = core.tfm_encoder_layer_create(c)
  end
  return new_object(TransformerEncoderLayer, h, {
    dropout = a.dropout, config = c, bias = bias, batch_first = check_bool("batch_first", a.batch_first), variant = variant,
    _repr = layer_repr(c) .. variant_repr(variant) }):reset_parameters()
end
constructor(TransformerEncoderLayer, new_encoder_layer)

TransformerEncoderLayer.attention_config = MultiheadAttention.attention_config

local ENC_OPTIONS = { "src_mask", "src_key_padding_mask", "is_causal" }

local function encoder_forward(self, fn, src, opts, mask_name)
  local h = handle(self)
  local x, was_batched, s = batched("src", src, self.batch_first)
  local B, L = s[1], s[2]
  local masks = block_masks({ "src_key_padding_mask", mask_name, "is_causal" },
    B, self.config.n_heads, L, L, mask_arg(opts.src_key_padding_mask, was_batched),
    opts[mask_name], opts.is_causal)
  local t = to_tensor(x, "src")
  local out = core.tfm_tensor_create({ B, L, s[3] })
  fn(h, t, masks, out)
  keep(self, { x = t, masks = masks, batched = was_batched, shape = { B, L, s[3] } })
  return unbatched(out, was_batched, self.batch_first)
end

--- layer:forward(src, {src_mask, src_key_padding_mask, is_causal=false})
--  src [B][L][d_model]; src_mask [L][L] or [B*nhead][L][L];
--  src_key_padding_mask [B][L] (true = padding).  Returns [B][L][d_model].
function TransformerEncoderLayer:forward(src, opts)
  opts = check_options("TransformerEncoderLayer:forward", opts, ENC_OPTIONS)
  return encoder_forward(self, core.tfm_encoder_layer_forward, src, opts, "src_mask")
end

--- The gradient with respect to src of the last training-mode call, given
-- grad_output (the output's shape and layout), in src's layout;
-- accumulates every parameter's gradient (tfm_encoder_layer_backward).
function TransformerEncoderLayer:backward(grad_output)
  local h = handle(self)
  local sv = saved(self, "TransformerEncoderLayer")
  local g = batched("grad_output", grad_output, self.batch_first)
  local gt = to_tensor(g, "grad_output")
  local gx = core.tfm_tensor_create(sv.shape)
  core.tfm_encoder_layer_backward(h, sv.x, sv.masks, gt, gx)
  return unbatched(gx, sv.batched, self.batch_first)
end

local TransformerDecoderLayer = class("TransformerDecoderLayer")
M.TransformerDecoderLayer = TransformerDecoderLayer

--- TransformerDecoderLayer(d_model, nhead, dim_feedforward=2048,
--  dropout=0.1, activation="relu", layer_norm_eps=1e-5, batch_first=true,
--  norm_first=false, bias=true): self-attention, cross-attention over the
--  memory, feed-forward; bias=false as TransformerEncoderLayer.
local function new_decoder_layer(...)
  local a = parse_args("TransformerDecoderLayer", LAYER_ARGS, LAYER_DEFAULTS,
                       { "d_model", "nhead" }, ...)
  local c, bias = layer_config("TransformerDecoderLayer", a)
  local h = core.tfm_decoder_layer_create_v2(c, { bias = bias })
  return new_object(TransformerDecoderLayer, h, {
    dropout = a.dropout, config = c, bias = bias, batch_first = check_bool("batch_first", a.batch_first),
    _repr = layer_repr(c) }):reset_parameters()
end
constructor(TransformerDecoderLayer, new_decoder_layer)

local DEC_OPTIONS = { "tgt_mask", "memory_mask", "tgt_key_padding_mask",
                      "memory_key_padding_mask", "tgt_is_causal", "memory_is_causal" }

local function decoder_masks(self, opts, B, L, S, was_batched)
  local H = self.config.n_heads
  local tm = block_masks({ "tgt_key_padding_mask", "tgt_mask", "tgt_is_causal" }, B, H, L, L,
    mask_arg(opts.tgt_key_padding_mask, was_batched), opts.tgt_mask, opts.tgt_is_causal)
  local mm = block_masks({ "memory_key_padding_mask", "memory_mask", "memory_is_causal" },
    B, H, L, S, mask_arg(opts.memory_key_padding_mask, was_batched), opts.memory_mask,
    opts.memory_is_causal)
  return tm, mm
end

local function decoder_forward(self, fn, tgt, memory, opts)
  local h = handle(self)
  local bf = self.batch_first
  local x, was_batched, s = batched("tgt", tgt, bf)
  local m, mb, ms = batched("memory", memory, bf)
  if mb ~= was_batched then fail("tgt and memory must both be batched (3D) or both unbatched (2D)") end
  local B, L, S = s[1], s[2], ms[2]
  local tm, mm = decoder_masks(self, opts, B, L, S, was_batched)
  local tt, tmem = to_tensor(x, "tgt"), to_tensor(m, "memory")
  local out = core.tfm_tensor_create({ B, L, s[3] })
  fn(h, tt, tmem, tm, mm, out)
  return unbatched(out, was_batched, bf)
end

--- layer:forward(tgt, memory, {tgt_mask, memory_mask, tgt_key_padding_mask,
--  memory_key_padding_mask, tgt_is_causal=false, memory_is_causal=false})
--  tgt [B][L][d_model], memory [B][S][d_model]; tgt_mask [L][L],
--  memory_mask [L][S] (or [B*nhead][...]); padding masks [B][L], [B][S].
--  Returns [B][L][d_model].
function TransformerDecoderLayer:forward(tgt, memory, opts)
  opts = check_options("TransformerDecoderLayer:forward", opts, DEC_OPTIONS)
  return decoder_forward(self, core.tfm_decoder_layer_forward, tgt, memory, opts)
end

---------------------------------------------------------------------------
-- Stacks
---------------------------------------------------------------------------

-- Copies every parameter of `src` (a module object) into `dst` under
-- prefix .. name.
local function copy_parameters(dst_h, prefix, src)
  local sh = handle(src)
  for _, name in ipairs(src:parameter_names()) do
    core.tfm_module_set_parameter(dst_h, prefix .. name, get_parameter_tensor(sh, name))
  end
end

local function check_final_norm(norm, c, bias)
  if norm == nil then return false end
  if getmetatable(norm) ~= LayerNorm then fail("norm must be a LayerNorm or nil") end
  handle(norm)
  if norm.normalized_shape[1] ~= c.d_model then
    fail("norm has %d features, the layers %d", norm.normalized_shape[1], c.d_model)
  end
  if math.abs(norm.eps - c.layer_norm_eps) > 1e-12 * math.max(1, c.layer_norm_eps) then
    fail("the final norm's eps (%g) must equal the layers' layer_norm_eps (%g)",
         norm.eps, c.layer_norm_eps)
  end
  if not bias then
    for _, name in ipairs(norm:parameter_names()) do
      if name == "bias" then
        fail("the final norm has a bias, the bias=false layers' stack has none: "
             .. "use LayerNorm(d, {bias = false})")
      end
    end
  end
  return true
end

-- A stack of a.num_layers copies of the checked template layer (its
-- current weights in every copy), with a.norm as the optional final
-- LayerNorm: the body of TransformerEncoder() and TransformerDecoder().
local function new_stack(cls, create, layer, a)
  local n = check_int("num_layers", a.num_layers, 1)
  local c, bias = layer.config, layer.bias ~= false
  local has_norm = check_final_norm(a.norm, c, bias)
  -- bias=false layers: the stack's layers and final norm have no bias (a
  -- final norm with bias=false in a stack with biases keeps a zero bias)
  local h = create(c, n, has_norm, { bias = bias })
  for i = 0, n - 1 do copy_parameters(h, "layers." .. i .. ".", layer) end
  if has_norm then copy_parameters(h, "norm.", a.norm) end
  return new_object(cls, h, {
    dropout = layer.dropout or 0.0, config = c, bias = bias, num_layers = n, batch_first = layer.batch_first,
    _repr = fmt("num_layers=%d, %s, norm=%s", n, layer_repr(c), tostring(has_norm)) })
end

local TransformerEncoder = class("TransformerEncoder")
M.TransformerEncoder = TransformerEncoder

--- TransformerEncoder(encoder_layer, num_layers, norm=nil): num_layers
--  copies of encoder_layer (a TransformerEncoderLayer, whose current
--  weights every copy gets, as PyTorch's deep copies), then the optional
--  final LayerNorm (its weights are copied too; a template with
--  bias=false needs a LayerNorm with bias=false).  Parameters
--  "layers.<i>.<layer name>" and "norm.weight", "norm.bias".
local function new_encoder(...)
  local a = parse_args("TransformerEncoder",
    { "encoder_layer", "num_layers", "norm", "enable_nested_tensor", "mask_check" },
    {}, { "encoder_layer", "num_layers" }, ...)
  local layer = a.encoder_layer
  if getmetatable(layer) ~= TransformerEncoderLayer then
    fail("encoder_layer must be a TransformerEncoderLayer")
  end
  handle(layer)
  if layer.variant ~= nil then
    fail("TransformerEncoder: the template layer has an attention variant, which the stacks "
         .. "do not take; use Model with an attention config")
  end
  return new_stack(TransformerEncoder, core.tfm_encoder_create_v2, layer, a)
end
constructor(TransformerEncoder, new_encoder)

--- encoder:forward(src, {mask, src_key_padding_mask, is_causal=false}):
--  as TransformerEncoderLayer:forward (PyTorch names the attention mask
--  `mask` here).
function TransformerEncoder:forward(src, opts)
  opts = check_options("TransformerEncoder:forward", opts,
                       { "mask", "src_key_padding_mask", "is_causal" })
  return encoder_forward(self, core.tfm_encoder_forward, src, opts, "mask")
end

local TransformerDecoder = class("TransformerDecoder")
M.TransformerDecoder = TransformerDecoder

--- TransformerDecoder(decoder_layer, num_layers, norm=nil): as
--  TransformerEncoder, with TransformerDecoderLayer copies.
local function new_decoder(...)
  local a = parse_args("TransformerDecoder", { "decoder_layer", "num_layers", "norm" },
    {}, { "decoder_layer", "num_layers" }, ...)
  local layer = a.decoder_layer
  if getmetatable(layer) ~= TransformerDecoderLayer then
    fail("decoder_layer must be a TransformerDecoderLayer")
  end
  handle(layer)
  return new_stack(TransformerDecoder, core.tfm_decoder_create_v2, layer, a)
end
constructor(TransformerDecoder, new_decoder)

--- decoder:forward(tgt, memory, {tgt_mask, memory_mask, tgt_key_padding_mask,
--  memory_key_padding_mask, tgt_is_causal, memory_is_causal}).
function TransformerDecoder:forward(tgt, memory, opts)
  opts = check_options("TransformerDecoder:forward", opts, DEC_OPTIONS)
  return decoder_forward(self, core.tfm_decoder_forward, tgt, memory, opts)
end

local Transformer = class("Transformer")
M.Transformer = Transformer

--- Transformer(d_model=512, nhead=8, num_encoder_layers=6,
--  num_decoder_layers=6, dim_feedforward=2048, dropout=0.1,
--  activation="relu", custom_encoder=nil, custom_decoder=nil,
--  layer_norm_eps=1e-5, batch_first=true, norm_first=false, bias=true):
--  PyTorch's nn.Transformer (both stacks end with a LayerNorm; bias=false:
--  no bias anywhere, the final norms included).  Parameters
--  "encoder.layers.<i>.*", "encoder.norm.*", "decoder.layers.<i>.*",
--  "decoder.norm.*".
local function new_transformer(...)
  local a = parse_args("Transformer",
    { "d_model", "nhead", "num_encoder_layers", "num_decoder_layers", "dim_feedforward",
      "dropout", "activation", "custom_encoder", "custom_decoder", "layer_norm_eps",
      "batch_first", "norm_first", "bias" },
    { d_model = 512, nhead = 8, num_encoder_layers = 6, num_decoder_layers = 6,
      dim_feedforward = 2048, dropout = 0.1, activation = "relu", layer_norm_eps = 1e-5,
      batch_first = true, norm_first = false, bias = true }, {}, ...)
  if a.custom_encoder ~= nil or a.custom_decoder ~= nil then
    fail("Transformer: custom_encoder and custom_decoder are not supported")
  end
  local c, bias = layer_config("Transformer", a)
  local ne = check_int("num_encoder_layers", a.num_encoder_layers, 1)
  local nd = check_int("num_decoder_layers", a.num_decoder_layers, 1)
  local h = core.tfm_transformer_create_v2(c, ne, nd, { bias = bias })
  return new_object(Transformer, h, {
    dropout = a.dropout, config = c, bias = bias, d_model = c.d_model, nhead = c.n_heads, num_encoder_layers = ne,
    num_decoder_layers = nd, batch_first = check_bool("batch_first", a.batch_first),
    _repr = fmt("num_encoder_layers=%d, num_decoder_layers=%d, %s", ne, nd, layer_repr(c)) }
  ):reset_parameters()
end
constructor(Transformer, new_transformer)

--- Transformer.generate_square_subsequent_mask(sz): the causal float mask
--  [sz][sz], -math.huge above the diagonal and 0 elsewhere.
function Transformer.generate_square_subsequent_mask(sz)
  sz = check_int("sz", sz, 1)
  local m = {}
  for i = 1, sz do
    local row = {}
    for j = 1, sz do row[j] = j > i and -math.huge or 0.0 end
    m[i] = row
  end
  return m
end

--- t:forward(src, tgt, {src_mask, tgt_mask, memory_mask,
--  src_key_padding_mask, tgt_key_padding_mask, memory_key_padding_mask,
--  src_is_causal, tgt_is_causal, memory_is_causal})
--  src [B][S][d_model], tgt [B][L][d_model] -> [B][L][d_model].
function Transformer:forward(src, tgt, opts)
  opts = check_options("Transformer:forward", opts,
    { "src_mask", "tgt_mask", "memory_mask", "src_key_padding_mask", "tgt_key_padding_mask",
      "memory_key_padding_mask", "src_is_causal", "tgt_is_causal", "memory_is_causal" })
  local h = handle(self)
  local bf = self.batch_first
  local xs, was_batched, ss = batched("src", src, bf)
  local xt, tb, ts = batched("tgt", tgt, bf)
  if tb ~= was_batched then fail("src and tgt must both be batched (3D) or both unbatched (2D)") end
  local B, S, L, H = ss[1], ss[2], ts[2], self.nhead
  local sm = block_masks({ "src_key_padding_mask", "src_mask", "src_is_causal" }, B, H, S, S,
    mask_arg(opts.src_key_padding_mask, was_batched), opts.src_mask, opts.src_is_causal)
  local tm, mm = decoder_masks(self, opts, B, L, S, was_batched)
  local out = core.tfm_tensor_create({ B, L, ts[3] })
  core.tfm_transformer_forward(h, to_tensor(xs, "src"), to_tensor(xt, "tgt"), sm, tm, mm, out)
  return unbatched(out, was_batched, bf)
end

return {
  layer_repr = layer_repr, TransformerEncoderLayer = TransformerEncoderLayer,
  TransformerDecoderLayer = TransformerDecoderLayer,
  TransformerEncoder = TransformerEncoder, TransformerDecoder = TransformerDecoder
}
