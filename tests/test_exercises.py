"""The exercises that close each lecture notebook (issue 39, item 6): read from the committed .ipynb, their cells
run here in this process (no kernel, no training), once with each answer cell's intended answer, once with its
recorded mistake and once as committed (`answer = ...`). Every check must say right to the first and not yet to the
other two, with a hint. The checks compute their expected values themselves (`attnlab.runs.lessons`); the intended
answers and mistakes live here, in tests/exercise_answers.json, never in the notebooks students get (issue 46).

Also: the quick-mode banner is the first thing a notebook shows in quick mode, and nothing in full mode; it says
what quick mode shrinks in that notebook (a notebook that loads a shipped trained model shows real maps)."""

import ast
import json
import re
from pathlib import Path

import nbformat
import pytest
import torch

from attnlab.runs import lessons

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
ANSWER = re.compile(r"^answer = \.\.\.(\s+#.*)?$", re.M)
ANSWERS = json.loads((ROOT / "tests" / "exercise_answers.json").read_text(encoding="utf-8"))


def exercise_cells(path: Path) -> list:
    nb = nbformat.read(path, as_version=4)
    return [c for c in nb.cells if c.cell_type == "code" and "exercise" in c.metadata.get("tags", [])]


def run_cells(cells: list, choose: str) -> list[lessons.Verdict]:
    """Runs the exercise cells in one namespace, each answer cell's `answer = ...` line replaced by its exercise's
    `choose` in ANSWERS ("solution" or "mistake"; "as committed": unchanged), as IPython would: a cell's last expression is
    its value. Returns the verdicts of the check cells, in order."""
    namespace: dict = {}
    verdicts = []
    for cell in cells:
        source = cell.source
        meta = cell.metadata.get("attnlab", {})
        if meta and choose != "as committed":
            assert len(ANSWER.findall(source)) == 1, source
            source = ANSWER.sub(lambda _: ANSWERS[meta["exercise"]][choose], source)
        tree = ast.parse(source)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, cell.get("id", "cell"), "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "cell", "eval"), namespace)
            if isinstance(value, lessons.Verdict):
                verdicts.append(value)
    return verdicts


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_each_notebook_ends_with_two_or_three_checked_exercises(path):
    cells = exercise_cells(path)
    answers = [c for c in cells if "attnlab" in c.metadata]
    assert 2 <= len(answers) <= 3, f"{path.name}: {len(answers)} exercises"
    ids = [c.metadata["attnlab"]["exercise"] for c in answers]
    assert ids == [f"{path.name[1]}.{i}" for i in range(1, len(ids) + 1)]  # 01_...: 1.1, 1.2, ...
    for c in answers:  # the givens and the blank the reader fills, never the answer itself
        assert len(ANSWER.findall(c.source)) == 1
        assert c.metadata["attnlab"] == {"exercise": c.metadata["attnlab"]["exercise"]}
    text = path.read_text(encoding="utf-8")  # nowhere in the handed-out file: no cell, no metadata, no output
    for exercise in ids:
        for kind in ("solution", "mistake"):
            code = ANSWERS[exercise][kind].removeprefix("answer = ")
            assert code not in text and json.dumps(code)[1:-1] not in text, f"{path.name}: the {kind} of {exercise}"
    nb = nbformat.read(path, as_version=4)
    last_exercise = max(i for i, c in enumerate(nb.cells) if c in cells)
    assert last_exercise == len(nb.cells) - 2  # only the closing "what to try next" comes after them


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_checks_pass_the_intended_answers_and_fail_wrong_ones(path):
    cells = exercise_cells(path)
    ids = [c.metadata["attnlab"]["exercise"] for c in cells if "attnlab" in c.metadata]
    right = run_cells(cells, "solution")
    assert [v.exercise for v in right] == ids and all(v.right for v in right), right
    wrong = run_cells(cells, "mistake")
    assert [v.exercise for v in wrong] == ids
    for v in wrong:  # each recorded mistake is a known one: its own hint, not the general one
        assert not v.right and v.message.startswith("Hint: ") and "not answered" not in v.message, v
    blank = run_cells(cells, "as committed")
    assert [v.exercise for v in blank] == ids
    assert all(not v.right and v.message == lessons.NOT_ANSWERED for v in blank), blank


def test_a_check_never_raises_and_never_shows_the_value_before_the_answer_is_right():
    scores = [2.0, 1.0, 0.1]
    expected = torch.softmax(torch.tensor(scores, dtype=torch.float64), 0)
    assert lessons.softmax_weights(expected, scores).right
    assert lessons.softmax_weights(expected.tolist(), scores).right  # a list or a tensor
    for bad in ("0.66", None, [0.66, 0.24], [[0.66, 0.24, 0.1]], float("nan"), object()):
        v = lessons.softmax_weights(bad, scores)
        assert not v.right and "0.659" not in v.message, (bad, v)
    v = lessons.softmax_weights([0.5, 0.3, 0.2], scores)  # wrong, no known mistake: the general hint
    assert not v.right and "exp(e_u)" in v.message
    assert lessons.gru_parameters(3 * (128 * 64 + 128 * 128 + 2 * 128) + 1, 64, 128).right is False  # exact
    assert 'data-right="1"' in lessons.softmax_weights(expected, scores)._repr_html_()
    assert repr(lessons.causal_pairs(78, 12)).startswith("✓ Exercise 3.3: right")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_quick_mode_shows_its_banner_first(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "ATTNLAB_QUICK" in code[0].source and "display(" not in code[0].source and "print(" not in code[0].source
    # the second cell draws the notebook's first output: the banner comes before its print
    source = code[1].source
    assert source.index("if QUICK:") < source.index("display(quick_mode_banner(") < source.index("print(")
    banner = lessons.quick_mode_banner()
    assert "mean nothing" in repr(banner) and "attnlab-quick-banner" in banner._repr_html_()
    own = lessons.quick_mode_banner("only the fit is shrunk <here>")  # a notebook's own account of its quick mode
    assert own.text == "QUICK MODE (ATTNLAB_QUICK=1): only the fit is shrunk <here>"
    assert "only the fit is shrunk &lt;here&gt;" in own._repr_html_()
