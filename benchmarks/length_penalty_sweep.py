#!/usr/bin/env python
"""Beam search's length penalty (GNMT alpha) against BLEU from the KJV and the WEB source, on dev and test, for the
shipped models (issue 46: WEB >= 90% of KJV; outputs were short, brevity penalty 0.93-0.97).

    python benchmarks/length_penalty_sweep.py [--models transformer bahdanau] [--alphas 0 0.6 1 1.5]
        [--splits dev test] [--json docs/results/issue46/length_penalty_sweep.jsonl]

Each model is loaded as `pretrained:NAME` and decodes every verse of the split with beam 5 at each alpha (its
decode.length_penalty set in memory; the shipped alpha reproduces the cards' scores); sacrebleu's BLEU, brevity
penalty and length ratio per source, and the KJV source's BLEU by source length. One JSON line per model, split
and alpha (appended to --json). `--splits dev` chooses an alpha without decoding the test verses.
"""

from __future__ import annotations

import argparse
import json
import sys

import sacrebleu
import torch

from attnlab.core.metrics import bleu_by_length
from attnlab.families.translation import split_pairs
from attnlab.runs.run import load
from attnlab.runs.shipped import run_path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["transformer", "bahdanau"])
    ap.add_argument("--alphas", nargs="+", type=float, default=[0.0, 0.6, 1.0, 1.5])
    ap.add_argument("--splits", nargs="+", choices=("dev", "test"), default=["dev", "test"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="append the JSON lines here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = open(args.json, "a", encoding="utf-8") if args.json else None
    for name in args.models:
        run = load(run_path(f"pretrained:{name}"))
        cfg, tok = run.loaded.cfg, run.loaded.tokenizers
        for split in args.splits:
            data = {src: split_pairs(cfg, split, tok, source=src) for src in ("kjv", "web")}
            for alpha in args.alphas:
                cfg.decode.length_penalty = alpha  # the translator reads the run's decode settings at each search
                row: dict = {"model": name, "split": split, "alpha": alpha}
                for src, pairs in data.items():
                    hyps = run.translate([p.src for p in pairs], beam=5)
                    b = sacrebleu.corpus_bleu(hyps, [[p.tgt for p in pairs]])
                    row[src] = {"bleu": round(b.score, 2), "bp": round(b.bp, 4), "ratio": round(b.sys_len / b.ref_len, 4)}
                    if src == "kjv":
                        row["kjv_by_length"] = {r["bucket"]: round(r["bleu"], 2) for r in bleu_by_length(
                            [p.src for p in pairs], hyps, [p.tgt for p in pairs])}
                row["web_over_kjv"] = round(row["web"]["bleu"] / row["kjv"]["bleu"], 4)
                line = json.dumps(row)
                print(line, flush=True)
                if out:
                    print(line, file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
