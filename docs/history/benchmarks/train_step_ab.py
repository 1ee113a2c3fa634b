#!/usr/bin/env python
"""The trainer's update (`Trainer.train_step`) with this checkout's code against older versions of some of its
modules, side by side in one process: one model, one trainer, the config's real batches; blocks of updates
alternate between the two versions (ABBA...), so machine noise and the model's progress hit both alike.

An old version is a file (`git show COMMIT:src/attnlab/kernels/dropout.py > /tmp/old_dropout.py`) given as
`--old attnlab.kernels.dropout=/tmp/old_dropout.py`. For the old blocks, every top-level class and function the old file
defines is put into the live module in place of the current one, and put back after: code that looks the name up
in that module when it runs (`dropout` calling `_MaskedScale`, `smoothed_cross_entropy` calling `FusedSmoothedCE`)
runs the old version; a name another module imported by value before the swap does not change.

    python benchmarks/train_step_ab.py configs/bible-transformer-small.toml --old attnlab.kernels.dropout=/tmp/old.py \
        [--old attnlab.kernels.loss=/tmp/old_loss.py] [--threads 1] [--block 5] [--rounds 4] [--json OUT.jsonl]

One JSON line: target tokens/s of each version and new / old.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trainer_steps import real_trainer  # noqa: E402  (a fresh trainer and the config's real batches)

from attnlab.families.translation import load_experiment  # noqa: E402


def swaps(specs: list[str]) -> tuple[list, list]:
    """(module, name, value) triples that install the old versions, and those that put the current ones back."""
    old, new = [], []
    for spec in specs:
        mod_name, _, path = spec.partition("=")
        live = importlib.import_module(mod_name)
        loader = importlib.util.spec_from_file_location(f"old_{mod_name.replace('.', '_')}", path)
        mod = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(mod)
        for name, value in vars(mod).items():
            if (inspect.isclass(value) or inspect.isfunction(value)) and value.__module__ == mod.__name__ \
                    and hasattr(live, name):
                old.append((live, name, value))
                new.append((live, name, getattr(live, name)))
    return old, new


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--old", action="append", required=True, metavar="MODULE=FILE")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--block", type=int, default=5, help="updates per block")
    ap.add_argument("--rounds", type=int, default=4, help="blocks of each version")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    ap.add_argument("--json", type=Path, help="append the JSON line to this file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_experiment(args.config, [*args.set, f"train.num_threads={args.threads}", "train.device=cpu"])
    n = args.warmup + 2 * args.block * args.rounds
    old, new = swaps(args.old)
    seconds, tokens = {"new": 0.0, "old": 0.0}, {"new": 0, "old": 0}
    with tempfile.TemporaryDirectory() as run_dir:
        trainer, batches = real_trainer(cfg, n, Path(run_dir))
        for b in batches[:args.warmup]:
            trainer.train_step([b])
        it = args.warmup
        for r in range(2 * args.rounds):
            name = ("new", "old")[(r + r // 2) % 2]  # new old old new new old ...
            for live, attr, value in (old if name == "old" else new):
                setattr(live, attr, value)
            t = time.perf_counter()
            for b in batches[it:it + args.block]:
                loss, k = trainer.train_step([b])
                tokens[name] += k
            float(loss)
            seconds[name] += time.perf_counter() - t
            it += args.block
        for live, attr, value in new:
            setattr(live, attr, value)
    rate = {k: round(tokens[k] / seconds[k], 1) for k in seconds}
    out = {"config": str(args.config), "old": args.old, "threads": args.threads, "torch": torch.__version__,
           "updates_each": args.block * args.rounds, "target_tokens_per_s": rate,
           "new_over_old": round(rate["new"] / rate["old"], 4)}
    line = json.dumps(out)
    if args.json:
        with args.json.open("a") as f:
            f.write(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
