-- transformer._util (internal): what every file of the package shares --
-- the C module transformer.core, the public table that require("transformer")
-- returns, errors (fail, api, publish), argument checking, the C enums'
-- names, attention-variant arguments, nested tables <-> tensors, masks and
-- token-id tables.

-- Loading the SWIG module defines the globals swig_type and swig_equals;
-- keep the global table as it was.
local had_swig_type = rawget(_G, "swig_type") ~= nil
local had_swig_equals = rawget(_G, "swig_equals") ~= nil
local core = require("transformer.core")
if not had_swig_type then rawset(_G, "swig_type", nil) end
if not had_swig_equals then rawset(_G, "swig_equals", nil) end

-- The public table: require("transformer") returns it; each file of the
-- package adds its names to it.
local M = {}

local unpack = table.unpack
local fmt = string.format

---------------------------------------------------------------------------
-- Errors
---------------------------------------------------------------------------

-- Internal errors carry no position; the public entry points (wrapped by
-- api) re-raise them at the caller's line.
local function fail(msg, ...)
  if select("#", ...) > 0 then msg = fmt(msg, ...) end
  error(msg, 0)
end

local depth = 0  -- nesting of public calls: only the outermost adds a position

local function api(f)
  return function(...)
    depth = depth + 1
    local res = table.pack(pcall(f, ...))
    depth = depth - 1
    if not res[1] then
      if depth > 0 then error(res[2], 0) end
      error(res[2], 2)
    end
    return unpack(res, 2, res.n)
  end
end

-- Wraps every public function of a class (and its metamethods) with api.
local function publish(class)
  for k, v in pairs(class) do
    if type(v) == "function" and (k:sub(1, 1) ~= "_" or k:sub(1, 2) == "__")
        and k ~= "__index" and k ~= "__gc" then
      class[k] = api(v)
    end
  end
  return class
end

---------------------------------------------------------------------------
-- Arguments
---------------------------------------------------------------------------

local function is_plain_table(t)
  return type(t) == "table" and getmetatable(t) == nil
end

-- An options table: a plain table without array part.
local function is_options(t)
  return is_plain_table(t) and rawget(t, 1) == nil
end

-- Constructor arguments: positional (in `names` order, optionally followed
-- by an options table) or one options table.  Unknown names are errors;
-- missing ones take `defaults`; `required` names must be given.
local function parse_args(what, names, defaults, required, ...)
  local n = select("#", ...)
  local args = { ... }
  local known = {}
  for _, k in ipairs(names) do known[k] = true end
  local out = {}
  local opts
  if n == 1 and is_options(args[1]) then
    opts = args[1]
  else
    for i = 1, n do
      if i == n and is_options(args[i]) and i > 1 then
        opts = args[i]
      elseif i > #names then
        fail("%s: too many arguments (%d)", what, n)
      else
        out[names[i]] = args[i]
      end
    end
  end
  if opts then
    for k, v in pairs(opts) do
      if not known[k] then fail("%s: unknown argument '%s'", what, tostring(k)) end
      if out[k] ~= nil then fail("%s: argument '%s' given twice", what, k) end
      out[k] = v
    end
  end
  for k, v in pairs(defaults) do
    if out[k] == nil then out[k] = v end
  end
  for _, k in ipairs(required or {}) do
    if out[k] == nil then fail("%s: missing argument '%s'", what, k) end
  end
  return out
end

-- forward() options: nil or a table with only the known names.
local function check_options(what, opts, names)
  if opts == nil then return {} end
  if not is_options(opts) then
    fail("%s: options must be a table of named arguments, got %s", what, type(opts))
  end
  local known = {}
  for _, k in ipairs(names) do known[k] = true end
  for k in pairs(opts) do
    if not known[k] then fail("%s: unknown option '%s'", what, tostring(k)) end
  end
  return opts
end

local function check_int(what, v, min)
  if math.type(v) ~= "integer" then
    if type(v) == "number" and v == math.floor(v) and v > -2^63 and v < 2^63 then
      v = math.tointeger(v)
    else
      fail("%s must be an integer, got %s", what, v == nil and "nil" or tostring(v))
    end
  end
  if min and v < min then fail("%s must be at least %d, got %d", what, min, v) end
  return v
end

local function check_number(what, v)
  if type(v) ~= "number" then fail("%s must be a number, got %s", what, type(v)) end
  return v
end

local function check_bool(what, v)
  if type(v) ~= "boolean" then fail("%s must be a boolean, got %s", what, type(v)) end
  return v
end

-- The names of the C enum `kind` (a TFM_ENUM_* constant), in value order:
-- the library's own table (names.h), shared with model files and Python.
local function enum_names(kind)
  local names = {}
  for v = 0, core.tfm_enum_count(kind) - 1 do
    local name = core.tfm_enum_name(kind, v)
    if name ~= nil then names[#names + 1] = name end
  end
  return names
end

local ACTIVATION_NAMES = enum_names(core.TFM_ENUM_ACTIVATION)
local ACTIVATIONS = {}
for _, name in ipairs(ACTIVATION_NAMES) do ACTIVATIONS[name] = true end
-- '"relu", "gelu" or "gelu_tanh"'
local ACTIVATION_LIST = "\"" .. table.concat(ACTIVATION_NAMES, "\", \"", 1, #ACTIVATION_NAMES - 1)
                        .. "\" or \"" .. ACTIVATION_NAMES[#ACTIVATION_NAMES] .. "\""
local function check_activation(v)
  if not ACTIVATIONS[v] then
    fail("activation must be %s, got %s", ACTIVATION_LIST, tostring(v))
  end
  return v
end

---------------------------------------------------------------------------
-- Attention variants (attention.h)
---------------------------------------------------------------------------

-- The variant's named arguments, in the C struct's order, and the allowed
-- option strings of its enum fields.
local VARIANT_KEYS = { "score", "scale", "additive_dim", "n_kv_heads", "rope", "rope_base",
                       "rope_dims", "relative", "max_distance", "relative_values",
                       "num_buckets", "bidirectional", "sparsity", "window", "dilation",
                       "n_global", "block_size", "n_random_blocks", "seed" }
local VARIANT_OPTIONS = {
  score = enum_names(core.TFM_ENUM_SCORE),
  rope = enum_names(core.TFM_ENUM_ROPE),
  relative = enum_names(core.TFM_ENUM_RELATIVE),
  sparsity = enum_names(core.TFM_ENUM_SPARSITY),
}
local VARIANT_FLAGS = { relative_values = true, bidirectional = true }
local VARIANT_NUMBERS = { scale = true, rope_base = true }

local function check_option(what, v, allowed)
  for _, a in ipairs(allowed) do
    if v == a then return v end
  end
  fail("%s must be one of \"%s\", got %s", what, table.concat(allowed, "\", \""),
       type(v) == "string" and ("\"" .. v .. "\"") or tostring(v))
end

-- The variant fields among parsed arguments `a`, checked: nil when none
-- is given (plain attention), else a table for the core.
local function variant_of(a)
  local v
  for _, k in ipairs(VARIANT_KEYS) do
    local x = a[k]
    if x ~= nil then
      if VARIANT_OPTIONS[k] then
        x = check_option(k, x, VARIANT_OPTIONS[k])
      elseif VARIANT_FLAGS[k] then
        x = check_bool(k, x)
      elseif VARIANT_NUMBERS[k] then
        x = check_number(k, x)
      else
        x = check_int(k, x)
      end
      v = v or {}
      v[k] = x
    end
  end
  return v
end

local function variant_repr(v)
  if v == nil then return "" end
  local parts = {}
  for _, k in ipairs(VARIANT_KEYS) do
    local x = v[k]
    if x ~= nil then
      parts[#parts + 1] = type(x) == "string" and fmt("%s=\"%s\"", k, x) or fmt("%s=%s", k, tostring(x))
    end
  end
  return #parts > 0 and (", " .. table.concat(parts, ", ")) or ""
end

local function with_variant_args(names)
  local out = {}
  for _, k in ipairs(names) do out[#out + 1] = k end
  for _, k in ipairs(VARIANT_KEYS) do out[#out + 1] = k end
  return out
end

---------------------------------------------------------------------------
-- Nested tables and tensors
---------------------------------------------------------------------------

-- The one walker of nested tables (every activation, mask and variant
-- argument goes through it): the shape, read down the first elements with
-- raw access (no metamethods), as the core's tensor_from_table reads them.
-- A table nested deeper than the library's largest rank -- a table that
-- contains itself, or a cycle -- is an error at that depth, never a loop.
local MAX_RANK = 4 -- TFM_MAX_RANK (tensor.h)
local function shape_of(t)
  local shape = {}
  while type(t) == "table" do
    if #shape == MAX_RANK then
      fail("tables nested deeper than %d levels are not supported (rank > %d; "
           .. "a table that contains itself?)", MAX_RANK, MAX_RANK)
    end
    shape[#shape + 1] = rawlen(t)
    t = rawget(t, 1)
  end
  return shape
end

local function shape_string(s)
  return "[" .. table.concat(s, ", ") .. "]"
end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

-- Nested table -> tensor object, is_boolean.  shape: optional other shape
-- (same element count) for the values in row-major order.
local function to_tensor(t, what, shape)
  if type(t) ~= "table" then
    fail("%s must be a (nested) table of numbers, got %s", what, type(t))
  end
  local ok, tensor, is_bool = pcall(core.tensor_from_table, t, shape)
  if not ok then fail("%s: %s", what, tostring(tensor)) end
  return tensor, is_bool
end

local function tensor_table(t, shape)
  return core.tensor_to_table(t, shape)
end

-- [a][b]... -> [b][a]... (swaps the first two axes).
local function transpose01(t)
  local out = {}
  for i = 1, #t do
    local row = t[i]
    for j = 1, #row do
      local col = out[j]
      if not col then col = {}; out[j] = col end
      col[i] = row[j]
    end
  end
  return out
end

---------------------------------------------------------------------------
-- Masks (MultiheadAttention's and the layers' conventions)
---------------------------------------------------------------------------

-- key_padding_mask [B][S] (booleans: true = padding, ignored; numbers:
-- added) and attn_mask [L][S] or [B*H][L][S] (PyTorch's layout, or
-- [B][H][L][S]) -> the core's masks table; tensors kept alive by it.
local function block_masks(names, B, H, L, S, kpm, attn_mask, is_causal)
  local m = {}
  if kpm ~= nil then
    local want = { B, S }
    local s = shape_of(kpm)
    if not same_shape(s, want) then
      fail("%s must have shape %s, got %s", names[1], shape_string(want), shape_string(s))
    end
    local t, is_bool = to_tensor(kpm, names[1])
    m.key_padding_mask = t
    m.key_padding_kind = is_bool and "block" or "additive"
  end
  if attn_mask ~= nil then
    local s = shape_of(attn_mask)
    local t, is_bool
    if #s == 2 then
      if not same_shape(s, { L, S }) then
        fail("%s must have shape %s, got %s", names[2], shape_string({ L, S }), shape_string(s))
      end
      t, is_bool = to_tensor(attn_mask, names[2])
    elseif #s == 3 then
      if not same_shape(s, { B * H, L, S }) then
        fail("the 3D %s must have shape %s (batch * num_heads, L, S), got %s",
             names[2], shape_string({ B * H, L, S }), shape_string(s))
      end
      t, is_bool = to_tensor(attn_mask, names[2], { B, H, L, S })
    elseif #s == 4 then
      if not same_shape(s, { B, H, L, S }) then
        fail("the 4D %s must have shape %s, got %s", names[2],
             shape_string({ B, H, L, S }), shape_string(s))
      end
      t, is_bool = to_tensor(attn_mask, names[2])
    else
      fail("%s must be 2D, 3D or 4D, got %dD", names[2], #s)
    end
    m.attn_mask = t
    m.attn_mask_kind = is_bool and "block" or "additive"
  end
  if is_causal ~= nil and check_bool(names[3], is_causal) then
    m.causal = "top_left"
  end
  if next(m) == nil then return nil end
  return m
end


-- Token ids: a table [L] or nested [B][L] of integers -> the table,
-- whether nested, B, L.
local function ids_shape(ids, what)
  if type(ids) ~= "table" then fail("%s must be a table of token ids, got %s", what, type(ids)) end
  if type(ids[1]) == "table" then
    local L = #ids[1]
    for b = 2, #ids do
      if type(ids[b]) ~= "table" or #ids[b] ~= L then
        fail("%s: row %d does not have %d ids", what, b, L)
      end
    end
    return ids, true, #ids, L
  end
  return ids, false, 1, #ids
end

return {
  core = core, M = M, fmt = fmt, fail = fail, api = api, publish = publish,
  is_plain_table = is_plain_table, is_options = is_options, parse_args = parse_args,
  check_options = check_options, check_int = check_int, check_number = check_number,
  check_bool = check_bool, enum_names = enum_names, ACTIVATION_NAMES = ACTIVATION_NAMES,
  check_activation = check_activation, VARIANT_KEYS = VARIANT_KEYS,
  check_option = check_option, variant_of = variant_of, variant_repr = variant_repr,
  with_variant_args = with_variant_args, shape_of = shape_of,
  shape_string = shape_string, same_shape = same_shape, to_tensor = to_tensor,
  tensor_table = tensor_table, transpose01 = transpose01, block_masks = block_masks,
  ids_shape = ids_shape
}
