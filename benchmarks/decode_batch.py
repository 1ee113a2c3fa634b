#!/usr/bin/env python
"""Decoding time of a whole split against the decoding batch size (`decode.batch_size`, sentences per batch), on one
trained run: greedy and beam search at each batch size, the same sentences, timed after a warm-up, with BLEU/chrF
of each (a batch size must not change the output; the row says how many outputs equal the first batch size's).
On a GPU a search step costs about the same for 64 sentences as for 1,000, so the split's time is mostly the
number of batches times the steps of each. One JSON object is printed (and written with --json).

--reference-search FILE times another version of `attnlab.decode.search` side by side: FILE is that version's search.py
(e.g. `git show COMMIT:src/attnlab/decode/search.py > old_search.py`); each row then decodes with both, alternating
(reference first, then this checkout's), and reports the reference's seconds and whether its outputs are the same.

    python benchmarks/decode_batch.py RUN_DIR [--split test] [--device cuda] [--batch-sizes 64,256,1024]
        [--beam 5] [--amp none] [--warmup 64] [--reference-search OLD_SEARCH.py] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_json  # noqa: E402
from decode_amp import decode  # noqa: E402  (a split's search, timed)

from attnlab.core.metrics import corpus_scores  # noqa: E402
from attnlab.decode import translate  # noqa: E402
from attnlab.decode.translate import Translator  # noqa: E402
from attnlab.families.translation import split_pairs  # noqa: E402
from attnlab.runs.workflow import load_run  # noqa: E402


@contextlib.contextmanager
def searching_with(module):
    """`Translator` calls the greedy and beam search of `module` (another version of attnlab.decode.search) inside."""
    saved = translate.greedy_search, translate.beam_search
    translate.greedy_search, translate.beam_search = module.greedy_search, module.beam_search
    try:
        yield
    finally:
        translate.greedy_search, translate.beam_search = saved


def load_search(path: Path):
    spec = importlib.util.spec_from_file_location("reference_search", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


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
    ap.add_argument("--reference-search", type=Path, help="another version's search.py, timed side by side")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    reference = load_search(args.reference_search) if args.reference_search else None
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
            row = {"batch_size": size, "search": search}
            if reference is not None:
                with searching_with(reference):
                    decode(translator, sources[:args.warmup], k)
                    ref_hyps, ref_seconds = decode(translator, sources, k)
            decode(translator, sources[:args.warmup], k)
            hyps, seconds = decode(translator, sources, k)  # texts back on the host: the GPU's work is done
            first.setdefault(search, hyps)
            s = corpus_scores(hyps, refs)
            row.update({"seconds": round(seconds, 3), "sentences_per_s": round(len(pairs) / seconds, 1),
                        "bleu": round(s.bleu, 2), "chrf": round(s.chrf, 2),
                        "same_as_first": sum(a == b for a, b in zip(hyps, first[search]))})
            if reference is not None:
                row.update({"reference_seconds": round(ref_seconds, 3), "speedup": round(ref_seconds / seconds, 3),
                            "same_as_reference": sum(a == b for a, b in zip(hyps, ref_hyps))})
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
