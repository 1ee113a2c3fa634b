"""The family table and the one run pipeline: every family trains, resumes, evaluates and is summarised through
the same commands (`attnlab train / train --resume / evaluate / summary`), on tiny generated data."""

import json
from pathlib import Path

import pytest
from conftest import one_thread

from attnlab.app.cli import main
from attnlab.core.config import read_config_file
from attnlab.data.bible import sword_dir
from attnlab.families.table import FAMILIES, family_of_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("config, family", [
    ("demo.toml", "rnn"), ("bible-rnn-bahdanau.toml", "rnn"), ("seed-char-lstm.toml", "rnn"),
    ("bible-transformer-small.toml", "transformer"), ("gpu/bible-transformer-base.toml", "transformer"),
    ("bible-lm-es.toml", "lm"), ("paraphrase-decomposable.toml", "pair"), ("paraphrase-minilm.toml", "pair"),
    ("seed-fib-attention.toml", "series"), ("seed-fib-rnn.toml", "series"),
])
def test_every_shipped_config_is_recognised_once(config, family):
    raw = read_config_file(CONFIGS / config)
    assert family_of_config(raw).name == family
    assert sum(f.recognise(raw) for f in FAMILIES) == 1  # no config fits two rows


def _seq2seq(tiny_tsv, family: str) -> str:
    model = ('[model]\nfamily = "transformer"\n[model.transformer]\nd_model = 16\nh = 2\nd_ff = 32\nenc_layers = 1\n'
             'dec_layers = 1\nnorm = "pre"\n' if family == "transformer" else
             '[model.rnn]\ncell = "gru"\nemb_dim = 8\nhidden_dim = 16\nattention = "bahdanau"\n')
    return (f'[data]\ncorpus = "files"\ntrain = ["{tiny_tsv / "train.tsv"}"]\ndev = ["{tiny_tsv / "dev.tsv"}"]\n'
            f'test = ["{tiny_tsv / "test.tsv"}"]\n[tokenizer]\nkind = "char"\n{model}'
            '[decode]\nbeam_size = 2\n')


def _lm(tiny_tsv, d: Path) -> str:
    text = d / "es.txt"
    text.write_text("".join(line.split("\t")[1] + "\n" for line in
                            (tiny_tsv / "train.tsv").read_text(encoding="utf-8").splitlines()[:300]), encoding="utf-8")
    return (f'[data]\ncorpus = "text"\ntrain = "{text}"\ndev_size = 20\ntest_size = 20\n[tokenizer]\nkind = "char"\n'
            '[model]\nfamily = "lm"\n[model.lm]\nd_model = 16\nh = 2\nd_ff = 32\nlayers = 1\n')


SERIES = ('[series]\ntask = "sine"\nlength = 120\nwindow = 8\ndev_fraction = 0.2\nselect = "best"\n'
          '[model]\nhidden_dim = 3\n')
PAIR = ('[data]\nmax_train_pairs = 200\n[tokenizer]\nvocab_size = 500\n[model]\nfamily = "decomposable"\n'
        '[model.decomposable]\nemb_dim = 8\nhidden_dim = 8\n')
TRAIN = ('[train]\nmax_steps = 4\neval_every = 2\nlog_every = 2\nmax_tokens = 400\nprogress = false\n'
         'eval_max_sentences = 4\n')


def _sword_ready() -> bool:
    d = sword_dir()
    return d is not None and all((d / "mods.d" / f"{m}.conf").is_file() for m in ("engKJV2006eb", "engWEB2015eb"))


@pytest.mark.parametrize("family", ["rnn", "transformer", "lm", "series",
                                    pytest.param("pair", marks=[pytest.mark.integration, pytest.mark.skipif(
                                        not _sword_ready(), reason="SWORD modules KJV/WEB not installed")])])
def test_train_resume_evaluate_summary_through_one_pipeline(family, tiny_tsv, tmp_path, capsys):
    body = {"rnn": lambda: _seq2seq(tiny_tsv, "rnn"), "transformer": lambda: _seq2seq(tiny_tsv, "transformer"),
            "lm": lambda: _lm(tiny_tsv, tmp_path), "series": lambda: SERIES, "pair": lambda: PAIR}[family]()
    config, run = tmp_path / f"{family}.toml", tmp_path / "run"
    config.write_text(body + TRAIN, encoding="utf-8")
    with one_thread():
        assert main(["summary", str(config)]) == 0
        assert "Total params" in capsys.readouterr().out
        assert main(["train", str(config), "--out", str(run)]) == 0
        assert main(["train", str(config), "--out", str(run)]) == 2  # a trained run is never overwritten
        assert main(["train", "--resume", str(run), "--set", "train.max_steps=6"]) == 0
        assert main(["train", "--resume", str(run), "--set", "train.lr=1"]) == 2  # only limits may change
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records if "dev_loss" in r] == [2, 4, 6]
        assert json.loads((run / "config.json").read_text())["train"]["max_steps"] == 6
        capsys.readouterr()
        assert main(["evaluate", str(run), "--split", "dev", "--checkpoint", "last", "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["split"] == "dev" and result["checkpoint"] == "last"
        assert main(["summary", str(run)]) == 0
    summary = capsys.readouterr().out
    assert "Total params" in summary and next(f for f in FAMILIES if f.name == family).title in summary
