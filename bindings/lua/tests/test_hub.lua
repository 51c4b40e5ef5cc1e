-- Hugging Face checkpoint directories from Lua (load_model(dir),
-- Model.from_pretrained(dir)): the directory and its reference.json (the
-- logits and 12 greedy ids of the architecture's forward pass in torch
-- float64, written from transformers' modeling_gpt2 / modeling_llama) are
-- made in the run by bindings/python/tests/hub_gpt2_reference.py or
-- hub_llama_reference.py; TFM_HUB_DIR names it.  ctest runs it as
-- lua_hub_gpt2 and lua_hub_llama.

local T = require("transformer")
local harness = require("harness")
local test = harness.test

local DIR = assert(os.getenv("TFM_HUB_DIR"), "TFM_HUB_DIR not set")

-- reference.json's three number arrays (read with patterns: the file is
-- json.dump of {"prompt": [...], "logits": [...], "greedy": [...]}).
local function reference()
  local f = assert(io.open(DIR .. "/reference.json", "rb"))
  local text = f:read("a")
  f:close()
  local r = {}
  for _, key in ipairs({ "prompt", "logits", "greedy" }) do
    local body = assert(text:match('"' .. key .. '": %[(.-)%]'), key)
    local t = {}
    for n in body:gmatch("[^,%s]+") do t[#t + 1] = assert(tonumber(n), n) end
    r[key] = t
  end
  return r
end

local R = reference()

test("load_model(dir): logits equal the torch float64 reference within 1e-5", function()
  local m = T.load_model(DIR)
  assert(m.architecture == "decoder_only", m.architecture)
  assert(m.tokenizer ~= nil and m.tokenizer:kind() == "byte_bpe")
  local logits = m:logits(R.prompt)
  local V = m.vocab_size
  assert(#logits == #R.prompt and #logits[1] == V)
  local diff, scale = 0, 0
  for i = 1, #R.prompt do
    for j = 1, V do
      local ref = R.logits[(i - 1) * V + j]
      diff = math.max(diff, math.abs(logits[i][j] - ref))
      scale = math.max(scale, math.abs(ref))
    end
  end
  assert(diff / scale <= 1e-5, ("relative error %g"):format(diff / scale))
  m:close()
end)

test("the norms are the checkpoint's kind (RMSNorm for Llama)", function()
  local m = T.load_model(DIR)
  local f = assert(io.open(DIR .. "/config.json", "rb"))
  local llama = f:read("a"):find('"model_type": "llama"', 1, true) ~= nil
  f:close()
  local norm = m:child("layers.0.norm1")
  assert(getmetatable(norm) == (llama and T.RMSNorm or T.LayerNorm), tostring(norm))
  m:close()
end)

test("Model.from_pretrained(dir): greedy ids equal the reference's", function()
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
