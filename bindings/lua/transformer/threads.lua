-- transformer.threads: the library's threads and scratch memory --
-- set_num_threads, get_num_threads, release_workspace.

local U = require("transformer._util")
local M, core = U.M, U.core

--- set_num_threads(n): how many threads forward passes use (n >= 1; the
-- library uses at most 64), or 0 for the default, one per online
-- processor.  Process-wide, as torch.set_num_threads.  Errors for a
-- non-integer or negative n.
function M.set_num_threads(n)
  if math.type(n) ~= "integer" then
    if type(n) == "number" and n == math.floor(n) and n >= 0 and n < 2^31 then
      n = math.tointeger(n)
    else
      error("set_num_threads: n must be a whole number, got " .. tostring(n), 2)
    end
  end
  if n < 0 then
    error("set_num_threads: n must be at least 0, got " .. n, 2)
  end
  core.tfm_set_num_threads(math.min(n, 2147483647))
end

--- get_num_threads() -> the thread count forward passes use (at least 1).
function M.get_num_threads()
  return core.tfm_get_num_threads()
end

--- release_workspace(): frees the calling thread's scratch memory of the
-- forward passes (it is reused between calls otherwise).
function M.release_workspace()
  core.tfm_workspace_release()
end
