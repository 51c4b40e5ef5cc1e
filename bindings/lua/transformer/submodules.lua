-- transformer.submodules: a module's sub-modules as Lua objects --
-- module:child, module:named_children, module:named_modules.

local U = require("transformer._util")
local core, fail, fmt, variant_repr = U.core, U.fail, U.fmt, U.variant_repr
local mod = require("transformer.module")
local Module, handle, new_object = mod.Module, mod.handle, mod.new_object
local MultiheadAttention = require("transformer.attention").MultiheadAttention
local nn = require("transformer.nn")
local LayerNorm, Linear, RMSNorm = nn.LayerNorm, nn.Linear, nn.RMSNorm
local layers = require("transformer.layers")
local TransformerDecoder = layers.TransformerDecoder
local TransformerDecoderLayer = layers.TransformerDecoderLayer
local TransformerEncoder = layers.TransformerEncoder
local TransformerEncoderLayer = layers.TransformerEncoderLayer
local layer_repr = layers.layer_repr

---------------------------------------------------------------------------
-- Sub-modules
---------------------------------------------------------------------------

-- Whether the C module ch has a parameter called name.
local function has_parameter(ch, name)
  for i = 0, core.tfm_module_parameter_count(ch) - 1 do
    if core.tfm_module_parameter_name(ch, i) == name then return true end
  end
  return false
end

-- The Lua object for sub-module `name` of `parent` (handle ch): its class
-- from the C kind, its fields from the parent's configuration.
local function child_object(parent, name, ch)
  local kind = core.tfm_module_kind_of(ch)
  local c = rawget(parent, "config")
  local fields = { _parent = parent }
  local cls
  if kind == core.TFM_MODULE_LINEAR then
    local shape = core.tfm_module_parameter_shape(ch, "weight")
    local bias = has_parameter(ch, "bias")
    cls = Linear
    fields.in_features, fields.out_features, fields.bias = shape[2], shape[1], bias
    fields._repr = fmt("in_features=%d, out_features=%d, bias=%s", shape[2], shape[1],
                       tostring(bias))
  elseif kind == core.TFM_MODULE_LAYER_NORM then
    local d = core.tfm_module_parameter_shape(ch, "weight")[1]
    cls = core.tfm_layer_norm_is_rms(ch) == 1 and RMSNorm or LayerNorm
    fields.bias = has_parameter(ch, "bias")
    fields.normalized_shape, fields.eps, fields.elementwise_affine = { d }, c.layer_norm_eps, true
    fields._repr = fmt("%d, eps=%g, elementwise_affine=true", d, c.layer_norm_eps)
  elseif kind == core.TFM_MODULE_MHA then
    local E, H = c.d_model, c.n_heads
    cls = MultiheadAttention
    fields.embed_dim, fields.num_heads, fields.head_dim = E, H, E // H
    fields.kdim, fields.vdim = E, E
    fields.bias = has_parameter(ch, "in_proj_bias")
    fields.batch_first, fields.variant = parent.batch_first, rawget(parent, "variant")
    fields._repr = fmt("embed_dim=%d, num_heads=%d, bias=%s%s", E, H,
                       tostring(fields.bias), variant_repr(fields.variant))
  elseif kind == core.TFM_MODULE_ENCODER_LAYER or kind == core.TFM_MODULE_DECODER_LAYER then
    cls = kind == core.TFM_MODULE_ENCODER_LAYER and TransformerEncoderLayer
          or TransformerDecoderLayer
    fields.config, fields.batch_first, fields._repr = c, parent.batch_first, layer_repr(c)
    fields.bias = rawget(parent, "bias") ~= false
  elseif kind == core.TFM_MODULE_ENCODER or kind == core.TFM_MODULE_DECODER then
    cls = kind == core.TFM_MODULE_ENCODER and TransformerEncoder or TransformerDecoder
    local n = 0
    for i = 0, core.tfm_module_child_count(ch) - 1 do
      if core.tfm_module_child_name(ch, i):match("^layers%.") then n = n + 1 end
    end
    fields.config, fields.num_layers, fields.batch_first = c, n, parent.batch_first
    fields.bias = rawget(parent, "bias") ~= false
    fields._repr = fmt("num_layers=%d, %s, norm=true", n, layer_repr(c))
  else
    fail("%s: sub-module %s has no Lua class (kind %d)", parent._class_name, name, kind)
  end
  return new_object(cls, ch, fields)
end

--- module:child(name): the sub-module called name, with PyTorch's names:
--  "self_attn", "multihead_attn", "linear1", "linear2", "norm1".."norm3"
--  of a layer, "out_proj" of a MultiheadAttention, "layers.<i>" (from 0,
--  as PyTorch) and "norm" of a stack, "encoder" and "decoder" of a
--  Transformer, or a dotted path ("layers.0.self_attn.out_proj").  A
--  sub-module is a view, not a copy: its parameters are the parent's
--  (load_state_dict on it changes the parent's forward), it keeps its
--  parent alive, and it raises an error once the parent is closed.  The
--  same name gives the same object.
function Module:child(name)
  local h = handle(self)
  if type(name) ~= "string" then fail("child: name must be a string, got %s", type(name)) end
  local cache = rawget(self, "_children")
  if cache == nil then
    cache = {}
    rawset(self, "_children", cache)
  end
  if cache[name] then return cache[name] end
  local obj = self
  local direct = {}
  for i = 0, core.tfm_module_child_count(h) - 1 do
    direct[core.tfm_module_child_name(h, i)] = true
  end
  if direct[name] then
    obj = child_object(self, name, core.tfm_module_child(h, name))
  else
    -- a path: the longest direct child name that starts it, then the rest
    local first
    for n in pairs(direct) do
      if name:sub(1, #n + 1) == n .. "." and (first == nil or #n > #first) then first = n end
    end
    if first == nil then
      fail("%s has no sub-module \"%s\"", self._class_name, name)
    end
    obj = self:child(first):child(name:sub(#first + 2))
  end
  cache[name] = obj
  return obj
end

--- module:named_children(): iterator of (name, sub-module) over the direct
--  sub-modules in PyTorch's order (a stack's layers are "layers.0",
--  "layers.1", ...: Lua has no ModuleList; PyTorch's dropout modules have
--  no counterpart).
function Module:named_children()
  local h = handle(self)
  local names = {}
  for i = 0, core.tfm_module_child_count(h) - 1 do
    names[#names + 1] = core.tfm_module_child_name(h, i)
  end
  local i = 0
  return function()
    i = i + 1
    if names[i] then return names[i], self:child(names[i]) end
  end
end

--- module:named_modules(): iterator of (dotted name, module) over the
--  module itself ("") and every sub-module, depth first, as PyTorch's.
function Module:named_modules()
  local list = {}
  local function walk(prefix, m)
    list[#list + 1] = { prefix, m }
    for name, c in m:named_children() do
      walk(prefix == "" and name or prefix .. "." .. name, c)
    end
  end
  walk("", self)
  local i = 0
  return function()
    i = i + 1
    if list[i] then return list[i][1], list[i][2] end
  end
end
