"""Transformer speed, side by side in one process.

1. Training throughput (target tokens/s, forward + backward + AdamW step) of attnlab's TransformerSeq2Seq vs a
   model built on torch.nn.Transformer with identical dimensions, embeddings, generator, optimizer and batches.
   The two alternate step by step so machine noise hits both alike.
2. Decoding speed (sentences/s) of attnlab's beam search with the KV cache vs without it (the same model
   re-run on the whole prefix at every step).

Usage:
    python benchmarks/transformer_bench.py [--device cuda] [--d-model 512] [--layers 6] [--heads 8] [--d-ff 2048]
        [--batch 64] [--src-len 32] [--tgt-len 32] [--vocab 8000] [--steps 10] [--amp bf16] [--compile]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from attnlab.decode.search import beam_search
from attnlab.nn.transformer import PositionalEncoding, TransformerConfig, TransformerSeq2Seq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_name  # noqa: E402


class TorchTransformerMT(nn.Module):
    """The reference: the same embeddings, positions and generator around torch.nn.Transformer."""

    def __init__(self, vocab: int, cfg: TransformerConfig) -> None:
        super().__init__()
        self.d_model = cfg.d_model
        self.src_embed, self.tgt_embed = nn.Embedding(vocab, cfg.d_model), nn.Embedding(vocab, cfg.d_model)
        self.pos = PositionalEncoding(cfg.d_model, cfg.max_len)
        self.dropout = nn.Dropout(cfg.dropout)
        self.transformer = nn.Transformer(cfg.d_model, cfg.h, cfg.enc_layers, cfg.dec_layers, cfg.d_ff, cfg.dropout,
                                          batch_first=True, norm_first=cfg.norm == "pre")
        self.generator = nn.Linear(cfg.d_model, vocab)

    def forward(self, src, src_lengths, tgt_in):
        S, T = src.size(1), tgt_in.size(1)
        src_pad = torch.arange(S, device=src.device)[None] >= src_lengths[:, None]  # (B, S) True = pad
        x = self.dropout(self.pos(self.src_embed(src) * math.sqrt(self.d_model)))
        y = self.dropout(self.pos(self.tgt_embed(tgt_in) * math.sqrt(self.d_model)))
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=src.device, dtype=torch.bool)
        out = self.transformer(x, y, tgt_mask=causal, src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad,
                               tgt_is_causal=True)
        return self.generator(out)


@dataclass
class Batch:
    src: torch.Tensor
    lengths: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor


def make_batches(n, B, S, T, V, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = torch.randint(S // 2, S + 1, (B,), generator=g)
        src = torch.randint(4, V, (B, S), generator=g)
        src[torch.arange(S)[None] >= lengths[:, None]] = 0
        tgt = torch.randint(4, V, (B, T + 1), generator=g)
        out.append(Batch(src.to(device), lengths.to(device), tgt[:, :-1].to(device), tgt[:, 1:].to(device)))
    return out


def train_timer(model, batches, device, amp):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if device.type == "cuda" else {}))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)

    def step(b):
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(b.src, b.lengths, b.tgt_in)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), b.tgt_out.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def timed(b):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(b)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    return step, timed


class Uncached(nn.Module):
    """The model without its KV cache: every step re-runs forward on the whole prefix (O(t^2) per sentence)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def encode(self, src, src_lengths):
        return (src, src_lengths)

    def init_state(self, enc):
        return enc[0].new_zeros(enc[0].size(0), 0)

    def step(self, prev, state, enc, need_weights=False):
        prefix = torch.cat([state, prev[:, None]], dim=1)  # (B, t)
        logits = self.model(enc[0], enc[1], prefix)[:, -1]
        return F.log_softmax(logits.float(), dim=-1), prefix, None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--d-ff", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--src-len", type=int, default=32)
    ap.add_argument("--tgt-len", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--amp", choices=("none", "bf16", "fp16"), default="none")
    ap.add_argument("--compile", action="store_true", help="torch.compile both models")
    ap.add_argument("--decode-sentences", type=int, default=16)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="the device's peak dense TFLOP/s for the dtype (H100 SXM bf16: 989): prints MFU")
    ap.add_argument("--skip-decode", action="store_true")
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=args.d_model, h=args.heads, d_ff=args.d_ff, enc_layers=args.layers,
                            dec_layers=args.layers, dropout=0.1, norm="post")
    mine = TransformerSeq2Seq(args.vocab, args.vocab, cfg).to(device)
    ref = TorchTransformerMT(args.vocab, cfg).to(device)
    n_mine, n_ref = (sum(p.numel() for p in m.parameters()) for m in (mine, ref))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    print(f"device {device} ({name}), torch {torch.__version__}, threads {torch.get_num_threads()}, amp {args.amp}, "
          f"compile {args.compile}")
    print(f"d_model {args.d_model}, layers {args.layers}+{args.layers}, heads {args.heads}, d_ff {args.d_ff}, "
          f"vocab {args.vocab}; batch {args.batch} x src {args.src_len} / tgt {args.tgt_len}; "
          f"params attnlab {n_mine:,}, torch {n_ref:,}")
    models = {"attnlab": mine, "torch.nn.Transformer": ref}
    if args.compile:
        models = {k: torch.compile(m) for k, m in models.items()}
    batches = make_batches(args.steps, args.batch, args.src_len, args.tgt_len, args.vocab, device)
    timers = {}
    for k, m in models.items():
        m.train()
        step, timed = train_timer(m, batches, device, args.amp)
        for b in batches[:2]:  # warm-up (and compilation)
            step(b)
        timers[k] = timed
    times = {k: [] for k in models}
    for b in batches:
        for k in models:
            times[k].append(timers[k](b))
    # FLOPs of one training step (forward + backward, matmuls and attention), counted by torch on the eager model
    flops = {}
    for k, m in (("attnlab", mine), ("torch.nn.Transformer", ref)):
        step, _ = train_timer(m, batches, device, args.amp)
        with FlopCounterMode(display=False) as counter:
            step(batches[0])
        flops[k] = counter.get_total_flops()
    tokens = args.batch * args.tgt_len
    base = statistics.median(times["torch.nn.Transformer"])
    print("\ntraining (median step):")
    for k, ts in times.items():
        med = statistics.median(ts)
        mfu = f"  MFU {flops[k] / med / (args.peak_tflops * 1e12):6.1%}" if args.peak_tflops else ""
        print(f"  {k:<22} {med * 1e3:9.1f} ms/step  {tokens / med:10,.0f} tgt tok/s  {base / med:5.2f}x torch  "
              f"{flops[k] / 1e12:6.2f} TFLOP/step{mfu}")
    if args.skip_decode:
        return

    mine.eval()
    src = batches[0].src[: args.decode_sentences]
    lengths = batches[0].lengths[: args.decode_sentences]
    max_len = args.tgt_len
    print(f"\ndecoding {len(src)} sentences, beam {args.beam}, {max_len} steps max:")
    with torch.no_grad():
        for label, model in (("with KV cache", mine), ("without cache", Uncached(mine))):
            beam_search(model, src[:2], lengths[:2], args.beam, 4)  # warm-up
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            hyps = beam_search(model, src, lengths, args.beam, max_len, length_penalty=0.6)
            if device.type == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            steps = sum(len(h[0].tokens) for h in hyps)
            print(f"  {label:<15} {len(src) / dt:8.2f} sentences/s  ({dt:.2f} s; {steps} output tokens)")


if __name__ == "__main__":
    main()
