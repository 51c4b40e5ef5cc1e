-- Hugging Face checkpoint directories from Lua (load_model(dir),
-- Model.from_pretrained(dir)): the directory and its reference.json (the
-- logits and 12 greedy ids of the architecture's forward pass in torch
-- float64, written from transformers' modeling_gpt2 / modeling_llama /
-- modeling_bert; a BERT has no greedy ids) are made in the run by
-- bindings/python/tests/hub_gpt2_reference.py, hub_llama_reference.py or
-- hub_bert_reference.py; TFM_HUB_DIR names it.  ctest runs it as
-- lua_hub_gpt2, lua_hub_llama and lua_hub_bert.

local T = require("transformer")
local harness = require("harness")
local test = harness.test

local DIR = assert(os.getenv("TFM_HUB_DIR"), "TFM_HUB_DIR not set")

local R = harness.hub_reference(DIR, { "prompt", "logits", "greedy" })
local f = assert(io.open(DIR .. "/config.json", "rb"))
local CONFIG = f:read("a")
f:close()
local BERT = CONFIG:find('"model_type": "bert"', 1, true) ~= nil

test("load_model(dir): logits equal the torch float64 reference within 1e-5", function()
  local m = T.load_model(DIR)
  assert(m.architecture == (BERT and "encoder_only" or "decoder_only"), m.architecture)
  local kind = BERT and "wordpiece" or "byte_bpe"
  assert(m.tokenizer ~= nil and m.tokenizer:kind() == kind)
  local logits = m:logits(R.prompt)
  local V = m.vocab_size
  assert(#logits == #R.prompt and #logits[1] == V)
  local err = harness.logits_error(logits, R.logits, V)
  assert(err <= 1e-5, ("relative error %g"):format(err))
  m:close()
end)

test("the norms are the checkpoint's kind (RMSNorm for Llama)", function()
  local m = T.load_model(DIR)
  local llama = CONFIG:find('"model_type": "llama"', 1, true) ~= nil
  local norm = m:child("layers.0.norm1")
  assert(getmetatable(norm) == (llama and T.RMSNorm or T.LayerNorm), tostring(norm))
  m:close()
end)

test("Model.from_pretrained(dir): greedy ids equal the reference's", function()
  if BERT then return end -- an encoder: no generation, no greedy ids
  local m = T.Model.from_pretrained(DIR)
  local ids = m:generate(R.prompt, { max_new_tokens = #R.greedy })
  assert(#ids == #R.greedy)
  for i = 1, #ids do
    assert(ids[i] == R.greedy[i], ("token %d: %d, reference %d"):format(i, ids[i], R.greedy[i]))
  end
  m:close()
end)

test("a directory without config.json is refused naming it", function()
  local tmp = os.tmpname()
  os.remove(tmp)
  assert(os.execute("mkdir " .. tmp))
  local ok, err = pcall(T.load_model, tmp)
  os.remove(tmp)
  assert(not ok and tostring(err):find("config.json", 1, true), tostring(err))
end)

harness.finish()
