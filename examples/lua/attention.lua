-- Multi-head attention on a small table, with the Lua bindings.
--
--   LUA_CPATH="build/bindings/lua/?.so;;" \
--   LUA_PATH="bindings/lua/?.lua;bindings/lua/?/init.lua;;" \
--       lua5.4 examples/lua/attention.lua
--
-- Four positions with four features each go through a 2-head attention
-- layer whose projections are the identity, so that head h compares the
-- features 2h-1 and 2h of the positions: weights = softmax(q k^T / sqrt(2)).
-- Prints the output and the attention weights (averaged over the heads and
-- per head), then the same with a causal mask.

local transformer = require("transformer")

local E, H = 4, 2

-- One sequence (batch of 1) of 4 positions, batch first: x[b][position][feature]
local x = { {
  { 1.0, 0.0, 0.5, 0.0 },
  { 0.0, 1.0, 0.0, 0.5 },
  { 1.0, 1.0, 0.0, 0.0 },
  { 0.0, 0.0, 1.0, 1.0 },
} }

local mha = transformer.MultiheadAttention{ embed_dim = E, num_heads = H }

-- Weights with PyTorch's names: in_proj_weight stacks W_q, W_k, W_v [3E][E];
-- here each is the identity, and so is the output projection.
local function identity(n)
  local m = {}
  for i = 1, n do
    m[i] = {}
    for j = 1, n do m[i][j] = i == j and 1.0 or 0.0 end
  end
  return m
end
local in_proj = {}
for _ = 1, 3 do
  for _, row in ipairs(identity(E)) do in_proj[#in_proj + 1] = row end
end
local zeros = function(n) local z = {} for i = 1, n do z[i] = 0.0 end return z end
mha:load_state_dict{
  in_proj_weight = in_proj, in_proj_bias = zeros(3 * E),
  ["out_proj.weight"] = identity(E), ["out_proj.bias"] = zeros(E),
}
print(mha, mha:num_parameters() .. " parameters")

local function show(title, m)
  print(title)
  for _, row in ipairs(m) do
    local cells = {}
    for j, v in ipairs(row) do cells[j] = string.format("%7.4f", v) end
    print("  " .. table.concat(cells, " "))
  end
end

-- Self-attention: query = key = value = x.
local out, weights = mha:forward(x, x, x)
show("output [position][feature]:", out[1])
show("attention weights, averaged over the heads [query][key]:", weights[1])

local _, per_head = mha:forward(x, x, x, { average_attn_weights = false })
for h = 1, H do
  show(("attention weights of head %d:"):format(h), per_head[1][h])
end

-- Each row of weights sums to 1.
for i, row in ipairs(weights[1]) do
  local s = 0
  for _, v in ipairs(row) do s = s + v end
  assert(math.abs(s - 1) < 1e-5, "row " .. i .. " sums to " .. s)
end

-- Causal: position i attends to positions 1..i only (zeros above the diagonal).
local cout, cweights = mha:forward(x, x, x, { is_causal = true })
show("causal output:", cout[1])
show("causal attention weights:", cweights[1])

-- Padding: the last position of the sequence is padding (true = ignored).
local _, pweights = mha:forward(x, x, x, { key_padding_mask = { { false, false, false, true } } })
show("attention weights with the last key as padding:", pweights[1])
