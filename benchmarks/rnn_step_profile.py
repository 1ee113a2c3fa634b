#!/usr/bin/env python
"""Where a training step of an RNN config goes on this machine: torch.profiler's table of operators (self CPU
time) over a few of the trainer's own updates (`Trainer.train_step`: label-smoothed loss, gradient clipping, the
learning-rate schedule, fused AdamW) on the config's real batches (its store, its token budget), on the CPU under
the precision training would use. For deciding what to make cheaper in the RNN decoder's per-step work.

    python benchmarks/rnn_step_profile.py [--config configs/demo.toml] [--threads 1] [--amp bf16|none]
        [--steps 5] [--rows 25]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import torch
from torch import nn

from attnlab.data.batching import TokenBudgetBatchSampler, collate_seq2seq
from attnlab.families.translation import build_seq2seq, load_experiment, prepare_corpus
from attnlab.training.trainer import Trainer


def config_batches(cfg, n: int) -> tuple[list, object]:
    """The first n training batches of the config's prepared corpus (its token budget, sampler seed 0) and the
    corpus's tokenizers."""
    store = prepare_corpus(cfg)
    data = store.train_data()
    sampler = TokenBudgetBatchSampler(data.lengths(), cfg.train.max_tokens, seed=0)
    return [collate_seq2seq([data[i] for i in idx]) for idx, _ in zip(sampler, range(n))], store.tokenizers()


def cpu_trainer(cfg, model: nn.Module, run_dir: Path, amp: str) -> Trainer:
    """The library's `Trainer` of `model` with the config's train section, on the CPU under train.amp = amp
    ("bf16" or "none"), no TensorBoard: `trainer.train_step([batch])` is the update these benchmarks time."""
    train = dataclasses.replace(cfg.train, device="cpu", amp=amp, tensorboard=False)
    data = prepare_corpus(cfg).train_data()  # the store config_batches prepared, opened again
    return Trainer(model, train, data, data, run_dir)


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
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = cpu_trainer(cfg, build_seq2seq(cfg, tokenizers), Path(run_dir), args.amp)
        for b in batches[:3]:  # warm-up
            trainer.train_step([b])
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for b in batches[3:]:
                trainer.train_step([b])
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
