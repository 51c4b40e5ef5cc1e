-- transformer.tokenizer: Tokenizer (character-level, byte-level BPE,
-- WordPiece, SentencePiece) and load_tokenizer.

local U = require("transformer._util")
local M, core, fail, fmt = U.M, U.core, U.fail, U.fmt
local mod = require("transformer.module")
local Object, class, constructor = mod.Object, mod.class, mod.constructor
local handle, new_object = mod.handle, mod.new_object

---------------------------------------------------------------------------
-- Tokenizer
---------------------------------------------------------------------------

local Tokenizer = class("Tokenizer", Object)
M.Tokenizer = Tokenizer

local function wrap_tokenizer(h)
  return new_object(Tokenizer, h, {
    vocab_size = core.tfm_tokenizer_vocab_size(h),
    _repr = fmt("vocab_size=%d", core.tfm_tokenizer_vocab_size(h)) })
end

--- Tokenizer(vocab): character-level, one token per Unicode code point;
-- vocab is the string of the tokens in id order (UTF-8, no character
-- twice).  Tokenizer.load(path) reads it from a model file.
constructor(Tokenizer, function(vocab)
  if type(vocab) ~= "string" then fail("vocab must be a string, got %s", type(vocab)) end
  if vocab:find("\0", 1, true) then fail("vocab must not contain NUL") end
  return wrap_tokenizer(core.tfm_tokenizer_create(vocab))
end, Object)

function Tokenizer.load(path)
  if type(path) ~= "string" then fail("path must be a string, got %s", type(path)) end
  return wrap_tokenizer(core.tfm_tokenizer_load(path))
end

--- tok:encode(text) -> token ids (0-based).
function Tokenizer:encode(text)
  if type(text) ~= "string" then fail("text must be a string, got %s", type(text)) end
  return core.tokenizer_encode(handle(self), text)
end

--- tok:decode(ids) -> text.
function Tokenizer:decode(ids)
  return core.tokenizer_decode(handle(self), ids)
end

--- tok:vocab() -> the tokens in id order, one string.
function Tokenizer:vocab()
  local h = handle(self)
  local ids = {}
  for i = 0, core.tfm_tokenizer_vocab_size(h) - 1 do ids[#ids + 1] = i end
  return core.tokenizer_decode(h, ids)
end

function Tokenizer:__len()
  return core.tfm_tokenizer_vocab_size(handle(self))
end

--- Since 1.2, with Hugging Face's names (ids 0-based, as everywhere here):
-- Tokenizer.from_pretrained(path) / M.load_tokenizer(path): a model file, a
-- tokenizer.json, GPT-2's encoder.json / vocab.json, BERT's vocab.txt, a
-- SentencePiece .model / .spm, or a directory.
Tokenizer.from_pretrained = Tokenizer.load
M.load_tokenizer = Tokenizer.load

local KINDS = { [0] = "char", [1] = "byte_bpe", [2] = "wordpiece",
                [3] = "sentencepiece", [4] = "marian" }

--- tok:kind() -> "char", "byte_bpe", "wordpiece", "sentencepiece" or
-- "marian".
function Tokenizer:kind()
  local k = core.tfm_tokenizer_get_kind(handle(self))
  return KINDS[k] or fmt("kind %d", k)
end

-- Encode flags from the options {add_special_tokens = true}: special tokens
-- written in the text always become their ids, as in Hugging Face's.
local function encode_flags(o)
  local flags = core.TFM_ENCODE_SPLIT_SPECIAL
  if o == nil or o.add_special_tokens == nil or o.add_special_tokens then
    flags = flags | core.TFM_ENCODE_ADD_SPECIAL
  end
  return flags
end

--- tok:encode_full(text [, pair [, opts]]) -> ids, type_ids, offsets
-- (offsets: {begin, end} bytes of the text each token covers, end
-- exclusive; {0, 0} for tokens the framing added).
function Tokenizer:encode_full(text, pair, opts)
  if type(text) ~= "string" then fail("text must be a string, got %s", type(text)) end
  if pair ~= nil and type(pair) ~= "string" then fail("pair must be a string, got %s", type(pair)) end
  return core.tokenizer_encode_v2(handle(self), text, pair, encode_flags(opts))
end

--- tok:decode_v2(ids [, {skip_special_tokens = false}]) -> the bytes.
function Tokenizer:decode_v2(ids, opts)
  local flags = (opts and opts.skip_special_tokens) and core.TFM_DECODE_SKIP_SPECIAL or 0
  return core.tokenizer_decode_v2(handle(self), ids, flags)
end

--- tok:convert_ids_to_tokens(id or ids) -> token string(s).
function Tokenizer:convert_ids_to_tokens(ids)
  local h = handle(self)
  if type(ids) == "number" then return core.tokenizer_id_to_token(h, ids) end
  local out = {}
  for i, id in ipairs(ids) do out[i] = core.tokenizer_id_to_token(h, id) end
  return out
end

--- tok:convert_tokens_to_ids(token or tokens) -> id(s); nil for a token
-- not in the vocabulary.
function Tokenizer:convert_tokens_to_ids(tokens)
  local h = handle(self)
  if type(tokens) == "string" then return core.tokenizer_token_to_id(h, tokens) end
  local out = {}
  for i, t in ipairs(tokens) do out[i] = core.tokenizer_token_to_id(h, t) end
  return out
end

--- tok:special_token_id(role) -> id or nil; role "bos", "eos", "unk",
-- "pad", "cls", "sep" or "mask".
function Tokenizer:special_token_id(role)
  return core.tokenizer_special_id(handle(self), role)
end

--- tok:batch(texts [, opts]) -> {input_ids = {...}, attention_mask = {...},
-- token_type_ids = {...}}: each text encoded (opts.pairs: a second text
-- each), padded on the right to the longest with opts.pad_token_id or the
-- tokenizer's pad token (an error when padding is needed and there is none).
function Tokenizer:batch(texts, opts)
  opts = opts or {}
  local rows, width = {}, 0
  for i, text in ipairs(texts) do
    local ids, types = self:encode_full(text, opts.pairs and opts.pairs[i], opts)
    rows[i] = { ids, types }
    if #ids > width then width = #ids end
  end
  local pad = opts.pad_token_id or self:special_token_id("pad")
  local out = { input_ids = {}, attention_mask = {}, token_type_ids = {} }
  for i, r in ipairs(rows) do
    local ids, mask, types = {}, {}, {}
    for k = 1, width do
      if k <= #r[1] then
        ids[k], mask[k], types[k] = r[1][k], 1, r[2][k]
      else
        if pad == nil then fail("this tokenizer has no padding token: give opts.pad_token_id") end
        ids[k], mask[k], types[k] = pad, 0, 0
      end
    end
    out.input_ids[i], out.attention_mask[i], out.token_type_ids[i] = ids, mask, types
  end
  return out
end

function Tokenizer:forward(text)
  return self:encode(text)
end

return {
  Tokenizer = Tokenizer
}
