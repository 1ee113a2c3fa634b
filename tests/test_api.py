"""The Python API (`attnlab.load / train / corpus / configs / show`): each call gives what the command line gives
for the same run (the CLI's own output is the reference), and a user's mistake is one AttnlabError."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab.app import api
from attnlab.app.cli import main
from attnlab.core.config import PACKAGED_CONFIGS, resolve_config, to_dict
from attnlab.core.errors import AttnlabError
from attnlab.decode.translate import Translator
from attnlab.runs.views import Exploration
from attnlab.runs.workflow import hold_run
from conftest import tiny_experiment

SENTENCES = ["my old cat sees the green door", "the dog runs"]


@pytest.fixture(scope="module")
def rnn(tiny_runs, single_thread):
    return attnlab.load(tiny_runs["rnn"])


def test_public_names():
    for name in ("load", "train", "corpus", "configs", "show", "Run", "Exploration", "AttnlabError"):
        assert name in attnlab.__all__ and hasattr(attnlab, name)


def test_translate_equals_the_cli(rnn, tiny_runs, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    assert main(["translate", str(tiny_runs["rnn"]), str(tmp_path / "in.txt"), "--beam", "2"]) == 0
    cli = capsys.readouterr().out.splitlines()
    assert rnn.translate(SENTENCES, beam=2) == cli
    assert rnn.translate(SENTENCES[0], beam=2) == cli[0]  # one sentence in, one string out


def test_translations_equal_the_translator(rnn):
    """Against the search used directly (no API in between): texts, scores and attention."""
    ref = Translator(rnn.model, rnn.tokenizers, rnn.config.decode).translate(SENTENCES, beam_size=2, n_best=2,
                                                                              need_weights=True)
    got = rnn.translations(SENTENCES, beam=2, n_best=2, need_weights=True)
    for a, b in zip(got, ref):
        assert [t.text for t in a] == [t.text for t in b] and [t.score for t in a] == [t.score for t in b]
        torch.testing.assert_close(a[0].attention, b[0].attention)


def test_decode_amp_of_a_loaded_run(tiny_runs, tmp_path, capsys):
    """`attnlab.load(..., decode_amp=)` and `translate/evaluate --amp` set the search's precision of that load
    only: bf16 runs the output layer in bf16; none is fp32; a wrong choice is one line."""
    run = attnlab.load(tiny_runs["transformer"], decode_amp="bf16")
    assert run.config.decode.amp == "bf16"
    seen = set()
    hook = run.model.generator.register_forward_hook(lambda m, a, out: seen.add(out.dtype))
    run.translate(SENTENCES, beam=2)
    hook.remove()
    assert seen == {torch.bfloat16}
    assert attnlab.load(tiny_runs["transformer"]).config.decode.amp == "none"  # the run's own setting is kept
    with pytest.raises(AttnlabError, match="decode amp 'fp16' is not one of"):
        attnlab.load(tiny_runs["transformer"], decode_amp="fp16")
    (tmp_path / "in.txt").write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    assert main(["translate", str(tiny_runs["transformer"]), str(tmp_path / "in.txt"), "--amp", "bf16"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    copy = shutil.copytree(tiny_runs["transformer"], tmp_path / "run")  # evaluate writes eval/: not in the shared run
    assert main(["evaluate", str(copy), "--amp", "none", "--max-sentences", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 3


def test_decode_batch_size_of_a_loaded_run(tiny_runs, tmp_path, capsys):
    """`attnlab.load(..., decode_batch_size=)` and `translate/evaluate --batch-size` set the sentences per search
    batch of that load only; the translations are those of the run's own batch size; a bad size is one line."""
    sentences = SENTENCES * 3
    default = attnlab.load(tiny_runs["rnn"])
    assert default.config.decode.batch_size == 0  # by device
    assert default._explorer.batch_size == 64  # on the CPU
    one = attnlab.load(tiny_runs["rnn"], decode_batch_size=1)
    assert one.config.decode.batch_size == 1
    seen = []
    hook = one.model.encoder.register_forward_hook(lambda m, a, out: seen.append(a[0].size(0)))
    assert one.translate(sentences, beam=2) == default.translate(sentences, beam=2)
    hook.remove()
    assert seen == [1] * len(sentences)  # one search per sentence
    for bad, message in ((-1, "decode.batch_size = -1 is below the minimum 0"),
                         (2**16 + 1, "decode.batch_size = 65537 exceeds the limit 65536"),
                         (2.5, "decode.batch_size: expected int, got float 2.5"),
                         (True, "decode.batch_size: expected int, got bool True")):
        with pytest.raises(AttnlabError, match=re.escape(message)):
            attnlab.load(tiny_runs["rnn"], decode_batch_size=bad)
    (tmp_path / "in.txt").write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
    assert main(["translate", str(tiny_runs["rnn"]), str(tmp_path / "in.txt"), "--batch-size", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == default.translate(sentences)
    copy = shutil.copytree(tiny_runs["rnn"], tmp_path / "run")  # evaluate writes eval/: not in the shared run
    assert main(["evaluate", str(copy), "--batch-size", "3", "--max-sentences", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 4
    with pytest.raises(SystemExit) as refused:  # an argparse refusal: exit code 2, one line naming the option
        main(["translate", str(tiny_runs["rnn"]), "--batch-size", "-1"])
    assert refused.value.code == 2 and "--batch-size" in capsys.readouterr().err


def test_empty_sentences_get_no_translation(rnn):
    assert rnn.translate(["", "   ", SENTENCES[1]])[:2] == ["", ""]
    assert rnn.translations(["  "]) == [[]]
    with pytest.raises(AttnlabError, match="list of sentences"):
        rnn.translations("a string")


def test_explore_and_the_run_card(rnn):
    ex = rnn.explore(SENTENCES[0], beam=1)
    assert isinstance(ex, Exploration) and ex.output == rnn.translate(SENTENCES[0], beam=1)
    assert list(ex.maps) == ["align"]  # the RNN's one attention: decoder steps over source tokens
    with pytest.raises(AttnlabError, match="empty"):
        rnn.explore("   ")
    card = rnn._repr_html_()
    assert f"{sum(p.numel() for p in rnn.model.parameters()):,}" in card and "20 steps" in card


def test_evaluate_equals_the_cli(rnn, tiny_runs, capsys):
    assert main(["evaluate", str(tiny_runs["rnn"]), "--split", "dev", "--json", "--device", "cpu"]) == 0
    cli = json.loads(capsys.readouterr().out)
    got = rnn.evaluate("dev")
    assert got["bleu"] == cli["bleu"] and got["chrf"] == cli["chrf"]
    assert got["by_length"] == cli["by_length"]
    with pytest.raises(AttnlabError, match="unknown split"):
        rnn.evaluate("valid")


def test_metrics_and_summary(rnn, tiny_runs):
    records = rnn.metrics()
    assert records and max(r["step"] for r in records) == 20
    assert f"{sum(p.numel() for p in rnn.model.parameters()):,}" in rnn.summary()


def test_generate_equals_the_cli(tiny_lm_run, capsys, single_thread):
    run = attnlab.load(tiny_lm_run)
    assert main(["generate", str(tiny_lm_run), "--prompt", "the", "--num", "3", "--seed", "7",
                 "--device", "cpu"]) == 0
    assert run.generate("the", num=3, seed=7) == capsys.readouterr().out.splitlines()
    with pytest.raises(AttnlabError, match="cannot translate"):
        run.translate("the")


def test_load_errors(tmp_path):
    with pytest.raises(AttnlabError, match="not a run directory"):
        attnlab.load(tmp_path)
    with pytest.raises(AttnlabError, match="unknown engine"):
        attnlab.load(tmp_path, engine="onnx")


def test_train_with_overrides_then_resume(tiny_tsv, tmp_path, single_thread):
    cfg = to_dict(tiny_experiment(tiny_tsv, "transformer", max_steps=4))
    run = attnlab.train(cfg, out=tmp_path / "run", train__max_steps=3, overrides={"train.eval_every": 3})
    assert isinstance(run, attnlab.Run) and run.family == "transformer"
    assert max(r["step"] for r in run.metrics()) == 3
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["max_steps"] == 3
    with pytest.raises(AttnlabError, match="already holds a trained run"):
        attnlab.train(cfg, out=tmp_path / "run")
    run = attnlab.train(None, out=tmp_path / "run", resume=True, train__max_steps=5)
    assert max(r["step"] for r in run.metrics()) == 5
    with pytest.raises(AttnlabError, match="train.nope"):
        attnlab.train(cfg, out=tmp_path / "other", train__nope=1)


def test_a_run_held_by_a_training_refuses_a_second(tiny_tsv, tmp_path, capsys, single_thread):
    """While a training holds its run folder (its lock beside it, as another process's training would), a second
    training into it, new or resumed, is refused in one line and writes nothing; once released, it trains."""
    cfg = to_dict(tiny_experiment(tiny_tsv, "transformer", max_steps=2))
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    run = tmp_path / "run"
    lock = hold_run(run)
    try:
        for args in (["train", str(tmp_path / "c.json"), "--out", str(run)], ["train", "--resume", str(run)]):
            assert main(args) == 2
            (err,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
            assert "another training is writing into this run now" in err
            assert not run.exists()
    finally:
        lock.close()
    assert main(["train", str(tmp_path / "c.json"), "--out", str(run)]) == 0
    assert (run / "checkpoints" / "latest.json").is_file()


def test_train_takes_a_config_object(tiny_tsv, tmp_path, single_thread):
    cfg = tiny_experiment(tiny_tsv, "rnn", max_steps=2)
    run = attnlab.train(cfg, out=tmp_path / "run")
    assert dataclasses.asdict(run.config) == dataclasses.asdict(cfg)
    with pytest.raises(AttnlabError, match="config: give"):
        attnlab.train(42, out=tmp_path / "x")


@pytest.mark.parametrize("given, expected", [
    ({"train.max_steps": 5}, ["train.max_steps=5"]),
    ({"model.rnn.bidirectional": True}, ["model.rnn.bidirectional=true"]),
    ({"data.train": ["a.tsv", "b.tsv"]}, ["data.train=[a.tsv, b.tsv]"]),
    ({"train.lr": 1e-3}, ["train.lr=0.001"]),
    (["train.max_steps=5"], ["train.max_steps=5"]),
])
def test_override_list(given, expected):
    assert api.override_list(given) == expected


def test_override_values_round_trip_through_the_config_parser():
    """Keywords with __ for the dot, values of every kind, read back by the same parser as --set."""
    from attnlab.core.config import apply_overrides

    sets = api.override_list(train__max_steps=7, model__rnn__cell="lstm", data__english="kjv",
                             train__amp="", decode__length_penalty=0.6, model__rnn__bidirectional=False)
    got = apply_overrides({}, sets)
    assert got == {"train": {"max_steps": 7, "amp": ""}, "model": {"rnn": {"cell": "lstm", "bidirectional": False}},
                   "data": {"english": "kjv"}, "decode": {"length_penalty": 0.6}}


def test_every_packaged_config_loads():
    infos = attnlab.configs()
    names = {c.name for c in infos}
    assert {"demo", "bible-transformer-small", "bible-rnn-bahdanau", "gpu/bible-transformer-base"} <= names
    assert len(infos) == len(list(PACKAGED_CONFIGS.rglob("*.toml")))
    for c in infos:
        family, cfg, _ = api.typed_config(c.name, [])
        assert family.name == c.family and c.description


def test_bare_names_resolve_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_config("demo") == PACKAGED_CONFIGS / "demo.toml"
    assert resolve_config("demo.toml") == PACKAGED_CONFIGS / "demo.toml"
    assert resolve_config("configs/demo.toml") == PACKAGED_CONFIGS / "demo.toml"  # the README's form
    assert resolve_config("gpu/bible-rnn-luong") == PACKAGED_CONFIGS / "gpu" / "bible-rnn-luong.toml"
    (tmp_path / "demo.toml").write_text("[train]\nmax_steps = 3\n")
    assert resolve_config("demo.toml") == Path("demo.toml")  # a file of the user's own comes first
    for bad in ("nosuch", "../configs/demo", "/etc/demo"):
        with pytest.raises(AttnlabError, match="no such config file.*packaged: .*bible-lm-es"):
            resolve_config(bad)


def test_cli_configs_list_print_copy(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["configs"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("demo", "bible-transformer-small", "seed-fib-attention"))
    assert main(["configs", "demo"]) == 0
    assert capsys.readouterr().out == (PACKAGED_CONFIGS / "demo.toml").read_text()
    assert main(["configs", "demo", "--copy"]) == 0
    assert (tmp_path / "demo.toml").read_text() == (PACKAGED_CONFIGS / "demo.toml").read_text()
    assert main(["configs", "demo", "--copy"]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["configs", "nosuch"]) == 2


def test_train_checks_the_config_before_slow_work(tmp_path, monkeypatch, capsys):
    """A bad key of a packaged config is refused at once, naming it (no corpus built, no run directory)."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", "demo", "--set", "train.max_stepz=3"]) == 2
    assert "train.max_stepz" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_corpus_of_a_data_file(tiny_tsv, tmp_path):
    store = attnlab.corpus(tiny_tsv / "train.tsv", data__dev_size=50, data__test_size=50)
    stats = store.stats()
    assert len(store.pairs("test")) == 50 and len(store.pairs("dev")) == 50
    assert json.dumps(stats)
    with pytest.raises(AttnlabError, match="no such file"):
        attnlab.corpus(tmp_path / "missing.tsv")
    with pytest.raises(AttnlabError, match="no parallel corpus"):
        attnlab.corpus("seed-fib-attention")


def test_show_outside_a_notebook(tmp_path):
    weights = torch.softmax(torch.randn(2, 3, 3), -1)
    with pytest.raises(AttnlabError, match="out="):
        attnlab.show(weights, ["a", "b", "c"])
    path = attnlab.show(weights, ["a", "b", "c"], out=tmp_path / "att.html")
    assert path.is_file() and "attnlab-data" in path.read_text()
    assert not os.environ.get("JPY_PARENT_PID")  # the test runs outside a kernel


def test_the_api_reference_renders():
    """`make docs` (pdoc): the public API page renders, and every public name of `attnlab` is documented."""
    pdoc = pytest.importorskip("pdoc")
    for name in attnlab.__all__:
        obj = getattr(attnlab, name)
        assert isinstance(obj, str) or (obj.__doc__ or "").strip(), f"attnlab.{name} has no docstring"
    for name, member in vars(attnlab.Run).items():
        if callable(member) and not name.startswith("_"):
            assert (member.__doc__ or "").strip(), f"Run.{name} has no docstring"
    page = pdoc.pdoc("attnlab.app.api")
    for anchor in ("load", "train", "corpus", "show", "Run.translate", "Run.explore", "Run.evaluate"):
        assert f'id="{anchor}"' in page, anchor


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_loading_a_run_imports_no_compiler(tiny_runs, family):
    """A cold start (`attnlab evaluate`, `attnlab.load` in a fresh process) builds the model once on the meta
    device to check its size: that must not import torch._dynamo (seconds on a fresh GPU machine, docs/results.md
    "GPU"), and the count must equal the real model's."""
    code = ("import sys, attnlab\n"
            "from attnlab.runs.workflow import check_model_size, run_config, run_tokenizers\n"
            f"run = attnlab.load({str(tiny_runs[family])!r})\n"
            "family, raw = run_config(run.path)\n"
            "n = check_model_size(family, family.from_dict(raw), run_tokenizers(run.path))\n"
            "real = sum(p.numel() for p in run.model.parameters())\n"
            "print(n == real, 'torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]
