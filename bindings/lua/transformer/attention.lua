-- transformer.attention: MultiheadAttention, scaled_dot_product_attention
-- and Attention (a variant on per-head tensors).

local U = require("transformer._util")
local M, api, block_masks, check_bool = U.M, U.api, U.block_masks, U.check_bool
local check_int, check_number = U.check_int, U.check_number
local check_options, core, enum_names = U.check_options, U.core, U.enum_names
local fail, fmt, is_options, parse_args = U.fail, U.fmt, U.is_options, U.parse_args
local same_shape, shape_of, shape_string = U.same_shape, U.shape_of, U.shape_string
local tensor_table, to_tensor, variant_of = U.tensor_table, U.to_tensor, U.variant_of
local variant_repr, with_variant_args = U.variant_repr, U.with_variant_args
local mod = require("transformer.module")
local batched, class, constructor = mod.batched, mod.class, mod.constructor
local handle, mask_arg, new_object = mod.handle, mod.mask_arg, mod.new_object
local unbatched = mod.unbatched

---------------------------------------------------------------------------
-- MultiheadAttention
---------------------------------------------------------------------------

local MultiheadAttention = class("MultiheadAttention")
M.MultiheadAttention = MultiheadAttention

--- MultiheadAttention(embed_dim, num_heads, dropout=0, bias=true,
--  add_bias_kv=false, add_zero_attn=false, kdim=nil, vdim=nil,
--  batch_first=true): PyTorch's nn.MultiheadAttention (Vaswani et al. 2017,
--  section 3.2.2).  Parameters: in_proj_weight [3E][E] (or q_proj_weight,
--  k_proj_weight [E][kdim], v_proj_weight [E][vdim] when kdim or vdim
--  differ from embed_dim), in_proj_bias [3E], out_proj.weight [E][E],
--  out_proj.bias [E].
--  Attention variants (not in PyTorch; see Attention for each one): score,
--  scale, additive_dim, n_kv_heads, rope, rope_base, rope_dims, relative,
--  max_distance, relative_values, num_buckets, bidirectional, sparsity,
--  window, dilation, n_global, block_size, n_random_blocks, seed.  With
--  n_kv_heads < num_heads, in_proj_weight is [E + 2*n_kv_heads*head_dim][E];
--  a variant's own parameters (score_weight, temperature,
--  relative_key.weight, ...) follow the projections.
local MHA_ARGS = with_variant_args({ "embed_dim", "num_heads", "dropout", "bias", "add_bias_kv",
                                     "add_zero_attn", "kdim", "vdim", "batch_first" })
local function new_mha(...)
  local a = parse_args("MultiheadAttention", MHA_ARGS,
    { dropout = 0.0, bias = true, add_bias_kv = false, add_zero_attn = false,
      batch_first = true }, { "embed_dim", "num_heads" }, ...)
  local E = check_int("embed_dim", a.embed_dim, 1)
  local H = check_int("num_heads", a.num_heads, 1)
  check_number("dropout", a.dropout)
  check_bool("bias", a.bias)
  local bias_kv = check_bool("add_bias_kv", a.add_bias_kv)
  local zero_attn = check_bool("add_zero_attn", a.add_zero_attn)
  local kdim = a.kdim == nil and E or check_int("kdim", a.kdim, 1)
  local vdim = a.vdim == nil and E or check_int("vdim", a.vdim, 1)
  local variant = variant_of(a)
  -- tfm_mha_create_v2: PyTorch's add_bias_kv / add_zero_attn too
  local h = core.tfm_mha_create_v2(E, H, { kdim = kdim, vdim = vdim, bias = a.bias,
    add_bias_kv = bias_kv, add_zero_attn = zero_attn, attention = variant })
  return new_object(MultiheadAttention, h, {
    dropout = a.dropout, embed_dim = E, num_heads = H, head_dim = E // H, kdim = kdim, vdim = vdim,
    bias = a.bias, add_bias_kv = bias_kv, add_zero_attn = zero_attn,
    batch_first = check_bool("batch_first", a.batch_first), variant = variant,
    _repr = fmt("embed_dim=%d, num_heads=%d, bias=%s%s%s%s%s", E, H, tostring(a.bias),
                (kdim ~= E or vdim ~= E) and fmt(", kdim=%d, vdim=%d", kdim, vdim) or "",
                bias_kv and ", add_bias_kv=true" or "", zero_attn and ", add_zero_attn=true" or "",
                variant_repr(variant)),
  }):reset_parameters()
end
constructor(MultiheadAttention, new_mha)

local MHA_OPTIONS = { "key_padding_mask", "need_weights", "attn_mask",
                      "average_attn_weights", "is_causal", "static_k", "static_v" }

-- static_k / static_v: PyTorch's [B*num_heads][S][head_dim] (or
-- [B][num_heads][S][head_dim]) -> a [B, H_kv, S, head_dim] tensor.
local function static_rows(self, t, B, what)
  if t == nil then return nil end
  local s = shape_of(t)
  local hd = self.head_dim
  if #s == 3 then
    if s[1] % B ~= 0 then fail("%s has %d rows, expected a multiple of the batch %d", what, s[1], B) end
    return (to_tensor(t, what, { B, s[1] // B, s[2], s[3] }))
  elseif #s == 4 then
    return (to_tensor(t, what))
  end
  fail("%s must be [B*num_heads][S][head_dim] or [B][num_heads][S][head_dim] (head_dim %d)", what, hd)
end

--- mha:forward(query, key, value, {key_padding_mask, need_weights=true,
--  attn_mask, average_attn_weights=true, is_causal=false})
--  query [B][L][E], key [B][S][kdim], value [B][S][vdim] (key and value
--  default to query: mha:forward(x) is self-attention);
--  key_padding_mask [B][S]: true = padding (ignored), or numbers (added);
--  attn_mask [L][S] or [B*num_heads][L][S]: true = may not attend, or
--  numbers (added); is_causal: query i sees keys j <= i.
--  static_k, static_v: F.multi_head_attention_forward's precomputed keys /
--  values [B*num_heads][S][head_dim], used instead of key's / value's
--  projections (tfm_mha_forward_v2).
--  Returns output [B][L][E] and, with need_weights, the attention weights
--  [B][L][S] (averaged over the heads) or [B][num_heads][L][S].
--  A query whose keys are all masked gets zero weights and a zero output
--  (PyTorch gives NaN).
function MultiheadAttention:forward(query, key, value, opts)
  local h = handle(self)
  if opts == nil and is_options(value) then opts, value = value, nil end
  if opts == nil and value == nil and is_options(key) then opts, key = key, nil end
  opts = check_options("MultiheadAttention:forward", opts, MHA_OPTIONS)
  if key == nil then key = query end
  if value == nil then value = key end
  local bf = self.batch_first
  local q, was_batched, qs = batched("query", query, bf)
  local k, kb, ks = batched("key", key, bf)
  local v, vb = batched("value", value, bf)
  if kb ~= was_batched or vb ~= was_batched then
    fail("query, key and value must all be batched (3D) or all unbatched (2D)")
  end
  local B, L, S, H = qs[1], qs[2], ks[2], self.num_heads
  local sk = static_rows(self, opts.static_k, B, "static_k")
  local sv = static_rows(self, opts.static_v, B, "static_v")
  if sk then S = core.tensor_shape(sk)[3] elseif sv then S = core.tensor_shape(sv)[3] end
  -- the extra keys: bias_k / bias_v and the zero row (weights over S')
  local S_out = S + (self.add_bias_kv and 1 or 0) + (self.add_zero_attn and 1 or 0)
  local masks = block_masks({ "key_padding_mask", "attn_mask", "is_causal" }, B, H, L, S,
    mask_arg(opts.key_padding_mask, was_batched), opts.attn_mask, opts.is_causal)
  local tq = to_tensor(q, "query")
  local tk = key == query and tq or to_tensor(k, "key")
  local tv = value == key and tk or to_tensor(v, "value")
  local out = core.tfm_tensor_create({ B, L, self.embed_dim })
  local need = opts.need_weights
  if need == nil then need = true end
  local avg = opts.average_attn_weights
  if avg == nil then avg = true end
  local w
  if check_bool("need_weights", need) then
    w = core.tfm_tensor_create(check_bool("average_attn_weights", avg)
      and { B, L, S_out } or { B, H, L, S_out })
  end
  core.tfm_mha_forward_v2(h, tq, tk, tv, sk, sv, masks, out, w)
  local weights
  if w then
    weights = tensor_table(w)
    if not was_batched then weights = weights[1] end
  end
  return unbatched(out, was_batched, bf), weights
end

--- mha:attention_config() -> the attention variant as the library holds
-- it (tfm_attention_get_config): a table with every field (option
-- strings for score, rope, relative, sparsity), usable as named arguments
-- again.  Also on Attention and TransformerEncoderLayer.
function MultiheadAttention:attention_config()
  return core.tfm_attention_get_config(handle(self))
end

---------------------------------------------------------------------------
-- scaled_dot_product_attention
---------------------------------------------------------------------------

-- Broadcasts a mask (flat values, shape) to `target` (4D), PyTorch's
-- rules: aligned at the last axis, each axis equal or 1.
local function broadcast_mask(flat, shape, target, what)
  local r = #shape
  if r > 4 then fail("%s has more than 4 dimensions", what) end
  local s = {}
  for i = 1, 4 - r do s[i] = 1 end
  for i = 1, r do s[4 - r + i] = shape[i] end
  for i = 1, 4 do
    if s[i] ~= target[i] and s[i] ~= 1 then
      fail("%s of shape %s cannot be broadcast to %s", what, shape_string(shape),
           shape_string(target))
    end
  end
  local out, n = {}, 0
  local st = { s[2] * s[3] * s[4], s[3] * s[4], s[4], 1 }
  for a = 0, target[1] - 1 do
    local ia = (s[1] == 1 and 0 or a) * st[1]
    for b = 0, target[2] - 1 do
      local ib = ia + (s[2] == 1 and 0 or b) * st[2]
      for c = 0, target[3] - 1 do
        local ic = ib + (s[3] == 1 and 0 or c) * st[3]
        for d = 0, target[4] - 1 do
          n = n + 1
          out[n] = flat[ic + (s[4] == 1 and 0 or d) + 1]
        end
      end
    end
  end
  return out
end

local SDPA_OPTIONS = { "attn_mask", "dropout_p", "is_causal", "scale", "need_weights" }

-- The masks table of an attention call with an attn_mask option: [L][S]
-- as it is, anything else broadcast to [B][H][L][S]; booleans are "allow"
-- masks (true = may attend), numbers additive.  {} without a mask.
local function attn_mask_table(m, B, H, L, S)
  local masks = {}
  if m == nil then return masks end
  local ms = shape_of(m)
  local t, is_bool
  if same_shape(ms, { L, S }) then
    t, is_bool = to_tensor(m, "attn_mask")
  else
    local t0
    t0, is_bool = to_tensor(m, "attn_mask")
    local flat = core.tensor_to_flat(t0)
    local target = { B, H, L, S }
    t = to_tensor(broadcast_mask(flat, ms, target, "attn_mask"), "attn_mask", target)
  end
  masks.attn_mask = t
  masks.attn_mask_kind = is_bool and "allow" or "additive"
  return masks
end

--- scaled_dot_product_attention(query, key, value, {attn_mask, dropout_p=0,
--  is_causal=false, scale=nil, need_weights=false})
--  PyTorch's F.scaled_dot_product_attention, eq. (1) of Vaswani et al.:
--  softmax(scale * Q K^T + mask) V.  query [...][L][E], key [...][S][E],
--  value [...][S][Ev], with the same 0 to 2 leading axes (e.g.
--  [B][H][L][E]).  attn_mask broadcasts to [...][L][S]: booleans, true =
--  may attend (PyTorch's convention here), or numbers (added).  scale
--  defaults to 1/sqrt(E).  Returns [...][L][Ev], and with need_weights the
--  weights [...][L][S].
-- query, key and value as core tensors of their 4D shapes q4, k4, v4
-- ([B][H][L][E], key and value [B][H][S][*]), converted in that order
-- (to_tensor's errors), and attn_mask's table (attn_mask_table) for them:
-- tq, tk, tv, masks, B, H, L, S.
local function qkv_tensors(query, key, value, q4, k4, v4, attn_mask)
  local B, H, L, S = q4[1], q4[2], q4[3], k4[3]
  local tq = to_tensor(query, "query", q4)
  local tk = to_tensor(key, "key", k4)
  local tv = to_tensor(value, "value", v4)
  local masks = attn_mask_table(attn_mask, B, H, L, S)
  return tq, tk, tv, masks, B, H, L, S
end

local function sdpa(query, key, value, opts)
  opts = check_options("scaled_dot_product_attention", opts, SDPA_OPTIONS)
  if opts.dropout_p ~= nil and check_number("dropout_p", opts.dropout_p) ~= 0 then
    fail("dropout_p must be 0 (evaluation only)")
  end
  local qs, ks, vs = shape_of(query), shape_of(key), shape_of(value)
  local r = #qs
  if r < 2 or r > 4 then fail("query must have 2 to 4 dimensions, got %d", r) end
  if #ks ~= r or #vs ~= r then
    fail("query, key and value must have the same number of dimensions (%d, %d, %d)", r, #ks, #vs)
  end
  local lead = {}
  for i = 1, r - 2 do
    if ks[i] ~= qs[i] or vs[i] ~= qs[i] then
      fail("query, key and value must agree on the leading dimensions: %s, %s, %s",
           shape_string(qs), shape_string(ks), shape_string(vs))
    end
    lead[#lead + 1] = qs[i]
  end
  local function four(s)
    local out = {}
    for i = 1, 4 - r do out[i] = 1 end
    for i = 1, r do out[4 - r + i] = s[i] end
    return out
  end
  local q4, k4, v4 = four(qs), four(ks), four(vs)
  local tq, tk, tv, masks, B, H, L, S =
    qkv_tensors(query, key, value, q4, k4, v4, opts.attn_mask)
  if opts.is_causal ~= nil and check_bool("is_causal", opts.is_causal) then
    masks.causal = "top_left"
  end
  local scale = 0.0
  if opts.scale ~= nil then
    scale = check_number("scale", opts.scale)
    if scale == 0 then
      -- softmax(0 + mask): the library reads 0 as "default", so use zero
      -- queries with any scale instead.
      tq = core.tfm_tensor_create(q4)
      scale = 1.0
    end
  end
  local out = core.tfm_tensor_create({ B, H, L, v4[4] })
  local w
  if opts.need_weights then w = core.tfm_tensor_create({ B, H, L, S }) end
  core.tfm_sdpa(tq, tk, tv, next(masks) and masks or nil, scale, out, w)
  local oshape, wshape = {}, {}
  for i = 1, #lead do oshape[i] = lead[i]; wshape[i] = lead[i] end
  oshape[#oshape + 1] = L; oshape[#oshape + 1] = v4[4]
  wshape[#wshape + 1] = L; wshape[#wshape + 1] = S
  return tensor_table(out, oshape), w and tensor_table(w, wshape) or nil
end
M.scaled_dot_product_attention = api(sdpa)

---------------------------------------------------------------------------
-- Attention: a variant on per-head tensors (tfm_attention_*)
---------------------------------------------------------------------------

local Attention = class("Attention")
M.Attention = Attention

--- Attention(head_dim, num_heads, value_dim=head_dim, {variant...}): the
--  functional form of include/transformer/attention.h; without a variant it
--  equals scaled_dot_product_attention.  Variant fields, each independent:
--    score = "scaled_dot" (Vaswani et al. 2017, eq. 1; the default), "dot"
--      (Luong et al. 2015), "general" (Luong: q^T W_h k, parameter
--      score_weight [H][d_k][d_k]), "additive" (Bahdanau et al. 2014:
--      v^T tanh(W_q q + W_k k), additive_query / additive_key
--      [H][d_a][d_k], additive_v [H][d_a]; additive_dim = d_a, default
--      d_k), "learned_temperature" (q.k / tau_h, temperature [H] starting
--      at sqrt(d_k)); scale: logit scale (0 = the score's own);
--    n_kv_heads: key/value heads dividing num_heads (1: multi-query,
--      Shazeer 2019; between: grouped-query, Ainslie et al. 2023);
--    rope = "adjacent" (pairs 2i, 2i+1: RoFormer, GPT-J, LLaMA) or "half"
--      (pairs i, i + rope_dims/2: GPT-NeoX), rope_base (10000), rope_dims
--      (even, default head_dim);
--    relative = "shaw" (Shaw et al. 2018: relative_key.weight, with
--      relative_values also relative_value.weight,
--      [2*max_distance+1][d_k]; max_distance required), "t5" (Raffel et
--      al. 2020: relative_attention_bias.weight [num_buckets][H];
--      num_buckets 32, max_distance 128, bidirectional true), "alibi"
--      (Press et al. 2022: -m_h |j - i|);
--    sparsity = "sliding_window" (|i - j| <= window), "dilated" (and
--      i - j divisible by dilation), "bigbird" (blocks of block_size:
--      window blocks each side, n_global global blocks, n_random_blocks
--      random blocks drawn from seed); n_global global tokens also apply
--      to the windows.
local ATTENTION_ARGS = with_variant_args({ "head_dim", "num_heads", "value_dim" })
local function new_attention(...)
  local a = parse_args("Attention", ATTENTION_ARGS, {}, { "head_dim", "num_heads" }, ...)
  local dk = check_int("head_dim", a.head_dim, 1)
  local H = check_int("num_heads", a.num_heads, 1)
  local dv = a.value_dim == nil and dk or check_int("value_dim", a.value_dim, 1)
  local variant = variant_of(a)
  local h = core.tfm_attention_create(dk, dv, H, variant)
  return new_object(Attention, h, {
    head_dim = dk, num_heads = H, value_dim = dv, variant = variant,
    _repr = fmt("head_dim=%d, num_heads=%d%s%s", dk, H,
                dv ~= dk and fmt(", value_dim=%d", dv) or "", variant_repr(variant)),
  }):reset_parameters()
end
constructor(Attention, new_attention)

Attention.attention_config = MultiheadAttention.attention_config

local ATTENTION_OPTIONS = { "attn_mask", "is_causal", "need_weights" }
local CAUSAL_MODES = {}
for _, name in ipairs(enum_names(core.TFM_ENUM_CAUSAL)) do CAUSAL_MODES[name] = name end

--- attn:forward(query, key, value, {attn_mask, is_causal=false,
--  need_weights=false})
--  query [B][H][L][head_dim], key [B][H_kv][S][head_dim], value
--  [B][H_kv][S][value_dim] (H_kv = n_kv_heads), or without B (unbatched).
--  attn_mask broadcasts to [B][H][L][S]: booleans, true = may attend (as
--  scaled_dot_product_attention), or numbers (added).  is_causal: true or
--  "top_left" (query i sees keys j <= i), "bottom_right" (the L queries
--  are the last L of the S positions, as in KV-cache decoding).
--  Returns [B][H][L][value_dim], and with need_weights the weights
--  [B][H][L][S].
function Attention:forward(query, key, value, opts)
  local h = handle(self)
  opts = check_options("Attention:forward", opts, ATTENTION_OPTIONS)
  local qs, ks, vs = shape_of(query), shape_of(key), shape_of(value)
  local r = #qs
  if r ~= 3 and r ~= 4 then
    fail("query must be [B][H][L][head_dim] (or unbatched [H][L][head_dim]), got %dD", r)
  end
  if #ks ~= r or #vs ~= r then
    fail("query, key and value must have the same number of dimensions (%d, %d, %d)", r, #ks, #vs)
  end
  local function four(s)
    if r == 4 then return s end
    return { 1, s[1], s[2], s[3] }
  end
  local q4, k4, v4 = four(qs), four(ks), four(vs)
  local tq, tk, tv, masks, B, H, L, S =
    qkv_tensors(query, key, value, q4, k4, v4, opts.attn_mask)
  local c = opts.is_causal
  if c ~= nil then
    if type(c) == "boolean" then
      masks.causal = c and "top_left" or "none"
    elseif CAUSAL_MODES[c] then
      masks.causal = c
    else
      fail("is_causal must be a boolean, \"top_left\" or \"bottom_right\", got %s", tostring(c))
    end
  end
  local out = core.tfm_tensor_create({ B, H, L, v4[4] })
  local w
  if opts.need_weights ~= nil and check_bool("need_weights", opts.need_weights) then
    w = core.tfm_tensor_create({ B, H, L, S })
  end
  core.tfm_attention_forward(h, tq, tk, tv, next(masks) and masks or nil, out, w)
  local o, wt = tensor_table(out), w and tensor_table(w) or nil
  if r == 3 then
    o = o[1]
    if wt then wt = wt[1] end
  end
  return o, wt
end

return {
  MultiheadAttention = MultiheadAttention
}
