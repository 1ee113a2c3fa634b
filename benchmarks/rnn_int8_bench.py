#!/usr/bin/env python
"""Dynamic int8 quantization of an RNN translation run's linear and recurrent layers
(`torch.ao.quantization.quantize_dynamic`), side by side with the float32 model in one process: beam-5 (and
greedy) BLEU/chrF and sentences/s on a split, on the same CPU threads. CTranslate2 has no RNN models; this is the
path that could make them faster on a CPU.

    python benchmarks/rnn_int8_bench.py RUN_DIR [--threads 2] [--json docs/results/issue12_rnn_int8.json]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch
from torch import nn

from attnlab.core.metrics import corpus_scores
from attnlab.decode.translate import Translator
from attnlab.families.translation import split_pairs
from attnlab.runs.workflow import load_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_json  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--split", default="test")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    run = load_run(args.run_dir, "best", "cpu", ability="translate")
    pairs = split_pairs(run.cfg, args.split, run.tokenizers)
    src, refs = [p.src for p in pairs], [p.tgt for p in pairs]
    models = {"float32": run.model,
              "dynamic int8": torch.ao.quantization.quantize_dynamic(copy.deepcopy(run.model),
                                                                     {nn.Linear, nn.GRU, nn.LSTM}, torch.qint8)}
    result: dict = {"run": str(args.run_dir), "split": args.split, "sentences": len(src), "threads": args.threads,
                    "torch": torch.__version__, "models": {}}
    for name, model in models.items():
        translator = Translator(model, run.tokenizers, run.cfg.decode, "cpu")
        row = {}
        for beam in (1, 5):
            t0 = time.perf_counter()
            hyps = [t[0].text for t in translator.translate(src, beam_size=beam)]
            seconds = time.perf_counter() - t0
            s = corpus_scores(hyps, refs)
            row[f"beam{beam}"] = {"bleu": round(s.bleu, 2), "chrf": round(s.chrf, 2),
                                  "sentences_per_s": round(len(src) / seconds, 1)}
        result["models"][name] = row
        print(name, row, flush=True)
    for beam in (1, 5):
        result[f"speedup_beam{beam}"] = round(result["models"]["dynamic int8"][f"beam{beam}"]["sentences_per_s"] /
                                              result["models"]["float32"][f"beam{beam}"]["sentences_per_s"], 2)
    print(write_json(args.json, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
