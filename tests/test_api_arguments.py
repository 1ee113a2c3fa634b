"""The Python API checks its arguments where they enter, with the command line's limits: a wrong type, a value
past a limit, bytes, a lone surrogate, a meta tensor or one string for a token list is one AttnlabError naming
the argument (before: TypeError, RuntimeError, NotImplementedError, an 8 TB allocation, or a string split into
characters). `load` refuses a run whose tokenizer folder is gone (before: it returned a Run)."""

import shutil

import pytest
import torch

import attnlab
from attnlab.app.cli import main
from attnlab.core.config import MAX_BEAM, MAX_SAMPLES
from attnlab.core.errors import AttnlabError
from attnlab.families.table import FAMILIES, load_family_config

from test_cli import one_error_line


@pytest.fixture(scope="module")
def runs(tiny_runs, tiny_lm_run, single_thread):
    return {"rnn": attnlab.load(tiny_runs["rnn"]), "transformer": attnlab.load(tiny_runs["transformer"]),
            "lm": attnlab.load(tiny_lm_run)}


def one_line_error(call) -> str:
    with pytest.raises(AttnlabError) as e:
        call()
    assert type(e.value) is AttnlabError and "\n" not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("family", ["rnn", "transformer"])
@pytest.mark.parametrize("call, message", [
    (lambda r: r.translate(5), "sentences must be a str or a list of str, not int"),
    (lambda r: r.translate(b"the house"), "not bytes: decode it first"),
    (lambda r: r.translate(["the house", b"my cat"]), "sentences[1] must be a str, not bytes"),
    (lambda r: r.translate("the \ud800 house"), "lone surrogate (U+D800 at character 4)"),
    (lambda r: r.translate(["ok", "the \udcff"]), "sentences[1] holds a lone surrogate"),
    (lambda r: r.translate("the house", beam=10**9), f"beam = 1000000000 exceeds the limit {MAX_BEAM}"),
    (lambda r: r.translate("the house", beam=MAX_BEAM + 1), f"exceeds the limit {MAX_BEAM}"),
    (lambda r: r.translate("the house", beam=2.5), "beam must be an integer in [1, 256], not float 2.5"),
    (lambda r: r.translate("the house", beam=True), "beam must be an integer"),
    (lambda r: r.translate("the house", beam=0), "beam = 0 is below the minimum 1"),
    (lambda r: r.translations(["the house"], beam=2, n_best="2"), "n_best must be an integer"),
    (lambda r: r.translations(["the house"], need_weights="yes"), "need_weights must be True or False"),
    (lambda r: r.explore(5), "sentence must be a str, not int"),
    (lambda r: r.explore("the house", beam=10**9), "exceeds the limit 256"),
    (lambda r: r.explore("the house", max_new=-1), "max_new = -1 is below the minimum 1"),
    (lambda r: r.evaluate("nope"), "unknown split 'nope'; choose train, dev or test"),
    (lambda r: r.evaluate("test", max_sentences=1.5), "max_sentences must be an integer"),
])
def test_translation_run_arguments(runs, family, call, message):
    assert message in one_line_error(lambda: call(runs[family]))


@pytest.mark.parametrize("call, message", [
    (lambda r: r.generate(5), "prompt must be a str"),
    (lambda r: r.generate("the", num=MAX_SAMPLES + 1), f"num = {MAX_SAMPLES + 1} exceeds the limit {MAX_SAMPLES}"),
    (lambda r: r.generate("the", num=2.0), "num must be an integer"),
    (lambda r: r.generate("the", temperature="hot"), "temperature must be a number"),
    (lambda r: r.generate("the", temperature=float("nan")), "temperature must be a number"),
    (lambda r: r.generate("the", top_p=2), "top_p = 2 exceeds the limit 1.0"),
    (lambda r: r.generate("the", seed=-1), "seed = -1 is below the minimum 0"),
])
def test_language_model_run_arguments(runs, call, message):
    assert message in one_line_error(lambda: call(runs["lm"]))


def test_the_api_and_the_cli_share_the_beam_limit(runs, tiny_runs, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("the house\n", encoding="utf-8")
    argv = ["translate", str(tiny_runs["rnn"]), str(tmp_path / "in.txt"), "--beam"]
    with pytest.raises(SystemExit) as e:  # argparse's own usage error
        main([*argv, str(MAX_BEAM + 1)])
    assert e.value.code == 2 and f"{MAX_BEAM + 1} exceeds the limit {MAX_BEAM}" in capsys.readouterr().err
    assert f"limit {MAX_BEAM}" in one_line_error(lambda: runs["rnn"].translate("the house", beam=MAX_BEAM + 1))
    assert main([*argv, "3"]) == 0
    assert capsys.readouterr().out.splitlines() == runs["rnn"].translate(["the house"], beam=3)


@pytest.mark.parametrize("call, message", [
    (lambda: attnlab.load(None), "run_dir must be a path (a str or pathlib.Path), not NoneType"),
    (lambda: attnlab.load(5), "run_dir must be a path"),
    (lambda: attnlab.load("runs/x", checkpoint=3), "checkpoint 3 is not one of best, last"),
    (lambda: attnlab.train("demo", overrides=5), "overrides: give a dict or a list of KEY=VALUE strings, not int"),
    (lambda: attnlab.train("demo", overrides=["train.max_steps=1", 5]), "not int 5 in the list"),
    (lambda: attnlab.train("demo", overrides={5: 1}), "the keys are dotted config keys (str), not int"),
    (lambda: attnlab.train("demo", out=5), "out must be a path"),
    (lambda: attnlab.corpus("demo", overrides=5), "overrides: give a dict or a list"),
    (lambda: attnlab.app.api.config_path(None), "name must be a path"),
])
def test_module_function_arguments(call, message):
    assert message in one_line_error(call)


@pytest.mark.parametrize("attention, src_tokens, message", [
    (torch.empty(3, 3, device="meta"), ["a", "b", "c"], "attention is a meta tensor: give its values"),
    ((torch.rand(1, 2, 3, 3), torch.empty(1, 2, 3, 3, device="meta")), ["a", "b", "c"], "attention[1] is a meta"),
    (torch.rand(3, 3).to_sparse(), ["a", "b", "c"], "attention is a torch.sparse_coo tensor"),
    (torch.rand(3, 3), "abc", "src_tokens must be a list of token strings, not one string"),
    (torch.rand(2, 2, 2, 3, 3), ["a", "b", "c"], "attention of a batch of 2 examples"),
    (torch.rand(1, 1, 1, 1, 3, 3), ["a", "b", "c"], "attention must be (R, C), (H, R, C), (L, H, R, C)"),
])
def test_show_arguments(tmp_path, attention, src_tokens, message):
    assert message in one_line_error(lambda: attnlab.show(attention, src_tokens, out=tmp_path / "a.html"))
    assert not (tmp_path / "a.html").exists()


def test_show_takes_the_documented_forms(tmp_path):
    """(R, C) and Hugging Face's stacked (L, 1, H, R, C): the one 5-D form, a batch of one."""
    for attention in (torch.rand(3, 3), torch.rand(2, 1, 2, 3, 3)):
        assert attnlab.show(attention, ["a", "b", "c"], out=tmp_path / "a.html") == tmp_path / "a.html"


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_load_refuses_a_run_without_its_tokenizer(tiny_runs, tmp_path, capsys, family):
    run = tmp_path / family
    shutil.copytree(tiny_runs[family], run)
    shutil.rmtree(run / "tokenizer")
    assert "the run's tokenizer folder" in one_line_error(lambda: attnlab.load(run))
    assert "tokenizer folder" in one_error_line(capsys, main(["translate", str(run), "--beam", "1"]))


def test_load_refuses_a_language_model_without_its_tokenizer(tiny_lm_run, tmp_path):
    shutil.copytree(tiny_lm_run, tmp_path / "lm")
    shutil.rmtree(tmp_path / "lm" / "tokenizer")
    assert "is missing" in one_line_error(lambda: attnlab.load(tmp_path / "lm"))


def test_which_families_have_tokenizers():
    by_name = {f.name: f for f in FAMILIES}
    series, cfg = load_family_config("seed-fib-rnn")
    assert series is by_name["series"] and not series.uses_tokenizers(cfg)
    for name, uses in (("paraphrase-decomposable", True), ("paraphrase-minilm", False)):
        pair, cfg = load_family_config(name)
        assert pair is by_name["pair"] and pair.uses_tokenizers(cfg) is uses
