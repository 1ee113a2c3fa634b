#!/usr/bin/env python
"""Training throughput on real Bible batches, side by side in one process (issue 11, item 1): attnlab's
TransformerSeq2Seq vs torch.nn.Transformer with the same dimensions, embeddings, positions, generator, AdamW,
label-smoothed loss and batches, each eager and (--compile) torch.compile'd.

The batches are the trainer's own: the config's corpus and tokenizer, `TokenBudgetBatchSampler` under
train.max_tokens (length-bucketed), collated by `collate_seq2seq`. The variants run the same batches in turn, step
by step, so machine noise hits all alike. Reported per variant: real target tokens/s (padding excluded), the
padding fraction of the batches, FLOPs counted with `torch.utils.flop_counter` on the real shapes and the achieved
TFLOP/s and the MFU: the achieved FLOP/s as a fraction of the device's peak for the variant's precision, either
given (--peak-tflops) or measured here (`matmul_peak`: the best fp32 and bf16 matrix-product FLOP/s this machine
reaches at the model's own shapes, batch tokens x d_model x d_ff, x vocab, ..., and at 2048^3), peak memory (CUDA
only). --amp both runs every variant in fp32 and under bf16 autocast, side by side. With --pack, attnlab also runs
on packed batches (`train.pack`: several sentences per row with per-sentence masks, `PackedBatchSampler` under the same
token budget): other batches than the bucketed ones, so each variant reports its own real tokens and padding. With
--fused-loss, attnlab also runs with `train.fused_loss` (the output layer and the loss in one, never the whole
logits: `attnlab.kernels.linear_ce`) on the bucketed batches.

    python benchmarks/train_bench.py [--config configs/bible-transformer-small.toml] [--steps 30] [--compile]
        [--pack] [--fused-loss] [--length-multiple 16] [--amp none|bf16|fp16|both] [--device cuda --peak-tflops 989] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_name, write_json  # noqa: E402
from transformer_bench import TorchTransformerMT  # noqa: E402  (the same reference model as the synthetic bench)

from attnlab.data.batching import (PackedBatchSampler, TokenBudgetBatchSampler,  # noqa: E402
                               collate_packed_seq2seq, collate_seq2seq, padding_fraction)
from attnlab.data.tokenizers import PAD_ID  # noqa: E402
from attnlab.families.translation import load_experiment, prepare_corpus  # noqa: E402
from attnlab.nn.transformer import TransformerSeq2Seq  # noqa: E402
from attnlab.training.trainer import sequence_loss  # noqa: E402


def real_batches(cfg, n: int, max_tokens: int, seed: int = 0, pack_length: int = -1, length_multiple: int = 0):
    """The first n training batches of the config's corpus as the trainer makes them (packed into rows of
    pack_length tokens when pack_length >= 0, 0 meaning the longest example; on the grid of shapes with
    length_multiple > 0, `train.length_multiple`), and the tokenizer's vocab."""
    store = prepare_corpus(cfg)
    toks = store.tokenizers()
    data = store.train_data()
    if pack_length >= 0:
        sampler = PackedBatchSampler(data.lengths(), max_tokens, pack_length, shuffle=True, seed=seed)
        return [collate_packed_seq2seq([data[i] for i in idx], sampler.row_len)
                for idx in list(sampler)[:n]], toks.tgt.vocab_size
    sampler = TokenBudgetBatchSampler(data.lengths(), max_tokens, shuffle=True, seed=seed,
                                      length_multiple=length_multiple)
    batches = [collate_seq2seq([data[i] for i in idx], length_multiple) for idx in list(sampler)[:n]]
    return batches, toks.tgt.vocab_size


def matmul_peak(dtype: torch.dtype, shapes: list[tuple[int, int, int]], device: torch.device,
                seconds: float = 0.5) -> dict[str, float]:
    """TFLOP/s of (m x k) @ (k x n) products in `dtype` on `device`, for each (m, k, n), each timed for about
    `seconds` after a warm-up: what this machine's matrix units reach at these shapes."""
    out = {}
    for m, k, n in shapes:
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(k, n, device=device).to(dtype)
        for _ in range(3):
            a @ b
        iters, t0 = 0, time.perf_counter()
        while True:
            a @ b
            iters += 1
            if device.type == "cuda":
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds and iters >= 3:
                break
        out[f"{m}x{k}x{n}"] = round(2 * m * k * n * iters / elapsed / 1e12, 4)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/bible-transformer-small.toml")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=30, help="measured steps per variant")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=0, help="token budget of a batch (default: the config's)")
    ap.add_argument("--amp", choices=("none", "bf16", "fp16", "both"), default="none",
                    help="autocast precision of the variants; both: each variant in fp32 and in bf16")
    ap.add_argument("--compile", action="store_true", help="also torch.compile both models (dynamic shapes)")
    ap.add_argument("--pack", action="store_true", help="also attnlab on packed batches (train.pack)")
    ap.add_argument("--fused-loss", action="store_true",
                    help="also attnlab with the output layer and the loss in one (train.fused_loss)")
    ap.add_argument("--pack-length", type=int, default=0, help="tokens per packed row (0: the longest example)")
    ap.add_argument("--length-multiple", type=int, default=0,
                    help="bucketed batches on the grid of shapes (train.length_multiple, e.g. 16): few shapes, so "
                         "the compiled variants compile a few times instead of at every new length")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="the device's peak dense TFLOP/s for the precision run (default: measured, `matmul_peak`)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cfg = load_experiment(args.config)
    tcfg = cfg.model.transformer
    max_tokens = args.max_tokens or cfg.train.max_tokens
    n = args.warmup + args.steps
    bucketed, vocab = real_batches(cfg, n, max_tokens, length_multiple=args.length_multiple)
    packed = real_batches(cfg, n, max_tokens, pack_length=args.pack_length)[0] if args.pack else []
    bucketed, packed = [b.to(device) for b in bucketed], [b.to(device) for b in packed]
    precisions = {"none": [None], "bf16": [torch.bfloat16], "fp16": [torch.float16],
                  "both": [None, torch.bfloat16]}[args.amp]
    label = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}

    torch.manual_seed(0)
    ours = TransformerSeq2Seq(vocab, vocab, tcfg).to(device)
    torch.manual_seed(0)
    theirs = TorchTransformerMT(vocab, tcfg).to(device)
    base_variants = {"attnlab eager": ours, "torch.nn.Transformer eager": theirs}
    if args.pack:
        base_variants["attnlab eager packed"] = ours
    if args.fused_loss:
        base_variants["attnlab eager fused-loss"] = ours
    if args.compile:
        base_variants["attnlab compiled"] = torch.compile(ours, dynamic=True)
        base_variants["torch.nn.Transformer compiled"] = torch.compile(theirs, dynamic=True)
        if args.pack:
            base_variants["attnlab compiled packed"] = torch.compile(ours, dynamic=True)
        if args.fused_loss:
            base_variants["attnlab compiled fused-loss"] = torch.compile(ours, dynamic=True)
    # every variant in each precision: "attnlab eager" (the first precision) and "attnlab eager bf16"
    variants, dtypes = {}, {}
    for i, dt in enumerate(precisions):
        for name, model in base_variants.items():
            full = name if i == 0 else f"{name} {label[dt]}"
            variants[full], dtypes[full] = model, dt
    batches = {name: packed if "packed" in name else bucketed for name in variants}
    fused = {"fused": True} if device.type == "cuda" else {}
    optims = {name: torch.optim.AdamW(m.parameters(), lr=1e-4, **fused) for name, m in variants.items()}

    def step(name, b):
        model = variants[name]
        dtype = dtypes[name]
        segments = () if b.src_segments is None else (b.src_segments, b.tgt_segments)
        fused_loss = "fused-loss" in name  # the model's own loss from its output layer (train.fused_loss)
        targets = {"targets": b.tgt_out, "label_smoothing": cfg.train.label_smoothing} if fused_loss else {}
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = model(b.src, b.src_lengths, b.tgt_in, *segments, **targets)  # the loss, or logits (B, T, V)
        loss = (out if fused_loss else sequence_loss(out, b.tgt_out, cfg.train.label_smoothing)) / b.num_tgt_tokens
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optims[name].step()
        optims[name].zero_grad(set_to_none=True)

    flops = {}
    for name in variants:  # FLOPs of the measured batches, counted once per model and batching
        if "compiled" not in name:
            counter = FlopCounterMode(display=False)
            with counter:
                for b in batches[name][args.warmup:]:
                    step(name, b)
            flops[name] = counter.get_total_flops()
    for name in list(variants):  # a compiled variant computes the FLOPs of its eager twin
        flops.setdefault(name, flops[name.replace("compiled", "eager")])
    seconds = {name: 0.0 for name in variants}
    t_compile = {}
    for name in variants:  # warm-up (and compilation) on the first batches
        t0 = time.perf_counter()
        for b in batches[name][:args.warmup]:
            step(name, b)
        t_compile[name] = time.perf_counter() - t0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    peak = {}
    for i in range(args.warmup, n):
        for name in variants:
            b = batches[name][i]
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            step(name, b)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds[name] += time.perf_counter() - t0
    if device.type == "cuda":
        peak["all variants"] = torch.cuda.max_memory_allocated() / 2**30
    tokens = sum(int(b.num_tgt_tokens) for b in bucketed) // max(len(bucketed), 1)  # target tokens of a batch
    d, ff = tcfg.d_model, tcfg.d_ff
    shapes = [(tokens, d, ff), (tokens, ff, d), (tokens, d, vocab), (tokens, d, d), (2048, 2048, 2048)]
    peaks = {}
    for dt in precisions:
        if args.peak_tflops:
            peaks[label[dt]] = {"given": args.peak_tflops, "peak": args.peak_tflops}
        else:
            measured = matmul_peak(dt or torch.float32, shapes, device)
            peaks[label[dt]] = {**measured, "peak": max(measured.values())}
    base = seconds["torch.nn.Transformer eager"]
    result = {"config": args.config, "device": str(device), "cpu": cpu_name(),
              "threads": torch.get_num_threads(), "torch": torch.__version__, "amp": args.amp,
              "dims": {k: getattr(tcfg, k) for k in ("d_model", "h", "d_ff", "enc_layers", "dec_layers", "norm")},
              "vocab": vocab, "max_tokens": max_tokens, "length_multiple": args.length_multiple,
              "shapes": len({tuple(b.src.shape) + tuple(b.tgt_in.shape) for b in bucketed}), "steps": args.steps, "matmul_tflops": peaks,
              "peak_memory_gib": {k: round(v, 2) for k, v in peak.items()}, "variants": {}}
    for name, s in seconds.items():
        measured = batches[name][args.warmup:]
        real = sum(int((b.tgt_out != PAD_ID).sum()) for b in measured)
        row = {"precision": label[dtypes[name]], "batching": "packed" if "packed" in name else "bucketed",
               "real_target_tokens": real,
               "padding_fraction": round(padding_fraction(measured), 4),
               "seconds": round(s, 3), "target_tokens_per_s": round(real / s, 1),
               "tflops_per_s": round(flops[name] / s / 1e12, 4), "speed_vs_torch_eager": round(base / s, 3),
               "warmup_s": round(t_compile[name], 1)}
        row["mfu"] = round(flops[name] / s / 1e12 / peaks[label[dtypes[name]]]["peak"], 4)
        result["variants"][name] = row
    print(write_json(args.json, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
