#!/usr/bin/env python
"""The GRU recurrences with their backward by hand (`attnlab.kernels.recurrence`: `GRURecurrence` for the encoder,
`BahdanauGRURecurrence` for the Bahdanau decoder) against torch's autograd through the same model step by step
(`autograd_recurrences()` here: those two kernels off, every other kernel on), side by side in one process: the
trainer's own updates (`Trainer.train_step`) on the config's real batches, the two variants alternating batch by
batch from the same initial weights. Prints one JSON line: target tokens/s of each, their ratio, and the largest
logit difference on one batch in float64 (a check that both compute the same function).

    python benchmarks/rnn_recurrence_bench.py [--config configs/demo.toml] [--threads 1] [--amp none|bf16]
        [--batches 40] [--warmup 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import append_json_line, cpu_name  # noqa: E402
from rnn_step_profile import config_batches, cpu_trainer  # noqa: E402  (the profiler's batches and trainer)

from attnlab.families.translation import build_seq2seq, load_experiment  # noqa: E402
from attnlab.kernels import recurrence  # noqa: E402


@contextlib.contextmanager
def autograd_recurrences() -> Iterator[None]:
    """The GRU recurrences through torch's autograd step by step, the other kernels as they are: so the ratio is
    the recurrences' own (`attnlab.kernels.disabled()` would turn dropout's and the loss's kernels off too)."""
    with mock.patch.object(recurrence, "by_hand", lambda x: False):
        yield


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/demo.toml")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--amp", choices=("none", "bf16"), default="none")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_experiment(args.config)
    batches, tokenizers = config_batches(cfg, args.batches)
    torch.manual_seed(0)
    base = build_seq2seq(cfg, tokenizers).train()

    b = batches[0]
    check = copy.deepcopy(base).double().eval()
    with torch.enable_grad():  # the hand-derived recurrences serve training only
        by_hand = check(b.src, b.src_lengths, b.tgt_in)
        with autograd_recurrences():
            reference = check(b.src, b.src_lengths, b.tgt_in)
    max_diff = (by_hand - reference).abs().max().item()

    models = {"autograd": base, "by_hand": copy.deepcopy(base)}
    secs = dict.fromkeys(models, 0.0)
    tokens = 0
    with tempfile.TemporaryDirectory() as run_dir:
        trainers = {k: cpu_trainer(cfg, m, Path(run_dir) / k, args.amp) for k, m in models.items()}
        for i, b in enumerate(batches):
            for k in (("autograd", "by_hand") if i % 2 else ("by_hand", "autograd")):
                with autograd_recurrences() if k == "autograd" else contextlib.nullcontext():
                    t0 = time.perf_counter()
                    trainers[k].train_step([b])
                    dt = time.perf_counter() - t0
                if i >= args.warmup:
                    secs[k] += dt
            if i >= args.warmup:
                tokens += int(b.num_tgt_tokens)
    row = {"config": args.config, "threads": args.threads, "amp": args.amp, "batches": args.batches - args.warmup,
           "target_tokens": tokens, "machine": cpu_name(), "torch": torch.__version__,
           "max_logit_diff_float64": max_diff,
           **{f"{k}_tokens_per_s": round(tokens / s, 1) for k, s in secs.items()},
           "ratio": round(secs["autograd"] / secs["by_hand"], 3)}
    print(append_json_line(args.json, row))


if __name__ == "__main__":
    main()
