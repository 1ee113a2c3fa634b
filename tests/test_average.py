"""Checkpoint averaging (`attnlab average RUN --last N`, Vaswani et al. 2017): the averaged run's weights equal the
mean of the checkpoint files computed here by hand with safetensors, it translates like any run, and a run with fewer
complete checkpoints than asked is refused in one line."""

import dataclasses
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from attnlab.app import api
from attnlab.app.cli import main
from attnlab.runs.workflow import train
from conftest import one_thread, tiny_experiment


@pytest.fixture(scope="module")
def run_with_checkpoints(tiny_tsv, tmp_path_factory):
    """A tiny Transformer run that keeps its last 4 checkpoints (one every 5 updates, 20 updates)."""
    cfg = tiny_experiment(tiny_tsv, "transformer", max_steps=20)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, eval_every=5, keep_last=4))
    run = tmp_path_factory.mktemp("avg") / "run"
    with one_thread():
        train(cfg, run)
    return run


def by_hand(run, steps):
    """The mean of the steps' weight files, read with safetensors alone, in float64."""
    files = [load_file(str(run / "checkpoints" / f"step_{n:08d}.safetensors")) for n in steps]
    return {k: torch.stack([f[k].double() for f in files]).mean(0) for k in files[0]}


def test_the_average_equals_the_mean_of_the_files_by_hand(run_with_checkpoints, tmp_path, capsys):
    run = run_with_checkpoints
    assert main(["average", str(run), "--last", "3", "--out", str(tmp_path / "avg")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "avg")
    card = json.loads((tmp_path / "avg" / "card.json").read_text())
    assert card["averaged_steps"] == [10, 15, 20]
    expected = by_hand(run, [10, 15, 20])
    (weights,) = (tmp_path / "avg" / "checkpoints").glob("step_*.safetensors")
    got = load_file(str(weights))
    assert set(expected) >= set(got) and got
    for name, t in got.items():
        torch.testing.assert_close(t.double(), expected[name], rtol=0, atol=1e-7)
    # the average differs from every single checkpoint (a copy of one would pass the check above for --last 1 only)
    last = load_file(str(run / "checkpoints" / "step_00000020.safetensors"))
    assert any(not torch.equal(got[k], last[k]) for k in got)
    # it loads and translates like any run
    loaded = api.load(tmp_path / "avg", device="cpu")
    assert isinstance(loaded.translate("abc"), str)


def test_last_1_is_the_last_checkpoint(run_with_checkpoints, tmp_path):
    out = api.average_run(run_with_checkpoints, 1, tmp_path / "one")
    (weights,) = (out / "checkpoints").glob("step_*.safetensors")
    last = load_file(str(run_with_checkpoints / "checkpoints" / "step_00000020.safetensors"))
    got = load_file(str(weights))
    for name, t in got.items():
        assert torch.equal(t, last[name])


def test_too_few_checkpoints_is_one_line(run_with_checkpoints, tmp_path, capsys):
    assert main(["average", str(run_with_checkpoints), "--last", "9", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds 4 complete checkpoint(s), not 9" in err and "keep_last" in err
    assert not (tmp_path / "x").exists()
    assert main(["average", str(tmp_path / "missing"), "--last", "2"]) == 2


def listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_out_never_replaces_a_training_run(run_with_checkpoints, tiny_runs, tmp_path, capsys):
    """--out naming the run itself, or another training run (whose top-level names a compact run shares), is
    refused in one line and leaves the folder as it was; an earlier compact run is replaced."""
    run, other = run_with_checkpoints, tiny_runs["rnn"]
    before = {r: listing(r) for r in (run, other)}
    for out in (run, other):
        assert main(["average", str(run), "--last", "2", "--out", str(out)]) == 2
        (err,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        assert ("is the run the compact one is made from" in err if out == run
                else "not a compact one (training state" in err or "which is not part of a compact" in err), err
        assert main(["export", str(tiny_runs["transformer"]), "--to", "attnlab", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "not a compact one" in err or "which is not part of a compact" in err
    assert {r: listing(r) for r in (run, other)} == before
    older = tmp_path / "older"  # a training run written before splits.json: only top-level names a compact run has
    shutil.copytree(other, older)
    (older / "splits.json").unlink()
    assert main(["average", str(run), "--last", "2", "--out", str(older)]) == 2
    assert "not a compact one (training state" in capsys.readouterr().err
    assert (older / "checkpoints" / "latest.json").is_file()
    assert main(["average", str(run), "--last", "2", "--out", str(tmp_path / "avg")]) == 0
    assert main(["average", str(run), "--last", "3", "--out", str(tmp_path / "avg")]) == 0  # an earlier compact run
    assert json.loads((tmp_path / "avg" / "card.json").read_text())["averaged_steps"] == [10, 15, 20]
