-- Text generation with the shipped model (models/kjv-char.safetensors, a
-- character-level model trained on the King James Bible), with the Lua
-- bindings.
--
--   LUA_CPATH="build/bindings/lua/?.so;;" \
--   LUA_PATH="bindings/lua/?.lua;bindings/lua/?/init.lua;;" \
--       lua5.4 examples/lua/generate.lua ["prompt" [max_new_tokens [temperature [seed]]]]
--
-- Without a temperature the decoding is greedy (always the most likely
-- character); with one it samples, reproducibly for a given seed.  The
-- model is $TRANSFORMER_MODEL when set, else the installed one, else the
-- source tree's (transformer.default_model_path()).

local transformer = require("transformer")

local prompt = arg[1] or "In the beginning"
local n = math.tointeger(tonumber(arg[2] or "200"))
local temperature = arg[3] and tonumber(arg[3])
local seed = arg[4] and math.tointeger(tonumber(arg[4]))
if not n or n < 0 or (arg[3] and not temperature) or (arg[4] and not seed) then
  io.stderr:write("usage: lua5.4 generate.lua [prompt [max_new_tokens [temperature [seed]]]]\n")
  os.exit(2)
end

local path, tried = transformer.default_model_path()
if not path then
  io.stderr:write("no model found; tried:\n  " .. table.concat(tried, "\n  ") .. "\n")
  os.exit(1)
end

local model = transformer.load_model(path)

local opts = { max_new_tokens = n, greedy = true }
if temperature then
  opts = { max_new_tokens = n, temperature = temperature, top_p = 0.9, seed = seed or 1 }
end

-- generate returns the new characters (the prompt is not repeated).
local text = model:generate(prompt, opts)
print(prompt .. text)
io.stderr:write(tostring(model), "\n")

-- The next-character distribution after the prompt, from the logits of
-- its last position.
local logits = model:logits(prompt)
local last = logits[#logits]
local maxv = -math.huge
for _, v in ipairs(last) do maxv = math.max(maxv, v) end
local probs, sum = {}, 0
for id, v in ipairs(last) do
  probs[id] = math.exp(v - maxv)
  sum = sum + probs[id]
end
local order = {}
for id = 1, #last do order[id] = id end
table.sort(order, function(a, b) return probs[a] > probs[b] end)
local top = {}
for i = 1, 5 do
  local id = order[i]
  top[i] = string.format("%q %.3f", model:decode({ id - 1 }), probs[id] / sum)
end
io.stderr:write("most likely next characters: ", table.concat(top, ", "), "\n")
