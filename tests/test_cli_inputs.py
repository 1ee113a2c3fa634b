"""What the command line makes of a user's inputs at their edges: a UTF-8 BOM on standard input (dropped, as from a
file), a YAML config that does not parse (the line and column named), two aligned corpus files named plainly, a
malformed corpus line whose hint names what that command can do, a directory given as an input file, and a
Transformer-only option given for an RNN run (refused)."""

from __future__ import annotations

import io
import json
import shutil
import sys

import pytest

from attnlab.app import api
from attnlab.app.cli import main
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import read_lines
from test_cli import one_error_line

BOM = b"\xef\xbb\xbf"
INPUT = b"the cat\nabc\n"


class _TerminalStdin(io.TextIOWrapper):
    """Standard input that says it is a terminal: translate then answers line by line."""

    def isatty(self) -> bool:
        return True


def _translate_stdin(monkeypatch, capsys, run: str, data: bytes, terminal: bool) -> str:
    stdin = (_TerminalStdin if terminal else io.TextIOWrapper)(io.BytesIO(data))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert main(["translate", run, "--n-best", "2", "--beam", "2"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_a_bom_on_stdin_is_dropped_as_from_a_file(tiny_runs, tmp_path, monkeypatch, capsys, terminal):
    run = str(tiny_runs["rnn"])
    # the BOM would change the translation: the model reads it as a character
    kept, dropped = api.load(run).translations(["\ufeffthe cat", "the cat"], beam=2, n_best=2)
    assert [t.score for t in kept] != [t.score for t in dropped]
    (tmp_path / "in.txt").write_bytes(BOM + INPUT)
    assert main(["translate", run, str(tmp_path / "in.txt"), "--n-best", "2", "--beam", "2"]) == 0
    from_file = capsys.readouterr().out
    assert len(from_file.splitlines()) == 4
    assert _translate_stdin(monkeypatch, capsys, run, BOM + INPUT, terminal) == from_file
    assert _translate_stdin(monkeypatch, capsys, run, INPUT, terminal) == from_file


@pytest.mark.parametrize("text, message", [
    ("model:\n  rnn: [\n   cell: gru\n", "bad.yaml: cannot parse: expected ',' or ']', but got '<stream end>' (at line "
                                          "4, column 1; while parsing a flow sequence from line 2, column 8)"),
    ("train:\n  lr: 0.1\n  steps: a: b\n", "bad.yaml: cannot parse: mapping values are not allowed here (at line 3, "
                                           "column 11)"),
], ids=["an-unclosed-flow-sequence", "a-mapping-in-a-value"])
def test_a_yaml_config_that_does_not_parse_names_the_line_and_column(tmp_path, capsys, text, message):
    (tmp_path / "bad.yaml").write_text(text, encoding="utf-8")
    line = one_error_line(capsys, main(["summary", str(tmp_path / "bad.yaml")]))
    assert line == f"attnlab: error: {tmp_path / message}"


def test_two_empty_aligned_files_are_named_plainly(tmp_path, capsys):
    src, tgt = tmp_path / "e.en", tmp_path / "e.es"
    src.write_text("")
    tgt.write_text("")
    line = one_error_line(capsys, main(["data", "files", str(src), str(tgt)]))
    assert line == f"attnlab: error: {src} + {tgt}: the corpus has no sentence pairs"


PREPARE_HINT = "(fix or remove the line; attnlab data prepare CONFIG --set data.skip_bad_lines=true skips such lines)"
CONFIG_HINT = "(data.skip_bad_lines = true skips such lines)"


def _bad_tsv(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("a b\tx y\nno tab\n" + "".join(f"w{i}\tv{i}\n" for i in range(8)), encoding="utf-8")
    return path


def test_a_malformed_line_read_without_a_config_points_to_data_prepare(tmp_path, capsys):
    path = _bad_tsv(tmp_path)
    line = one_error_line(capsys, main(["data", "tsv", str(path), "--dev-size", "1", "--test-size", "1"]))
    assert line == f"attnlab: error: {path}:2: expected 2 tab-separated fields (source, target), found 1 {PREPARE_HINT}"
    src, tgt = tmp_path / "a.en", tmp_path / "a.es"  # not UTF-8: refused by the reader, before parsing
    src.write_bytes(b"one\n\xfftwo\nthree\n")
    tgt.write_bytes(b"uno\ndos\ntres\n")
    line = one_error_line(capsys, main(["data", "files", str(src), str(tgt)]))
    assert line == f"attnlab: error: {src}:2: not valid UTF-8 (byte 0xff) {PREPARE_HINT}"


def test_a_malformed_line_read_through_a_config_names_the_key_that_skips_it(tmp_path, capsys):
    path = _bad_tsv(tmp_path)
    config = tmp_path / "c.toml"
    config.write_text(f'[data]\ncorpus = "files"\ntrain = ["{path}"]\ndev_size = 2\ntest_size = 2\n'
                      '[tokenizer]\nkind = "char"\n', encoding="utf-8")
    prepare = ["data", "prepare", str(config), "--out", str(tmp_path / "store")]
    line = one_error_line(capsys, main(prepare))
    assert line == f"attnlab: error: {path}:2: expected 2 tab-separated fields (source, target), found 1 {CONFIG_HINT}"
    assert main([*prepare, "--set", "data.skip_bad_lines=true"]) == 0  # as the hint says
    assert "1 malformed" in capsys.readouterr().out


def test_a_directory_given_as_an_input_file_is_named_a_directory(tiny_runs, tmp_path, capsys):
    with pytest.raises(AttnlabError, match="is a directory, not a text file"):
        read_lines(tmp_path)
    line = one_error_line(capsys, main(["translate", str(tiny_runs["rnn"]), str(tmp_path)]))
    assert line == f"attnlab: error: {tmp_path}: is a directory, not a text file"
    line = one_error_line(capsys, main(["translate", str(tiny_runs["rnn"]), str(tmp_path / "nope.txt")]))
    assert line == f"attnlab: error: {tmp_path / 'nope.txt'}: no such file"


@pytest.mark.parametrize("option", [["--layer", "2"], ["--layer", "all"], ["--head", "1"]])
def test_layer_or_head_for_an_rnn_run_is_refused(tiny_runs, tmp_path, capsys, option):
    run = tiny_runs["rnn"]
    out = tmp_path / "plots" / "att"
    line = one_error_line(capsys, main(["plot", "attention", str(run), "--sentence", "the cat", "--out", str(out),
                                        "--formats", "png", *option]))
    assert line == (f"attnlab: error: {' '.join(option)}: {run} is an RNN run, whose attention is one map with no "
                    "layers or heads (--layer and --head choose a Transformer's)")
    assert not (tmp_path / "plots").exists()  # refused before a file is written


def test_the_default_layer_and_head_plot_an_rnn_run(tiny_runs, tmp_path, capsys):
    out = tmp_path / "att"
    assert main(["plot", "attention", str(tiny_runs["rnn"]), "--sentence", "the cat", "--out", str(out),
                 "--formats", "png", "--layer", "-1", "--head", "all"]) == 0
    assert capsys.readouterr().out.split() == [str(out.with_suffix(".png"))]
    assert out.with_suffix(".png").stat().st_size > 0


def test_series_takes_a_packaged_config_by_its_bare_name(tmp_path, capsys):
    """`attnlab series seed-fib-attention`, as every command takes a packaged config (it read the name as a task)."""
    assert main(["series", "seed-fib-attention", "--seeds", "1", "--only", "attention", "--set",
                 "train.max_epochs=1", "--out", str(tmp_path / "s")]) == 0
    results = json.loads((tmp_path / "s" / "results.json").read_text())
    assert results["task"] == "fibonacci" and list(results["models"]) == ["attention"]
    capsys.readouterr()
    assert main(["series", "seed-fib-attention", "--seeds", "1", "--only", "attention", "--set",
                 "train.max_epochs=1", "--out", str(tmp_path / "s")]) == 0
    assert "replacing" in capsys.readouterr().err  # an earlier study's run is not replaced silently


def test_bleu_by_length_of_a_language_model_says_it_has_none(tiny_lm_run, tmp_path, capsys):
    run = tmp_path / "lm"
    shutil.copytree(tiny_lm_run, run)
    assert main(["evaluate", str(run), "--split", "test"]) == 0
    capsys.readouterr()
    assert main(["plot", "bleu-by-length", str(run), "--out", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert "has no BLEU by source length" in err and not (tmp_path / "p.png").exists()


def test_a_compact_copy_of_a_bible_language_model_is_written(tiny_lm_run, tmp_path, capsys):
    """`export --to attnlab` of a language model whose data is the Bible (bible-lm-es, every GPT-2 import): its card
    read the translation config's English renderings (an internal error)."""
    run = tmp_path / "lm"
    shutil.copytree(tiny_lm_run, run)
    cfg = json.loads((run / "config.json").read_text())
    cfg["data"]["corpus"] = "bible"
    (run / "config.json").write_text(json.dumps(cfg))
    assert main(["export", str(run), "--to", "attnlab", "--out", str(tmp_path / "compact")]) == 0
    assert "See config.json" in (tmp_path / "compact" / "README.md").read_text()


def test_decoding_stops_at_the_positions_the_transformer_has(tiny_tsv, tmp_path, capsys):
    """A source within max_src_tokens and the model's max_len, whose step limit (1.5 x its length + 10) passes
    max_len, is translated, its output at most max_len pieces (it was refused: "positions up to N exceed the
    model's max_len")."""
    import dataclasses

    from attnlab.runs.workflow import train
    from conftest import one_thread, tiny_experiment

    cfg = tiny_experiment(tiny_tsv, "transformer", max_steps=2)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, transformer=dataclasses.replace(
        cfg.model.transformer, max_len=80)), decode=dataclasses.replace(cfg.decode, max_src_tokens=78))
    with one_thread():
        train(cfg, tmp_path / "run")
    src = tmp_path / "in.txt"
    src.write_text(" ".join(["abcde fghij"] * 6) + "\n")  # 71 characters + EOS: a limit of 118 steps
    capsys.readouterr()
    for beam in ("1", "3"):
        assert main(["translate", str(tmp_path / "run"), str(src), "--beam", beam, "--device", "cpu"]) == 0, beam
        assert len(capsys.readouterr().out.rstrip("\n").replace(" ", "")) <= 80


@pytest.mark.parametrize("argv", [["translate", "pretrained:noattn", "--beam", "1000000000"],
                                  ["evaluate", "pretrained:noattn", "--beam", "0"], ["nosuch"]])
def test_an_option_out_of_range_is_one_line(argv, capsys):
    """README: a number past its limit is one line on stderr and exit code 2 (argparse printed its usage block)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "error: " in err and "--help)" in err, err
