-- transformer.module: the base classes -- Object (a handle: close,
-- is_closed, tostring) and Module (parameters, state_dict, safetensors,
-- train/eval, dropout, gradients) -- the class machinery, manual_seed and
-- the batch handling shared by the forward functions.

local U = require("transformer._util")
local M, api, check_int, check_number = U.M, U.api, U.check_int, U.check_number
local core, fail, is_plain_table = U.core, U.fail, U.is_plain_table
local same_shape, shape_of, shape_string = U.same_shape, U.shape_of, U.shape_string
local tensor_table, to_tensor, transpose01 = U.tensor_table, U.to_tensor, U.transpose01
local safetensors = require("transformer.safetensors")
local write_safetensors = safetensors.write_safetensors
local read_tensors = safetensors.read_tensors

---------------------------------------------------------------------------
-- Modules
---------------------------------------------------------------------------

-- Object: every object holding a handle (close, is_closed, tostring).
-- Module: the objects holding a tfm_module (parameters, state_dict ...).
local Object = {}
Object.__index = Object
local Module = setmetatable({}, { __index = Object })
Module.__index = Module
Module.__name = "transformer.Module"

local classes = {}

local function class(name, base)
  base = base or Module
  local c = {}
  for _, src in ipairs({ Object, base }) do
    for k, v in pairs(src) do
      if k:sub(1, 2) == "__" and k ~= "__index" and k ~= "__name" then c[k] = v end
    end
  end
  c.__index = c
  c.__name = "transformer." .. name
  c._class_name = name
  setmetatable(c, { __index = base })
  classes[c] = true
  return c
end

-- Makes the class table callable: Class(...) == Class.new(...) == fn(...).
local function constructor(c, fn, base)
  c.new = fn
  setmetatable(c, { __index = base or Module, __call = api(function(_, ...) return fn(...) end) })
end

local function is_object(o)
  local mt = getmetatable(o)
  return mt ~= nil and classes[mt] == true
end

-- The open handle of a module object.
local function handle(self)
  if not is_object(self) then
    fail("expected a transformer object (call methods as obj:method(...)), got %s", type(self))
  end
  local h = rawget(self, "_h")
  if h == nil or core.is_closed(h) then
    fail("this %s has been closed", self._class_name)
  end
  -- A sub-module (Module:child) is valid while its parents are open.
  local p = rawget(self, "_parent")
  while p ~= nil do
    local ph = rawget(p, "_h")
    if ph == nil or core.is_closed(ph) then
      fail("this %s is a part of a %s that has been closed", self._class_name, p._class_name)
    end
    p = rawget(p, "_parent")
  end
  return h
end

local dropout_streams   -- defined below (manual_seed)

local function new_object(c, h, fields)
  local o = fields or {}
  o._h = h
  -- a module with dropout sites: its constructor's dropout (torch's
  -- dropout=p) and a dropout stream of its own (module.h)
  if o.dropout ~= nil then
    core.tfm_module_set_dropout(h, o.dropout)
    core.tfm_module_set_dropout_state(h, core.tfm_rng_next(dropout_streams), 0)
  end
  return setmetatable(o, c)
end

--- Frees the object's memory now (the garbage collector would later).
-- Idempotent; using a closed object raises an error.
function Object:close()
  if not is_object(self) then fail("close: expected a transformer object") end
  local h = rawget(self, "_h")
  if h ~= nil then core.close(h) end
end

--- true once close() has been called.
function Object:is_closed()
  local h = rawget(self, "_h")
  return h == nil or core.is_closed(h)
end

Object.__close = function(self) self:close() end

local get_parameter_tensor   -- defined below

-- The package's generator for default initialisation (manual_seed).
local default_rng = core.tfm_rng()
core.tfm_rng_seed(default_rng, 0)
-- The seeds of new modules' dropout streams: module number i made since
-- manual_seed(s) gets output i + 1 of SplitMix64 seeded with s (as the
-- Python package).
dropout_streams = core.tfm_rng()
core.tfm_rng_seed(dropout_streams, 0)

--- manual_seed(seed): seeds the generator that new modules (and
-- reset_parameters() without a seed) draw their initial weights from, and
-- their dropout streams, as torch.manual_seed.  It starts seeded with 0
-- when the module is loaded.
function M.manual_seed(seed)
  core.tfm_rng_seed(default_rng, check_int("seed", seed, 0))
  core.tfm_rng_seed(dropout_streams, check_int("seed", seed, 0))
end

--- module:reset_parameters([seed]): draws every parameter afresh with
-- PyTorch's default initialisation (tfm_module_reset_parameters, module.h:
-- xavier-uniform attention projections, zero attention biases, nn.Linear's
-- U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for out_proj.weight and the
-- feed-forward layers, LayerNorm ones and zeros, N(0, 1) embeddings;
-- Transformer then xavier-uniform on every matrix, as nn.Transformer).
-- seed nil draws from the package's generator (manual_seed), an integer
-- from a generator seeded with it.  Returns the module.
function Module:reset_parameters(seed)
  local h = handle(self)
  local rng = default_rng
  if seed ~= nil then
    rng = core.tfm_rng()
    core.tfm_rng_seed(rng, check_int("seed", seed, 0))
  end
  core.tfm_module_reset_parameters(h, rng)
  local pad = rawget(self, "padding_idx")
  if pad ~= nil then     -- nn.Embedding: the padding row starts at zero
    local flat, shape = core.tensor_to_flat(get_parameter_tensor(h, "weight"))
    for j = 1, shape[2] do flat[pad * shape[2] + j] = 0 end
    core.tfm_module_set_parameter(h, "weight", (core.tensor_from_table(flat, shape)))
  end
  return self
end

--- Names of the parameters, in the library's fixed order (PyTorch names).
function Module:parameter_names()
  local h = handle(self)
  local hidden = rawget(self, "_hidden") or {}
  local names = {}
  for i = 0, core.tfm_module_parameter_count(h) - 1 do
    local n = core.tfm_module_parameter_name(h, i)
    if not hidden[n] then names[#names + 1] = n end
  end
  return names
end

--- Shape of a parameter, e.g. {24, 8}.
function Module:parameter_shape(name)
  return core.tfm_module_parameter_shape(handle(self), name)
end

--- Number of scalar parameters (as PyTorch's sum(p.numel())).
function Module:num_parameters()
  local h = handle(self)
  if rawget(self, "_hidden") == nil then return core.tfm_module_num_parameters(h) end
  local n = 0
  for _, name in ipairs(self:parameter_names()) do
    local c = 1
    for _, d in ipairs(core.tfm_module_parameter_shape(h, name)) do c = c * d end
    n = n + c
  end
  return n
end

function get_parameter_tensor(h, name)
  local t = core.tfm_tensor_create(core.tfm_module_parameter_shape(h, name))
  core.tfm_module_get_parameter(h, name, t)
  return t
end

--- The parameters as {name = nested table}, PyTorch's state_dict names.
function Module:state_dict()
  local h = handle(self)
  local sd = {}
  for _, name in ipairs(self:parameter_names()) do
    sd[name] = tensor_table(get_parameter_tensor(h, name))
  end
  return sd
end

-- Sets parameters from {name = tensor object}; all or nothing.
local function set_parameters(self, tensors, strict, from)
  local h = handle(self)
  local names = self:parameter_names()
  local known, missing, unexpected = {}, {}, {}
  for _, n in ipairs(names) do
    known[n] = true
    if tensors[n] == nil then missing[#missing + 1] = n end
  end
  for k in pairs(tensors) do
    if not known[k] then unexpected[#unexpected + 1] = tostring(k) end
  end
  table.sort(unexpected)
  if strict and (#missing > 0 or #unexpected > 0) then
    local parts = {}
    if #missing > 0 then
      parts[#parts + 1] = "Missing key(s) in state_dict: \"" .. table.concat(missing, "\", \"") .. "\"."
    end
    if #unexpected > 0 then
      parts[#parts + 1] = "Unexpected key(s) in state_dict: \"" .. table.concat(unexpected, "\", \"") .. "\"."
    end
    fail("Error(s) in loading %s for %s: %s", from, self._class_name, table.concat(parts, " "))
  end
  -- shapes first, so that a mismatch changes nothing
  for _, n in ipairs(names) do
    local t = tensors[n]
    if t ~= nil then
      local want = core.tfm_module_parameter_shape(h, n)
      local got = core.tensor_shape(t)
      if not same_shape(want, got) then
        fail("size mismatch for %s: copying a param with shape %s, the parameter in the current model has shape %s",
             n, shape_string(got), shape_string(want))
      end
    end
  end
  -- keep the old values, to restore them if a later one is refused
  local old = {}
  for _, n in ipairs(names) do
    if tensors[n] ~= nil then old[#old + 1] = { n, get_parameter_tensor(h, n) } end
  end
  for _, n in ipairs(names) do
    local t = tensors[n]
    if t ~= nil then
      local ok, err = pcall(core.tfm_module_set_parameter, h, n, t)
      if not ok then
        for _, p in ipairs(old) do core.tfm_module_set_parameter(h, p[1], p[2]) end
        fail(tostring(err))
      end
    end
  end
  return { missing_keys = missing, unexpected_keys = unexpected }
end

--- Loads parameters from a table {name = nested table} with PyTorch's
-- names (e.g. a state_dict() converted to tables).  strict (default
-- true): every parameter must be given and no other key.  All or
-- nothing: on any error no parameter changes.  Returns
-- {missing_keys = {...}, unexpected_keys = {...}}.
function Module:load_state_dict(state_dict, strict)
  handle(self)
  if not is_plain_table(state_dict) then
    fail("load_state_dict: expected a table {name = values}, got %s", type(state_dict))
  end
  if strict == nil then strict = true end
  local tensors = {}
  for k, v in pairs(state_dict) do
    if type(k) ~= "string" then  -- with strict = false too (as Python, torch)
      fail("load_state_dict: parameter names must be strings, got %s %s", type(k), tostring(k))
    end
    local t, is_bool = to_tensor(v, k)
    if is_bool then fail("%s: parameters must be numbers, not booleans", k) end
    tensors[k] = t
  end
  return set_parameters(self, tensors, strict, "state_dict")
end


--- module:save_safetensors(path [, metadata [, dtype]]): writes the
-- parameters to a safetensors file (PyTorch names); metadata: optional
-- table of strings; dtype as M.save_safetensors's ("F32" by default).
function Module:save_safetensors(path, metadata, dtype)
  local h = handle(self)
  local list = {}
  for _, name in ipairs(self:parameter_names()) do
    list[#list + 1] = { name, get_parameter_tensor(h, name) }
  end
  write_safetensors(list, path, metadata, dtype)
end

--- Loads the parameters from a safetensors file (F32, F16 or BF16) with
-- PyTorch's names; strict as for load_state_dict.
function Module:load_safetensors(path, strict)
  handle(self)
  if strict == nil then strict = true end
  local f = core.tfm_safetensors_open(path)
  local tensors = read_tensors(f)
  core.close(f)
  return set_parameters(self, tensors, strict, "safetensors file")
end

--- Multiply-accumulate count of one forward pass (module.h):
-- batch sequences of tgt_len queries over src_len keys (src_len defaults
-- to tgt_len).
function Module:forward_macs(batch, tgt_len, src_len)
  return core.tfm_module_forward_macs(handle(self), check_int("batch", batch, 1),
    check_int("tgt_len", tgt_len, 1), check_int("src_len", src_len or tgt_len, 1))
end

--- Training mode (as PyTorch's train(); module.h: tfm_module_train):
-- allocates every parameter's gradient once (zeroed), and the forward
-- calls of Linear, LayerNorm, TransformerEncoderLayer and Model keep their
-- inputs for :backward().  train(false) is eval().  Returns the module.
function Module:train(mode)
  local h = handle(self)
  if mode == nil then mode = true end
  core.tfm_module_train(h, mode and 1 or 0)
  rawset(self, "training", mode and true or false)
  if not mode then rawset(self, "_saved", nil) end
  return self
end

--- Evaluation mode (the forward computes as before): returns the module.
function Module:eval()
  return self:train(false)
end

--- module:set_dropout(p): the dropout probability of every dropout site
-- of the module and its sub-modules (tfm_module_set_dropout: attention
-- weights, feed-forward hidden activations, residual branches, a model's
-- embeddings), applied in training mode only.  p in [0, 1].  Returns the
-- module.
function Module:set_dropout(p)
  local h = handle(self)
  p = check_number("p", p)
  if not (p >= 0 and p <= 1) then
    fail("dropout probability has to be between 0 and 1, but got %s", tostring(p))
  end
  core.tfm_module_set_dropout(h, p)
  if rawget(self, "dropout") ~= nil then rawset(self, "dropout", p) end
  return self
end

--- module:dropout_state() -> seed, offset of the module's dropout stream
-- (tfm_module_get_dropout_state); module:set_dropout_state(seed, offset)
-- sets it (the next training-mode call draws key number offset), to
-- repeat or resume a run's masks.
function Module:dropout_state()
  return core.tfm_module_get_dropout_state(handle(self))
end

function Module:set_dropout_state(seed, offset)
  core.tfm_module_set_dropout_state(handle(self), check_int("seed", seed),
                                    check_int("offset", offset, 0))
  return self
end

--- Sets every parameter's gradient to zero (tfm_module_zero_grad).
function Module:zero_grad()
  core.tfm_module_zero_grad(handle(self))
  return self
end

--- The gradient of parameter `name` (PyTorch's name and shape), a nested
-- table, after training-mode backward passes (tfm_module_get_grad).
function Module:grad(name)
  local h = handle(self)
  if type(name) ~= "string" then fail("name must be a string, got %s", type(name)) end
  local t = core.tfm_tensor_create(core.tfm_module_parameter_shape(h, name))
  core.tfm_module_get_grad(h, name, t)
  return tensor_table(t)
end

-- What the last training-mode forward kept for backward (see train()).
local function saved(self, what)
  local sv = rawget(self, "_saved")
  if sv == nil then
    fail("%s:backward: no training-mode forward to differentiate (call "
         .. "train(), then the module, then backward)", what)
  end
  return sv
end

local function keep(self, sv)
  if rawget(self, "training") then rawset(self, "_saved", sv) end
end

function Object:__tostring()
  local h = rawget(self, "_h")
  if h == nil or core.is_closed(h) then return self._class_name .. "(closed)" end
  return self._class_name .. "(" .. (self._repr or "") .. ")"
end

function Object:__call(...)
  return self:forward(...)
end

---------------------------------------------------------------------------
-- Batch handling shared by the forward functions
---------------------------------------------------------------------------

-- Brings an activation to [B][L][E]: returns the table, whether it was
-- batched, and its shape.
local function batched(what, x, batch_first)
  if type(x) ~= "table" then
    fail("%s must be a nested table [B][L][E] (or [L][E]), got %s", what, type(x))
  end
  local s = shape_of(x)
  if #s == 2 then
    return { x }, false, { 1, s[1], s[2] }
  elseif #s == 3 then
    if not batch_first then
      x = transpose01(x)
      s = { s[2], s[1], s[3] }
    end
    return x, true, s
  end
  fail("%s must be 3D [B][L][E] (or unbatched 2D [L][E]), got %dD", what, #s)
end

-- Output tensor [B][L][E] -> table in the caller's layout.
local function unbatched(t, was_batched, batch_first)
  local out = tensor_table(t)
  if not was_batched then return out[1] end
  if not batch_first then return transpose01(out) end
  return out
end

local function mask_arg(m, was_batched)
  -- an unbatched key padding mask [S] becomes [1][S]
  if m ~= nil and not was_batched and type(m) == "table" and type(m[1]) ~= "table" then
    return { m }
  end
  return m
end

return {
  Object = Object, Module = Module, classes = classes, class = class,
  constructor = constructor, handle = handle, new_object = new_object,
  get_parameter_tensor = get_parameter_tensor, saved = saved, keep = keep,
  batched = batched, unbatched = unbatched, mask_arg = mask_arg
}
