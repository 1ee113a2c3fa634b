"""A user's corpus with some of its splits given as files: a split not given is held out of train at random (its
size from data.dev_size / data.test_size), an empty one is refused in one line where it is needed (dev before
training, test at evaluate), and a run is never scored on a held-out split drawn again from corpus files changed
since it was trained (such a split can hold its training pairs)."""

import json
import re
import shutil

import pytest

from attnlab.app.cli import main
from attnlab.core.config import to_dict
from conftest import tiny_experiment


def config(tiny_dir, tmp_path, name, **data):
    """The tiny RNN experiment, its data section replaced by `data` (train copied into tmp_path: a file the test may
    change), written as tmp_path/name.json."""
    train = tmp_path / "train.tsv"
    if not train.exists():
        shutil.copy(tiny_dir / "train.tsv", train)
    cfg = to_dict(tiny_experiment(tiny_dir, "rnn", max_steps=4))
    cfg["data"] = {"corpus": "files", "train": [str(train)], **data}
    cfg["train"]["eval_every"] = 4
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return path


def errors(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if "error" in line]


@pytest.mark.usefixtures("single_thread")
def test_a_test_file_without_dev_holds_dev_out_and_trains(tiny_tsv, tmp_path, capsys):
    cfg = config(tiny_tsv, tmp_path, "c", test=[str(tiny_tsv / "test.tsv")], dev_size=30)
    assert main(["train", str(cfg), "--out", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "checkpoints" / "latest.json").is_file()
    capsys.readouterr()
    assert main(["data", "prepare", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^dev +30 ", out, re.M) and re.search(r"^test +40 ", out, re.M), out
    # with dev_size 0 there is nothing to select checkpoints on: refused before training, nothing left behind
    cfg = config(tiny_tsv, tmp_path, "none", test=[str(tiny_tsv / "test.tsv")], dev_size=0)
    assert main(["train", str(cfg), "--out", str(tmp_path / "none")]) == 2
    (err,) = errors(capsys)
    assert "the dev split is empty" in err and "data.dev_size" in err
    assert not (tmp_path / "none").exists()


@pytest.mark.usefixtures("single_thread")
def test_an_empty_test_split_is_refused_at_evaluate(tiny_tsv, tmp_path, capsys):
    cfg = config(tiny_tsv, tmp_path, "c", dev=[str(tiny_tsv / "dev.tsv")], test_size=0)
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--beam", "1"]) == 2
    (err,) = errors(capsys)
    assert "the test split of this run's corpus is empty" in err
    assert main(["evaluate", str(run), "--beam", "1", "--split", "dev"]) == 0


@pytest.mark.usefixtures("single_thread")
def test_a_held_out_split_drawn_again_from_a_changed_corpus_is_refused(tiny_tsv, tmp_path, capsys):
    cfg = config(tiny_tsv, tmp_path, "c", dev_size=30, test_size=30)
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(run)]) == 0
    assert main(["evaluate", str(run), "--beam", "1", "--max-sentences", "5"]) == 0
    with open(tmp_path / "train.tsv", "a", encoding="utf-8") as f:  # more data appended after training
        f.write("".join(f"x{i} y\tz{i} w\n" for i in range(50)))
    capsys.readouterr()
    before = (run / "eval" / "test.json").read_bytes()
    assert main(["evaluate", str(run), "--beam", "1", "--max-sentences", "5"]) == 2
    (err,) = errors(capsys)
    assert "is not the one this run was trained beside" in err and "test split" in err
    assert (run / "eval" / "test.json").read_bytes() == before


@pytest.mark.parametrize("text, says", [("", "no training pairs read (0 empty"),
                                        ("\n\n\n", "no training pairs read (3 empty"),
                                        ("a\tb\nc\td\n", "cannot hold out dev_size (500) + test_size (500) pairs")])
def test_a_corpus_too_small_names_the_file_and_what_to_change(tmp_path, capsys, text, says):
    (tmp_path / "my.tsv").write_text(text, encoding="utf-8")
    (tmp_path / "c.json").write_text(json.dumps({"data": {"corpus": "files", "train": [str(tmp_path / "my.tsv")]}}))
    assert main(["data", "prepare", str(tmp_path / "c.json")]) == 2
    (err,) = errors(capsys)
    assert "data.train my.tsv" in err and says in err, err
    assert "after the filters" not in err  # no filter was set: the old message blamed them
