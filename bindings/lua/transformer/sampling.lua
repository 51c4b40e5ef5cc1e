-- transformer.sampling: Sampler, DEFAULT_SEED and the decoding rule that
-- turns sampling options into the core's settings.

local U = require("transformer._util")
local M, check_bool, check_int = U.M, U.check_bool, U.check_int
local check_number, core, fail, fmt = U.check_number, U.core, U.fail, U.fmt
local parse_args = U.parse_args
local mod = require("transformer.module")
local Object, class, constructor = mod.Object, mod.class, mod.constructor
local handle, new_object = mod.handle, mod.new_object

---------------------------------------------------------------------------
-- Sampling
---------------------------------------------------------------------------

-- The seed used when sampling is asked for without one (the same in the
-- Python module and transformer-generate).
M.DEFAULT_SEED = 42

-- Sampling settings as the core's table, and the seed, by the one decoding
-- rule of the bindings and transformer-generate: greedy unless sampling is
-- asked for, i.e. do_sample = true (greedy = false), or any of temperature,
-- top_k, top_p, seed given (as the command line's --temperature, --top-k,
-- --top-p, --seed); temperature = 0 means greedy unless do_sample = true
-- says otherwise.  Unset values: temperature 1, top_k 0 (all), top_p 1,
-- seed M.DEFAULT_SEED.
local function sampling_table(o)
  local greedy, do_sample = o.greedy, o.do_sample
  if greedy ~= nil then check_bool("greedy", greedy) end
  if do_sample ~= nil then check_bool("do_sample", do_sample) end
  if greedy ~= nil and do_sample ~= nil and greedy == do_sample then
    fail("greedy = %s and do_sample = %s contradict each other: give one of them",
      tostring(greedy), tostring(do_sample))
  end
  local temperature = o.temperature ~= nil and check_number("temperature", o.temperature) or nil
  local sample
  if do_sample ~= nil then sample = do_sample
  elseif greedy ~= nil then sample = not greedy
  elseif temperature == 0 then sample = false
  else sample = o.temperature ~= nil or o.top_k ~= nil or o.top_p ~= nil or o.seed ~= nil end
  return {
    greedy = not sample,
    temperature = (sample and temperature) or 1.0,
    top_k = o.top_k == nil and 0 or check_int("top_k", o.top_k, 0),
    top_p = (not sample or o.top_p == nil) and 1.0 or check_number("top_p", o.top_p),
  }, (o.seed == nil and M.DEFAULT_SEED or check_int("seed", o.seed))
end

local Sampler = class("Sampler", Object)
M.Sampler = Sampler

--- Sampler{temperature=nil, top_k=nil, top_p=nil, greedy=nil, seed=nil,
-- do_sample=nil}: draws token ids from logits, reproducibly (the library's
-- SplitMix64 stream), by generate's rule: greedy (argmax) unless sampling
-- is asked for with do_sample = true or any of temperature (default 1),
-- top_k (default 0: no limit), top_p (default 1: no limit), seed (default
-- 42).
-- sampler(logits) or sampler:sample(logits): logits [vocab_size] -> id.
local function new_sampler(...)
  local a = parse_args("Sampler", { "temperature", "top_k", "top_p", "greedy", "seed", "do_sample" }, {}, {}, ...)
  local s, seed = sampling_table(a)
  local rng = core.tfm_rng()
  core.tfm_rng_seed(rng, seed)
  return new_object(Sampler, rng, {
    sampling = s,
    _repr = s.greedy and "greedy=true"
      or fmt("temperature=%g, top_k=%d, top_p=%g", s.temperature, s.top_k, s.top_p) })
end
constructor(Sampler, new_sampler, Object)

function Sampler:sample(logits)
  local rng = handle(self)
  if type(logits) ~= "table" or type(logits[1]) == "table" then
    fail("logits must be a flat table [vocab_size] of numbers")
  end
  return core.tfm_sample(logits, self.sampling, rng)
end

function Sampler:forward(logits)
  return self:sample(logits)
end

return {
  sampling_table = sampling_table
}
