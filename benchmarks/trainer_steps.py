#!/usr/bin/env python
"""The trainer's own update, `Trainer.train_step`, on the config's real batches, timed two ways (GPU figures):

1. **First shapes.** The first N updates of a fresh trainer, each timed alone (the device synchronised before
   and after), with its batch shape (sentences, source and target length) and whether that shape is new to the
   process; then the same N batches again, every shape now seen. The difference is what the first meeting with
   a shape costs (kernel loading, the allocator, library heuristics): the warm-up of a run's first minute.
2. **Reading the loss every update, side by side.** Alternating blocks of `--block` updates: one reads the
   summed loss back to the host after every update (`float(loss)`, what the trainer did before it kept the
   loss on the device), the other once per block (what `Trainer.fit` does now: once per log record). Same
   model, same batches in turn; target tokens/s of each.

    python benchmarks/trainer_steps.py configs/gpu/bible-transformer-base.toml [--first 60] [--block 25]
        [--rounds 4] [--device cuda] [--json OUT.json] [--set KEY=VALUE ...]

One JSON object is printed (and written to --json).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_json  # noqa: E402
from train_bench import real_batches  # noqa: E402  (the trainer's own bucketed batches of the config's corpus)

from attnlab.families.translation import build_translation_model, load_experiment, prepare_corpus  # noqa: E402
from attnlab.training.trainer import Trainer  # noqa: E402


def real_trainer(cfg, n: int, run_dir: Path, device: torch.device = torch.device("cpu")) -> tuple[Trainer, list]:
    """A fresh `Trainer` of the config's model (initialised under train.seed) writing to run_dir, and the first n
    training batches as it makes them, on `device`."""
    batches, vocab = real_batches(cfg, n, cfg.train.max_tokens, seed=cfg.train.seed)
    torch.manual_seed(cfg.train.seed)
    model = build_translation_model(cfg.model, vocab, vocab)
    data = prepare_corpus(cfg).train_data()
    return Trainer(model, cfg.train, data, data, run_dir), [b.to(device) for b in batches]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def first_shapes(trainer: Trainer, batches: list, device: torch.device) -> dict:
    """Per update of the first pass and of a second pass over the same batches: seconds, shape, new or seen."""
    seen: set = set()
    passes = []
    for _ in range(2):
        rows = []
        for b in batches:
            shape = (b.src.size(0), b.src.size(1), b.tgt_in.size(1))
            sync(device)
            t = time.perf_counter()
            loss, _ = trainer.train_step([b])
            float(loss)
            rows.append({"shape": shape, "new": shape not in seen, "s": round(time.perf_counter() - t, 4)})
            seen.add(shape)
        passes.append(rows)
    first, again = passes
    new = [i for i, r in enumerate(first) if r["new"]]
    return {"first_pass_s": round(sum(r["s"] for r in first), 3), "second_pass_s": round(sum(r["s"] for r in again), 3),
            "new_shapes": len(new), "distinct_shapes": len(seen),
            "first_pass_new_shape_s": round(sum(first[i]["s"] for i in new), 3),
            "second_pass_same_updates_s": round(sum(again[i]["s"] for i in new), 3),
            "first_pass": first, "second_pass": again}


def read_every_update(trainer: Trainer, batches: list, device: torch.device, block: int, rounds: int) -> dict:
    """Alternating blocks (ABBA...) of updates reading the loss after each update or once per block."""
    seconds = {"every_update": 0.0, "once_per_block": 0.0}
    tokens = dict.fromkeys(seconds, 0)
    it = 0
    for r in range(2 * rounds):
        for name in (list(seconds) if r % 2 == 0 else list(seconds)[::-1]):
            sync(device)
            t = time.perf_counter()
            total = torch.zeros((), device=device)
            for _ in range(block):
                b = batches[it % len(batches)]
                it += 1
                loss, n = trainer.train_step([b])
                if name == "every_update":
                    float(loss)
                else:
                    total += loss
                tokens[name] += n
            float(total)
            sync(device)
            seconds[name] += time.perf_counter() - t
    rate = {k: round(tokens[k] / seconds[k], 1) for k in seconds}
    ratio = round(rate["once_per_block"] / rate["every_update"], 4)
    return {"target_tokens_per_s": rate, "ratio_once_per_block": ratio, "updates_each": block * rounds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--first", type=int, default=60, help="updates timed one by one (first shapes)")
    ap.add_argument("--block", type=int, default=25, help="updates per block of the side-by-side part")
    ap.add_argument("--rounds", type=int, default=4, help="blocks of each variant")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    device = torch.device(args.device)
    cfg = load_experiment(args.config, args.set)
    cfg.train.device = args.device
    n = max(args.first, args.block)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer, batches = real_trainer(cfg, n, Path(run_dir), device)
        t0 = time.perf_counter()
        out = {"config": str(args.config), "device": torch.cuda.get_device_name(device) if device.type == "cuda"
               else "cpu", "torch": torch.__version__, "amp": cfg.train.amp, "max_tokens": cfg.train.max_tokens,
               "first_shapes": first_shapes(trainer, batches[:args.first], device)}
        out["first_shapes"]["wall_s_with_setup"] = round(time.perf_counter() - t0, 3)
        out["read_loss"] = read_every_update(trainer, batches[:args.block], device, args.block, args.rounds)
    write_json(args.json, out, indent=None)
    summary = {k: v for k, v in out["first_shapes"].items() if not k.endswith("_pass")}
    print(json.dumps({**out, "first_shapes": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
