#!/usr/bin/env python
"""How much BLEU falls from 11-20-word to 31+-word source verses, with a bootstrap interval. For each run: corpus
BLEU of the test verses in each source-length bucket (`core.metrics.bleu_by_length`'s buckets, KJV source) and
the fall 1 - BLEU(31+) / BLEU(11-20); then resamples of the verses within each bucket, with replacement (the same
resamples for every run, so that differences between runs are paired), give a 95% percentile interval for each
run's fall and for each run's fall minus the first run's.

    python benchmarks/length_fall.py RUN_DIR [RUN_DIR ...] [--first N] [--resamples 1000] [--seed 0] [--json OUT]

--first N: only the first N test verses (issue 46 measured its models on the first 400).

Reads each run's beam-search test translations (RUN_DIR/eval/test.hyp.txt, written by `attnlab evaluate RUN_DIR
--split test`, in the test split's order) and the Bible corpus' test split. The bucket BLEU computed here from
sentence statistics is checked against sacrebleu's corpus BLEU of the same verses before any resampling.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from sacrebleu.metrics import BLEU

from attnlab.core.metrics import LENGTH_BUCKETS, bucket_label, corpus_scores
from attnlab.data.bible import bible_split
from attnlab.runs.shipped import run_path

SHORT, LONG = "11-20", "31+"


def sentence_stats(hypotheses: list[str], references: list[str]) -> np.ndarray:
    """One row per sentence: the 4 matched n-gram counts, the 4 hypothesis n-gram counts, hypothesis and reference
    length (sacrebleu's 13a tokenization); corpus BLEU is a function of their column sums."""
    bleu = BLEU(effective_order=True)  # the counts are the same either way; this only silences sacrebleu's warning
    rows = []
    for hyp, ref in zip(hypotheses, references):
        s = bleu.sentence_score(hyp, [ref])
        rows.append([*s.counts, *s.totals, s.sys_len, s.ref_len])
    return np.asarray(rows, dtype=np.int64)


def bleu_of(summed: np.ndarray) -> float:
    """Corpus BLEU (sacrebleu's defaults: exp smoothing, no effective order) of summed sentence statistics."""
    return BLEU.compute_bleu(summed[:4].tolist(), summed[4:8].tolist(), int(summed[8]), int(summed[9])).score


def buckets(sources: list[str]) -> dict[str, np.ndarray]:
    """The test verses' indices in each source-length bucket."""
    lengths = np.asarray([len(s.split()) for s in sources])
    return {bucket_label(lo, hi): np.flatnonzero((lengths >= lo) & (lengths <= (hi or math.inf)))
            for lo, hi in LENGTH_BUCKETS}


def fall(stats: np.ndarray, short: np.ndarray, long: np.ndarray) -> float:
    """1 - BLEU(long) / BLEU(short); NaN where the short verses' BLEU is 0 (a fall from nothing)."""
    base = bleu_of(stats[short].sum(0))
    return 1 - bleu_of(stats[long].sum(0)) / base if base > 0 else math.nan


def interval(values: list[float]) -> list[float]:
    lo, hi = np.nanpercentile(values, [2.5, 97.5])
    return [round(float(lo), 4), round(float(hi), 4)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--first", type=int, default=0, help="only the first N test verses (default: all)")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    verses = bible_split("kjv", "test")[: args.first or None]
    sources, references = [p.src for p in verses], [p.tgt for p in verses]
    index = buckets(sources)
    if not len(index[SHORT]) or not len(index[LONG]):
        raise SystemExit(f"the {len(verses)} test verses hold {len(index[SHORT])} of {SHORT} words and "
                         f"{len(index[LONG])} of {LONG}: no fall to measure")
    if len(set(args.runs)) != len(args.runs):
        raise SystemExit("a run is named twice")
    stats = {}
    for r in args.runs:
        run = run_path(r)
        hyps = (run / "eval" / "test.hyp.txt").read_text(encoding="utf-8").split("\n")[: len(verses)]
        if len(hyps) != len(verses):  # (a file of fewer lines than the split: not the test split's translations)
            raise SystemExit(f"{run}: {len(hyps)} translations for {len(verses)} test verses")
        stats[r] = sentence_stats(hyps, references)
        for name in (SHORT, LONG):  # the sums give sacrebleu's corpus BLEU, or the resamples mean nothing
            direct = corpus_scores([hyps[i] for i in index[name]], [references[i] for i in index[name]]).bleu
            if not math.isclose(direct, bleu_of(stats[r][index[name]].sum(0)), rel_tol=1e-9, abs_tol=1e-9):
                raise SystemExit(f"{run}: bucket {name}: BLEU from sentence statistics differs from sacrebleu's")
    rng = np.random.default_rng(args.seed)
    draws = [(rng.choice(index[SHORT], len(index[SHORT])), rng.choice(index[LONG], len(index[LONG])))
             for _ in range(args.resamples)]
    first = args.runs[0]
    point = {r: fall(s, index[SHORT], index[LONG]) for r, s in stats.items()}
    falls = {r: [fall(s, short, long) for short, long in draws] for r, s in stats.items()}
    out = []
    for r, s in stats.items():
        record = {"run": r, "sentences": {SHORT: len(index[SHORT]), LONG: len(index[LONG])},
                  "bleu": {name: round(bleu_of(s[index[name]].sum(0)), 2) for name in (SHORT, LONG)},
                  "fall": round(point[r], 4), "fall_95": interval(falls[r]),
                  "verses": len(verses), "resamples": args.resamples, "seed": args.seed}
        if r != first:
            record[f"fall_minus_{Path(first).name}"] = round(point[r] - point[first], 4)
            record[f"fall_minus_{Path(first).name}_95"] = interval([a - b for a, b in zip(falls[r], falls[first])])
        out.append(record)
        print(json.dumps(record))
    if args.json:
        args.json.write_text("".join(json.dumps(o) + "\n" for o in out), encoding="utf-8")


if __name__ == "__main__":
    main()
