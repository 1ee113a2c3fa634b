"""The trainer end to end on a tiny synthetic task: it learns, checkpoints are complete and atomic, resume is
exact, and the CLI's train / translate / evaluate work with clear errors."""

import contextlib
import io
import json
import subprocess
import sys
from unittest import mock

import pytest
import torch

from attnlab import load
from attnlab.app.cli import main
from attnlab.core.checkpoint import load_checkpoint, write_latest
from attnlab.core.errors import AttnlabError
from attnlab.families.translation import experiment_from_dict
from attnlab.runs.workflow import train
from attnlab.training.optim import lr_factor, make_optimizer
from attnlab.training.trainer import TrainConfig, Trainer
from conftest import run_or_dump


def tiny_config(tiny_tsv, model=None, **train):
    return experiment_from_dict({
        "data": {"corpus": "files", "train": [str(tiny_tsv / "train.tsv")], "dev": [str(tiny_tsv / "dev.tsv")],
                 "test": [str(tiny_tsv / "test.tsv")]},
        "tokenizer": {"kind": "char"},
        "model": model or {"rnn": {"cell": "gru", "emb_dim": 32, "hidden_dim": 64, "attention": "bahdanau",
                                   "dropout": 0.1}},
        "train": {"max_steps": 40, "max_tokens": 2000, "lr": 0.003, "eval_every": 20, "log_every": 10,
                  "seed": 3, "progress": False, "keep_last": 1, **train},
        "decode": {"beam_size": 3},
    })


def test_lr_schedules():
    assert lr_factor("inverse_sqrt", 100, 50) == pytest.approx(0.5)
    assert lr_factor("inverse_sqrt", 100, 400) == pytest.approx(0.5)
    assert lr_factor("noam", 4000, 4000, d_model=512) == pytest.approx(512 ** -0.5 * 4000 ** -0.5)


def test_resume_is_exact(tiny_tsv, tmp_path):
    straight = tmp_path / "straight"
    train(tiny_config(tiny_tsv, max_steps=20, eval_every=10), straight)
    halves = tmp_path / "halves"
    train(tiny_config(tiny_tsv, max_steps=10, eval_every=10), halves)
    state = train(None, halves, resume=True, overrides=["train.max_steps=20"])
    assert state.step == 20
    a = {k: v.clone() for k, v in _weights(straight).items()}
    b = _weights(halves)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0, msg=k)
    logs = [json.loads(x) for x in (halves / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logs if "dev_loss" in r] == [10, 20]
    # keep_last = 1: one step checkpoint remains, plus the one best.json names
    names = {p.name for p in (halves / "checkpoints").iterdir()}
    best = json.loads((halves / "checkpoints" / "best.json").read_text())["name"]
    assert names == {"best.json", "latest.json"} | {f"{stem}{suffix}" for stem in ("step_00000020", best)
                                                    for suffix in (".json", ".safetensors", ".train.safetensors")}


def test_each_checkpoint_holds_the_seconds_trained_up_to_it(tiny_tsv, tmp_path):
    """A run killed after a checkpoint resumes from it, so the checkpoint's state must hold the time trained up to
    its step, not the time at the start of the process: the resumed run's time_s counts on from there."""
    run = tmp_path / "run"
    train(tiny_config(tiny_tsv, max_steps=20, eval_every=10, keep_last=2), run)
    ckpt = run / "checkpoints"
    saved = {n: json.loads((ckpt / f"step_{n:08d}.json").read_text())["train_seconds"] for n in (10, 20)}
    logged = {r["step"]: r["time_s"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
              if "loss" in r}  # the training records, written before each step's validation and checkpoint
    assert 0 < logged[10] <= saved[10] < logged[20] <= saved[20]
    # as after a kill between the two checkpoints: resume from step 10
    write_latest(ckpt, 10, run)
    train(None, run, resume=True)
    again = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in again if "loss" in r] == [10, 20]
    assert again[-1]["time_s"] > saved[10]


def _weights(run_dir):
    from safetensors.torch import load_file
    return load_file(str(run_dir / "checkpoints" / "step_00000020.safetensors"))


@pytest.fixture(scope="module")
def trained(tiny_tsv, tmp_path_factory):
    run = tmp_path_factory.mktemp("run") / "bahdanau"
    # 200 updates at lr 0.01: test BLEU (beam 3) 93.7 on the EPYC (300 at lr 0.005 gave 97.2 in 1.7x the time; 150 at
    # lr 0.01 gave 82.3, 160 at lr 0.005 gave 46.6): well past the 60 that test_model_learns_the_task asks
    train(tiny_config(tiny_tsv, max_steps=200, eval_every=100, lr=0.01), run)
    return run


def test_model_learns_the_task(trained):
    result = load(trained).evaluate("test", beam=3)
    assert result["bleu"] > 60, result
    assert sum(r["sentences"] for r in result["by_length"]) == 40
    assert (trained / "eval" / "test.hyp.txt").read_text().count("\n") == 40


def _cli(*args, stdin: str | bytes = ""):
    """`attnlab ARGS` run in this process (`attnlab.app.cli.main`, as a user's shell would run it, argparse's exits
    included), `stdin` its standard input: a CompletedProcess of its exit code and what it wrote to stdout and
    stderr (text). A fresh process would pay about 4 s to import torch on a slow CPU; the tests that are about a
    process (a kill, a signal, torchrun, --procs) start one."""
    out, err = io.StringIO(), io.StringIO()
    data = stdin if isinstance(stdin, bytes) else stdin.encode("utf-8")
    with mock.patch.object(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:  # argparse: a usage error (2) or --help (0)
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_cli_translate(trained):
    done = _cli("translate", trained, "--beam", "3", "--device", "cpu", stdin="the red house\n\nmy cat\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    # the right words (order is harder on 3-word inputs after 200 updates); the empty line stays empty
    assert sorted(lines[0].split()) == ["casa", "la", "roja"] and lines[1] == ""
    assert sorted(lines[2].split()) == ["gata", "mi"]
    done = _cli("translate", trained, "--beam", "3", "--n-best", "2", "--device", "cpu", stdin="the cat\n")
    assert done.returncode == 0 and len(done.stdout.strip().splitlines()) == 2


@pytest.mark.parametrize("args, message", [
    (("translate", "{run}", "--beam", "2", "--n-best", "3"), "n_best (3) <= beam size (2)"),
    (("evaluate", "{tmp}/nothing"), "not a run directory"),
    (("train", "{tmp}/missing.toml"), "no such config file"),
])
def test_cli_errors(trained, tmp_path, args, message):
    args = [a.format(run=trained, tmp=tmp_path) for a in args]
    done = _cli(*args, stdin="the cat\n")
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_cli_sentence_too_long(trained):
    done = _cli("translate", trained, "--device", "cpu", stdin="the " * 500 + "\n")
    assert done.returncode == 2 and "the limit is 400" in done.stderr


def test_cli_bad_config_key(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[model.rnn]\nhiden_dim = 3\n")
    done = _cli("train", cfg, "--out", tmp_path / "r")
    assert done.returncode == 2 and "unknown config key model.rnn.hiden_dim" in done.stderr
    done = _cli("train", "configs/bible-rnn-bahdanau.toml", "--set", "model.rnn.cell=transformer")
    assert done.returncode == 2 and "model.rnn.cell: 'transformer' is not one of" in done.stderr


def test_missing_checkpoint_on_resume(tmp_path):
    with pytest.raises(Exception, match="nothing to resume"):
        train(None, tmp_path / "none", resume=True)
    ckpt = tmp_path / "ck"
    ckpt.mkdir()
    with pytest.raises(Exception, match="latest.json missing"):
        load_checkpoint(ckpt, torch.nn.Linear(1, 1), None)


def test_gradient_accumulation_equals_one_big_batch(tiny_tsv, tmp_path):
    from attnlab.data.batching import Seq2SeqDataset, collate_seq2seq
    from attnlab.families.translation import build_translation_model
    from attnlab.training.trainer import Trainer

    cfg = tiny_config(tiny_tsv, amp="none")  # an fp32 identity (bf16 rounds the two groupings differently)
    cfg.model.rnn.dropout = 0.0
    data = Seq2SeqDataset([[5, 6, 7], [8, 9], [5, 5, 5, 5], [7]], [[4, 5], [6, 7, 8], [9], [4, 4, 4]])
    grads = []
    for groups in ([[0, 1, 2, 3]], [[0, 1], [2, 3]]):
        torch.manual_seed(0)
        model = build_translation_model(cfg.model, 12, 12)
        trainer = Trainer(model, cfg.train, data, data, tmp_path / str(len(groups)))
        trainer.optimizer.step = lambda: None  # keep the weights; look at the accumulated gradients
        trainer.optimizer.zero_grad = lambda set_to_none=True: None
        loss, ntok = trainer.train_step([collate_seq2seq([data[i] for i in g]) for g in groups])
        grads.append((float(loss), ntok, [p.grad.clone() for p in model.parameters()]))
    (l1, n1, g1), (l2, n2, g2) = grads
    assert n1 == n2 == 13  # 9 target tokens + 4 EOS
    assert l1 == pytest.approx(l2, rel=1e-5)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_early_stopping(tiny_tsv, tmp_path):
    # a learning rate of zero never improves dev: patience 2 stops after 3 validations
    state = train(tiny_config(tiny_tsv, max_steps=1000, eval_every=5, lr=0.0, patience=2, eval_bleu=False),
                      tmp_path / "es")
    assert state.stopped == "early_stopping" and state.step == 15


def _ddp_config(tiny_tsv, path, **train):
    """A tiny RNN config for the torchrun tests; train: keys of [train] over the defaults below."""
    keys = {"max_steps": 10, "max_tokens": 600, "eval_every": 5, "eval_max_sentences": 5, "num_threads": 1,
            "progress": "false", **train}
    path.write_text(f"""
[data]
corpus = "files"
train = ["{tiny_tsv / 'train.tsv'}"]
dev = ["{tiny_tsv / 'dev.tsv'}"]
[tokenizer]
kind = "char"
[model.rnn]
emb_dim = 16
hidden_dim = 32
dropout = 0.0
[train]
""" + "".join(f"{k} = {v}\n" for k, v in keys.items()))
    return path


def _torchrun(cfg, out):
    # --standalone: the rendezvous store on a free port; the default, 127.0.0.1:29500, collides with any other
    # torchrun on the machine (another test run, a training)
    return run_or_dump([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        "-m", "attnlab.app.cli", "train", str(cfg), "--out", str(out)], timeout=300)


# The two DDP tests share one torchrun launch (three processes that each import torch: 15-40 s on a slow CPU); under
# pytest-xdist the module runs on one worker (conftest.ONE_WORKER_MODULES), where it is made once.
@pytest.fixture(scope="module")
def torchrun_run(tiny_tsv, tmp_path_factory):
    """A tiny RNN trained for 6 updates by two ranks under the documented torchrun line (dev loss at steps 3 and 6,
    no dev BLEU): (its config, its run directory, the finished torchrun process)."""
    d = tmp_path_factory.mktemp("ddp")
    cfg = _ddp_config(tiny_tsv, d / "ddp.toml", max_steps=6, lr=0.01, eval_every=3, eval_bleu="false")
    return cfg, d / "torchrun", _torchrun(cfg, d / "torchrun")


def test_procs_two_is_the_torchrun_line(torchrun_run, tmp_path):
    """DDP on CPU (gloo) under the documented torchrun line: two ranks train one model, only rank 0 writes, the
    ranks agree on when to stop. `attnlab train CONFIG --procs 2` starts the two ranks itself: the same weights, bit
    for bit, as the torchrun line, and a resumed run continues under --procs too."""
    from safetensors.torch import load_file

    cfg, torchrun, done = torchrun_run
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("stopped after 6 steps") == 1
    logs = [json.loads(x) for x in (torchrun / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logs if "dev_loss" in r] == [3, 6]
    done = run_or_dump([sys.executable, "-m", "attnlab.app.cli", "train", str(cfg), "--out", str(tmp_path / "procs"),
                        "--procs", "2"], timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "starting 2 training processes" in done.stderr and done.stderr.count("stopped after 6 steps") == 1
    name = "checkpoints/step_00000006.safetensors"
    a, b = load_file(str(torchrun / name)), load_file(str(tmp_path / "procs" / name))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    done = run_or_dump([sys.executable, "-m", "attnlab.app.cli", "train", "--resume", str(tmp_path / "procs"), "--procs",
                        "2", "--set", "train.max_steps=9"], timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "procs" / "checkpoints" / "step_00000009.safetensors").is_file()


@pytest.mark.parametrize("key,value", [("eval_every", 0), ("max_tokens", 0), ("accum_steps", 0), ("max_steps", -1),
                                       ("label_smoothing", 1.0)])
def test_train_config_rejects_bad_values_by_name(key, value):
    from attnlab.families.translation import load_experiment

    with pytest.raises(AttnlabError, match=rf"train(\.|: .*){key}"):  # its range, or a rule of TrainConfig
        load_experiment(None, [f"train.{key}={value}"])


def test_corrupt_checkpoint_is_a_clear_error(trained, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    best = run / "checkpoints" / (json.loads((run / "checkpoints" / "best.json").read_text())["name"] + ".safetensors")
    best.write_bytes(best.read_bytes()[: best.stat().st_size // 2])  # truncated, as by a full disk
    done = _cli("translate", run, "--device", "cpu", stdin="the cat\n")
    assert done.returncode == 2 and "corrupt checkpoint" in done.stderr and "Traceback" not in done.stderr
    latest = json.loads((run / "checkpoints" / "latest.json").read_text())["name"]
    (run / "checkpoints" / f"{latest}.train.safetensors").write_bytes(b"\x00garbage")
    done = _cli("train", "--resume", run, "--set", "train.max_steps=400")
    assert done.returncode == 2 and "corrupt checkpoint" in done.stderr and "Traceback" not in done.stderr


def test_ctrl_c_then_resume_equals_an_uninterrupted_run(tiny_tsv, tmp_path):
    """Ctrl-C (SIGINT) wherever it lands, in an update, a validation or a checkpoint write: the training stops at
    the end of that update with a checkpoint there (exit 130), and `--resume` ends with the weights of a run never
    stopped, dropout included (the checkpoint holds the random state after the update, not part of the next)."""
    import signal
    import time

    cfg = _kill_config(tiny_tsv, tmp_path)
    run = tmp_path / "interrupted"
    proc = subprocess.Popen([sys.executable, "-m", "attnlab.app.cli", "train", str(cfg), "--out", str(run)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # xdist may ignore it
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while proc.poll() is None:
        assert time.monotonic() < deadline, "no step 15 within 300 s"
        if metrics.is_file() and '"step": 15,' in metrics.read_text():
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    at = json.loads((run / "checkpoints" / "latest.json").read_text())["step"]
    assert 15 <= at < 400 and f"checkpoint at step {at} saved" in err, err
    _resume_equals_straight(cfg, run, at + 7, tmp_path / "straight")  # past the next update, not a validation


def _resume_equals_straight(cfg, run, target, straight):
    """`train --resume RUN` to `target` updates ends with the weights, bit for bit, of the config trained straight
    there (into `straight`)."""
    from safetensors.torch import load_file

    resumed = _cli("train", "--resume", run, "--set", f"train.max_steps={target}")
    assert resumed.returncode == 0, resumed.stderr
    done = _cli("train", cfg, "--out", straight, "--set", f"train.max_steps={target}")
    assert done.returncode == 0, done.stderr
    a = load_file(str(straight / "checkpoints" / f"step_{target:08d}.safetensors"))
    b = load_file(str(run / "checkpoints" / f"step_{target:08d}.safetensors"))
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0, msg=k)


def _kill_config(tiny_tsv, tmp_path):
    """The tiny RNN with dropout that the interruption tests train (1 thread, a checkpoint every 10 updates)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"""
[data]
corpus = "files"
train = ["{tiny_tsv / 'train.tsv'}"]
dev = ["{tiny_tsv / 'dev.tsv'}"]
test = ["{tiny_tsv / 'test.tsv'}"]
[tokenizer]
kind = "char"
[model.rnn]
cell = "gru"
emb_dim = 16
hidden_dim = 32
attention = "bahdanau"
dropout = 0.1
[train]
max_steps = 400
max_tokens = 800
lr = 0.003
eval_every = 10
eval_bleu = false
log_every = 1
seed = 3
num_threads = 1
progress = false
""")
    return cfg


def test_sigkill_then_resume_equals_an_uninterrupted_run(tiny_tsv, tmp_path):
    """`attnlab train` killed with SIGKILL (no chance to save anything) and resumed from its last checkpoint ends
    with the same weights and the same logged loss at the same step as a run that was never interrupted."""
    import signal
    import time

    cfg = _kill_config(tiny_tsv, tmp_path)
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "attnlab.app.cli", "train", str(cfg), "--out", str(killed)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latest = killed / "checkpoints" / "latest.json"
    deadline = time.monotonic() + 300
    while proc.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint at step 10 within 300 s"
        if latest.is_file() and json.loads(latest.read_text())["step"] >= 10:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    at_kill = json.loads(latest.read_text())["step"]  # wherever the kill landed (10, 20, ...: a checkpoint step)
    assert 10 <= at_kill < 400
    # compared one checkpoint interval past the kill, so the check never depends on how fast the machine was
    target = at_kill + 10
    _resume_equals_straight(cfg, killed, target, tmp_path / "straight")

    def last_loss(run):
        logs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        return [(r["step"], r["loss"]) for r in logs if "loss" in r][-1]

    assert last_loss(killed) == last_loss(tmp_path / "straight") and last_loss(killed)[0] == target


def test_adamw_does_not_decay_norms_biases_and_embeddings(tiny_tsv, tmp_path):
    """After one AdamW step with zero gradients only weight decay moves a parameter: the matrices shrink by
    lr * weight_decay, LayerNorm gains, biases and embeddings stay where they were."""
    from attnlab.nn.transformer import TransformerConfig, TransformerSeq2Seq

    model = TransformerSeq2Seq(20, 20, TransformerConfig(d_model=16, h=2, d_ff=32, enc_layers=1, dec_layers=1))
    with torch.no_grad():
        model.encoder[0].norm1.weight.fill_(1.5)  # away from any fixed point of the update
    cfg = TrainConfig(optimizer="adamw", lr=0.1, weight_decay=0.5, device="cpu", progress=False)
    data = torch.utils.data.TensorDataset(torch.zeros(1))
    data.lengths = lambda: [1]
    trainer = Trainer(model, cfg, data, data, tmp_path)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    trainer.optimizer.step()
    after = dict(model.named_parameters())
    for name in ("encoder.0.norm1.weight", "encoder.0.norm1.bias", "encoder.0.ff.linear1.bias",
                 "src_embed.weight", "tgt_embed.weight"):
        assert torch.equal(after[name], before[name]), name
    torch.testing.assert_close(after["encoder.0.ff.linear1.weight"],
                               before["encoder.0.ff.linear1.weight"] * (1 - 0.1 * 0.5))


def test_progress_off_a_terminal_is_plain_lines(tiny_tsv, tmp_path):
    """`attnlab train` with stderr to a file (not a terminal): one plain log line per log_every steps with loss and
    tokens/s, no carriage-return progress bar."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"""[data]\ncorpus = "files"\ntrain = ["{tiny_tsv / 'train.tsv'}"]\ndev = ["{tiny_tsv / 'dev.tsv'}"]
test = ["{tiny_tsv / 'test.tsv'}"]\n[tokenizer]\nkind = "char"\n[model.rnn]\nhidden_dim = 16\nemb_dim = 8
[train]\nmax_steps = 30\nlog_every = 10\neval_every = 30\nmax_tokens = 600\nprogress = true\nnum_threads = 1
eval_max_sentences = 4\n""")
    done = _cli("train", cfg, "--out", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr
    progress = [line for line in done.stderr.splitlines() if line.startswith("step ") and "tokens/s" in line]
    assert [line.split(":")[0] for line in progress] == ["step 10/30", "step 20/30", "step 30/30"]
    assert all("loss " in line for line in progress)


def test_sigusr1_prints_the_stacks_and_the_command_goes_on(trained):
    """`kill -USR1 PID` on any attnlab command (a rank that seems stuck) prints its Python stacks; it goes on."""
    import signal
    import time
    from pathlib import Path

    proc = subprocess.Popen([sys.executable, "-m", "attnlab.app.cli", "translate", str(trained), "--device", "cpu",
                             "--beam", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        caught = 0
        while not caught and proc.poll() is None and time.monotonic() < deadline:  # until main() has registered it
            status = Path(f"/proc/{proc.pid}/status").read_text()
            caught = int(next(x for x in status.splitlines() if x.startswith("SigCgt:")).split()[1], 16) \
                >> (signal.SIGUSR1 - 1) & 1
            time.sleep(0.05)
        assert caught, "attnlab did not install its SIGUSR1 handler"
        # signalled while it waits on stdin (syscall read, fd 0), not deep in torch's model set-up, where the dump's
        # 100 innermost frames can all be torch's
        while proc.poll() is None and time.monotonic() < deadline and \
                Path(f"/proc/{proc.pid}/syscall").read_text().split()[:2] != ["0", "0x0"]:
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate("the cat\n", timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "most recent call first" in err and "/attnlab/" in err  # a stack of attnlab's frames (up to 100)
    assert len(out.splitlines()) == 1 and out.strip()


def test_cli_translate_takes_the_file_before_or_after_the_options(trained, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("the red house\nmy cat\n", encoding="utf-8")
    after = _cli("translate", trained, "--checkpoint", "last", "--device", "cpu", "--beam", "1", src)
    before = _cli("translate", trained, src, "--checkpoint", "last", "--device", "cpu", "--beam", "1")
    assert after.returncode == 0 and before.returncode == 0, after.stderr + before.stderr
    assert after.stdout == before.stdout and len(after.stdout.splitlines()) == 2
    extra = _cli("translate", trained, src, src)
    assert extra.returncode == 2 and "unrecognized arguments" in extra.stderr


def test_bad_input_and_output_paths_are_one_line_errors(trained, tiny_tsv, tmp_path):
    """Undecodable stdin names the line; an output file in a place that cannot be written, an --out that is a
    file, and a metrics.jsonl that is a symlink (never followed) are one-line errors with exit code 2."""
    done = _cli("translate", trained, "--device", "cpu", stdin=b"the cat\n\xff\xfe broken\n")
    assert done.returncode == 2 and "<stdin>:2: not valid UTF-8" in done.stderr and "Traceback" not in done.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    done = _cli("translate", trained, "--device", "cpu", "-o", blocker / "out.txt", stdin="the cat\n")
    assert done.returncode == 2 and "cannot write there" in done.stderr and "Traceback" not in done.stderr
    done = _cli("train", "configs/demo.toml", "--out", blocker)
    assert done.returncode == 2 and "is a file" in done.stderr
    run = tmp_path / "linked"
    run.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    (run / "metrics.jsonl").symlink_to(outside)
    with pytest.raises(AttnlabError, match="a symlink is refused"):
        train(tiny_config(tiny_tsv, max_steps=2, log_every=1), run)
    assert outside.read_text() == "keep me\n"


def test_a_symlinked_plot_is_replaced_not_followed(trained, tmp_path):
    outside = tmp_path / "outside.png"
    outside.write_bytes(b"not a plot")
    (tmp_path / "att.png").symlink_to(outside)
    done = _cli("plot", "attention", trained, "--sentence", "the cat", "--out", tmp_path / "att", "--formats", "png",
                "--device", "cpu")
    assert done.returncode == 0, done.stderr
    assert outside.read_bytes() == b"not a plot"
    assert not (tmp_path / "att.png").is_symlink() and (tmp_path / "att.png").read_bytes()[:4] == b"\x89PNG"


def test_two_ranks_equal_one_rank_with_both_batches(torchrun_run, tmp_path):
    """DDP on CPU (gloo): rank 0 with batches B1, B3, ... and rank 1 with B2, B4, ... give, after 6 updates, the
    weights of one process that accumulates B1 + B2, B3 + B4, ... (the loss normalised by the target tokens of both
    ranks). Tolerance: 1e-6 absolute, float summation order being the only difference."""
    from safetensors.torch import load_file

    cfg, two, done = torchrun_run
    assert done.returncode == 0, done.stderr[-2000:]
    one = _cli("train", cfg, "--out", tmp_path / "one", "--set", "train.accum_steps=2")
    assert one.returncode == 0, one.stderr[-2000:]
    a = load_file(str(two / "checkpoints" / "step_00000006.safetensors"))
    b = load_file(str(tmp_path / "one" / "checkpoints" / "step_00000006.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=0, msg=k)


def _tiny_transformer(tiny_tsv, **train):
    return tiny_config(tiny_tsv, {"family": "transformer", "transformer": {
        "d_model": 32, "h": 4, "d_ff": 64, "enc_layers": 2, "dec_layers": 2, "dropout": 0.0, "norm": "pre"}}, **train)


def test_packed_training_learns_and_an_rnn_refuses_it(tiny_tsv, tmp_path):
    state = train(_tiny_transformer(tiny_tsv, pack=True, max_steps=30, lr=0.003), tmp_path / "packed")
    logs = [json.loads(x) for x in (tmp_path / "packed" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in logs if "loss" in r]
    assert state.step == 30 and losses[-1] < 0.7 * losses[0]
    with pytest.raises(AttnlabError, match="train.pack needs model.family = 'transformer'"):
        train(tiny_config(tiny_tsv, pack=True), tmp_path / "rnn")


def test_compiled_step_equals_eager_step(tiny_tsv, tmp_path):
    """train.compile = true (torch.compile with inductor, as the trainer runs it) gives the eager step's loss and
    gradients on a packed batch. Tolerance 1e-5 relative: the fused kernels sum in another order."""
    from attnlab.data.batching import Seq2SeqDataset, collate_packed_seq2seq
    from attnlab.families.translation import build_translation_model

    data = Seq2SeqDataset([[5, 6, 7], [8, 9], [5, 5, 5, 5], [7]], [[4, 5], [6, 7, 8], [9], [4, 4, 4]])
    batch = collate_packed_seq2seq([data[i] for i in range(4)], 8)
    results = []
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    for compile_ in (False, True):
        cfg = _tiny_transformer(tiny_tsv, compile=compile_, amp="none")  # fp32: the compiler fuses bf16 casts
        cfg.model.transformer.enc_layers = cfg.model.transformer.dec_layers = 1  # compiling takes a while on CPU
        torch.manual_seed(0)
        model = build_translation_model(cfg.model, 12, 12)
        trainer = Trainer(model, cfg.train, data, data, tmp_path / str(compile_))
        trainer.optimizer.step = lambda: None  # keep the weights; compare the gradients
        trainer.optimizer.zero_grad = lambda set_to_none=True: None
        loss, ntok = trainer.train_step([batch])
        results.append((float(loss), ntok, [p.grad.clone() for p in model.parameters()]))
    (l1, n1, g1), (l2, n2, g2) = results
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # the step really ran compiled
    assert not torch._dynamo.utils.counters["graph_break"]  # and whole (the kernels step aside while tracing)
    assert n1 == n2 == 13 and l1 == pytest.approx(l2, rel=1e-5)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_bf16_on_the_cpu_autocasts_the_matrix_products(tiny_tsv, tmp_path, family):
    """train.amp = bf16 on the CPU runs the model's linear layers in bf16 (it was silently fp32 before), keeps the
    weights, their gradients and the loss in fp32, and the step's loss and gradients stay close to fp32's."""
    from attnlab.data.batching import Seq2SeqDataset, collate_seq2seq
    from attnlab.families.translation import build_translation_model

    data = Seq2SeqDataset([[5, 6, 7], [8, 9], [5, 5, 5, 5], [7]], [[4, 5], [6, 7, 8], [9], [4, 4, 4]])
    batch = collate_seq2seq([data[i] for i in range(4)])
    results = {}
    for amp in ("none", "bf16"):
        cfg = _tiny_transformer(tiny_tsv, amp=amp) if family == "transformer" else tiny_config(tiny_tsv, amp=amp)
        torch.manual_seed(0)
        model = build_translation_model(cfg.model, 12, 12)
        seen = set()
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.register_forward_hook(lambda mod, inp, out: seen.add(out.dtype))
        trainer = Trainer(model, cfg.train, data, data, tmp_path / amp)
        trainer.optimizer.step = lambda: None  # compare the gradients of the same weights
        trainer.optimizer.zero_grad = lambda set_to_none=True: None
        loss, _ = trainer.train_step([batch])
        assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
        results[amp] = (float(loss), seen, torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert results["none"][1] == {torch.float32} and results["bf16"][1] == {torch.bfloat16}
    assert results["bf16"][0] == pytest.approx(results["none"][0], rel=0.02)  # bf16 has 8 bits of mantissa
    g32, g16 = results["none"][2], results["bf16"][2]
    assert torch.nn.functional.cosine_similarity(g32, g16, dim=0) > 0.99


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_the_fused_optimizer_equals_torchs_default(name, tmp_path):
    """The trainer steps with the fused Adam/AdamW on the CPU too (one kernel for all the parameters; 3x as fast as
    the default for the small Transformer: benchmarks/optimizer_bench.py), and its updates equal torch's default
    (foreach) implementation's: 10 steps with the same gradients, weights within 1e-6."""
    from attnlab.data.batching import Seq2SeqDataset
    from attnlab.nn.rnn_seq2seq import RNNModelConfig, RNNSeq2Seq

    data = Seq2SeqDataset([[5, 6, 7], [8, 9]], [[4, 5], [6, 7, 8]])
    trainer = Trainer(RNNSeq2Seq(12, 12, RNNModelConfig(cell="gru", emb_dim=8, hidden_dim=8)),
                      TrainConfig(device="cpu", progress=False, optimizer=name), data, data, tmp_path)
    assert trainer.optimizer.defaults["fused"] is True
    copies = []
    for fused in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 30), torch.nn.LayerNorm(30))
        copies.append((model, make_optimizer(model, name, 1e-2, (0.9, 0.98), 0.1, fused=fused)))
    start = [p.detach().clone() for p in copies[0][0].parameters()]
    g = torch.Generator().manual_seed(1)
    for _ in range(10):
        grads = [torch.randn(p.shape, generator=g) for p in copies[0][0].parameters()]
        for model, opt in copies:
            for p, grad in zip(model.parameters(), grads):
                p.grad = grad.clone()
            opt.step()
    for a, b in zip(copies[0][0].parameters(), copies[1][0].parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert all(not torch.equal(a, b) for a, b in zip(start, copies[0][0].parameters()))  # the steps moved them
