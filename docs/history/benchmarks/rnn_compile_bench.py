#!/usr/bin/env python
"""Does torch.compile pay for the RNN decoder's step on this CPU? The teacher-forced Bahdanau decoder of an RNN
config (default: the demo GRU) trained eagerly, with its additive attention compiled, and with its whole
recurrent step (attention + RNN cell) compiled: target tokens/s of forward-backward-AdamW steps on the config's
real batches, side by side in one process (the same batches, the same initial weights for each variant).

    python benchmarks/rnn_compile_bench.py [--config configs/demo.toml] [--threads 1] [--amp none|bf16]
        [--steps 24] [--warmup 8] [--json out.json]

The compiled variants replace `RNNSeq2Seq._bahdanau_recur` for the benchmark only (dynamic shapes: the batches'
lengths vary); the warm-up steps include compilation and are timed apart.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rnn_step_profile import config_batches, training_step  # noqa: E402  (the profiler's batches and step)

from attnlab.families.translation import build_seq2seq, load_experiment  # noqa: E402
from attnlab.nn.rnn_seq2seq import DecoderState, EncoderOutput, RNNSeq2Seq  # noqa: E402

EAGER_RECUR = RNNSeq2Seq._bahdanau_recur


def attention_compiled(model: RNNSeq2Seq):
    """The additive attention of one step compiled; the RNN cell eager."""
    attend = torch.compile(lambda q, k, v, m: model.attention(q, k, v, m, precomputed=True), dynamic=True)

    def recur(self, e, state, enc):
        context, weights = attend(state.hidden[:, -1:, :], enc.keys, enc.values, enc.mask)
        state = DecoderState(state.hidden, state.cell, context[:, 0])
        h, state = self._rnn_step(torch.cat([e, state.feed], dim=-1), state)
        return h, state, weights
    return recur


def step_compiled(model: RNNSeq2Seq):
    """The whole recurrent step (attention, concatenation, RNN cell) compiled."""
    def inner(e, hidden, cell, keys, values, mask):
        h, state, weights = EAGER_RECUR(model, e, DecoderState(hidden, cell, None),
                                        EncoderOutput(None, mask, None, keys, values))
        return h, state.hidden, state.cell, state.feed, weights
    compiled = torch.compile(inner, dynamic=True)

    def recur(self, e, state, enc):
        h, hidden, cell, feed, weights = compiled(e, state.hidden, state.cell, enc.keys, enc.values, enc.mask)
        return h, DecoderState(hidden, cell, feed), weights
    return recur


VARIANTS = {"eager": None, "attention compiled": attention_compiled, "step compiled": step_compiled}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/demo.toml")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--amp", choices=("bf16", "none"), default="none")
    ap.add_argument("--steps", type=int, default=24, help="timed steps per variant")
    ap.add_argument("--warmup", type=int, default=8, help="untimed steps first (compilation happens here)")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"which to run, in this order (comma-separated; default: {','.join(VARIANTS)})")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_experiment(args.config)
    if cfg.model.family != "rnn" or cfg.model.rnn.attention != "bahdanau":
        raise SystemExit(f"{args.config}: an RNN config with model.rnn.attention = \"bahdanau\" is needed")
    batches, tokenizers = config_batches(cfg, args.warmup + args.steps)
    torch.manual_seed(0)
    initial = build_seq2seq(cfg, tokenizers)
    results = []
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not names or any(n not in VARIANTS for n in names):
        raise SystemExit(f"--variants: choose among {', '.join(VARIANTS)}")
    for name in names:
        make = VARIANTS[name]
        model = copy.deepcopy(initial).train()
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
        RNNSeq2Seq._bahdanau_recur = EAGER_RECUR if make is None else make(model)
        torch.manual_seed(1)
        bf16 = args.amp == "bf16"
        t0 = time.perf_counter()
        for b in batches[:args.warmup]:
            training_step(model, opt, b, bf16)
        warm = time.perf_counter() - t0
        tokens, t0 = 0, time.perf_counter()
        for b in batches[args.warmup:]:
            training_step(model, opt, b, bf16)
            tokens += int((b.tgt_out != 0).sum())
        seconds = time.perf_counter() - t0
        results.append({"variant": name, "tokens_per_s": round(tokens / seconds, 1),
                        "ms_per_step": round(1000 * seconds / args.steps, 1), "warmup_s": round(warm, 1)})
        print(json.dumps(results[-1]), flush=True)
    RNNSeq2Seq._bahdanau_recur = EAGER_RECUR
    eager = [r["tokens_per_s"] for r in results if r["variant"] == "eager"]
    for r in results:
        if eager:
            r["vs_eager"] = round(r["tokens_per_s"] / (sum(eager) / len(eager)), 3)
    out = {"config": args.config, "variants": names, "threads": args.threads, "amp": args.amp, "steps": args.steps,
           "warmup": args.warmup, "torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
           "cpu_model": _cpu_model(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "commit": _commit(), "results": results}
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return ""


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


if __name__ == "__main__":
    main()
