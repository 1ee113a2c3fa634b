#!/usr/bin/env python
"""Dropout on the CPU, side by side in one process: `torch.nn.functional.dropout` (the reference), attnlab's
16-bit mask multiplied as a bool mask (what `attnlab.kernels.dropout` did before 2026-11-29), and the same mask
written in the input's dtype (what it does now). Each variant's forward and backward pass (the mask saved, the
gradient multiplied by it) on the shapes of a small-Transformer training step: the FFN's hidden activation
(B, T, d_ff) in bf16 and a sublayer's output (B, T, d_model) in bf16 and float32. The variants run in turn, round
after round, and the median of the rounds is reported, so machine drift hits all alike.

    python benchmarks/dropout_bench.py [--threads 2] [--rounds 15] [--tokens 3000] [--json OUT.json]

Prints one JSON object: per shape and variant the median milliseconds of a forward + backward, and the speed-up
of each variant against F.dropout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_name, write_json  # noqa: E402

from attnlab.kernels.dropout import MaskedScale, dropout, keep_mask  # noqa: E402

P = 0.1


def reference(x: torch.Tensor) -> torch.Tensor:
    return F.dropout(x, P, training=True)


def bool_mask(x: torch.Tensor) -> torch.Tensor:
    """The former kernel: the same multiplication with the bool mask of the same draws."""
    keep, scale = keep_mask(x.shape, P, x.device)  # bool
    return MaskedScale.apply(x, keep, scale)


def dtype_mask(x: torch.Tensor) -> torch.Tensor:
    return dropout(x, P, training=True)


VARIANTS = {"F.dropout": reference, "bool mask": bool_mask, "mask in x's dtype": dtype_mask}


def timed(fn, x: torch.Tensor, grad: torch.Tensor) -> float:
    """Milliseconds of one forward and backward pass."""
    t = time.perf_counter()
    fn(x).backward(grad)
    ms = (time.perf_counter() - t) * 1e3
    x.grad = None
    return ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tokens", type=int, default=3000, help="B x T of the batch")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shapes = {"FFN hidden (tokens, 1024) bf16": ((args.tokens, 1024), torch.bfloat16),
              "sublayer output (tokens, 256) bf16": ((args.tokens, 256), torch.bfloat16),
              "sublayer output (tokens, 256) float32": ((args.tokens, 256), torch.float32)}
    out = {"cpu": cpu_name(), "threads": args.threads, "torch": torch.__version__, "p": P, "rounds": args.rounds,
           "shapes": {}}
    for label, (shape, dtype) in shapes.items():
        x = torch.randn(shape, dtype=dtype, requires_grad=True)
        grad = torch.randn(shape, dtype=dtype)
        times = {name: [] for name in VARIANTS}
        for name, fn in VARIANTS.items():  # warm-up
            timed(fn, x, grad)
        for _ in range(args.rounds):
            for name, fn in VARIANTS.items():
                times[name].append(timed(fn, x, grad))
        median = {name: statistics.median(v) for name, v in times.items()}
        out["shapes"][label] = {
            "median_ms": {k: round(v, 3) for k, v in median.items()},
            "speedup_over_F_dropout": {k: round(median["F.dropout"] / v, 3) for k, v in median.items()}}
    write_json(args.json, out, indent=1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
