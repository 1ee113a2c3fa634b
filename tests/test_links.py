"""The link policy (issue 47, docs/architecture.md "Links"), through the commands a user types: a user's own path
(`--out` or a parent of it, the cache's folders) may be a link and is followed like any tool follows it; the write
completes and no command fails after the data is written. Inside a received folder nothing is followed
(tests/test_fileio.py, tests/test_export.py)."""

import os

import pytest

from attnlab.app.cli import main


@pytest.fixture
def linked(tmp_path):
    """(a folder on 'another disk', a link to it where the user works)."""
    target = tmp_path / "other-disk"
    target.mkdir()
    link = tmp_path / "work"
    link.symlink_to(target, target_is_directory=True)
    return target, link


@pytest.mark.parametrize("to", ["attnlab", "ctranslate2"])
def test_export_into_a_linked_parent(tiny_runs, linked, capsys, to):
    target, link = linked
    assert main(["export", str(tiny_runs["transformer"]), "--to", to, "--out", str(link / "x")]) == 0, \
        capsys.readouterr().err
    assert (target / "x").is_dir() and any((target / "x").iterdir())
    assert not [p for p in target.iterdir() if p.name.startswith(".")]  # no staging folder left


def test_huggingface_export_and_import_into_linked_parents(linked, tmp_path, monkeypatch, capsys):
    """The shipped Transformer (pre-norm: a Pegasus export, which imports back) out and in through links."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    target, link = linked
    assert main(["export", "pretrained:transformer", "--to", "huggingface", "--out", str(link / "hf")]) == 0, \
        capsys.readouterr().err
    assert (target / "hf" / "model.safetensors").is_file()
    assert main(["import", str(link / "hf"), "--out", str(link / "run")]) == 0, capsys.readouterr().err
    assert (target / "run" / "checkpoints" / "latest.json").is_file()


def test_train_into_a_linked_run_folder_and_a_linked_cache(tiny_tsv, linked, tmp_path, monkeypatch, capsys):
    """--out a link to an empty folder, and a cache whose stores/ folder is a link to another disk."""
    import json
    target, link = linked
    cache = tmp_path / "cache"
    cache.mkdir()
    stores = tmp_path / "stores-disk"
    stores.mkdir()
    (cache / "stores").symlink_to(stores, target_is_directory=True)
    monkeypatch.setenv("ATTNLAB_CACHE", str(cache))
    config = tmp_path / "c.json"
    config.write_text(json.dumps({
        "data": {"corpus": "files", "train": [str(tiny_tsv / "train.tsv")], "dev": [str(tiny_tsv / "dev.tsv")],
                 "test": [str(tiny_tsv / "test.tsv")]},
        "tokenizer": {"kind": "char"}, "model": {"rnn": {"emb_dim": 16, "hidden_dim": 16}},
        "train": {"max_steps": 2, "max_tokens": 400, "eval_every": 2, "progress": False, "num_threads": 1}}))
    assert main(["train", str(config), "--out", str(link)]) == 0, capsys.readouterr().err
    assert (target / "checkpoints" / "latest.json").is_file() and os.listdir(stores)
