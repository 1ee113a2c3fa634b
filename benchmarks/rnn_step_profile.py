#!/usr/bin/env python
"""Where a training step of an RNN config goes on this machine: torch.profiler's table of operators (self CPU
time) over a few forward-backward-AdamW steps on the config's real batches (its store, its token budget), under
the precision training would use. For deciding what to make cheaper in the RNN decoder's per-step work.

    python benchmarks/rnn_step_profile.py [--config configs/demo.toml] [--threads 1] [--amp bf16|none]
        [--steps 5] [--rows 25]
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from attnlab.data.batching import TokenBudgetBatchSampler, collate_seq2seq
from attnlab.families.translation import build_seq2seq, load_experiment, prepare_corpus


def config_batches(cfg, n: int) -> tuple[list, object]:
    """The first n training batches of the config's prepared corpus (its token budget, sampler seed 0) and the
    corpus's tokenizers."""
    store = prepare_corpus(cfg)
    data = store.train_data()
    sampler = TokenBudgetBatchSampler(data.lengths(), cfg.train.max_tokens, seed=0)
    return [collate_seq2seq([data[i] for i in idx]) for idx, _ in zip(sampler, range(n))], store.tokenizers()


def training_step(model: nn.Module, opt: torch.optim.Optimizer, b, bf16: bool) -> None:
    """One forward-backward-AdamW step of a seq2seq model on batch b, under CPU bf16 autocast if bf16."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(b.src, b.src_lengths, b.tgt_in)
    loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), b.tgt_out.flatten(), ignore_index=0)
    opt.zero_grad()
    loss.backward()
    opt.step()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/demo.toml")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--amp", choices=("bf16", "none"), default="bf16")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rows", type=int, default=25)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_experiment(args.config)
    batches, tokenizers = config_batches(cfg, 3 + args.steps)
    torch.manual_seed(0)
    model = build_seq2seq(cfg, tokenizers).train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    for b in batches[:3]:  # warm-up
        training_step(model, opt, b, args.amp == "bf16")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for b in batches[3:]:
            training_step(model, opt, b, args.amp == "bf16")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
