#!/usr/bin/env python
"""The optimizer's step, fused (one kernel over all the parameters, `torch.optim.AdamW(fused=True)`) against torch's
default (foreach), side by side in one process (issue 40, item 3: "a fused optimizer"): for each config, two copies
of its model built by the run pipeline's own builder with the same gradients, `attnlab.training.optim.make_optimizer`
as the trainer calls it, steps alternating between the two so that machine noise hits both alike. Reported per config:
parameters, ms per step of each, default / fused, and the largest difference between the two copies' weights after
all the steps (the fused kernel sums in another order).

    python benchmarks/optimizer_bench.py [--config configs/bible-transformer-small.toml ...] [--device cpu]
        [--steps 30] [--threads 2] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from attnlab.families.translation import build_translation_model, load_experiment
from attnlab.training.optim import make_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_name, write_json  # noqa: E402


def bench(config: str, device: torch.device, steps: int) -> dict:
    cfg = load_experiment(config)
    copies = {}
    for fused in (False, True):
        torch.manual_seed(0)
        vocab = cfg.tokenizer.vocab_size  # the config's (joint) vocabulary: the model a run of it trains
        model = build_translation_model(cfg.model, vocab, vocab).to(device)
        g = torch.Generator(device=device).manual_seed(1)
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=g, device=device) * 1e-3
        t = cfg.train
        copies[fused] = (model, make_optimizer(model, t.optimizer, t.lr, (t.adam_beta1, t.adam_beta2),
                                               t.weight_decay, fused=fused))
    for fused in (False, True):  # warm-up: the optimizer state is created on the first step
        for _ in range(3):
            copies[fused][1].step()
    seconds = {False: 0.0, True: 0.0}
    for _ in range(steps):
        for fused in (False, True):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            copies[fused][1].step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds[fused] += time.perf_counter() - t0
    diff = max(float((a - b).abs().max()) for a, b in zip(copies[False][0].parameters(),
                                                           copies[True][0].parameters()))
    return {"config": config, "family": cfg.model.family, "optimizer": cfg.train.optimizer,
            "parameters": sum(p.numel() for p in copies[False][0].parameters()),
            "default_ms": round(seconds[False] / steps * 1e3, 3), "fused_ms": round(seconds[True] / steps * 1e3, 3),
            "fused_speedup": round(seconds[False] / seconds[True], 3), "max_weight_diff": diff}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append",
                    help="translation configs (default: bible-transformer-small and the demo's GRU)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=30, help="measured steps of each optimizer")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = args.config or ["configs/bible-transformer-small.toml", "configs/demo.toml"]
    device = torch.device(args.device)
    result = {"device": str(device), "cpu": cpu_name(),
              "threads": torch.get_num_threads(), "torch": torch.__version__, "steps": args.steps,
              "configs": [bench(c, device, args.steps) for c in configs]}
    print(write_json(args.json, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
