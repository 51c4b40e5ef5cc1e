"""Executes examples/notebooks/attention_tour.ipynb headlessly and fails if
any cell errors (every claim in the notebook is an assert in its cells).

The kernel is this test's own interpreter (sys.executable, i.e. the
TRANSFORMER_PYTHON the bindings were built for), through a kernelspec
written to a temporary directory, so that whatever "python3" kernel the
machine has installed is not used.  The kernel imports the same
`transformer` package as this test and runs in a temporary directory, with
Jupyter's, IPython's and matplotlib's state directories there too.

Needs Debian's python3-nbclient, python3-nbformat, python3-ipykernel and
python3-matplotlib (tools/install-deps.sh); skipped without them.
"""

import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

from nbclient.exceptions import CellExecutionError  # noqa: E402

import transformer  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[3]
NOTEBOOK_DIR = REPO / "examples" / "notebooks"
NOTEBOOK = NOTEBOOK_DIR / "attention_tour.ipynb"
GENERATOR = NOTEBOOK_DIR / "make_attention_tour.py"

KERNEL_NAME = "libtransformer-test-python3"
CELL_TIMEOUT_S = 120
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    """A private kernelspec for sys.executable and private state dirs;
    returns the directory the kernel runs in."""
    jupyter = tmp_path / "jupyter"
    spec_dir = jupyter / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-Xfrozen_modules=off", "-m",
                 "ipykernel_launcher",
                 "-f", "{connection_file}"],
        "display_name": "Python 3 (libtransformer tests)",
        "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "matplotlib"))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    # The kernel imports the transformer package this test imported.
    package_root = str(pathlib.Path(transformer.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH",
                       package_root + (os.pathsep + path if path else ""))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return cwd


def execute(nb, cwd):
    """Runs every cell of nb in place; CellExecutionError on the first
    cell that raises."""
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL_NAME,
        allow_errors=False, resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def outputs_of(nb, output_type=None):
    return [out for cell in nb.cells if cell.cell_type == "code"
            for out in cell.outputs
            if output_type is None or out.output_type == output_type]


# Run before the notebook's cells: every figure the kernel renders (inline
# display, savefig: all go through FigureCanvasBase.print_figure) is
# recorded with its title and the titles and axis labels of its axes
# (colorbars aside).
RECORD_FIGURES = """
import matplotlib.backend_bases as _tfm_mbb
_tfm_figures = []
_tfm_print_figure = _tfm_mbb.FigureCanvasBase.print_figure
def _tfm_recording_print_figure(self, *args, **kwargs):
    fig = self.figure
    _tfm_figures.append({
        "suptitle": fig._suptitle.get_text() if fig._suptitle else "",
        "axes": [{"title": ax.get_title(), "xlabel": ax.get_xlabel(),
                  "ylabel": ax.get_ylabel()}
                 for ax in fig.axes if ax.get_label() != "<colorbar>"]})
    return _tfm_print_figure(self, *args, **kwargs)
_tfm_mbb.FigureCanvasBase.print_figure = _tfm_recording_print_figure
"""
REPORT_FIGURES = "import json; print(json.dumps(_tfm_figures))"


def unlabelled(figures):
    """What the recorded figures lack: a title (the figure's, or one on
    every axes) and an x and a y label on every axes."""
    problems = []
    for i, fig in enumerate(figures, 1):
        if not fig["suptitle"].strip() and not all(
                a["title"].strip() for a in fig["axes"]):
            problems.append(f"figure {i}: no title")
        for j, a in enumerate(fig["axes"], 1):
            for key in ("xlabel", "ylabel"):
                if not a[key].strip():
                    problems.append(f"figure {i}, axes {j} "
                                    f"({a['title']!r}): no {key}")
    return problems


def test_unlabelled_figures_are_noticed():
    ok = {"suptitle": "", "axes": [{"title": "t", "xlabel": "x",
                                    "ylabel": "y"}]}
    per_head = {"suptitle": "", "axes": [{"title": "head 1", "xlabel": "",
                                          "ylabel": ""}]}
    assert unlabelled([ok]) == []
    assert unlabelled([ok, per_head]) == [
        "figure 2, axes 1 ('head 1'): no xlabel",
        "figure 2, axes 1 ('head 1'): no ylabel"]
    assert unlabelled([{"suptitle": "", "axes": [
        {"title": "", "xlabel": "x", "ylabel": "y"}]}]) == [
        "figure 1: no title"]


def test_attention_tour_runs(kernel_env):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(RECORD_FIGURES))
    nb.cells.append(nbformat.v4.new_code_cell(REPORT_FIGURES))
    start = time.monotonic()
    failure = None
    try:
        execute(nb, kernel_env)
    except CellExecutionError as e:
        failure = ANSI_ESCAPE.sub("", str(e))   # IPython colours tracebacks
    if failure:
        pytest.fail(f"{NOTEBOOK.name}: a cell failed:\n{failure}",
                    pytrace=False)
    elapsed = time.monotonic() - start
    print(f"{NOTEBOOK.name}: {len(nb.cells)} cells ran in {elapsed:.1f} s")

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    # Every figure has a title and axis labels.
    report = code.pop()
    figures = json.loads("".join(o.text for o in report.outputs
                                 if o.output_type == "stream"))
    assert len(figures) >= 3, figures
    assert unlabelled(figures) == [], unlabelled(figures)
    code.pop(0)
    assert not outputs_of(nb, "error")
    # The heatmaps were displayed inline, as PNG images.
    images = [o for o in outputs_of(nb)
              if o.output_type in ("display_data", "execute_result")
              and "image/png" in o.get("data", {})]
    assert len(images) >= 2, "expected the heatmap figures inline"
    # The generation cell printed generated text; the training cell its
    # falling losses.
    by_id = {c.get("id"): c for c in code}

    def printed(cell_id):
        return "".join(o.text for o in by_id[cell_id].outputs
                       if o.output_type == "stream")

    assert printed("generate").startswith("And God said")
    assert len(printed("generate")) > 200
    assert printed("train").startswith("loss per step:")
    # Nothing was written next to the notebook or in the kernel's cwd
    # besides what matplotlib/IPython keep in their (temporary) dirs.
    assert not any(kernel_env.iterdir()), list(kernel_env.iterdir())


def test_broken_cell_fails(kernel_env):
    """The harness notices an error (and runs this interpreter)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import sys; print(sys.executable)"),
                nbformat.v4.new_code_cell("1 / 0"),
                nbformat.v4.new_code_cell("print('not reached')")]
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        execute(nb, kernel_env)
    printed = nb.cells[0].outputs[0].text.strip()
    assert os.path.realpath(printed) == os.path.realpath(sys.executable)
    assert not nb.cells[2].outputs


def test_committed_notebook_is_generated_and_clean(monkeypatch):
    """attention_tour.ipynb is what make_attention_tour.py writes: no
    outputs, no execution counts, the generator's cells."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no __pycache__
    committed = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    for cell in committed["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"cell {cell['id']} has outputs"
            assert cell["execution_count"] is None, cell["id"]

    spec = importlib.util.spec_from_file_location("make_attention_tour",
                                                  GENERATOR)
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generated = json.loads(nbformat.writes(generator.build_notebook()))
    assert committed == generated, (
        f"{NOTEBOOK.name} differs from what {GENERATOR.name} writes: "
        f"run /usr/bin/python3 {GENERATOR.relative_to(REPO)}")


def test_readme_commands_are_installed():
    """Every `jupyter <command>` the notebook README tells users to run
    comes from a Debian package tools/install-deps.sh installs
    (jupyter-<command>), and runs here."""
    readme = (NOTEBOOK_DIR / "README.md").read_text(encoding="utf-8")
    deps = (REPO / "tools" / "install-deps.sh").read_text(encoding="utf-8")
    commands = sorted(set(re.findall(r"\bjupyter (notebook|nbconvert)\b",
                                     readme)))
    assert commands == ["nbconvert", "notebook"], commands
    for command in commands:
        assert re.search(rf"\bjupyter-{command}\b", deps), command
    if shutil.which("jupyter") is None:
        pytest.skip("jupyter is not installed (tools/install-deps.sh)")
    for command in commands:
        r = subprocess.run(["jupyter", command, "--version"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (command, r.stderr)
        assert re.match(r"\d+\.\d+", r.stdout.strip()), r.stdout
