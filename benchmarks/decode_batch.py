#!/usr/bin/env python
"""Decoding time of a whole split against the decoding batch size (`decode.batch_size`, sentences per batch), on one
trained run: greedy and beam search at each batch size, the same sentences, timed after a warm-up, with BLEU/chrF
of each (a batch size must not change the output; the row says how many outputs equal the first batch size's).
On a GPU a search step costs about the same for 64 sentences as for 1,000, so the split's time is mostly the
number of batches times the steps of each. One JSON object is printed (and written with --json).

    python benchmarks/decode_batch.py RUN_DIR [--split test] [--device cuda] [--batch-sizes 64,256,1024]
        [--beam 5] [--amp none] [--warmup 64] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_amp import decode  # noqa: E402  (a split's search, timed)

from attnlab.experiment import split_pairs  # noqa: E402
from attnlab.metrics import corpus_scores  # noqa: E402
from attnlab.translate import Translator  # noqa: E402
from attnlab.workflow import load_run  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--split", default="test")
    ap.add_argument("--checkpoint", default="best")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-sizes", default="64,256,1024", help="comma-separated decode.batch_size values")
    ap.add_argument("--beam", type=int, default=0, help="beam size (default: the run's decode.beam_size)")
    ap.add_argument("--amp", default="none", choices=("none", "auto", "bf16"))
    ap.add_argument("--warmup", type=int, default=64, help="decode the first N sentences once before timing")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    run = load_run(args.run_dir, args.checkpoint, args.device)
    pairs = split_pairs(run.cfg, args.split, run.tokenizers, 0)
    sources, refs = [p.src for p in pairs], [p.tgt for p in pairs]
    beam = args.beam or run.cfg.decode.beam_size
    sizes = [int(x) for x in args.batch_sizes.split(",")]
    out: dict = {"run": str(args.run_dir), "split": args.split, "sentences": len(pairs), "beam_size": beam,
                 "amp": args.amp, "device": str(run.device), "torch": torch.__version__,
                 "gpu": torch.cuda.get_device_name(run.device) if run.device.type == "cuda" else None, "rows": []}
    first: dict[str, list[str]] = {}
    for size in sizes:
        translator = Translator(run.model, run.tokenizers,
                                dataclasses.replace(run.cfg.decode, batch_size=size, amp=args.amp), run.device)
        for search, k in (("greedy", 1), ("beam", beam)):
            decode(translator, sources[:args.warmup], k)
            hyps, seconds = decode(translator, sources, k)  # texts back on the host: the GPU's work is done
            first.setdefault(search, hyps)
            s = corpus_scores(hyps, refs)
            row = {"batch_size": size, "search": search, "seconds": round(seconds, 3),
                   "sentences_per_s": round(len(pairs) / seconds, 1), "bleu": round(s.bleu, 2),
                   "chrf": round(s.chrf, 2), "same_as_first": sum(a == b for a, b in zip(hyps, first[search]))}
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
    text = json.dumps(out, indent=1, ensure_ascii=False)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
