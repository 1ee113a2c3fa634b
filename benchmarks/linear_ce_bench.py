#!/usr/bin/env python
"""The output layer and the label-smoothed loss, forward and backward, three ways side by side in one process:
`plain` (F.linear, then F.cross_entropy: torch alone, the kernels off), `loss_kernel` (F.linear, then
`attnlab.kernels.loss.smoothed_cross_entropy`: what the trainer runs on the CPU today) and `fused`
(`attnlab.kernels.linear_ce.linear_cross_entropy`: the logits a block of rows at a time, never whole). Base-like
sizes by default: 8,192 target tokens (5% of them padding), d 512, V 8,000, fp32, label smoothing 0.1.

Time: the median of --reps forward+backward passes of each variant, the variants in turn (A B C, B C A, ...), after
one warm-up pass each. Memory: the peak above the inputs, each variant in a process of its own (on the CPU the
resident set sampled every half millisecond during one pass, above its size before; on CUDA
torch.cuda.max_memory_allocated).
The loss and the gradients of each variant against `plain` are reported too.

    python benchmarks/linear_ce_bench.py [--rows 8192] [--dim 512] [--vocab 8000] [--threads 1] [--reps 5]
        [--block-elements 2097152 ...] [--device cpu|cuda] [--dtype fp32|bf16] [--json OUT.jsonl]

Prints one JSON object (also appended to --json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attnlab import kernels
from attnlab.kernels.linear_ce import BLOCK_ELEMENTS, linear_cross_entropy
from attnlab.kernels.loss import smoothed_cross_entropy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import append_json_line, cpu_name  # noqa: E402

PAD, EPS = 0, 0.1
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def inputs(args) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    dtype, device = DTYPES[args.dtype], torch.device(args.device)
    x = torch.randn(args.rows, args.dim, generator=g).to(device, dtype).requires_grad_()
    W = (torch.randn(args.vocab, args.dim, generator=g) / args.dim ** 0.5).to(device, dtype).requires_grad_()
    b = torch.zeros(args.vocab).to(device, dtype).requires_grad_()
    y = torch.randint(1, args.vocab, (args.rows,), generator=g)
    y[torch.randperm(args.rows, generator=g)[: args.rows // 20]] = PAD
    return x, W, b, y.to(device)


def variant(name: str, block_elements: int):
    """loss(x, W, b, y) of one variant."""
    if name == "plain":
        def plain(x, W, b, y):
            with kernels.disabled():
                return F.cross_entropy(F.linear(x, W, b).float(), y, ignore_index=PAD, label_smoothing=EPS,
                                       reduction="sum")
        return plain
    if name == "loss_kernel":
        def loss_kernel(x, W, b, y):
            with kernels.override(True):
                return smoothed_cross_entropy(F.linear(x, W, b), y, EPS, PAD)
        return loss_kernel

    def fused(x, W, b, y):
        with kernels.override(True):
            return linear_cross_entropy(x, W, b, y, EPS, PAD, block_elements=block_elements)
    return fused


def names(args) -> list[str]:
    return ["plain", "loss_kernel"] + [f"fused@{n}" for n in args.block_elements]


def run(fn, x, W, b, y) -> tuple[torch.Tensor, list[torch.Tensor]]:
    for t in (x, W, b):
        t.grad = None
    loss = fn(x, W, b, y)
    loss.backward()
    return loss.detach(), [t.grad for t in (x, W, b)]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def memory_child(args, name: str) -> dict:
    """One pass of one variant in this (fresh) process: the peak above the inputs, in MiB."""
    x, W, b, y = inputs(args)
    fn = variant(name.split("@")[0], int(name.split("@")[1]) if "@" in name else 0)
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run(fn, x, W, b, y)
        torch.cuda.synchronize()
        return {"peak_mib": round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)}
    page, peak, done = os.sysconf("SC_PAGE_SIZE"), [0], threading.Event()

    def rss() -> int:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * page

    def watch() -> None:  # torch's operations let go of the GIL: this thread samples the resident set meanwhile
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            time.sleep(0.0005)

    before = rss()
    watcher = threading.Thread(target=watch)
    watcher.start()
    run(fn, x, W, b, y)
    done.set()
    watcher.join()
    return {"peak_mib": round((max(peak[0], rss()) - before) / 2**20, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--block-elements", type=int, nargs="+", default=[BLOCK_ELEMENTS])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--dtype", default="fp32", choices=tuple(DTYPES))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--memory-of", help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.memory_of:
        print(json.dumps(memory_child(args, args.memory_of)))
        return 0
    x, W, b, y = inputs(args)
    fns = {n: variant(n.split("@")[0], int(n.split("@")[1]) if "@" in n else 0) for n in names(args)}
    reference, ref_grads = run(fns["plain"], x, W, b, y)
    result: dict = {"rows": args.rows, "dim": args.dim, "vocab": args.vocab, "dtype": args.dtype,
                    "device": args.device, "threads": args.threads, "reps": args.reps,
                    "machine": cpu_name(), "torch": torch.__version__,
                    "logits_mib": round(args.rows * args.vocab * 4 / 2**20, 1), "variants": {}}
    for name, fn in fns.items():  # the warm-up pass, and each variant against plain
        loss, grads = run(fn, x, W, b, y)
        result["variants"][name] = {
            "loss_rel_diff": float((loss - reference).abs() / reference.abs()),
            "grad_max_abs_diff": [float((g.float() - r.float()).abs().max()) for g, r in zip(grads, ref_grads)]}
    times: dict[str, list[float]] = {n: [] for n in fns}
    order = list(fns)
    for rep in range(args.reps):
        for name in order[rep % len(order):] + order[:rep % len(order)]:
            sync(args.device)
            t = time.perf_counter()
            run(fns[name], x, W, b, y)
            sync(args.device)
            times[name].append(1000 * (time.perf_counter() - t))
    base_cmd = [sys.executable, __file__, "--rows", str(args.rows), "--dim", str(args.dim), "--vocab", str(args.vocab),
                "--threads", str(args.threads), "--device", args.device, "--dtype", args.dtype]
    for name in fns:
        out = subprocess.run(base_cmd + ["--memory-of", name], check=True, capture_output=True, text=True)
        row = result["variants"][name]
        row.update(json.loads(out.stdout.strip().splitlines()[-1]))
        row["ms"] = round(statistics.median(times[name]), 1)
        row["ms_all"] = [round(t, 1) for t in times[name]]
    plain_ms = result["variants"]["plain"]["ms"]
    for row in result["variants"].values():
        row["speed_vs_plain"] = round(plain_ms / row["ms"], 3)
    print(append_json_line(args.json, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
