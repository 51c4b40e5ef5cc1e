-- transformer.generation: Model:generate (sampling, batches, beam search),
-- Model:stream and the KV cache (Model:kv_cache, KVCache).

local U = require("transformer._util")
local M, check_int, check_number = U.M, U.check_int, U.check_number
local check_options, core, fail, fmt = U.check_options, U.core, U.fail, U.fmt
local ids_shape, is_options, tensor_table = U.ids_shape, U.is_options, U.tensor_table
local mod = require("transformer.module")
local Object, class, handle = mod.Object, mod.class, mod.handle
local new_object = mod.new_object
local sampling_table = require("transformer.sampling").sampling_table
local model = require("transformer.model")
local Model, model_ids = model.Model, model.model_ids

---------------------------------------------------------------------------
-- Generation
---------------------------------------------------------------------------

local GEN_OPTIONS = { "max_new_tokens", "temperature", "top_k", "top_p", "seed", "greedy",
                      "do_sample", "min_new_tokens", "eos_token_id", "stop_strings",
                      "repetition_penalty", "no_repeat_ngram_size", "past_context",
                      "past_key_values" }
local KVCache = class("KVCache", Object)   -- its methods are below

-- Ends (closes) the generation running in a KVCache (generate's
-- past_key_values), if any: a cache serves one generation at a time, and
-- using it otherwise (decode, reset, close, another generation) ends a
-- stream still running on it, whose next step then raises.
local function end_generation(cache)
  local g = rawget(cache, "_generator")
  if g ~= nil then
    core.close(g)
    rawset(cache, "_generator", nil)
  end
end
local PAST_CONTEXT = { auto = 0, reencode = 1 }   -- tfm_past_context
local BEAM_OPTIONS = { "num_beams", "length_penalty", "early_stopping", "num_return_sequences",
                       "return_scores", "decoder_start_token_id", "suppress_tokens",
                       "forced_eos_token_id", "renormalize_logits" }
local EARLY_STOPPING = { [false] = 0, [true] = 1, never = 2 }

-- The value of option `name` through the table `values` (nil when it is not
-- given), or an error naming the allowed ones (`allowed`).
local function named_option(opts, name, values, allowed)
  local v = opts[name]
  if v == nil then return nil end
  local r = values[v]
  if r == nil then fail("%s must be %s, got %s", name, allowed, tostring(v)) end
  return r
end

-- The core options table (and the tokenizer handle, for stop strings) of
-- generate's options.
local function core_generate_options(self, opts, what)
  opts = check_options(what, opts, GEN_OPTIONS)
  local sampling, seed = sampling_table(opts)
  local o = {
    max_new_tokens = opts.max_new_tokens == nil and 100
      or check_int("max_new_tokens", opts.max_new_tokens, 0),
    sampling = sampling, seed = seed,
  }
  if opts.min_new_tokens ~= nil then o.min_new_tokens = check_int("min_new_tokens", opts.min_new_tokens) end
  if opts.repetition_penalty ~= nil then
    o.repetition_penalty = check_number("repetition_penalty", opts.repetition_penalty)
  end
  if opts.no_repeat_ngram_size ~= nil then
    o.no_repeat_ngram_size = check_int("no_repeat_ngram_size", opts.no_repeat_ngram_size)
  end
  o.past_context = named_option(opts, "past_context", PAST_CONTEXT, "\"auto\" or \"reencode\"")
  local eos = opts.eos_token_id
  if eos ~= nil then o.eos_token_id = type(eos) == "table" and eos or { eos } end
  local tok
  local stops = opts.stop_strings
  if stops ~= nil then
    o.stop_strings = type(stops) == "table" and stops or { stops }
    tok = rawget(self, "tokenizer")
    if tok == nil then fail("stop_strings need the model's tokenizer, and this model has none") end
    tok = handle(tok)
  end
  return o, tok
end

-- A core generator (tfm_generator_create) for generate's options.
local function new_generator(self, prompt, opts, what)
  local h = handle(self)
  local ids = model_ids(self, prompt)
  local _, nested, _, L = ids_shape(ids, "prompt")
  if nested then fail("prompt must be one sequence (a string or a flat table of ids)") end
  if L < 1 then fail("prompt must not be empty") end
  local o, tok = core_generate_options(self, opts, what)
  local cache = opts and opts.past_key_values
  if cache ~= nil then
    if getmetatable(cache) ~= KVCache or rawget(cache, "model") ~= self then
      fail("past_key_values must be a KVCache of this model (model:kv_cache())")
    end
  end
  local g = core.generator_create(h, ids, o, tok, cache ~= nil and handle(cache) or nil)
  -- (only now: a refused call leaves a stream running in the cache as it was)
  if cache ~= nil then
    end_generation(cache)
    rawset(cache, "_generator", g)
  end
  return g
end

-- Whether generate's prompt is a table of prompts (strings or id tables).
local function is_prompt_list(prompt)
  return type(prompt) == "table" and #prompt > 0
    and (type(prompt[1]) == "string" or type(prompt[1]) == "table")
end

-- generate on a table of prompts (tfm_model_generate_batch): a table of
-- results, item i what generate(prompts[i], opts) returns first (the text
-- for a string prompt, else the new ids).
function Model:_generate_batch(prompts, opts)
  local h = handle(self)
  local flat, lengths = {}, {}
  for i, p in ipairs(prompts) do
    if type(p) ~= "string" and type(p) ~= "table" then
      fail("prompts[%d] must be a string or a table of ids, got %s", i, type(p))
    end
    local ids = model_ids(self, p)
    for _, id in ipairs(ids) do
      if type(id) ~= "number" then fail("prompts[%d] must be a flat table of ids", i) end
      flat[#flat + 1] = id
    end
    lengths[i] = #ids
  end
  if opts ~= nil and opts.past_key_values ~= nil then
    fail("a table of prompts does not take past_key_values (one cache serves one sequence)")
  end
  local o, tok = core_generate_options(self, opts, "generate")
  local out = core.model_generate_batch(h, flat, lengths, o, tok)
  for i, p in ipairs(prompts) do
    if type(p) == "string" then out[i] = self.tokenizer:decode(out[i]) end
  end
  return out
end

--- model:generate(prompt, {max_new_tokens=100, temperature=nil, top_k=nil,
--  top_p=nil, seed=nil, greedy=nil, do_sample=nil, min_new_tokens=0,
--  eos_token_id=nil, stop_strings=nil, repetition_penalty=1,
--  no_repeat_ngram_size=0, past_context="auto", past_key_values=nil})
--  (decoder-only models;
--  with a KV cache).  The names are Hugging Face generate()'s, as in
--  Python.  past_context, once the sequence is longer than context_length
--  W: "auto" (a rolling cache for models without absolute positions, else
--  the half-window shift: the last ceil(W/2) tokens encoded afresh when the
--  cache is full) or "reencode" (the last W tokens afresh for every token);
--  Python's generate and tfm_past_context (model.h) say more.
--  past_key_values: a KVCache of this model (model:kv_cache(), of the
--  context length; model:kv_cache(nil, true), rolling, exactly when "auto"
--  rolls: a model without learned or sinusoidal positions) to generate in, for prefix reuse across calls: of the
--  positions it holds, the longest common prefix with the prompt (never its
--  last token) is kept and only the rest is computed; the new tokens are
--  appended (afterwards it holds the prompt and the new tokens but the
--  last), so a chat whose next prompt is the conversation so far computes
--  only its new turn; the tokens are those of a call without it
--  (tfm_generate_options.cache).  Not taken by the beam search.
--  prompt: a string, or a table of token ids (at least one); one longer
--  than the context_length is taken as its last context_length ids, as
--  tfm_model_generate takes one (the beam search too, but not an
--  encoder-decoder model's source, which it refuses).
--  Decoding is greedy (argmax) unless sampling is asked for: do_sample =
--  true, or any of temperature (default 1; 0 means greedy), top_k (default
--  0: all), top_p (default 1: no limit), seed (default 42; the same seed
--  gives the same text) given, as transformer-generate's --temperature,
--  --top-k, --top-p, --seed.  greedy = true (or do_sample = false) decodes
--  greedily whatever else is given.
--  Generation stops after max_new_tokens, after an EOS id (eos_token_id: an
--  id or a table of ids; the EOS token is returned), or once the generated
--  text contains one of stop_strings (a string or a table of strings; it may
--  span tokens).  min_new_tokens masks the EOS ids until that many tokens
--  are generated; repetition_penalty is CTRL's (a logit x of a token already
--  seen becomes x / r if x > 0, else x * r); no_repeat_ngram_size n forbids
--  any n-gram twice.
--  Beam search (Hugging Face's; tfm_model_beam_search) with num_beams > 1,
--  or any of length_penalty, early_stopping (true, false or "never"),
--  num_return_sequences, return_scores, decoder_start_token_id given, and
--  always for encoder-decoder models (prompt: the source;
--  decoder_start_token_id required): the names and meanings of Python's
--  Model.generate; one eos_token_id, min_new_tokens, suppress_tokens (a
--  table of ids never generated, Hugging Face's), forced_eos_token_id (the
--  id the max_new_tokens-th token is forced to be), renormalize_logits
--  (true: log-softmax again after those bans, Hugging Face's
--  LogitNormalization), and no sampling or other processors.
--  Returns, for a string prompt, the generated text (the prompt not
--  repeated) and the new ids; for an ids prompt, the new ids.  Beam search:
--  the same for the best sequence, tables of them (best first) when
--  num_return_sequences > 1, and with return_scores the score(s) last.
--  A table of prompts ({p1, p2, ...}, each a string or a table of ids) is
--  generated as a batch (tfm_model_generate_batch; not with the beam
--  options): the result is a table, item i what generate(prompts[i],
--  opts) returns first (the text for a string, else the new ids), the same
--  tokens as alone, each sequence stopping on its own; each step runs the
--  new tokens of all sequences through the weights together.
function Model:generate(prompt, opts)
  if is_prompt_list(prompt) then
    if opts ~= nil and is_options(opts) then
      for _, k in ipairs(BEAM_OPTIONS) do
        if opts[k] ~= nil then fail("generate: a table of prompts does not take %s (no beam search)", k) end
      end
    end
    if self.architecture ~= "decoder_only" then
      fail("generate: a table of prompts needs a decoder-only model")
    end
    return self:_generate_batch(prompt, opts)
  end
  if opts ~= nil and is_options(opts) then
    local beam = self.architecture == "encoder_decoder"
    for _, k in ipairs(BEAM_OPTIONS) do
      if opts[k] ~= nil then beam = true end
    end
    if beam then return self:_beam_search(prompt, opts) end
  elseif self.architecture == "encoder_decoder" then
    return self:_beam_search(prompt, opts)
  end
  local g = new_generator(self, prompt, opts, "generate")
  local new_ids = {}
  while true do
    local id = core.generator_next(g)
    if id == nil then break end
    new_ids[#new_ids + 1] = id
  end
  core.close(g)
  if type(prompt) == "string" then return self.tokenizer:decode(new_ids), new_ids end
  return new_ids
end

-- generate's beam search (tfm_model_beam_search): the options of
-- BEAM_OPTIONS with max_new_tokens, min_new_tokens and one eos_token_id.
function Model:_beam_search(prompt, opts)
  local h = handle(self)
  local names = { "max_new_tokens", "min_new_tokens", "eos_token_id", "greedy", "do_sample" }
  for _, k in ipairs(BEAM_OPTIONS) do names[#names + 1] = k end
  opts = opts or {}
  for _, k in ipairs({ "temperature", "top_k", "top_p", "seed", "stop_strings",
                       "repetition_penalty", "no_repeat_ngram_size" }) do
    if opts[k] ~= nil then
      fail("generate: beam search does not take %s (it is deterministic, with min_new_tokens "
           .. "and one eos_token_id as its only processors)", k)
    end
  end
  if opts.greedy == false or opts.do_sample == true then
    fail("generate: beam search does not sample")
  end
  opts = check_options("generate", opts, names)
  local ids = model_ids(self, prompt)
  local _, nested, _, L = ids_shape(ids, "prompt")
  if nested then fail("prompt must be one sequence (a string or a flat table of ids)") end
  if L < 1 then fail("prompt must not be empty") end
  local o = { max_new_tokens = opts.max_new_tokens == nil and 100
                or check_int("max_new_tokens", opts.max_new_tokens) }
  for _, k in ipairs({ "num_beams", "min_new_tokens", "num_return_sequences",
                       "decoder_start_token_id" }) do
    if opts[k] ~= nil then o[k] = check_int(k, opts[k]) end
  end
  if opts.length_penalty ~= nil then
    o.length_penalty = check_number("length_penalty", opts.length_penalty)
  end
  o.early_stopping = named_option(opts, "early_stopping", EARLY_STOPPING,
                                  "true, false or \"never\"")
  local eos = opts.eos_token_id
  if type(eos) == "table" then
    if #eos > 1 then fail("beam search takes one eos_token_id, got %d", #eos) end
    eos = eos[1]
  end
  if eos ~= nil then o.eos_token_id = check_int("eos_token_id", eos) end
  if opts.forced_eos_token_id ~= nil then
    o.forced_eos_token_id = check_int("forced_eos_token_id", opts.forced_eos_token_id)
  end
  if opts.renormalize_logits ~= nil then
    if type(opts.renormalize_logits) ~= "boolean" then
      fail("renormalize_logits must be a boolean, got %s", type(opts.renormalize_logits))
    end
    o.renormalize_logits = opts.renormalize_logits
  end
  if opts.suppress_tokens ~= nil then
    if type(opts.suppress_tokens) ~= "table" then
      fail("suppress_tokens must be a table of ids, got %s", type(opts.suppress_tokens))
    end
    o.suppress_tokens = {}
    for i, id in ipairs(opts.suppress_tokens) do
      o.suppress_tokens[i] = check_int("suppress_tokens", id)
    end
  end
  local seqs, scores = core.model_beam_search(h, ids, o)
  local one = #seqs == 1
  local ret_ids = one and seqs[1] or seqs
  local ret_scores = one and scores[1] or scores
  if type(prompt) == "string" then
    local texts = {}
    for i, s in ipairs(seqs) do texts[i] = self.tokenizer:decode(s) end
    local text = one and texts[1] or texts
    if opts.return_scores then return text, ret_ids, ret_scores end
    return text, ret_ids
  end
  if opts.return_scores then return ret_ids, ret_scores end
  return ret_ids
end

--- model:stream(prompt, opts): an iterator over what model:generate(prompt,
--  opts) returns, as it is generated: for a string prompt, text pieces
--  (each new piece of text once it is whole UTF-8 characters;
--  table.concat of them is generate's text) and, second, the piece's ids;
--  for an ids prompt, one id per token.
--    for piece in model:stream("And God said", {max_new_tokens = 50}) do
--      io.write(piece) end
function Model:stream(prompt, opts)
  local g = new_generator(self, prompt, opts, "stream")
  local cache = opts and opts.past_key_values   -- kept alive while it runs
  local as_text = type(prompt) == "string"
  local tok = self.tokenizer
  local stops = opts and opts.stop_strings ~= nil
  local pending = {}
  return function()
    while true do
      if cache ~= nil and rawget(cache, "_generator") ~= g then
        fail("stream: its past_key_values cache was used since (decode, reset, close or another generation), which ended it")
      end
      -- The generator refers to the model and the stop strings' tokenizer:
      -- closing either closed it (lifetimes.h); say which.
      handle(self)
      if stops then handle(tok) end
      local id = core.generator_next(g)
      if id == nil then
        core.close(g)
        if #pending > 0 then
          local ids = pending
          pending = {}
          return tok:decode(ids), ids
        end
        return nil
      end
      if not as_text then return id end
      pending[#pending + 1] = id
      local ok, text = pcall(tok.decode, tok, pending)
      -- A character cut in the middle waits for its next bytes.
      if ok and utf8.len(text) then
        local ids = pending
        pending = {}
        return text, ids
      end
    end
  end
end
---------------------------------------------------------------------------
-- KV cache
---------------------------------------------------------------------------

M.KVCache = KVCache

--- model:kv_cache([capacity]) -> KVCache (decoder-only models): the keys
-- and values of the positions decoded so far, so that each new token costs
-- one position's work; capacity defaults to the context length; rolling =
-- true: once full, each new position drops the oldest
-- (tfm_kv_cache_create_rolling; models without learned or sinusoidal
-- positions only).  Closed with the model; it keeps the model alive.
function Model:kv_cache(capacity, rolling)
  local h = handle(self)
  capacity = capacity == nil and self.context_length or check_int("capacity", capacity, 1)
  local c = rolling and core.tfm_kv_cache_create_rolling(h, capacity)
    or core.tfm_kv_cache_create(h, capacity)
  local cache = new_object(KVCache, c, { model = self, vocab_size = self.vocab_size })
  self._caches[cache] = true
  return cache
end

--- cache:decode(ids [, last_only]) -> logits of the new positions
-- [n][vocab_size] (or [vocab_size] of the last one with last_only): ids
-- (an integer, a table of ids, or a string) are appended after the cached
-- positions; equal to the rows of model:logits on the whole sequence.
function KVCache:decode(ids, last_only)
  local h = handle(self)
  if math.type(ids) == "integer" then ids = { ids } end
  ids = model_ids(self.model, ids)
  local _, nested, _, n = ids_shape(ids, "ids")
  if nested then fail("ids must be one sequence (a flat table)") end
  if n < 1 then fail("ids must not be empty") end
  local out = core.tfm_tensor_create({ last_only and 1 or n, self.vocab_size })
  core.tfm_kv_cache_decode(h, ids, out)
  end_generation(self)   -- (after the decode: a refused one ends nothing)
  local t = tensor_table(out)
  return last_only and t[1] or t
end

--- cache:reset(): empties the cache for a new sequence.
function KVCache:reset()
  local h = handle(self)
  end_generation(self)
  core.tfm_kv_cache_reset(h)
end

--- cache:close(): frees it now (a generation running in it ends first).
function KVCache:close()
  end_generation(self)
  Object.close(self)
end

--- cache:length() (or #cache): the number of positions held.
function KVCache:length()
  return core.tfm_kv_cache_length(handle(self))
end
KVCache.__len = KVCache.length

--- cache:capacity(): the most positions the cache holds.
function KVCache:capacity()
  return core.tfm_kv_cache_capacity(handle(self))
end

function KVCache:forward(ids, last_only)
  return self:decode(ids, last_only)
end

function KVCache:__tostring()
  if self:is_closed() then return "KVCache(closed)" end
  return fmt("KVCache(length=%d, capacity=%d)", self:length(), self:capacity())
end
