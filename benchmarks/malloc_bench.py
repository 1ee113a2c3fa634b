#!/usr/bin/env python
"""The trainer's update on the CPU with glibc's malloc as it comes and with `attnlab.kernels.memory.keep_freed_memory`
(freed memory reused, not returned to the kernel and faulted back in): target tokens/s and minor page faults per
update. The setting is per process, so each variant runs in processes of its own, alternating (default, kept,
kept, default, ...), each process timing the same real batches of the config after a warm-up; the pairs' ratios
and their mean are reported.

    python benchmarks/malloc_bench.py configs/bible-transformer-small.toml [--threads 1] [--steps 8] [--pairs 3]
        [--json OUT.jsonl]

Each process's JSON line, then a summary line (also appended to --json).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import append_json_line  # noqa: E402
from trainer_steps import real_trainer  # noqa: E402  (a fresh trainer and the config's real batches)

from attnlab.families.translation import load_experiment  # noqa: E402
from attnlab.kernels.memory import ENV, keep_freed_memory  # noqa: E402

WARMUP = 3


def child(config: Path, threads: int, steps: int) -> dict:
    """One process: WARMUP + steps updates of a fresh trainer; tokens/s and faults over the timed ones."""
    torch.set_num_threads(threads)
    cfg = load_experiment(config, [f"train.num_threads={threads}", "train.device=cpu"])
    with tempfile.TemporaryDirectory() as run_dir:
        trainer, batches = real_trainer(cfg, WARMUP + steps, Path(run_dir))  # calls keep_freed_memory on the CPU
        for b in batches[:WARMUP]:
            trainer.train_step([b])
        usage = resource.getrusage(resource.RUSAGE_SELF)
        t, tokens = time.perf_counter(), 0
        for b in batches[WARMUP:]:
            loss, n = trainer.train_step([b])
            tokens += n
        float(loss)
        seconds = time.perf_counter() - t
        end = resource.getrusage(resource.RUSAGE_SELF)
    cpu = {"user": end.ru_utime - usage.ru_utime, "sys": end.ru_stime - usage.ru_stime}
    return {"kept": keep_freed_memory(), "threads": threads, "updates": steps,
            "target_tokens_per_s": round(tokens / seconds, 1),
            "minor_faults_per_update": (end.ru_minflt - usage.ru_minflt) // steps,
            "cpu_s_per_update": {k: round(v / steps, 4) for k, v in cpu.items()}, "wall_s_per_update": round(seconds / steps, 4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=8, help="timed updates per process")
    ap.add_argument("--pairs", type=int, default=3, help="processes of each variant")
    ap.add_argument("--json", type=Path, help="append the summary line to this file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.config, args.threads, args.steps)))
        return 0
    runs: dict[str, list[dict]] = {"default": [], "kept": []}
    cmd = [sys.executable, __file__, str(args.config), "--threads", str(args.threads), "--steps", str(args.steps),
           "--child"]
    for i in range(args.pairs):  # default kept, kept default, ...: neither always goes first
        for name, value in (("default", "0"), ("kept", "1"))[::1 if i % 2 == 0 else -1]:
            out = subprocess.run(cmd, env={**os.environ, ENV: value}, check=True, capture_output=True, text=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps({"variant": name, **row}), flush=True)
            runs[name].append(row)
    ratios = [k["target_tokens_per_s"] / d["target_tokens_per_s"] for d, k in zip(runs["default"], runs["kept"])]
    summary = {"config": str(args.config), "threads": args.threads, "updates_per_process": args.steps,
               "torch": torch.__version__, "runs": runs, "kept_over_default": [round(r, 4) for r in ratios],
               "mean_ratio": round(statistics.mean(ratios), 4)}
    append_json_line(args.json, summary)
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
