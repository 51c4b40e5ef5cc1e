"""Files that are not files, in the Python and Lua layers (issue 44, kind
4): the files the bindings themselves read (generation_config.json,
config.json's id2label, preprocessor_config.json, the probes for tokenizer
files) go through one door, transformer/_files.py, as the library's
(src/base/file.c, src/base/json_check.c):

- a FIFO, a symlink to /dev/zero or a directory named like a file of a
  checkpoint directory is refused at once (the alarm ends a run that
  blocks) with an I/O error naming the path and what it is, never taken
  for missing nor read until memory runs out; a symlink to a regular file
  is followed (hub directories are git checkouts and hold symlinks);
- JSON is read as the library reads it: at most 16 MiB, UTF-8 (the bad
  byte's offset named), a key twice in one object refused, NaN, Infinity
  and numbers beyond a double refused, a NUL in a string refused, an
  object;
- no module of either package opens a file another way (checked on their
  sources), and the Lua probes never open the file (core.file_kind).

The library's own messages (file.c) are the expected texts: "<path> is a
FIFO (named pipe), not a regular file: refused", "<path>: larger than
16777216 bytes, the limit for this kind of file", "<path>: the key "k"
appears twice in one object ..."."""

import ast
import json
import os
import re
from pathlib import Path

import pytest

from odd_files import KINDS, make_odd, no_hang

import transformer
from transformer import FormatError, TransformerIOError
from transformer._files import open_regular, present, read_json
import hub_gpt2_reference as R

PACKAGE = Path(__file__).resolve().parents[1] / "transformer"
LUA_PACKAGE = Path(__file__).resolve().parents[2] / "lua" / "transformer"


@pytest.fixture(autouse=True)
def _no_hang():
    with no_hang(30):
        yield


@pytest.fixture(scope="module")
def weights():
    return R.random_weights(R.CONFIG)


def _checkpoint(tmp_path, weights):
    d = tmp_path / "gpt2"
    R.write_checkpoint(str(d), weights)
    return d


# ---- generation_config.json, config.json, the tokenizer files ------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["generation_config.json", "config.json",
                                  "vocab.json", "merges.txt"])
def test_checkpoint_file_not_a_regular_file(tmp_path, weights, name, kind):
    # Before: a FIFO or /dev/zero generation_config.json was taken for
    # missing (config.json's defaults used instead), a FIFO vocab.json for
    # no tokenizer at all.
    d = _checkpoint(tmp_path, weights)
    p = d / name
    if p.exists():
        p.unlink()
    make_odd(p, kind)
    if kind == "a directory" and name in ("vocab.json", "merges.txt"):
        # the library's rule (tokenizer_files.c): a directory is not a
        # tokenizer file, the checkpoint has no tokenizer
        m = transformer.from_pretrained(d)
        assert m.tokenizer is None
        m.close()
        return
    with pytest.raises(OSError) as e:
        transformer.from_pretrained(d)
    assert f"{p} is {kind}" in str(e.value), str(e.value)
    assert "not a regular file: refused" in str(e.value)


def test_symlinks_to_regular_files_are_followed(tmp_path, weights):
    d = _checkpoint(tmp_path, weights)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "gen.json").write_text(
        json.dumps({"num_beams": 3, "max_length": 7}))
    os.symlink(elsewhere / "gen.json", d / "generation_config.json")
    for name in ("vocab.json", "merges.txt"):
        os.rename(d / name, elsewhere / name)
        os.symlink(os.path.relpath(elsewhere / name, d), d / name)
    m = transformer.from_pretrained(d)
    try:
        assert m.generation_config["num_beams"] == 3
        assert m.generation_config["max_length"] == 7
        assert m.tokenizer is not None and m.tokenizer.kind == "byte_bpe"
    finally:
        m.close()


@pytest.mark.parametrize("text,words", [
    ('{"num_beams": 2, "num_beams": 3}',
     'the key "num_beams" appears twice in one object'),
    ('{"a": {"x": 1, "x": 1}}', 'the key "x" appears twice in one object'),
    ('{"length_penalty": NaN}', "NaN is not a JSON value"),
    ('{"length_penalty": -Infinity}', "-Infinity is not a JSON value"),
    ('{"length_penalty": 1e999}', "the number 1e999 is too large"),
    ('{"x": "a\\u0000b"}', 'the value of "x" holds an escaped NUL'),
    ('{"x": ["a", ["\\u0000"]]}', 'the value of "x" holds an escaped NUL'),
    ('{"a\\u0000b": 1}', 'the name or key "a" holds an escaped NUL'),
    ('{"x": "\\ud800"}', 'the value of "x" holds an escaped lone UTF-16'),
    ('[1, 2]', "not a JSON object"),
    ('{"num_beams": 2} {}', "not valid JSON (Extra data near byte 17)"),
    ('{"num_beams": 2', "not valid JSON"),
])
def test_generation_config_strict_json(tmp_path, weights, text, words):
    # Before: Python's json took the last of two keys and NaN, and a file
    # that did not parse was silently ignored.
    d = _checkpoint(tmp_path, weights)
    (d / "generation_config.json").write_text(text)
    with pytest.raises(FormatError) as e:
        transformer.from_pretrained(d)
    assert str(e.value).startswith(f"{d / 'generation_config.json'}: ")
    assert words in str(e.value), str(e.value)


def test_generation_config_cap_and_utf8(tmp_path, weights):
    d = _checkpoint(tmp_path, weights)
    p = d / "generation_config.json"
    with open(p, "wb") as f:
        f.truncate((16 << 20) + 1)        # sparse: nothing written
    with pytest.raises(TransformerIOError,
                       match=re.escape(f"{p}: larger than 16777216 bytes, "
                                       f"the limit for this kind of file")):
        transformer.from_pretrained(d)
    # "é" is 2 bytes: the bad byte \xff is byte 13 (from 0), character 12
    p.write_bytes(b'{"x": "\xc3\xa9", "\xff": 1}')
    with pytest.raises(FormatError,
                       match=re.escape(f"{p}: not valid UTF-8 at byte 13")):
        transformer.from_pretrained(d)


# ---- the door itself --------------------------------------------------------

def test_read_json_grows_past_cap_and_proc_files(tmp_path):
    # a file whose st_size says 0 (a /proc file) is read on, to the cap
    assert open_regular("/proc/self/status").read(4) == b"Name"
    p = tmp_path / "c.json"
    p.write_text('{"a": [1, 2.5, "x", null, true], "b": {"c": {}}}')
    assert read_json(p, cap=100) == {"a": [1, 2.5, "x", None, True],
                                     "b": {"c": {}}}
    with pytest.raises(TransformerIOError, match="larger than 10 bytes"):
        read_json(p, cap=10)


def test_present_does_not_open(tmp_path):
    os.mkfifo(tmp_path / "fifo")           # opening it would block
    os.symlink("/dev/zero", tmp_path / "zero")
    os.symlink("missing", tmp_path / "dangling")
    assert present(tmp_path / "fifo") and present(tmp_path / "zero")
    assert not present(tmp_path / "dangling")
    assert not present(tmp_path) and not present(tmp_path / "none")
    with pytest.raises(FileNotFoundError, match="dangling"):
        open_regular(tmp_path / "dangling")


# ---- nothing else opens files -----------------------------------------------

def test_python_package_reads_files_only_through_the_door():
    """Builtin open, io.open, os.open, json.load and Path.read_text /
    read_bytes / open appear in _files.py only (Image.open of the file
    object the door gave, and writes of files the package made itself,
    through os.fdopen of mkstemp's descriptor, are not reads by path)."""
    found = []
    for src in sorted(PACKAGE.rglob("*.py")):
        if src.name == "_files.py":
            continue
        for node in ast.walk(ast.parse(src.read_text(), str(src))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = (f.id if isinstance(f, ast.Name) else
                    f"{getattr(f.value, 'id', '?')}.{f.attr}"
                    if isinstance(f, ast.Attribute) else "")
            if name in ("open", "io.open", "os.open", "json.load",
                        "codecs.open") or name.endswith(
                            (".read_text", ".read_bytes")):
                found.append(f"{src.name}:{node.lineno}: {name}")
    assert not found, found


def test_lua_package_never_opens_files():
    """The Lua package probes with core.file_kind (a stat) and reads every
    file through the library: no io.open / io.lines / loadfile there."""
    found = []
    for src in sorted(LUA_PACKAGE.glob("*.lua")):
        for n, line in enumerate(src.read_text().splitlines(), 1):
            code = line.split("--", 1)[0]
            if re.search(r"\bio\.(open|lines|input|popen)\b|\b(loadfile|"
                         r"dofile)\b", code):
                found.append(f"{src.name}:{n}: {line.strip()}")
    assert not found, found


def test_paths_not_utf8(tmp_path):
    """Issue 44 follow-up: a directory whose name is not UTF-8 (os.listdir
    gives b"caf\\xe9" as the str "caf\\udce9") raised UnicodeEncodeError
    at the C call; paths now cross into C as Python's open() takes them
    (str through os.fsencode, bytes, os.PathLike), and the file written is
    in the directory of that very name.  A NUL is still refused."""
    d = tmp_path / os.fsdecode(b"caf\xe9")
    d.mkdir()
    assert os.listdir(os.fsencode(tmp_path)) == [b"caf\xe9"]
    lin = transformer.Linear(3, 2)
    f = d / "lin.safetensors"
    lin.save_safetensors(f)
    assert os.listdir(os.fsencode(d)) == [b"lin.safetensors"]
    for path in (f, str(f), os.fsencode(f)):
        other = transformer.Linear(3, 2)
        other.load_safetensors(path)
        for k, v in lin.state_dict().items():
            assert (other.state_dict()[k] == v).all()
        assert set(transformer.load_safetensors(path)) == {"weight", "bias"}
    m = transformer.Model(dict(architecture="decoder_only", vocab_size=11,
                               d_model=8, n_heads=2, d_ff=16, n_layers=1,
                               context_length=8))
    mf = d / "model.safetensors"
    m.save(mf)
    for path in (mf, os.fsencode(mf)):
        back = transformer.Model.load(path)
        for k, v in m.state_dict().items():
            assert (back.state_dict()[k] == v).all()
    for bad in (str(d) + "/a\0b.safetensors",
                os.fsencode(d) + b"/a\0b.safetensors"):
        with pytest.raises(ValueError, match="NUL"):
            lin.save_safetensors(bad)
        with pytest.raises(ValueError, match="NUL"):
            transformer.Model.load(bad)
    assert sorted(os.listdir(os.fsencode(d))) == [b"lin.safetensors",
                                                  b"model.safetensors"]
