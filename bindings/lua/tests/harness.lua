-- The plain-Lua test harness of the Lua suites: harness.test(name, fn)
-- prints "ok" or "FAIL" with the traceback; harness.finish() prints
-- "N passed, M failed" and exits non-zero when a test failed.  A name
-- given as the script's first argument runs only the tests containing it.
local H = {}
local passed, failed = 0, 0
local only = arg and arg[1]

function H.test(name, fn)
  if only and not name:find(only, 1, true) then return end
  local ok, err = xpcall(fn, debug.traceback)
  if ok then
    passed = passed + 1
    print("ok    " .. name)
  else
    failed = failed + 1
    print("FAIL  " .. name .. "\n      " .. tostring(err):gsub("\n", "\n      "))
  end
end

-- The number arrays `keys` of a hub test directory's reference.json
-- (json.dump of flat lists of numbers, written by the Python suite's
-- hub_*_reference.py), read with patterns: a table key -> numbers.
function H.hub_reference(dir, keys)
  local f = assert(io.open(dir .. "/reference.json", "rb"))
  local text = f:read("a")
  f:close()
  local r = {}
  for _, key in ipairs(keys) do
    local body = assert(text:match('"' .. key .. '": %[(.-)%]'), key)
    local t = {}
    for n in body:gmatch("[^,%s]+") do t[#t + 1] = assert(tonumber(n), n) end
    r[key] = t
  end
  return r
end

-- max |got - ref| / max |ref| of logits rows got[i][j] against the flat
-- reference ref (row-major, V columns).
function H.logits_error(got, ref, V)
  local diff, scale = 0, 0
  for i = 1, #got do
    for j = 1, V do
      local want = ref[(i - 1) * V + j]
      diff = math.max(diff, math.abs(got[i][j] - want))
      scale = math.max(scale, math.abs(want))
    end
  end
  return diff / scale
end

function H.finish()
  print(("%d passed, %d failed"):format(passed, failed))
  os.exit(failed == 0 and 0 or 1, true)  -- close the state: finalizers run
end

return H
