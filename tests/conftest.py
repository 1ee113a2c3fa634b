"""Shared fixtures: a tiny synthetic parallel corpus that models can learn in seconds; and what makes every test's
result independent of the order the tests run in (pytest-randomly shuffles it) and of the machine's core count."""

import atexit
import contextlib
import logging
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

# One torch thread in this process and in every `attnlab` subprocess a test starts (they inherit the environment;
# set before torch is imported, which reads it once). Floating-point sums are split across threads, so the thread
# count changes the last bits of every reduction; a model trained for a few hundred steps (BLEU > 60, a loss
# halved, a greedy translation compared word for word) would then depend on the machine's cores and on whether an
# earlier test changed torch.set_num_threads. Tiny models gain nothing from threads anyway (conftest.one_thread).
os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
# An unexpected exception in `attnlab.app.cli.main` (and in an `attnlab` subprocess) propagates with its traceback
# instead of becoming the one-line "internal error" of exit code 1, so every internal error fails the test that
# caused it. setdefault: scripts/fuzz_counts.py sets it to 0 to count internal errors instead.
os.environ.setdefault("ATTNLAB_RAISE_INTERNAL", "1")
# A subprocess that dies of a fatal signal (a segfault, an abort in a library's teardown) prints its Python stack.
os.environ.setdefault("PYTHONFAULTHANDLER", "1")


def _test_cache() -> None:
    """A cache of the test session's own ($ATTNLAB_CACHE, removed at exit), so the prepared corpora of the tests'
    temporary files do not pile up in the user's cache; the Bible's corpus cache (built from the SWORD modules) is
    shared with the user's through a link, as it never changes."""
    if os.environ.get("ATTNLAB_CACHE"):
        return
    user = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "attnlab"
    tmp = Path(tempfile.mkdtemp(prefix="attnlab-test-cache-"))
    (user / "corpora").mkdir(parents=True, exist_ok=True)
    (tmp / "corpora").symlink_to(user / "corpora", target_is_directory=True)
    os.environ["ATTNLAB_CACHE"] = str(tmp)
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)


_test_cache()

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

TORCH_SEED = 0  # the global torch RNG at the start of every fixture set-up and every test body


def _global_state() -> dict:
    """What one test could leave behind for the next: process-wide settings that a test or the code under test may
    change (the CLI sets the attnlab logger up and applies train.num_threads). Not the environment: no test changes
    it (monkeypatch would put it back), and libraries set their own variables once (torch's inductor its cache
    directory), which must stay."""
    logger = logging.getLogger("attnlab")
    return {"threads": torch.get_num_threads(), "dtype": torch.get_default_dtype(), "grad": torch.is_grad_enabled(),
            "deterministic": torch.are_deterministic_algorithms_enabled(), "cwd": os.getcwd(),
            "logger": (logger.level, list(logger.handlers), logger.propagate)}


def _restore(state: dict) -> None:
    if torch.get_num_threads() != state["threads"]:
        torch.set_num_threads(state["threads"])
    torch.set_default_dtype(state["dtype"])
    torch.set_grad_enabled(state["grad"])
    torch.use_deterministic_algorithms(state["deterministic"])
    os.chdir(state["cwd"])
    logger = logging.getLogger("attnlab")
    logger.level, logger.handlers[:], logger.propagate = state["logger"][0], state["logger"][1], state["logger"][2]


BASELINE = _global_state()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A known torch RNG for the fixtures this test sets up (a module fixture is built by whichever of its tests
    runs first)."""
    torch.manual_seed(TORCH_SEED)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Each test body starts from the same torch RNG state whatever ran before it (pytest-randomly reseeds only
    random and numpy), and what it changes of the process-wide state is put back after it."""
    before = _global_state()
    torch.manual_seed(TORCH_SEED)
    try:
        return (yield)
    finally:
        _restore(before)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last test of a module, once its module fixtures are torn down: back to the state the session
    started with, whatever those fixtures left (a fixture that trains through the CLI sets the logger up)."""
    try:
        return (yield)
    finally:
        if nextitem is None or nextitem.module is not item.module:
            _restore(BASELINE)


# Modules whose tests share a costly module fixture (test_trainer.py: a GRU trained for 200 updates and a 2-rank
# torchrun launch; test_lm.py: a trained LM; test_package.py: a wheel in a fresh virtualenv). pytest-xdist's
# `--dist load` (what `-n N` means) sends a module's tests to every worker, and each worker makes the fixture again.
ONE_WORKER_MODULES = ("tests/test_trainer.py", "tests/test_lm.py", "tests/test_package.py")


@pytest.hookimpl(optionalhook=True)  # a pytest without pytest-xdist runs the tests in one process
def pytest_xdist_make_scheduler(config, log):
    """Under `-n N` (`make test`): each module of ONE_WORKER_MODULES runs whole on one worker, so that its fixtures
    are made once; every other test is scheduled alone, as `--dist load` would, to whichever worker is free. The
    modules go first (xdist's load-scope scheduler hands out its largest units first), the single tests balance
    the end. pytest-xdist's own `--dist loadgroup` (xdist_group marks) groups nothing under pytest 9.2
    (pytest-dev/pytest-xdist#1386). Another `--dist` mode given on the command line is left as it is."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerModules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER_MODULES else nodeid

    return OneWorkerModules(config, log)


def pytest_sessionstart(session):
    """pytest-randomly prints its seed in the report header, which `-q` (our addopts) hides: print it anyway, so
    that a failing order can be replayed with `pytest -p randomly --randomly-seed=N`; and whether the kernels are
    off (ATTNLAB_KERNELS=0, `make test-plain`: the workers and every `attnlab` subprocess inherit it). Printed by
    the process that reports: the only one, or pytest-xdist's controller (`make test` runs workers, which share
    the seed), not its workers."""
    if hasattr(session.config, "workerinput"):
        return
    seed = session.config.getoption("randomly_seed", None)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if seed is not None and reporter is not None and session.config.pluginmanager.has_plugin("randomly"):
        reporter.write_line(f"Using --randomly-seed={seed}")
    from attnlab import kernels

    if not kernels.enabled() and reporter is not None:  # `make test-plain`: say so above the results
        reporter.write_line(f"{kernels.ENV}={os.environ[kernels.ENV]}: every kernel off, the models' plain torch twins")

WORDS = {"the": "la", "house": "casa", "is": "es", "big": "grande", "small": "pequeña", "red": "roja",
         "a": "una", "cat": "gata", "sees": "ve", "and": "y", "old": "vieja", "my": "mi", "door": "puerta",
         "green": "verde", "window": "ventana", "opens": "abre"}


def _session_processes(sid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the processes of session `sid` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()  # state ppid pgrp session ...
            if int(fields[3]) == sid:
                cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append((int(stat.parent.name), cmdline))
    return found


def run_or_dump(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, text=True, timeout=timeout) for a command that starts processes of
    its own (torchrun, `train --procs`). One still running after `timeout` seconds fails the test with the Python
    stacks of every attnlab process it started (SIGUSR1: `attnlab.app.cli.main` registers faulthandler for it) and
    their output, instead of a bare TimeoutExpired: a hang then says where each rank hung."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except KeyboardInterrupt:  # its own session gets no Ctrl-C: end it with the test run
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    except subprocess.TimeoutExpired:
        running = _session_processes(proc.pid)
        for pid, cmdline in running:
            if "attnlab.app.cli" in cmdline and "torch.distributed.run" not in cmdline:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGUSR1)
        time.sleep(5)
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        listing = "\n".join(f"  {pid}: {cmdline}" for pid, cmdline in running)
        pytest.fail(f"still running after {timeout} s: {' '.join(cmd)}\nprocesses:\n{listing}\n"
                    f"stdout:\n{out[-3000:]}\nstderr (the Python stacks at the end):\n{err[-12000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def benchmark_module(name: str):
    """A script of benchmarks/ as a module: tests run its functions with small counts, the script the full ones."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_pairs(n: int, seed: int = 0, max_words: int = 7) -> list[tuple[str, str]]:
    """Word-for-word 'translations' in reversed order: learnable only with some alignment."""
    rng = random.Random(seed)
    vocab = sorted(WORDS)
    pairs = []
    for _ in range(n):
        words = [rng.choice(vocab) for _ in range(rng.randint(2, max_words))]
        pairs.append((" ".join(words), " ".join(WORDS[w] for w in reversed(words))))
    return pairs


@pytest.fixture(scope="session")
def tiny_tsv(tmp_path_factory):
    """train.tsv / dev.tsv / test.tsv of the synthetic task; returns the directory."""
    d = tmp_path_factory.mktemp("tiny")
    for name, n, seed in (("train", 1500, 0), ("dev", 40, 1), ("test", 40, 2)):
        (d / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in make_pairs(n, seed)), encoding="utf-8")
    return d


def tiny_experiment(tiny_dir, family: str = "rnn", max_steps: int = 20):
    """A char-level model of the synthetic task, trained in seconds: an RNN with Bahdanau attention, or a
    Transformer with 2 decoder layers of 2 heads."""
    from attnlab.families.translation import experiment_from_dict

    model = ({"rnn": {"cell": "gru", "emb_dim": 32, "hidden_dim": 64, "attention": "bahdanau", "dropout": 0.1}}
             if family == "rnn" else
             {"family": "transformer", "transformer": {"d_model": 32, "h": 2, "d_ff": 64, "enc_layers": 1,
                                                       "dec_layers": 2, "dropout": 0.1, "norm": "pre"}})
    return experiment_from_dict({
        "data": {"corpus": "files", "train": [str(tiny_dir / "train.tsv")], "dev": [str(tiny_dir / "dev.tsv")],
                 "test": [str(tiny_dir / "test.tsv")]},
        "tokenizer": {"kind": "char"},
        "model": model,
        "train": {"max_steps": max_steps, "max_tokens": 1200, "lr": 0.005, "eval_every": max_steps,
                  "log_every": 10, "seed": 3, "progress": False, "keep_last": 1, "eval_max_sentences": 10},
        "decode": {"beam_size": 2, "max_src_tokens": 80},
    })


@pytest.fixture(scope="session")
def tiny_runs(tiny_tsv, tmp_path_factory):
    """Two trained run directories of the synthetic task, {"rnn": path, "transformer": path}, made once per
    session (for the report, the server and the browser test)."""
    from attnlab.runs.workflow import train

    root = tmp_path_factory.mktemp("tiny_runs")
    runs = {}
    with one_thread():
        for family in ("rnn", "transformer"):
            runs[family] = root / family
            train(tiny_experiment(tiny_tsv, family), runs[family])
    return runs


@contextlib.contextmanager
def torch_threads(n: int):
    """torch on n intra-op threads, restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def one_thread():
    """torch on one intra-op thread, restored after. Tiny models gain nothing from threads, and on a 2-core
    machine shared with other test runs two threads each made them 5-8x slower (measured)."""
    return torch_threads(1)


@pytest.fixture(scope="module")
def single_thread():
    with one_thread():
        yield


@pytest.fixture(scope="session")
def tiny_lm_run(tmp_path_factory):
    """A character language model of the synthetic task's source side, trained for a few steps (the explorer
    serves it: causal self-attention of a prompt and its continuation); its run directory."""
    from attnlab.families.lm import load_lm_config
    from attnlab.runs.workflow import train

    d = tmp_path_factory.mktemp("tiny_lm")
    (d / "text.txt").write_text("".join(s + "\n" for s, _ in make_pairs(300, seed=5)), encoding="utf-8")
    cfg = load_lm_config(None, ["data.corpus=text", f"data.train={d / 'text.txt'}", "data.dev_size=20",
                                "data.test_size=20", "tokenizer.kind=char", "model.lm.d_model=32", "model.lm.h=2",
                                "model.lm.d_ff=64", "model.lm.layers=2", "model.lm.max_len=128", "train.max_steps=10",
                                "train.max_tokens=800", "train.eval_every=10", "train.progress=false",
                                "train.keep_last=1"])
    with one_thread():
        train(cfg, d / "lm")
    return d / "lm"


def check_export_spares_a_foreign_model(run, to: str, files, tmp_path, capsys) -> None:
    """`attnlab export RUN --to TO --out DIR` where DIR is another tool's model (files named as an export's, no
    attnlab.json) is refused and leaves DIR as it was; an earlier attnlab export there is replaced."""
    from attnlab.app.cli import main

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for name in files:
        (theirs / name).write_text(f"their {name}")
    before = {p.name: p.read_text() for p in theirs.iterdir()}
    assert main(["export", str(run), "--to", to, "--out", str(theirs)]) == 2
    assert "attnlab did not export (no attnlab.json)" in capsys.readouterr().err
    assert {p.name: p.read_text() for p in theirs.iterdir()} == before
    ours = tmp_path / "ours"
    assert main(["export", str(run), "--to", to, "--out", str(ours)]) == 0
    assert main(["export", str(run), "--to", to, "--out", str(ours)]) == 0
    assert (ours / "attnlab.json").is_file()
