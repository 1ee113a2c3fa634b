#!/usr/bin/env python
"""Makes the trained models that ship with attnlab (src/attnlab/trained/NAME) from trained runs.

    python scripts/pack_pretrained.py [--runs runs/pretrained] [--quantization int8] [NAME ...]

Each NAME (bahdanau, luong, noattn, transformer) is first trained with its packaged config:
`attnlab train pretrained/NAME --out runs/pretrained/NAME` (configs/pretrained/NAME.toml: English KJV + WEB to
Spanish). Then, for each: the compact run (`attnlab.app.shipped.compact_run`) goes to RUNS/NAME-QUANTIZATION, is
evaluated there on the 918 test verses from both English renderings (beam 5: the scores of the weights as they ship,
not of the float32 run), and is written again with those scores in its card into the package. The float32 run is
evaluated too, so the cost of the quantization is on record (printed as JSON lines, one per evaluation).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from attnlab.app.shipped import compact_run, trained_folder
from attnlab.app.workflow import evaluate, load_run
from attnlab.families.base import EvalOptions

TITLES = {
    "bahdanau": "Bahdanau (additive) attention, bidirectional GRU encoder-decoder",
    "luong": "Luong (general) attention with input feeding, GRU encoder-decoder",
    "noattn": "GRU encoder-decoder without attention (Cho et al. 2014)",
    "transformer": "Transformer encoder-decoder, small (3+3 layers, d_model 256, pre-norm)",
}
SOURCES = ("kjv", "web")


def scores(run_dir: Path, label: str) -> None:
    for source in SOURCES:
        t0 = time.perf_counter()
        _, r = evaluate(run_dir, "test", "best", "cpu", EvalOptions(source=source))
        print(json.dumps({"model": label, "source": source, "bleu": round(r["bleu"], 2), "chrf": round(r["chrf"], 2),
                          "sentences": r["sentences"], "seconds": round(time.perf_counter() - t0, 1)}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", default=sorted(TITLES))
    ap.add_argument("--runs", type=Path, default=Path("runs/pretrained"))
    ap.add_argument("--quantization", default="int8")
    ap.add_argument("--skip-float32", action="store_true", help="do not evaluate the float32 runs")
    args = ap.parse_args()
    for name in args.names:
        run_dir = args.runs / name
        if not args.skip_float32:
            scores(run_dir, f"{name} float32")
        compact = args.runs / f"{name}-{args.quantization}"
        shutil.rmtree(compact, ignore_errors=True)
        compact_run(load_run(run_dir), compact, args.quantization, TITLES[name], name)
        scores(compact, f"{name} {args.quantization}")
        out = compact_run(load_run(compact), trained_folder() / name, args.quantization, TITLES[name], name)
        print(json.dumps({"model": name, "packed": str(out),
                          "bytes": sum(p.stat().st_size for p in out.rglob("*") if p.is_file())}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
