-- A ViT (ViTForImageClassification) checkpoint directory from Lua
-- (load_model(dir), model:image_logits(pixels)): the directory and its
-- reference.json (two images' normalised pixels, flat [2, 3, 32, 32], and
-- their class logits from the torch float64 ViT written from the paper and
-- modeling_vit) are made in the run by
-- bindings/python/tests/hub_vit_reference.py; TFM_HUB_DIR names it.  ctest
-- runs it as lua_hub_vit.

local T = require("transformer")
local harness = require("harness")
local test = harness.test

local DIR = assert(os.getenv("TFM_HUB_DIR"), "TFM_HUB_DIR not set")

local R = harness.hub_reference(DIR, { "pixels", "shape", "logits" })

-- The flat pixels as [B][C][H][W].
local function nested(flat, shape)
  local B, C, H, W = shape[1], shape[2], shape[3], shape[4]
  local out, k = {}, 1
  for b = 1, B do
    out[b] = {}
    for c = 1, C do
      out[b][c] = {}
      for y = 1, H do
        local row = {}
        for x = 1, W do row[x] = flat[k]; k = k + 1 end
        out[b][c][y] = row
      end
    end
  end
  return out
end

test("load_model(dir): image logits equal the torch float64 reference within 1e-5", function()
  local m = T.load_model(DIR)
  assert(m.architecture == "encoder_only", m.architecture)
  assert(m.config.patch_size == 8 and m.config.image_size == 32 and m.config.num_channels == 3)
  assert(m.vocab_size == 5, m.vocab_size)
  local x = nested(R.pixels, R.shape)
  local logits = m:image_logits(x)
  assert(#logits == 2 and #logits[1] == 5)
  local err = harness.logits_error(logits, R.logits, 5)
  assert(err <= 1e-5, ("relative error %g"):format(err))
  -- one image alone: [C][H][W] -> [num_labels]
  local one = m:image_logits(x[2])
  assert(#one == 5)
  err = harness.logits_error({ one }, { table.unpack(R.logits, 6, 10) }, 5)
  assert(err <= 1e-5, ("relative error %g"):format(err))
  m:close()
end)

test("image models refuse token ids and wrong image sizes, naming why", function()
  local m = T.load_model(DIR)
  local ok, err = pcall(m.logits, m, { 1, 2 })
  assert(not ok and tostring(err):find("image model", 1, true), tostring(err))
  local small = {}
  for c = 1, 3 do
    small[c] = {}
    for y = 1, 16 do
      small[c][y] = {}
      for x = 1, 16 do small[c][y][x] = 0 end
    end
  end
  ok, err = pcall(m.image_logits, m, small)
  assert(not ok and tostring(err):find("image_size", 1, true), tostring(err))
  m:close()
end)

test("image_backward: the classifier bias's gradient is the batch's sum of grad_logits, accumulated", function()
  local m = T.load_model(DIR)
  m:train()
  local x = nested(R.pixels, R.shape)
  local g = { { 0.5, -1, 0.25, 2, -0.75 }, { 1, 0.5, -2, 0, 0.125 } }
  m:image_backward(x, g)
  m:image_backward(x[1], g[1])
  local gb = m:grad("lm_head.bias")
  local want = { 2, -1.5, -1.5, 4, -1.375 }
  for j = 1, 5 do
    assert(math.abs(gb[j] - want[j]) < 1e-6, ("bias %d: %g, want %g"):format(j, gb[j], want[j]))
  end
  local gw = m:grad("patch_embedding.weight")
  assert(#gw == 48 and #gw[1] == 3 and #gw[1][1] == 8)
  m:close()
end)

harness.finish()
