#!/usr/bin/env python
"""attnlab's PyTorch search vs its CTranslate2 export (float32 and int8) on a split, side by side in one process:
greedy parity (identical outputs), BLEU/chrF with beam 5 and greedy, sentences/s.

    python benchmarks/ct2_bench.py RUN_DIR [--split test] [--threads 2] [--json docs/results/issue12_ct2.json]

Every engine decodes the same sentences with the run's decode settings (batches of decode.batch_size sentences,
sorted by length) on the same number of CPU threads; each timing is the best of --repeat runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from attnlab.core.metrics import corpus_scores
from attnlab.decode.translate import CTranslate2Translator, Translator
from attnlab.families.translation import split_pairs
from attnlab.runs.workflow import export_run
from attnlab.runs.workflow import load_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_json  # noqa: E402


def timed(translator, sentences: list[str], beam: int, repeat: int) -> tuple[list[str], float]:
    """The outputs and the best wall time in seconds of `repeat` decodes of the sentences."""
    best, hyps = float("inf"), []
    for _ in range(repeat):
        t0 = time.perf_counter()
        hyps = [t[0].text for t in translator.translate(sentences, beam_size=beam)]
        best = min(best, time.perf_counter() - t0)
    return hyps, best


def engines(run_dir: Path, split: str, threads: int) -> tuple[dict, list[str], list[str]]:
    """attnlab's search of the run's best checkpoint on the CPU and its CTranslate2 exports (float32, int8; made by
    `attnlab export` where missing), with the run's decode settings on `threads` threads; and the split's sources
    and references."""
    run = load_run(run_dir, "best", "cpu", ability="translate")
    ours = Translator(run.model, run.tokenizers, run.cfg.decode, "cpu")
    pairs = split_pairs(run.cfg, split, run.tokenizers)
    found = {"attnlab eager (PyTorch)": ours}
    for q in ("float32", "int8"):
        out = export_run(run_dir, run_dir / f"ctranslate2-best-{q}", q)
        found[f"CTranslate2 {q}"] = CTranslate2Translator(out, ours.tokenizers, ours.decode, threads=threads)
    return found, [p.src for p in pairs], [p.tgt for p in pairs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--split", default="test")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    found, src, refs = engines(args.run_dir, args.split, args.threads)
    result: dict = {"run": str(args.run_dir), "split": args.split, "sentences": len(src), "threads": args.threads,
                    "torch": torch.__version__, "engines": {}}
    outputs: dict = {}
    for name, engine in found.items():
        row = {}
        for beam in (1, 5):
            hyps, seconds = timed(engine, src, beam, args.repeat)
            speed = len(src) / seconds
            s = corpus_scores(hyps, refs)
            row[f"beam{beam}"] = {"bleu": round(s.bleu, 2), "chrf": round(s.chrf, 2),
                                  "sentences_per_s": round(speed, 1)}
            outputs[(name, beam)] = hyps
        result["engines"][name] = row
        print(name, row, flush=True)
    base = "attnlab eager (PyTorch)"
    for name in found:
        if name == base:
            continue
        for beam in (1, 5):
            same = [a == b for a, b in zip(outputs[(base, beam)], outputs[(name, beam)])]
            result["engines"][name][f"beam{beam}"]["identical_to_attnlab"] = round(sum(same) / len(same), 4)
            result["engines"][name][f"beam{beam}"]["speedup_vs_attnlab"] = round(
                result["engines"][name][f"beam{beam}"]["sentences_per_s"] /
                result["engines"][base][f"beam{beam}"]["sentences_per_s"], 2)
        diffs = [{"sentence": i, "src": src[i], "attnlab": a, name: b}
                 for i, (a, b) in enumerate(zip(outputs[(base, 1)], outputs[(name, 1)])) if a != b]
        result["engines"][name]["greedy_differences"] = diffs[:20]
    print(write_json(args.json, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
