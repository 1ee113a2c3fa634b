#!/usr/bin/env python
"""Soak test of crash-safe checkpoints (outside the test suite): SIGKILL a real `attnlab train` run at random
moments, then check the run directory and resume it, again and again.

After every kill: latest.json and best.json name complete checkpoints (weights, optimizer state and trainer state
all readable); best.json's step is the step its trainer state calls best, with the score metrics.jsonl logged
there; then `attnlab train --resume` must work. At the end: no temporary files, no step after latest, and
metrics.jsonl holds each step once.

    python scripts/soak_checkpoints.py --kills 50 --out runs/soak [--json docs/results/soak_checkpoints.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

WORDS = ["the", "house", "is", "big", "small", "red", "a", "cat", "sees", "and", "old", "my", "door"]


def write_corpus(d: Path, seed: int = 0) -> None:
    rng = random.Random(seed)
    for name, n in (("train", 3000), ("dev", 40), ("test", 40)):
        rows = []
        for _ in range(n):
            words = [rng.choice(WORDS) for _ in range(rng.randint(2, 8))]
            rows.append(" ".join(words) + "\t" + " ".join(w[::-1] for w in reversed(words)))
        (d / f"{name}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")


def config(d: Path) -> Path:
    path = d / "soak.toml"
    path.write_text(f"""[data]
corpus = "files"
train = ["{d / 'train.tsv'}"]
dev = ["{d / 'dev.tsv'}"]
test = ["{d / 'test.tsv'}"]
[tokenizer]
kind = "char"
[model.rnn]
cell = "gru"
emb_dim = 16
hidden_dim = 32
attention = "bahdanau"
[train]
max_steps = 100000
max_tokens = 600
eval_every = 5
log_every = 5
keep_last = 1
eval_max_sentences = 8
progress = false
num_threads = 1
""", encoding="utf-8")
    return path


def check(run: Path) -> dict:
    """The invariants of a killed run directory; raises AssertionError naming the first one broken."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from attnlab.core.checkpoint import read_pointer, read_tensors
    from attnlab.core.fileio import read_json

    ckpt = run / "checkpoints"
    latest = read_pointer(ckpt, "latest.json")
    assert latest is not None, "latest.json missing"
    for suffix in (".safetensors", ".train.safetensors"):
        read_tensors(ckpt / f"{latest['name']}{suffix}")
    state = read_json(ckpt / f"{latest['name']}.json")
    best = read_pointer(ckpt, "best.json")
    if best is not None:
        read_tensors(ckpt / f"{best['name']}.safetensors")
        best_state = read_json(ckpt / f"{best['name']}.json")
        assert best_state["best_step"] == best["step"], f"best.json names {best['name']} whose state says best is " \
                                                        f"step {best_state['best_step']}"
        logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        at = [r for r in logged if r.get("step") == best["step"] and "bleu" in r]
        assert at and at[-1]["bleu"] == best["score"], f"best.json score {best['score']} != logged {at}"
    return {"latest": latest["step"], "best": best["step"] if best else None, "state_best": state.get("best_step")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--out", type=Path, default=Path("runs/soak"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the summary here")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    write_corpus(args.out)
    cfg, run = config(args.out), args.out / "run"
    cmd = [sys.executable, "-m", "attnlab.app.cli", "train"]
    first, kills, checks, started = True, 0, [], time.time()
    while kills < args.kills:
        argv = cmd + ([str(cfg), "--out", str(run)] if first else ["--resume", str(run)])
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        delay = rng.uniform(3.0, 10.0)  # start-up (imports, data, tokenizer) takes 2-3 s of it
        time.sleep(delay)
        if proc.poll() is not None:
            print(proc.stderr.read(), file=sys.stderr)
            raise SystemExit(f"training exited by itself with {proc.returncode}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if not (run / "checkpoints" / "latest.json").is_file():
            continue  # killed before the first checkpoint: start again
        first = False
        kills += 1
        checks.append({"kill": kills, "after_s": round(delay, 2), **check(run)})
        print(json.dumps(checks[-1]), flush=True)
    done = subprocess.run(cmd + ["--resume", str(run), "--set", f"train.max_steps={checks[-1]['latest'] + 10}"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    final = check(run)
    ckpt = run / "checkpoints"
    temp = [p.name for p in ckpt.iterdir() if p.name.startswith(".")]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
             if "loss" in json.loads(line)]
    assert not temp, f"temporary files left: {temp}"
    assert steps == sorted(set(steps)), "metrics.jsonl repeats steps"
    summary = {"kills": kills, "lost_or_mislabelled": 0, "temp_files_left": 0, "final": final,
               "minutes": round((time.time() - started) / 60, 1), "checks": checks}
    print(json.dumps({k: v for k, v in summary.items() if k != "checks"}))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
