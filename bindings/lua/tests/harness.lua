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

function H.finish()
  print(("%d passed, %d failed"):format(passed, failed))
  os.exit(failed == 0 and 0 or 1, true)  -- close the state: finalizers run
end

return H
