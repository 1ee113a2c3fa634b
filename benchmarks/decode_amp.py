#!/usr/bin/env python
"""Decoding in bf16 against fp32, side by side on one trained run (issue 23, item 1): `decode.amp = "bf16"` (the
search under bf16 autocast) against `decode.amp = "none"`, on a split of the run's corpus.

For greedy search: how many outputs are identical, and BLEU/chrF of each; for beam search (the run's beam or
--beam): BLEU/chrF of each and how many outputs are identical. Each precision decodes the same sentences in the
same batches, greedy then beam, in turn, and is timed (sentences/s). One JSON object is printed (and written with
--json).

On a GPU the first search pays for CUDA's start (kernel loading, cuBLAS handles): --warmup N decodes the first N
sentences with each precision before anything is timed.

    python benchmarks/decode_amp.py RUN_DIR [--split test] [--checkpoint best] [--beam 5] [--threads 2]
        [--device cpu|cuda] [--warmup 0] [--max-sentences 0] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

from attnlab.core.metrics import corpus_scores
from attnlab.decode.translate import Translator
from attnlab.families.translation import split_pairs
from attnlab.runs.workflow import load_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import commit, cpu_name, write_json  # noqa: E402


def decode(translator: Translator, sources: list[str], beam: int) -> tuple[list[str], float]:
    t0 = time.perf_counter()
    hyps = [t[0].text for t in translator.translate(sources, beam_size=beam)]
    return hyps, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--split", default="test")
    ap.add_argument("--checkpoint", default="best")
    ap.add_argument("--beam", type=int, default=0, help="beam size (default: the run's decode.beam_size)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="where the search runs (cpu, cuda, auto)")
    ap.add_argument("--warmup", type=int, default=0, help="decode the first N sentences once before timing")
    ap.add_argument("--max-sentences", type=int, default=0, help="the first N sentences of the split (0: all)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    run = load_run(args.run_dir, args.checkpoint, args.device)
    pairs = split_pairs(run.cfg, args.split, run.tokenizers, args.max_sentences)
    sources, refs = [p.src for p in pairs], [p.tgt for p in pairs]
    beam = args.beam or run.cfg.decode.beam_size
    translators = {amp: Translator(run.model, run.tokenizers, dataclasses.replace(run.cfg.decode, amp=amp), run.device)
                   for amp in ("none", "bf16")}
    out: dict = {"run": str(args.run_dir), "checkpoint": args.checkpoint, "split": args.split,
                 "sentences": len(pairs), "beam_size": beam, "threads": torch.get_num_threads(), "torch": torch.__version__,
                 "device": str(run.device), "cpu": cpu_name(),
                 "gpu": torch.cuda.get_device_name(run.device) if run.device.type == "cuda" else None,
                 "commit": commit()}
    if args.warmup:
        for translator in translators.values():
            for size in (1, beam):
                decode(translator, sources[:args.warmup], size)
    for search, size in (("greedy", 1), ("beam", beam)):
        hyps, seconds = {}, {}
        for amp, translator in translators.items():
            hyps[amp], seconds[amp] = decode(translator, sources, size)
        same = sum(a == b for a, b in zip(hyps["none"], hyps["bf16"]))
        row = {"identical": same, "identical_fraction": round(same / max(len(pairs), 1), 4)}
        for amp in translators:
            s = corpus_scores(hyps[amp], refs)
            row[amp] = {"bleu": round(s.bleu, 2), "chrf": round(s.chrf, 2), "seconds": round(seconds[amp], 2),
                        "sentences_per_s": round(len(pairs) / seconds[amp], 2)}
        row["bf16_speedup"] = round(seconds["none"] / seconds["bf16"], 3)
        row["examples_that_differ"] = [{"src": sources[i], "fp32": hyps["none"][i], "bf16": hyps["bf16"][i]}
                                       for i in range(len(pairs)) if hyps["none"][i] != hyps["bf16"][i]][:3]
        out[search] = row
    print(write_json(args.json, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
