"""The C examples of the documentation, extracted, compiled against the
build tree's library and headers, and run: README.md's attention example
(it prints four outputs), and docs/USAGE.md's training step (its loss must
fall: the program exits 0 only then, and it prints the two losses)."""

import os
import pathlib
import re
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


def _build_lib():
    """The directory of the libtransformer.so the Python package uses."""
    import transformer
    here = pathlib.Path(transformer.__file__).resolve().parent
    for cand in (here.parents[2] / "src", here.parents[1] / "src"):
        if (cand / "libtransformer.so").exists():
            return cand
    return None


def _compile_and_run(cc, lib, tmp_path, doc, anchor):
    """The first ```c block after anchor in doc, built and run."""
    text = (REPO / doc).read_text(encoding="utf-8")
    start = text.index(anchor)
    block = re.search(r"```c\n(.*?)```", text[start:], re.S).group(1)
    src = tmp_path / "example.c"
    src.write_text(block)
    exe = tmp_path / "example"
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", str(src),
                    "-I", str(REPO / "include"), "-L", str(lib),
                    "-ltransformer", "-lm", "-o", str(exe)], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib))
    out = subprocess.run([str(exe)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr + out.stdout
    return out


def test_readme_c_attention(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    lib = _build_lib()
    if cc is None or lib is None:
        pytest.skip("no C compiler or no build tree library")
    out = _compile_and_run(cc, lib, tmp_path, "README.md", "## C\n")
    assert re.fullmatch(r"out\[0, 0, :4\] = (-?\d+\.\d{4} ?){4}\n",
                        out.stdout), out.stdout


def test_readme_c_training_step(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    lib = _build_lib()
    if cc is None or lib is None:
        pytest.skip("no C compiler or no build tree library")
    out = _compile_and_run(cc, lib, tmp_path, "docs/USAGE.md",
                           "In C, a training step of a small")
    m = re.match(r"loss (\d+\.\d+) -> (\d+\.\d+)", out.stdout)
    assert m and float(m.group(2)) < float(m.group(1)) / 2, out.stdout
