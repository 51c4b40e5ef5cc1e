"""The repository's Python tools take their output file as a positional
argument: ``--help`` must print usage, not become a file.  (A run of
``tools/kjv_text.py --help`` once wrote the whole King James text to a file
named ``--help`` that was then committed.)"""

import subprocess
import sys

import pytest

from conftest import REPO

TOOLS = ["tools/kjv_text.py", "tools/kjv_quantized_bpc.py",
         "tools/make_safetensors_testdata.py"]


@pytest.mark.parametrize("tool", TOOLS)
def test_help_prints_usage_and_writes_nothing(tool, tmp_path):
    r = subprocess.run([sys.executable, str(REPO / tool), "--help"],
                       cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage:")
    assert list(tmp_path.iterdir()) == []


def test_no_tracked_file_name_looks_like_an_option():
    r = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"],
                       capture_output=True, timeout=60)
    if r.returncode != 0:
        pytest.skip("not a git checkout")
    names = [p for p in r.stdout.decode().split("\0") if p]
    bad = [p for p in names if any(part.startswith("-")
                                   for part in p.split("/"))]
    assert bad == []
