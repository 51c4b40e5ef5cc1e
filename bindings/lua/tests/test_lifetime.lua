-- Objects that refer to others (issue 44, kind 1): every pair of the Lua
-- layer and of the raw core (transformer.core), used after its owner was
-- closed, must raise "... closed" (never read freed memory), and the
-- collector must never free an owner under a living dependent.  The pairs
-- (bindings/lua/lifetimes.h): optimizer -> module (a model, a module, a
-- sub-module view); KV cache -> model; generator (stream) -> model, the
-- tokenizer of its stop strings, its past_key_values cache; sub-module ->
-- parent.  Also (kind 7) strings with a NUL refused where they cross into
-- C.  tools/reliability.sh runs this file under valgrind (step
-- "bindings"), where a use of freed memory fails the run.
--
-- ctest runs it as lua_lifetime.

local T = require("transformer")
local core = T.core
local harness = require("harness")
local test = harness.test

local HERE = (debug.getinfo(1, "S").source:match("^@(.*)[/\\][^/\\]*$")) or "."
local ROOT = os.getenv("TFM_SOURCE_DIR") or (HERE .. "/../../..")
local KJV = ROOT .. "/models/kjv-char.safetensors"

local function raises(fn, pattern)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error")
  err = tostring(err)
  if pattern then
    assert(err:find(pattern, 1, true), ("error %q does not contain %q"):format(err, pattern))
  end
  return err
end

-- A small encoder layer in training mode, with gradients from one pass.
local function trained_layer()
  local lay = T.TransformerEncoderLayer(8, 2, 16)
  lay:train()
  local x = { { { 1, 2, 3, 4, 5, 6, 7, 8 } } }
  local y = lay:forward(x)
  lay:backward(y)
  return lay
end

local function sgd_options()
  local o = core.tfm_optimizer_options()
  core.tfm_optimizer_options_init(o, core.TFM_OPTIMIZER_SGD)
  return o
end

---------------------------------------------------------------------------
-- Optimizers
---------------------------------------------------------------------------

test("optimizer: step, zero_grad, get_lr, set_lr after its model was closed raise", function()
  local m = T.load_model(KJV)
  m:train()
  local opt = T.optim.AdamW(m, { lr = 1e-3 })
  opt:zero_grad()
  m:close()
  assert(opt:is_closed(), "closing the model closed its optimizer")
  raises(function() opt:step() end, "this Model has been closed")
  raises(function() opt:zero_grad() end, "this Model has been closed")
  raises(function() opt:get_lr() end, "this Model has been closed")
  raises(function() opt:set_lr(0.1) end, "this Model has been closed")
end)

test("optimizer: of a module, after the module was closed", function()
  local lay = trained_layer()
  local opt = T.optim.SGD(lay, { lr = 0.1 })
  opt:step()
  lay:close()
  raises(function() opt:step() end, "has been closed")
  raises(function() opt:zero_grad() end, "has been closed")
end)

test("optimizer: of a sub-module view, after its parent was closed", function()
  local lay = trained_layer()
  local lin = lay:child("linear1")
  local opt = T.optim.SGD(lin, { lr = 0.1 })
  opt:step()
  lay:close()
  raises(function() opt:step() end, "closed")
  raises(function() opt:zero_grad() end, "closed")
end)

test("optimizer: closing only the view leaves the optimizer working (the parent is open)", function()
  local lay = trained_layer()
  local lin = lay:child("linear1")
  local opt = T.optim.SGD(lin, { lr = 0.1 })
  local before = lay:state_dict()["linear1.bias"][1]
  local g = lay:grad("linear1.bias")[1]
  lin:close()                      -- detaches this view; frees nothing
  assert(not core.is_closed(opt._h), "the optimizer is still open")
  core.tfm_optimizer_step(opt._h)  -- the core object is still valid
  local after = lay:state_dict()["linear1.bias"][1]
  -- SGD: p - lr * g (torch.optim.SGD without momentum)
  assert(math.abs(after - (before - 0.1 * g)) < 1e-6, ("bias %g, want %g"):format(after, before - 0.1 * g))
end)

test("optimizer: the raw core optimizer is closed with its raw module", function()
  local raw = core.tfm_model_load(KJV)
  core.tfm_module_train(raw, 1)
  local ro = core.tfm_optimizer_create(raw, sgd_options())
  core.tfm_optimizer_zero_grad(ro)
  core.close(raw)
  assert(core.is_closed(ro), "closed with its module")
  raises(function() core.tfm_optimizer_step(ro) end, "closed")
  raises(function() core.tfm_optimizer_zero_grad(ro) end, "closed")
  core.close(ro)                   -- idempotent
end)

test("optimizer: the raw optimizer of a raw child is closed with the parent", function()
  local raw = core.tfm_model_load(KJV)
  core.tfm_module_train(raw, 1)
  local child = core.tfm_module_child(raw, "layers.0")
  local ro = core.tfm_optimizer_create(child, sgd_options())
  core.close(raw)
  assert(core.is_closed(child), "the child is closed with its parent")
  assert(core.is_closed(ro), "and the optimizer of the child")
  raises(function() core.tfm_optimizer_step(ro) end, "closed")
  raises(function() core.tfm_module_num_parameters(child) end, "closed")
end)

test("optimizer: keeps its module alive (the module dropped, then collected)", function()
  local opt
  do
    local lay = trained_layer()
    opt = T.optim.SGD(lay, { lr = 0.1 })
  end
  collectgarbage("collect")
  collectgarbage("collect")
  opt:step()
  opt:zero_grad()
  -- the raw layer: only the optimizer userdata refers to the module
  local ro
  do
    local raw = core.tfm_model_load(KJV)
    core.tfm_module_train(raw, 1)
    ro = core.tfm_optimizer_create(raw, sgd_options())
  end
  collectgarbage("collect")
  collectgarbage("collect")
  core.tfm_optimizer_zero_grad(ro)
  core.tfm_optimizer_step(ro)
end)

---------------------------------------------------------------------------
-- KV caches, generators, sub-modules
---------------------------------------------------------------------------

test("KV cache: after its model was closed (Lua and raw)", function()
  local m = T.load_model(KJV)
  local cache = m:kv_cache(8)
  m:close()
  raises(function() cache:decode({ 1 }) end, "closed")
  local raw = core.tfm_model_load(KJV)
  local rc = core.tfm_kv_cache_create(raw, 4)
  core.close(raw)
  assert(core.is_closed(rc))
  raises(function() core.tfm_kv_cache_length(rc) end, "closed")
end)

test("stream: after its model was closed", function()
  local m = T.load_model(KJV)
  local it = m:stream("And", { max_new_tokens = 5 })
  assert(type(it()) == "string")
  m:close()
  raises(it, "closed")
end)

test("stream: after the tokenizer of its stop strings was closed", function()
  local m = T.load_model(KJV)
  local it = m:stream(m:encode("And"), { max_new_tokens = 5, stop_strings = { "zzz" } })
  assert(math.type(it()) == "integer")
  m.tokenizer:close()
  raises(it, "Tokenizer has been closed")
  m:close()
end)

test("stream: after its past_key_values cache was closed", function()
  local m = T.load_model(KJV)
  local cache = m:kv_cache()
  local it = m:stream(m:encode("And"), { max_new_tokens = 5, past_key_values = cache })
  it()
  cache:close()
  raises(it)
end)

test("generator (raw): closed with its model, its tokenizer or its cache", function()
  local ids = { 1, 2 }
  for _, which in ipairs({ "model", "tokenizer", "cache" }) do
    local raw = core.tfm_model_load(KJV)
    local tok = core.tfm_tokenizer_load(KJV)
    local cache = core.tfm_kv_cache_create(raw, T.load_model(KJV).context_length)
    local g = core.generator_create(raw, ids, { max_new_tokens = 4, stop_strings = { "zzz" } }, tok, cache)
    assert(math.type(core.generator_next(g)) == "integer")
    core.close(({ model = raw, tokenizer = tok, cache = cache })[which])
    assert(core.is_closed(g), "closed with its " .. which)
    raises(function() core.generator_next(g) end, "closed")
    core.close(raw)
    core.close(tok)
  end
end)

test("sub-module: after its parent was closed (Lua and raw)", function()
  local lay = T.TransformerEncoderLayer(8, 2, 16)
  local attn = lay:child("self_attn")
  local out_proj = attn:child("out_proj")
  lay:close()
  raises(function() attn:state_dict() end, "closed")
  raises(function() out_proj:state_dict() end, "closed")
  local raw = core.tfm_model_load(KJV)
  local c1 = core.tfm_module_child(raw, "layers.0")
  local c2 = core.tfm_module_child(c1, "self_attn")
  core.close(raw)
  assert(core.is_closed(c1) and core.is_closed(c2), "children closed with the parent")
  raises(function() core.tfm_module_num_parameters(c2) end, "closed")
end)

test("sub-module: keeps its parent alive (raw)", function()
  local c
  do
    local raw = core.tfm_model_load(KJV)
    c = core.tfm_module_child(raw, "layers.0")
  end
  collectgarbage("collect")
  collectgarbage("collect")
  assert(core.tfm_module_num_parameters(c) > 0)
end)

test("GC: owners and dependents dropped together, in any order", function()
  for round = 1, 3 do
    local objs = {}
    do
      local m = T.load_model(KJV)
      m:train()
      objs[#objs + 1] = T.optim.SGD(m, { lr = 0.1 })
      objs[#objs + 1] = m:kv_cache(4)
      objs[#objs + 1] = m:child("layers.0")
      objs[#objs + 1] = T.optim.SGD(m:child("layers.0"), { lr = 0.1 })
      objs[#objs + 1] = m:stream("And", { max_new_tokens = 3, stop_strings = { "q" } })
      objs[#objs + 1] = m
    end
    if round == 2 then objs[#objs]:close() end
    objs = nil
    collectgarbage("collect")
    collectgarbage("collect")
  end
end)

---------------------------------------------------------------------------
-- Strings with a NUL (kind 7): refused where they cross into C
---------------------------------------------------------------------------

test("NUL: stop strings, paths, tokens, names and enum values are refused", function()
  local m = T.load_model(KJV)
  raises(function() m:generate("And", { max_new_tokens = 2, stop_strings = { "a\0b" } }) end, "NUL")
  raises(function() m:stream("And", { max_new_tokens = 2, stop_strings = "a\0b" }) end, "NUL")
  raises(function() T.load_model(KJV .. "\0.txt") end, "NUL")
  raises(function() m:save(os.tmpname() .. "\0x") end, "NUL")
  raises(function() m.tokenizer:convert_tokens_to_ids("a\0b") end, "NUL")
  raises(function() m:child("layers.0\0x") end, "no sub-module")
  raises(function() m.tokenizer:special_token_id("eos\0x") end, "NUL")
  raises(function() core.generator_create(core.tfm_model_load(KJV), { 1 }, { ["max_new_tokens\0x"] = 2 }) end, "NUL")
  raises(function() core.generator_create(core.tfm_model_load(KJV), { 1 }, { sampling = { ["top_k\0x"] = 2 } }) end, "NUL")
  -- a prompt or a text with a NUL is taken whole (with its length): the
  -- character U+0000 is not in this model's vocabulary, at byte 2
  raises(function() m:generate("An\0d", { max_new_tokens = 2 }) end, "U+0000 at byte offset 2")
  raises(function() m.tokenizer:encode("a\0b") end, "U+0000 at byte offset 1")
end)

-- Left open: the state closes (harness.finish) with an optimizer, a cache,
-- a child and a stream alive, whose finalizers then run in any order.
local keep_model = T.load_model(KJV)
keep_model:train()
local keep = { T.optim.SGD(keep_model, { lr = 0.1 }), keep_model:kv_cache(4),
               keep_model:child("layers.0"), keep_model:stream("And", { max_new_tokens = 2 }) }
assert(#keep == 4)

harness.finish()
