-- transformer.nn: the single-purpose modules -- LayerNorm, RMSNorm, Linear,
-- GatedFeedForward, Embedding -- and sinusoidal_positional_encoding.

local U = require("transformer._util")
local ACTIVATION_NAMES, M = U.ACTIVATION_NAMES, U.M
local check_activation, check_bool = U.check_activation, U.check_bool
local check_int, check_number = U.check_int, U.check_number
local check_option, core, enum_names = U.check_option, U.core, U.enum_names
local fail, fmt, ids_shape, parse_args = U.fail, U.fmt, U.ids_shape, U.parse_args
local tensor_table, to_tensor = U.tensor_table, U.to_tensor
local mod = require("transformer.module")
local class, constructor, handle = mod.class, mod.constructor, mod.handle
local keep, new_object, saved = mod.keep, mod.new_object, mod.saved

---------------------------------------------------------------------------
-- LayerNorm
---------------------------------------------------------------------------

local LayerNorm = class("LayerNorm")
M.LayerNorm = LayerNorm

-- The width d of a norm's normalized_shape (a number or {d}: the last
-- axis only), checked a whole number >= 1; `who` starts the message.
local function normalized_dim(who, d)
  if type(d) == "table" then
    if #d ~= 1 then fail("%s: only a 1D normalized_shape (the last axis) is supported", who) end
    d = d[1]
  end
  return check_int("normalized_shape", d, 1)
end

--- LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=true,
--  bias=true): over the last axis (normalized_shape is a number or {d}).
--  Parameters: weight [d], bias [d] (none with bias=false).
local function new_layer_norm(...)
  local a = parse_args("LayerNorm", { "normalized_shape", "eps", "elementwise_affine", "bias" },
    { eps = 1e-5, elementwise_affine = true, bias = true }, { "normalized_shape" }, ...)
  local d = normalized_dim("LayerNorm", a.normalized_shape)
  local eps = check_number("eps", a.eps)
  local affine = check_bool("elementwise_affine", a.elementwise_affine)
  local bias = check_bool("bias", a.bias)
  -- bias=false (or no affine parameters): a C LayerNorm without bias
  local h = core.tfm_layer_norm_create_v2(d, eps, bias and affine)
  local hidden
  if not affine then hidden = { weight = true } end
  return new_object(LayerNorm, h, {
    normalized_shape = { d }, eps = eps, elementwise_affine = affine, _hidden = hidden,
    _repr = fmt("%d, eps=%g, elementwise_affine=%s", d, eps, tostring(affine)),
  })
end
constructor(LayerNorm, new_layer_norm)

-- The forward of a module whose output has its input's shape (the C
-- forward c_forward(h, x, out)), keeping x for the backward.
local function forward_same_shape(self, c_forward, x)
  local h = handle(self)
  local t = to_tensor(x, "input")
  local out = core.tfm_tensor_create(core.tensor_shape(t))
  c_forward(h, t, out)
  keep(self, { x = t })
  return tensor_table(out)
end

-- Its backward (c_backward(h, x, grad_output, grad_input)) from the kept x.
local function backward_same_shape(self, what, c_backward, grad_output)
  local h = handle(self)
  local x = saved(self, what).x
  local g = to_tensor(grad_output, "grad_output")
  local gx = core.tfm_tensor_create(core.tensor_shape(x))
  c_backward(h, x, g, gx)
  return tensor_table(gx)
end

--- norm:forward(x): x of any rank 1 to 4 whose last axis is d -> same shape.
function LayerNorm:forward(x)
  return forward_same_shape(self, core.tfm_layer_norm_forward, x)
end

--- The gradient with respect to the input of the last training-mode
-- call (tfm_layer_norm_backward); accumulates the weight and bias
-- gradients.
function LayerNorm:backward(grad_output)
  return backward_same_shape(self, "LayerNorm", core.tfm_layer_norm_backward, grad_output)
end

--- RMSNorm(normalized_shape, eps=nil): torch.nn.RMSNorm (Zhang & Sennrich
--  2019; Llama's), y = x / sqrt(mean(x^2) + eps) * weight over the last
--  axis, nothing subtracted, no bias (tfm_rms_norm_create); eps nil is
--  torch's, float32's machine epsilon 2^-23.  Parameter: weight [d] (ones).
--  forward and backward as LayerNorm's.
local RMSNorm = class("RMSNorm", LayerNorm)
M.RMSNorm = RMSNorm
local function new_rms_norm(...)
  local a = parse_args("RMSNorm", { "normalized_shape", "eps" }, {},
    { "normalized_shape" }, ...)
  local d = normalized_dim("RMSNorm", a.normalized_shape)
  local eps = a.eps == nil and 2.0 ^ -23 or check_number("eps", a.eps)
  return new_object(RMSNorm, core.tfm_rms_norm_create(d, eps), {
    normalized_shape = { d }, eps = eps, elementwise_affine = true,
    _repr = fmt("%d, eps=%g", d, eps),
  })
end
constructor(RMSNorm, new_rms_norm, LayerNorm)

---------------------------------------------------------------------------
-- Linear
---------------------------------------------------------------------------

local Linear = class("Linear")
M.Linear = Linear

--- Linear(in_features, out_features, bias=true): PyTorch's nn.Linear,
--  y = x W^T + b.  Parameters: weight [out][in], bias [out], both drawn
--  from U(-1/sqrt(in), 1/sqrt(in)) as nn.Linear's reset_parameters.
local function new_linear(...)
  local a = parse_args("Linear", { "in_features", "out_features", "bias" }, { bias = true },
                       { "in_features", "out_features" }, ...)
  local n_in = check_int("in_features", a.in_features, 1)
  local n_out = check_int("out_features", a.out_features, 1)
  local bias = check_bool("bias", a.bias)
  return new_object(Linear, core.tfm_linear_create(n_in, n_out, bias), {
    in_features = n_in, out_features = n_out, bias = bias,
    _repr = fmt("in_features=%d, out_features=%d, bias=%s", n_in, n_out, tostring(bias)) }
  ):reset_parameters()
end
constructor(Linear, new_linear)

--- linear:forward(x): x of rank 1 to 4 whose last axis is in_features ->
--  the same leading axes, last axis out_features.
function Linear:forward(x)
  local h = handle(self)
  local t = to_tensor(x, "input")
  local shape = core.tensor_shape(t)
  shape[#shape] = self.out_features
  local out = core.tfm_tensor_create(shape)
  core.tfm_linear_forward(h, t, out)
  keep(self, { x = t })
  return tensor_table(out)
end

--- The gradient with respect to the input of the last training-mode
-- call, given grad_output (the output's shape); accumulates the weight
-- and bias gradients (tfm_linear_backward), as torch.autograd does.
function Linear:backward(grad_output)
  local h = handle(self)
  local x = saved(self, "Linear").x
  local g = to_tensor(grad_output, "grad_output")
  local gx = core.tfm_tensor_create(core.tensor_shape(x))
  core.tfm_linear_backward(h, x, g, gx)
  return tensor_table(gx)
end

---------------------------------------------------------------------------
-- GatedFeedForward
---------------------------------------------------------------------------

local GatedFeedForward = class("GatedFeedForward")
M.GatedFeedForward = GatedFeedForward

--- GatedFeedForward(d_model, dim_feedforward, activation="silu",
--  bias=false): the gated feed-forward network of Llama (Shazeer 2020,
--  SwiGLU; tfm_gated_feed_forward_create), out = linear2(act(linear1(x)) *
--  linear3(x)): linear1 is Llama's gate_proj, linear3 up_proj, linear2
--  down_proj.  Parameters, in order: linear1.weight [F][E], linear3.weight
--  [F][E], (bias: linear1.bias, linear3.bias,) linear2.weight [E][F]
--  (linear2.bias); nn.Linear's initialisation.
local function new_gated_feed_forward(...)
  local a = parse_args("GatedFeedForward", { "d_model", "dim_feedforward", "activation", "bias" },
    { activation = "silu", bias = false }, { "d_model", "dim_feedforward" }, ...)
  local d = check_int("d_model", a.d_model, 1)
  local f = check_int("dim_feedforward", a.dim_feedforward, 1)
  local act
  for v, name in ipairs(ACTIVATION_NAMES) do
    if name == check_activation(a.activation) then act = v - 1 end
  end
  local bias = check_bool("bias", a.bias)
  return new_object(GatedFeedForward,
    core.tfm_gated_feed_forward_create(d, f, act, bias), {
      d_model = d, dim_feedforward = f, activation = a.activation, bias = bias,
      _repr = fmt("d_model=%d, dim_feedforward=%d, activation=%s, bias=%s", d, f,
                  tostring(a.activation), tostring(bias)) }):reset_parameters()
end
constructor(GatedFeedForward, new_gated_feed_forward)

--- ff:forward(x): x [B][L][d_model] -> the same shape.
function GatedFeedForward:forward(x)
  return forward_same_shape(self, core.tfm_feed_forward_forward, x)
end

--- The gradient with respect to the input of the last training-mode
-- call (tfm_feed_forward_backward); accumulates the parameter gradients.
function GatedFeedForward:backward(grad_output)
  return backward_same_shape(self, "GatedFeedForward", core.tfm_feed_forward_backward,
                             grad_output)
end

---------------------------------------------------------------------------
-- Embedding and positional encodings
---------------------------------------------------------------------------

local Embedding = class("Embedding")
M.Embedding = Embedding

--- Embedding(num_embeddings, embedding_dim, padding_idx=nil, max_norm=nil,
--  {scale=false}): PyTorch's nn.Embedding, a lookup table.  scale (not in
--  PyTorch) multiplies the rows by sqrt(embedding_dim) (section 3.4 of
--  Vaswani et al.).  Parameter: weight [num_embeddings][embedding_dim],
--  N(0, 1) with row padding_idx (a 0-based id; negative counts from the
--  end) zero, as PyTorch's.
local function new_embedding(...)
  local a = parse_args("Embedding", { "num_embeddings", "embedding_dim", "padding_idx",
                                      "max_norm", "scale" },
                       { scale = false }, { "num_embeddings", "embedding_dim" }, ...)
  if a.max_norm ~= nil then fail("Embedding: max_norm is not supported") end
  local n = check_int("num_embeddings", a.num_embeddings, 1)
  local d = check_int("embedding_dim", a.embedding_dim, 1)
  local pad = a.padding_idx
  if pad ~= nil then
    pad = check_int("padding_idx", pad, -n)
    if pad >= n then fail("padding_idx = %d is outside [-%d, %d)", pad, n, n) end
    if pad < 0 then pad = pad + n end
  end
  local h = core.tfm_embedding_create(n, d, check_bool("scale", a.scale))
  return new_object(Embedding, h, {
    num_embeddings = n, embedding_dim = d, padding_idx = pad, scale = a.scale,
    _repr = fmt("%d, %d%s", n, d, a.scale and ", scale=true" or "") }):reset_parameters()
end
constructor(Embedding, new_embedding)

--- emb:forward(ids): ids [L] -> [L][embedding_dim], [B][L] ->
-- [B][L][embedding_dim], an integer -> [embedding_dim].
function Embedding:forward(ids)
  local h = handle(self)
  if math.type(ids) == "integer" then return self:forward({ ids })[1] end
  local nested, B, L
  ids, nested, B, L = ids_shape(ids, "input")
  if L < 1 then fail("input must not be empty") end
  local out = core.tfm_tensor_create({ B, L, self.embedding_dim })
  core.tfm_embedding_forward(h, ids, out)
  local t = tensor_table(out)
  return nested and t or t[1]
end

--- sinusoidal_positional_encoding(length, d_model, offset=0, base=10000,
-- layout="interleaved"): PE [length][d_model] of positions offset ..
-- offset+length-1.  "interleaved" (section 3.5 of Vaswani et al.):
-- PE[pos][2i+1] = sin(pos / base^(2i/d)), PE[pos][2i+2] = cos(pos /
-- base^(2i/d)) (Lua's 1-based columns).  "concat" (fairseq,
-- tensor2tensor; d_model >= 4): with h = d_model // 2, PE[pos][i+1] =
-- sin(pos * base^(-i/(h-1))) and PE[pos][h+i+1] = cos(same), i = 0..h-1
-- (an odd d_model's last column is 0).
function M.sinusoidal_positional_encoding(length, d_model, offset, base, layout)
  local pe = core.tfm_tensor_create({ check_int("length", length, 1), check_int("d_model", d_model, 1) })
  offset = offset == nil and 0 or check_int("offset", offset, 0)
  base = base == nil and 10000.0 or check_number("base", base)
  layout = layout == nil and "interleaved" or check_option("layout", layout, enum_names(core.TFM_ENUM_SINUSOIDAL_LAYOUT))
  if layout == "interleaved" then
    core.tfm_sinusoidal_encoding(pe, offset, base)
  else
    core.tfm_sinusoidal_encoding_ex(pe, offset, base, layout)
  end
  return tensor_table(pe)
end

return {
  LayerNorm = LayerNorm, RMSNorm = RMSNorm, Linear = Linear
}
