-- Files that are not files, from Lua (issue 44, kind 4): the package never
-- opens a file to learn whether it is there (io.open of a FIFO blocks
-- forever); it asks core.file_kind (a stat, following links, files.h) and
-- every file is read by the library through its one door (src/base/file.c).
-- A FIFO or a link to /dev/zero named like a file of a GPT-2 checkpoint
-- directory (a copy of TFM_HUB_DIR, written by hub_gpt2_reference.py) is
-- refused naming the path and what it is, at once: before, a FIFO
-- vocab.json blocked Model.load forever in the probe (ctest's TIMEOUT of
-- lua_files ends a run that blocks); a symlink to a regular file is
-- followed.  ctest runs it as lua_files.

local T = require("transformer")
local core = require("transformer.core")
local harness = require("harness")
local test = harness.test

local DIR = assert(os.getenv("TFM_HUB_DIR"), "TFM_HUB_DIR not set")

local function sh(cmd)
  assert(os.execute(cmd), cmd)
end

-- A fresh directory; its path.
local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  sh("mkdir " .. d)
  return d
end

-- A copy of the checkpoint directory; its path.
local function checkpoint()
  local d = tmpdir() .. "/gpt2"
  sh("cp -r '" .. DIR .. "' " .. d)
  return d
end

local function cleanup(d)
  sh("rm -rf " .. d:match("^(.*)/gpt2$"))
end

-- Something that is not a regular file at path: kind as file.c names it.
local ODD = {
  ["a FIFO (named pipe)"] = function(p) sh("mkfifo " .. p) end,
  ["a character device"] = function(p) sh("ln -s /dev/zero " .. p) end,
}

test("file_kind stats without opening, following links", function()
  local d = tmpdir()
  sh("mkfifo " .. d .. "/fifo && ln -s /dev/zero " .. d .. "/zero && ln -s missing "
     .. d .. "/dangling && echo x > " .. d .. "/file && ln -s file " .. d .. "/link")
  assert(core.file_kind(d .. "/fifo") == "fifo")   -- io.open would block here
  assert(core.file_kind(d .. "/zero") == "character device")
  assert(core.file_kind(d .. "/file") == "file")
  assert(core.file_kind(d .. "/link") == "file")
  assert(core.file_kind(d) == "directory")
  local kind, why = core.file_kind(d .. "/dangling")
  assert(kind == nil and why == "No such file or directory", tostring(why))
  assert(core.file_kind(d .. "/none") == nil)
  local ok, err = pcall(core.file_kind, d .. "/file\0x")
  assert(not ok and tostring(err):find("holds a NUL byte", 1, true), tostring(err))
  sh("rm -rf " .. d)
end)

for _, name in ipairs({ "vocab.json", "merges.txt", "config.json" }) do
  for kind, make in pairs(ODD) do
    test(name .. " that is " .. kind .. " is refused naming it", function()
      local d = checkpoint()
      local p = d .. "/" .. name
      os.remove(p)
      make(p)
      local ok, err = pcall(T.load_model, d)
      cleanup(d)
      assert(not ok, "loaded")
      local want = p .. " is " .. kind .. ", not a regular file: refused"
      assert(tostring(err):find(want, 1, true), tostring(err))
    end)
  end
end

test("symlinks to regular files are followed", function()
  local d = checkpoint()
  local elsewhere = d:match("^(.*)/gpt2$") .. "/elsewhere"
  sh("mkdir " .. elsewhere)
  for _, name in ipairs({ "vocab.json", "merges.txt", "config.json" }) do
    sh(("mv %s/%s %s/ && ln -s ../elsewhere/%s %s/%s"):format(d, name, elsewhere, name, d, name))
  end
  local m = T.load_model(d)
  cleanup(d)
  assert(m.tokenizer ~= nil and m.tokenizer:kind() == "byte_bpe")
  m:close()
end)

test("default_model_path probes without opening", function()
  -- $TRANSFORMER_MODEL is returned as given; the candidates are stat'ed
  local p = T.default_model_path()
  assert(p == nil or core.file_kind(p) == "file", tostring(p))
end)

harness.finish()
