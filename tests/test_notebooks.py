"""The lecture notebooks (notebooks/*.ipynb): each runs top to bottom in quick mode (ATTNLAB_QUICK=1: small
budgets, the same cells) in a fresh kernel of this interpreter, through scripts/run_notebooks.py, the runner of
`make notebooks`; and the committed notebooks carry no outputs (`scripts/run_notebooks.py --strip`)."""

import importlib.util
import json
from pathlib import Path

import nbformat
import pytest

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
    assert "what to try next" in nb.cells[-1].source.lower()


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


def test_a_failing_notebook_fails_the_runner(tmp_path, capsys):
    first = "import os\nQUICK = os.environ.get('ATTNLAB_QUICK') == '1'\nassert QUICK"  # quick mode reaches the kernel
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(first),
                                         nbformat.v4.new_code_cell("raise ValueError('boom')")])
    path = tmp_path / "bad.ipynb"
    nbformat.write(nb, path)
    assert run_notebooks.main(["--quick", str(path), "--json", str(tmp_path / "t.jsonl")]) == 1
    record = json.loads((tmp_path / "t.jsonl").read_text())
    assert record["name"] == "bad.ipynb" and record["mode"] == "quick" and not record["ok"]
    assert "ValueError: boom" in record["error"] and "ValueError: boom" in capsys.readouterr().err
