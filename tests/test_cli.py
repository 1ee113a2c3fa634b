"""The command line's promise: a user's mistake is one line on stderr and exit code 2, whatever the input (numbers
past every limit, devices this torch lacks, formats matplotlib cannot write, files in the way, damaged run
directories); an unexpected exception is one line naming the file with its traceback and exit code 1."""

import argparse
import json
import re
import shutil

import pytest

import attnlab.app.cli
import attnlab.app.commands
from attnlab.app.cli import main


def one_error_line(capsys, code: int, expected: int = 2) -> str:
    """The error line of a finished command: exit code `expected`, exactly one line saying error, no traceback."""
    err = capsys.readouterr().err
    assert code == expected, err
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def parse_error_line(capsys, argv: list[str]) -> str:
    """An argparse refusal: SystemExit(2) and one error line."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    return one_error_line(capsys, e.value.code)


# ---------------------------------------------------------------------------------------------- last resort
def test_an_unexpected_exception_is_one_line_naming_the_crash_file(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("ATTNLAB_RAISE_INTERNAL", raising=False)
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))

    def broken(*args, **kwargs):
        raise RuntimeError("a bug\nwith a second line")

    monkeypatch.setattr(attnlab.app.commands, "summary", broken)
    code = main(["summary", "configs/demo.toml"])
    line = one_error_line(capsys, code, expected=1)
    assert line.startswith("attnlab: internal error: RuntimeError: a bug; the full traceback is in ")
    assert line.endswith("; please report it")
    path = line.split("the full traceback is in ")[1].split("; please report it")[0]
    assert path.startswith(str(tmp_path / "cache" / "crashes"))
    text = open(path, encoding="utf-8").read()
    assert "Traceback (most recent call last)" in text and "in broken" in text and "a bug" in text
    assert "command: attnlab summary configs/demo.toml" in text
    assert not [p for p in (tmp_path / "cache" / "crashes").iterdir() if p.name.startswith(".")]  # atomic


def test_the_crash_file_falls_back_to_the_temporary_folder(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("ATTNLAB_RAISE_INTERNAL", raising=False)
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "file"))  # a file: the crash folder cannot be made
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(attnlab.app.cli.tempfile, "tempdir", None)  # gettempdir reads TMPDIR again
    monkeypatch.setattr(attnlab.app.commands, "summary", lambda *a, **k: {}["missing"])
    line = one_error_line(capsys, main(["summary", "configs/demo.toml"]), expected=1)
    assert f"internal error: KeyError: 'missing'; the full traceback is in {tmp_path / 'tmp'}" in line


def test_the_tests_see_internal_errors_as_exceptions(monkeypatch):
    """conftest sets ATTNLAB_RAISE_INTERNAL: a bug fails the test that calls main(), with its traceback."""
    monkeypatch.setattr(attnlab.app.commands, "summary", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        main(["summary", "configs/demo.toml"])


def test_out_of_memory_is_a_user_error(monkeypatch, capsys):
    monkeypatch.delenv("ATTNLAB_RAISE_INTERNAL", raising=False)

    def allocate(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                           "memory: you tried to allocate 8000000000 bytes.")

    monkeypatch.setattr(attnlab.app.commands, "summary", allocate)
    line = one_error_line(capsys, main(["summary", "configs/demo.toml"]))
    assert line.startswith("attnlab: error: out of memory (RuntimeError: [enforce fail")
    assert line.endswith("choose smaller sizes, batches or beams")


# ---------------------------------------------------------------------------------------------- numeric options
@pytest.mark.parametrize("argv, message", [
    (["translate", "RUN", "--beam", "1000000000"], "argument --beam: 1000000000 exceeds the limit 256"),
    (["translate", "RUN", "--beam", str(2**63)], f"argument --beam: {2**63} exceeds the limit 256"),
    (["translate", "RUN", "--n-best", "0"], "argument --n-best: 0 is below the minimum 1"),
    (["translate", "RUN", "--beam", "1e3"], "argument --beam: '1e3' is not an integer"),
    (["evaluate", "RUN", "--max-sentences", "-1"], "argument --max-sentences: -1 is below the minimum 0"),
    (["generate", "RUN", "--temperature", "nan"], "argument --temperature: nan is not a number in [0.0, 100.0]"),
    (["generate", "RUN", "--temperature", "1e308"], "argument --temperature: 1e+308 exceeds the limit 100.0"),
    (["generate", "RUN", "--top-p", "inf"], "argument --top-p: inf exceeds the limit 1.0"),
    (["generate", "RUN", "--num", "1000000000"], "argument -n/--num: 1000000000 exceeds the limit 1024"),
    (["generate", "RUN", "--seed", "-1"], "argument --seed: -1 is below the minimum 0"),
    (["summary", "CFG", "--src-len", "-1"], "argument --src-len: -1 is below the minimum 1"),
    (["series", "fib", "--seeds", "1000000000"], "argument --seeds: 1000000000 exceeds the limit 1000"),
    (["serve", "RUN", "--timeout", "1e308"], "argument --timeout: 1e+308 exceeds the limit 86400.0"),
    (["serve", "RUN", "--max-chars", str(10**30)], f"argument --max-chars: {10**30} exceeds the limit 1000000"),
    (["data", "tsv", "F", "--vocab-size", str(10**12)], f"argument --vocab-size: {10**12} exceeds the limit 1048576"),
    (["plot", "attention", "RUN", "--sentence", "x", "--formats", "png,xyz"],
     "argument --formats: 'xyz' is not a format matplotlib writes; choose from avif, eps"),
    (["plot", "attention", "RUN", "--sentence", "x", "--formats", "png,"], "argument --formats: '' is not a format"),
    (["translate", "RUN", "--device", "xpu"], "argument --device: invalid choice: 'xpu'"),
])
def test_numeric_options_are_refused_past_their_limits(capsys, argv, message):
    assert message in parse_error_line(capsys, argv)


# ---------------------------------------------------------------------------------------------- inputs that crashed
def test_a_config_file_that_is_not_utf8(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"[train]\nmax_steps = 5 # \xff\xfe\n")
    line = one_error_line(capsys, main(["summary", str(bad)]))
    assert line == f"attnlab: error: {bad}:2: not valid UTF-8 (byte 0xff); a config file is UTF-8 text"


def test_sizes_that_multiply_past_the_parameter_limit_are_refused_before_allocating(capsys):
    line = one_error_line(capsys, main(["summary", "configs/bible-transformer-small.toml", "--set",
                                        "model.transformer.d_model=65536", "--set", "model.transformer.h=8"]))
    assert "parameters, more than the limit 1,000,000,000; choose smaller sizes under model" in line


@pytest.mark.parametrize("argv, message", [
    (["summary", "configs/demo.toml", "--set", "model.rnn.hidden_dim=1000000000000"],
     "model.rnn.hidden_dim = 1000000000000 exceeds the limit 65536"),
    (["summary", "configs/demo.toml", "--set", "model.rnn.attn_dim=-5"],
     "model.rnn.attn_dim = -5 is below the minimum 0"),
    (["summary", "configs/demo.toml", "--set", "summary.src_vocab=-5"],
     "summary.src_vocab = -5 is below the minimum 0"),
    (["series", "fib", "--set", "series.length=1000000000000"],
     "series.length = 1000000000000 exceeds the limit 100000"),
])
def test_config_numbers_past_their_limits(capsys, argv, message):
    assert message in one_error_line(capsys, main(argv))


def test_a_device_this_torch_lacks(tiny_runs, tmp_path, capsys):
    import torch

    if torch.backends.mps.is_available():
        pytest.skip("this machine has an MPS device")
    (tmp_path / "in.txt").write_text("the cat\n")
    line = one_error_line(capsys, main(["translate", str(tiny_runs["rnn"]), str(tmp_path / "in.txt"), "--device",
                                        "mps"]))
    assert f"device 'mps' is not available: this torch ({torch.__version__}) on this machine has cpu" in line


@pytest.mark.parametrize("out, message", [
    ("x.xyz", "x.xyz: matplotlib cannot write 'xyz' files; the suffix picks the format, one of avif"),
    ("dir", "dir: cannot write there"),
])
def test_plot_outputs_matplotlib_cannot_write_or_a_folder_in_the_way(tiny_runs, tmp_path, capsys, out, message):
    (tmp_path / "dir").mkdir()
    line = one_error_line(capsys, main(["plot", "curves", str(tiny_runs["rnn"]), "--out", str(tmp_path / out)]))
    assert message in line


def test_output_paths_where_a_file_stands(tiny_runs, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    (tmp_path / "in.txt").write_text("the cat\n")
    line = one_error_line(capsys, main(["translate", str(tiny_runs["rnn"]), str(tmp_path / "in.txt"), "-o",
                                        str(tmp_path / "file" / "out.txt")]))
    assert "file/out.txt: cannot write there" in line
    line = one_error_line(capsys, main(["plot", "attention", str(tiny_runs["rnn"]), "--sentence", "the cat",
                                        "--out", str(tmp_path / "file" / "att")]))
    assert "cannot write there" in line
    line = one_error_line(capsys, main(["plot", "attention", str(tiny_runs["rnn"]), "--sentence", "the cat",
                                        "--out", str(tmp_path) + "/.."]))
    assert "give a file path" in line


def test_a_tokenizer_folder_replaced_by_a_file(tiny_runs, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(tiny_runs["rnn"], run)
    shutil.rmtree(run / "tokenizer")
    (run / "tokenizer").write_text("x")
    for argv in (["summary", str(run)], ["train", "--resume", str(run), "--set", "train.max_steps=21"]):
        line = one_error_line(capsys, main(argv))
        assert f"{run / 'tokenizer'}: expected the run's tokenizer folder, found a file" in line


def test_a_resumed_run_without_its_tokenizer_folder(tiny_runs, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(tiny_runs["rnn"], run)
    shutil.rmtree(run / "tokenizer")
    line = one_error_line(capsys, main(["train", "--resume", str(run), "--set", "train.max_steps=21"]))
    assert "a translation run needs its tokenizers (RUN_DIR/tokenizer is missing)" in line


def test_float8_weights_in_a_run(tiny_runs, tmp_path, capsys):
    import torch
    from safetensors.torch import load_file, save_file

    run = tmp_path / "run"
    shutil.copytree(tiny_runs["rnn"], run)
    name = json.loads((run / "checkpoints" / "latest.json").read_text())["name"]
    path = run / "checkpoints" / f"{name}.safetensors"
    save_file({k: v.to(torch.float8_e4m3fn) for k, v in load_file(str(path)).items()}, str(path))
    (run / "in.txt").write_text("the cat\n")
    line = one_error_line(capsys, main(["translate", str(run), str(run / "in.txt"), "--checkpoint", "last"]))
    assert "is torch.float8_e4m3fn; weights must be one of torch.float32, torch.float16" in line


def test_the_demo_trains_with_two_processes_on_a_multicore_cpu(monkeypatch):
    """`attnlab demo` without --procs: two 1-thread processes on a CPU with 2+ cores (measured better there), one
    process on a single core or a GPU."""
    commands = attnlab.app.commands
    monkeypatch.setattr(commands.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(commands.os, "cpu_count", lambda: 2)
    assert commands.demo_procs() == 2
    monkeypatch.setattr(commands.os, "cpu_count", lambda: 1)
    assert commands.demo_procs() == 1
    monkeypatch.setattr(commands.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(commands.torch.cuda, "is_available", lambda: True)
    assert commands.demo_procs() == 1
    assert attnlab.app.cli.build_parser().parse_args(["demo"]).procs == 0


def _commands(parser, prefix=()):
    """Every (sub)command parser of the CLI with its words, nested ones included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _commands(sub, (*prefix, name))


def test_each_command_runs_on_the_device_its_help_names(monkeypatch):
    """`--device` defaults to what each command's --help says: auto (a GPU if there is one) for the model
    commands, cpu for serve, report and paraphrase plot. argparse's parent parsers share their actions, so a
    set_defaults(device="cpu") on serve once made `attnlab evaluate` and `translate` decode on the CPU beside a GPU
    (36 verses/s against 350 on an H200)."""
    seen = {}
    for words, sub in _commands(attnlab.app.cli.build_parser()):
        for action in sub._actions:
            if "--device" in action.option_strings:
                said = re.search(r"\(default: (\w+)", action.help).group(1)
                assert sub.get_default("device") == action.default == said, words
                seen[" ".join(words)] = said
    assert seen["evaluate"] == seen["translate"] == seen["generate"] == seen["paraphrase evaluate"] == "auto"
    assert seen["serve"] == seen["report"] == seen["paraphrase plot"] == "cpu"
    loads = []
    monkeypatch.setattr(attnlab.app.commands.api, "load", lambda *a, **k: loads.append(a[2]) or 1 / 0)
    monkeypatch.setenv("ATTNLAB_RAISE_INTERNAL", "1")
    with pytest.raises(ZeroDivisionError):
        main(["evaluate", "RUN"])
    assert loads == ["auto"]
