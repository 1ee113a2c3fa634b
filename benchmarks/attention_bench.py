"""Attention core speed, side by side in one process:

1. attnlab's fused path (F.scaled_dot_product_attention) vs its explicit path (weights materialised);
2. attnlab MultiHeadAttention vs torch.nn.MultiheadAttention with identical weights and inputs.

Forward + backward, median of repeated timings. Usage:
    python benchmarks/attention_bench.py [--device cuda] [--batch 32] [--len 64] [--d-model 512] [--heads 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

from attnlab.nn.attention import MultiHeadAttention, padding_mask

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_name  # noqa: E402


def timeit(fn, device: torch.device, repeat: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--len", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    B, L, D, H = args.batch, args.len, args.d_model, args.heads
    mine = MultiHeadAttention(D, H).to(device)
    ref = nn.MultiheadAttention(D, H, batch_first=True).to(device)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mine.W_Q.weight, mine.W_K.weight, mine.W_V.weight]))
        ref.in_proj_bias.copy_(torch.cat([mine.W_Q.bias, mine.W_K.bias, mine.W_V.bias]))
        ref.out_proj.weight.copy_(mine.W_O.weight)
        ref.out_proj.bias.copy_(mine.W_O.bias)
    x = torch.randn(B, L, D, device=device, requires_grad=True)
    lengths = torch.randint(L // 2, L + 1, (B,), device=device)
    keep = padding_mask(lengths, L)  # (B, L)

    def run(fn):
        def go():
            out = fn()
            out.sum().backward()
        return go

    cases = {
        "attnlab fused (no weights)": run(lambda: mine(x, x, x, mask=keep)[0]),
        "attnlab explicit (weights)": run(lambda: mine(x, x, x, mask=keep, need_weights=True)[0]),
        "torch nn.MultiheadAttention": run(lambda: ref(x, x, x, key_padding_mask=~keep, need_weights=False)[0]),
    }
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else cpu_name()}), "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}; B={B} L={L} D={D} H={H}; fwd+bwd")
    results = {name: timeit(fn, device, args.repeat) for name, fn in cases.items()}
    base = results["torch nn.MultiheadAttention"]
    for name, t in results.items():
        print(f"{name:<30} {t * 1e3:8.2f} ms   {base / t:5.2f}x torch speed")


if __name__ == "__main__":
    main()
