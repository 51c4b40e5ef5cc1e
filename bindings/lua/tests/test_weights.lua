-- Weights in 16, 8 and 4 bits from Lua (transformer/weights.h): on the
-- shipped model (d_model 128: every weight row is whole blocks of 32),
-- model:quantize(dtype) computes exactly what a float32 model holding the
-- widened weights computes (its state_dict loaded into a fresh model);
-- parameter_dtype; num_parameter_bytes against the bytes worked out by
-- hand; Model.load(path, {dtype=...}); the refusals.
--
-- ctest runs it as lua_weights.

local T = require("transformer")
local harness = require("harness")
local test = harness.test

local HERE = (debug.getinfo(1, "S").source:match("^@(.*)[/\\][^/\\]*$")) or "."
local ROOT = os.getenv("TFM_SOURCE_DIR") or (HERE .. "/../../..")
local KJV = ROOT .. "/models/kjv-char.safetensors"
local IDS = { 3, 14, 15, 9, 26, 5, 35 }

local function raises(fn, pattern)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error")
  err = tostring(err)
  assert(err:find(pattern, 1, true), ("error %q does not contain %q"):format(err, pattern))
end

-- max |a - b| / max |b| over rows of logits.
local function rel_err(a, b)
  local diff, scale = 0, 0
  for i = 1, #b do
    for j = 1, #b[i] do
      diff = math.max(diff, math.abs(a[i][j] - b[i][j]))
      scale = math.max(scale, math.abs(b[i][j]))
    end
  end
  return diff / scale
end

-- Values of the rank-2 parameters (the convertible ones) and of all.
local function counts(m)
  local all, conv = 0, 0
  for _, name in ipairs(m:parameter_names()) do
    local shape = m:parameter_shape(name)
    local n = 1
    for _, d in ipairs(shape) do n = n * d end
    all = all + n
    if #shape == 2 then conv = conv + n end
  end
  return all, conv
end

-- Bytes per 32 values: bf16 / f16 64; Q8_0 34 (fp16 scale + 32 int8);
-- Q4_0 18 (fp16 scale + 16 bytes of 4-bit pairs): ggml's block_q8_0 and
-- block_q4_0.
local PER32 = { bf16 = 64, f16 = 64, q8_0 = 34, q4_0 = 18 }
local NAMES = { bf16 = "BF16", f16 = "F16", q8_0 = "Q8_0", q4_0 = "Q4_0" }

for _, dtype in ipairs({ "bf16", "f16", "q8_0", "q4_0" }) do
  test("quantize " .. dtype .. " equals float32 on the widened weights", function()
    local m = T.load_model(KJV)
    local before = m:logits(IDS)
    assert(m:quantize(dtype) == m)
    local got = m:logits(IDS)
    local fresh = T.Model(m.config)
    fresh:load_state_dict(m:state_dict())
    local want = fresh:logits(IDS)
    local e = rel_err(got, want)
    assert(e <= 1e-6, e)
    local moved = rel_err(got, before)
    assert(moved > 0 and moved < (dtype == "q4_0" and 1.5 or 0.1), moved)
    assert(m:parameter_dtype("layers.0.linear1.weight") == NAMES[dtype])
    assert(m:parameter_dtype("token_embedding.weight") == NAMES[dtype])
    assert(m:parameter_dtype("layers.0.norm1.weight") == "F32")
    local all, conv = counts(m)
    assert(m:num_parameter_bytes() == 4 * (all - conv) + conv // 32 * PER32[dtype])
    assert(m:get_memory_footprint() == m:num_parameter_bytes())
  end)
end

test("Model.load with dtype and mmap", function()
  local ref = T.load_model(KJV):quantize("q8_0")
  -- Hand-worked: the 63 x 128 token embedding is 252 blocks of 32, 8568
  -- bytes in Q8_0 against 32256 in float32.
  local all, conv = counts(ref)
  assert(ref:num_parameter_bytes() == 4 * (all - conv) + conv // 32 * 34)
  for _, opts in ipairs({ { dtype = "q8_0" }, { dtype = "Q8_0", mmap = false } }) do
    local m = T.load_model(KJV, opts)
    assert(m:parameter_dtype("layers.1.self_attn.in_proj_weight") == "Q8_0")
    assert(rel_err(m:logits(IDS), ref:logits(IDS)) == 0)
    assert(m.tokenizer ~= nil)
  end
  local auto = T.Model.from_pretrained(KJV, { dtype = "auto" })
  assert(auto:parameter_dtype("layers.0.linear1.weight") == "F32")
  -- Weights used from the file's mapping are read-only, float32 too: no
  -- training; copied (mmap = false, or no options) they train.
  raises(function() auto:train() end, "mapping")
  T.load_model(KJV, { dtype = "f32", mmap = false }):train()
  T.load_model(KJV):train()
  raises(function() T.load_model(KJV, { dtype = "q5_1" }) end, 'unknown dtype "q5_1"')
  raises(function() T.load_model(KJV, { dtype = "q8_0", lazy = true }) end,
         'unknown option "lazy"')
end)

test("refusals", function()
  local m = T.load_model(KJV)
  raises(function() m:quantize("int8") end, 'unknown dtype "int8"')
  raises(function() m:quantize(8) end, "dtype must be a name")
  m:quantize("q4_0")
  raises(function() m:train() end, "Q4_0")
  -- Rows of 48 values are not whole blocks of 32: refused, named; a
  -- 16-bit type has no blocks.
  local small = T.Model({ vocab_size = 10, d_model = 48, n_heads = 4,
                          context_length = 8 })
  raises(function() small:quantize("q8_0") end, "multiple of 32")
  assert(small:parameter_dtype("layers.0.linear1.weight") == "F32")
  small:quantize("bf16")
  assert(small:parameter_dtype("layers.0.linear1.weight") == "BF16")
  -- Back to float32: trains again.
  m:quantize("f32")
  m:train()
end)

harness.finish()
