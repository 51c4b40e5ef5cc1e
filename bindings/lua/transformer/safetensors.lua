-- transformer.safetensors: safetensors files -- load_safetensors,
-- load_safetensors_metadata, save_safetensors, and the writer that
-- Module:save_safetensors shares.

local U = require("transformer._util")
local M, core, fail, is_plain_table = U.M, U.core, U.fail, U.is_plain_table
local tensor_table, to_tensor = U.tensor_table, U.to_tensor

---------------------------------------------------------------------------
-- Safetensors files
---------------------------------------------------------------------------

-- dtype names of save_safetensors -> the core's tfm_dtype.
local SAVE_DTYPES = {
  F32 = "TFM_DTYPE_F32", f32 = "TFM_DTYPE_F32", float32 = "TFM_DTYPE_F32",
  F16 = "TFM_DTYPE_F16", f16 = "TFM_DTYPE_F16", float16 = "TFM_DTYPE_F16",
  half = "TFM_DTYPE_F16",
  BF16 = "TFM_DTYPE_BF16", bf16 = "TFM_DTYPE_BF16", bfloat16 = "TFM_DTYPE_BF16",
}
local function save_dtype(dtype, name)
  local d = dtype
  if type(dtype) == "table" then d = dtype[name] end
  if d == nil then return core.TFM_DTYPE_F32 end
  local key = SAVE_DTYPES[d]
  if not key then
    fail("dtype %s: the writer stores \"F32\", \"F16\" or \"BF16\"", tostring(d))
  end
  return core[key]
end

-- Adds every (name, tensor) of pairs to a new writer with the metadata and
-- saves it to path (tfm_safetensors_writer_save: temporary file, fsync,
-- rename).
local function write_safetensors(pairs_, path, metadata, dtype)
  if type(path) ~= "string" then fail("path must be a string, got %s", type(path)) end
  if dtype ~= nil and type(dtype) ~= "string" and not is_plain_table(dtype) then
    fail("dtype must be a string or a table {name = dtype}, got %s", type(dtype))
  end
  local w = core.tfm_safetensors_writer_create()
  for _, p in ipairs(pairs_) do
    core.tfm_safetensors_writer_add_as(w, p[1], p[2], save_dtype(dtype, p[1]))
  end
  for k, v in pairs(metadata or {}) do
    core.tfm_safetensors_writer_set_metadata(w, tostring(k), tostring(v))
  end
  core.tfm_safetensors_writer_save(w, path)
  core.close(w)
end

-- Every tensor of the open file f: {name = convert(tensor)} (convert nil:
-- the core's tensor as read); the core's read errors are raised.
local function read_tensors(f, convert)
  local tensors = {}
  for i = 0, core.tfm_safetensors_count(f) - 1 do
    local name = core.tfm_safetensors_name(f, i)
    local t = core.tfm_safetensors_read(f, name)
    if convert then t = convert(t) end
    tensors[name] = t
  end
  return tensors
end

-- Every metadata entry of the open file f: {key = value} (strings).
local function read_metadata(f)
  local meta = {}
  for i = 0, core.tfm_safetensors_metadata_count(f) - 1 do
    local k = core.tfm_safetensors_metadata_key(f, i)
    meta[k] = core.tfm_safetensors_metadata(f, k)
  end
  return meta
end

--- load_safetensors(path) -> {name = nested table}, metadata {key = value}.
-- Floating-point tensors (F32, F16, BF16, F64) only.
function M.load_safetensors(path)
  local f = core.tfm_safetensors_open(path)
  local tensors = read_tensors(f, tensor_table)
  local meta = read_metadata(f)
  core.close(f)
  return tensors, meta
end

--- load_safetensors_metadata(path) -> {key = value}.
function M.load_safetensors_metadata(path)
  local f = core.tfm_safetensors_open(path)
  local meta = read_metadata(f)
  core.close(f)
  return meta
end

--- save_safetensors(tensors, path [, metadata [, dtype]]): tensors {name =
-- nested table} (the argument order of the safetensors library's
-- save_file, and of the Python module's); metadata an optional table of
-- strings; dtype "F32" (default), "F16" or "BF16" (also "float16", "half",
-- "bfloat16"), or a table {name = dtype}: F16 and BF16 round to nearest
-- even as torch's .to(torch.float16) / .to(torch.bfloat16).
function M.save_safetensors(tensors, path, metadata, dtype)
  if not is_plain_table(tensors) then fail("tensors must be a table {name = values}") end
  local list = {}
  for name, v in pairs(tensors) do
    list[#list + 1] = { tostring(name), (to_tensor(v, tostring(name))) }
  end
  write_safetensors(list, path, metadata, dtype)
end

return {
  write_safetensors = write_safetensors,
  read_tensors = read_tensors,
}
