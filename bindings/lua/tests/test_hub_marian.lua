-- A Marian (opus-mt) checkpoint directory from Lua (load_model(dir)): the
-- directory and its reference.json (the source ids, a decoder input, its
-- logits and 12 greedy ids with the pad banned, of MarianMTModel's forward
-- pass in torch float64, written from transformers' modeling_marian) are
-- made in the run by bindings/python/tests/hub_marian_reference.py;
-- TFM_HUB_DIR names it.  ctest runs it as lua_hub_marian.

local T = require("transformer")
local harness = require("harness")
local test = harness.test

local DIR = assert(os.getenv("TFM_HUB_DIR"), "TFM_HUB_DIR not set")

local R = harness.hub_reference(DIR, { "prompt", "decoder_input", "logits", "greedy",
                                        "greedy_forced" })
local PAD = 262  -- the reference's vocab_size - 1: pad and decoder start

test("load_model(dir): seq2seq logits equal the torch float64 reference within 1e-5", function()
  local m = T.load_model(DIR)
  assert(m.architecture == "encoder_decoder", m.architecture)
  local logits = m:logits({ R.prompt }, { R.decoder_input })[1]
  local V = m.vocab_size
  assert(#logits == #R.decoder_input and #logits[1] == V)
  local err = harness.logits_error(logits, R.logits, V)
  assert(err <= 1e-5, ("relative error %g"):format(err))
  m:close()
end)

test("greedy translation with the pad suppressed equals the reference's", function()
  local m = T.load_model(DIR)
  local opts = { max_new_tokens = #R.greedy, num_beams = 1, eos_token_id = 0,
                 decoder_start_token_id = PAD, suppress_tokens = { PAD } }
  local ids = m:generate(R.prompt, opts)
  assert(#ids == #R.greedy, #ids)
  for i = 1, #ids do
    assert(ids[i] == R.greedy[i], ("token %d: %d, reference %d"):format(i, ids[i], R.greedy[i]))
  end
  -- without the ban the raised pad wins
  opts.suppress_tokens = nil
  assert(m:generate(R.prompt, opts)[1] == PAD)
  opts.suppress_tokens = { m.vocab_size }
  local ok, err = pcall(m.generate, m, R.prompt, opts)
  assert(not ok and tostring(err):find("suppress_tokens[0]", 1, true), tostring(err))
  opts.suppress_tokens = { 5, 2 ^ 40 // 1 }
  ok, err = pcall(m.generate, m, R.prompt, opts)
  assert(not ok and tostring(err):find("suppress_tokens[2] = 1099511627776", 1, true),
         tostring(err))
  m:close()
end)

test("forced_eos_token_id and renormalize_logits reach the beam search", function()
  local m = T.load_model(DIR)
  local opts = { max_new_tokens = #R.greedy_forced, num_beams = 1, eos_token_id = 0,
                 decoder_start_token_id = PAD, suppress_tokens = { PAD },
                 forced_eos_token_id = 0 }
  local ids = m:generate(R.prompt, opts)
  assert(#ids == #R.greedy_forced and ids[#ids] == 0, #ids)
  for i = 1, #ids do
    assert(ids[i] == R.greedy_forced[i],
           ("token %d: %d, reference %d"):format(i, ids[i], R.greedy_forced[i]))
  end
  -- greedy picks the argmax whether or not the row is renormalized; its
  -- score is the sum of the renormalized log-probabilities, so it rises
  opts.return_scores = true
  local _, plain = m:generate(R.prompt, opts)
  opts.renormalize_logits = true
  local same, renormalized = m:generate(R.prompt, opts)
  assert(#same == #ids and renormalized > plain, ("%g vs %g"):format(renormalized, plain))
  opts.renormalize_logits = 1
  local ok, err = pcall(m.generate, m, R.prompt, opts)
  assert(not ok and tostring(err):find("renormalize_logits must be a boolean", 1, true),
         tostring(err))
  m:close()
end)

harness.finish()
