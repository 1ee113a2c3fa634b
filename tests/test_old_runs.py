"""Run directories made by an older attnlab (tests/data/old_runs, made at the commit expected.json names, before
issue 48 moved the models into nn/ and the run pipeline into runs/, by scripts/make_old_runs.py) still load and
translate as that attnlab translated them: greedy and beam, through today's command line."""

import json
import shutil
from pathlib import Path

import pytest

from attnlab.app.cli import main

OLD = Path(__file__).parent / "data" / "old_runs"
EXPECTED = json.loads((OLD / "expected.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("name", sorted(EXPECTED["runs"]))
def test_an_old_run_translates_as_it_did(tmp_path, capsys, name, beam):
    run = shutil.copytree(OLD / name, tmp_path / name)  # a copy: nothing written into tests/data
    (tmp_path / "in.txt").write_text("".join(s + "\n" for s in EXPECTED["sentences"]), encoding="utf-8")
    assert main(["translate", str(run), str(tmp_path / "in.txt"), "--beam", str(beam)]) == 0
    assert capsys.readouterr().out.splitlines() == EXPECTED["runs"][name][f"beam{beam}"]
    assert any(EXPECTED["runs"][name][f"beam{beam}"])  # a model that says something: the check can fail
