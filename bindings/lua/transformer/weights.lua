-- transformer.weights: weights kept in 16, 8 and 4 bits (weights.h) --
-- the dtype names, module:quantize, module:parameter_dtype,
-- module:num_parameter_bytes, and the load options of Model.load.

local U = require("transformer._util")
local core, fail = U.core, U.fail
local mod = require("transformer.module")
local Module, handle = mod.Module, mod.handle

-- The names quantize and Model.load's dtype take (case-insensitive).
local DTYPES = {
  float32 = core.TFM_DTYPE_F32, f32 = core.TFM_DTYPE_F32,
  bfloat16 = core.TFM_DTYPE_BF16, bf16 = core.TFM_DTYPE_BF16,
  float16 = core.TFM_DTYPE_F16, f16 = core.TFM_DTYPE_F16,
  q8_0 = core.TFM_DTYPE_Q8_0, q4_0 = core.TFM_DTYPE_Q4_0,
}
local NAMES = "float32, f32, bfloat16, bf16, float16, f16, q8_0, q4_0"

-- The TFM_DTYPE_* of a name; with auto, "auto" too.
local function dtype_value(dtype, who, auto)
  if type(dtype) ~= "string" then
    fail("%s: dtype must be a name such as \"q8_0\", got %s", who, type(dtype))
  end
  local key = dtype:lower()
  if auto and key == "auto" then return core.TFM_LOAD_DTYPE_AUTO end
  local v = DTYPES[key]
  if v == nil then
    fail("%s: unknown dtype \"%s\" (one of %s%s)", who, dtype,
         auto and "auto, " or "", NAMES)
  end
  return v
end

--- module:quantize(dtype) -> the module: stores every weight of the
-- matrix products and every embedding table in dtype ("bf16", "f16",
-- "q8_0", "q4_0" -- llama.cpp's blocks of 32 -- or "f32" back to float32;
-- the long names "bfloat16", "float16", "float32" too); biases and norms
-- stay float32 and every computation is float32 on the widened weights
-- (weights.h: tfm_module_quantize).  A quantised module does not train
-- (module:train() raises); state_dict() holds the widened values.
-- Errors: an unknown name, training mode, for q8_0 / q4_0 a weight whose
-- rows are not a multiple of 32 values (named); nothing changes then.
function Module:quantize(dtype)
  local v = dtype_value(dtype, "quantize")
  core.tfm_module_quantize(handle(self), v)
  return self
end

--- module:parameter_dtype(name) -> "F32", "BF16", "F16", "Q8_0" or
-- "Q4_0": how parameter name is stored.
function Module:parameter_dtype(name)
  local v = core.tfm_module_parameter_dtype(handle(self), name)
  return core.tfm_enum_name(core.TFM_ENUM_DTYPE, v)
end

--- module:num_parameter_bytes() -> bytes of the parameters: 4 per
-- float32 value, 2 per bf16 / f16 value, 34 per 32 Q8_0 values, 18 per
-- 32 Q4_0 values (tfm_module_parameter_bytes).  get_memory_footprint is
-- Hugging Face's name for it.
function Module:num_parameter_bytes()
  return core.tfm_module_parameter_bytes(handle(self))
end
Module.get_memory_footprint = Module.num_parameter_bytes

-- The model handle of path, loaded with opts (nil, or a table {dtype =
-- "auto" or a name above, mmap = boolean}): tfm_model_load without
-- options, tfm_model_load_v2 with them.
local function load_handle(path, opts)
  if opts == nil then return core.tfm_model_load(path) end
  if type(opts) ~= "table" then
    fail("load: options must be a table {dtype=..., mmap=...}, got %s", type(opts))
  end
  for k in pairs(opts) do
    if k ~= "dtype" and k ~= "mmap" then
      fail("load: unknown option \"%s\" (dtype, mmap)", tostring(k))
    end
  end
  local o = {}
  if opts.dtype ~= nil then o.dtype = dtype_value(opts.dtype, "load", true) end
  if opts.mmap ~= nil then
    if type(opts.mmap) ~= "boolean" then
      fail("load: mmap must be a boolean, got %s", type(opts.mmap))
    end
    o.mmap = opts.mmap
  end
  return core.tfm_model_load_v2(path, o)
end

return { dtype_value = dtype_value, load_handle = load_handle }
