#!/usr/bin/env python
"""Decoding speed of a trained RNN run with this checkout's attention core against the same weights with the
attention classes of another version of attention.py, side by side in one process: the run's test verses (918 for
the Bible), greedy and beam 5, in 4 chunks, alternating which goes first. Reports the seconds of each and how many
outputs are the same.

    git show COMMIT:src/attnlab/nn/attention.py > /tmp/old_attention.py
    python benchmarks/rnn_decode_ab.py RUN_DIR /tmp/old_attention.py [--threads 2] [--json OUT.jsonl]
"""
import argparse
import importlib.util
import json
import sys
import time

import torch

import attnlab
from attnlab.nn import attention
from attnlab.families.translation import prepare_corpus

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("run_dir")
ap.add_argument("old_attention", help="an older attention.py (git show COMMIT:src/attnlab/nn/attention.py > FILE)")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--json", help="append the result as one JSON line to this file")
args = ap.parse_args()
torch.set_num_threads(args.threads)
spec = importlib.util.spec_from_file_location("old_attention", args.old_attention)
old = importlib.util.module_from_spec(spec); sys.modules[spec.name] = old; spec.loader.exec_module(old)

runs = {"new": attnlab.load(args.run_dir), "old": attnlab.load(args.run_dir)}
swapped = 0
for m in runs["old"].model.modules():  # the same weights, the old module's forward code
    for name in ("Attention", "AdditiveScore", "MultiHeadAttention", "LearnedQueryAttention"):
        if type(m) is getattr(attention, name):
            m.__class__ = getattr(old, name); swapped += 1
assert swapped, "the run's model has no attention module to swap"
test = [p.src for p in prepare_corpus(runs["new"].config).pairs("test")]
chunks = [test[i::4] for i in range(4)]
res = {"run": args.run_dir, "sentences": len(test), "swapped_modules": swapped}
for search, k in (("greedy", 1), ("beam", 5)):
    runs["new"].translate(chunks[0][:8], beam=k); runs["old"].translate(chunks[0][:8], beam=k)  # warm-up
    secs = {"new": 0.0, "old": 0.0}; outs = {"new": [], "old": []}
    for r, chunk in enumerate(chunks):
        for name in (("new", "old") if r % 2 == 0 else ("old", "new")):
            t = time.perf_counter()
            outs[name] += runs[name].translate(chunk, beam=k)
            secs[name] += time.perf_counter() - t
    res[search] = {"new_s": round(secs["new"], 3), "old_s": round(secs["old"], 3),
                   "old_over_new": round(secs["old"] / secs["new"], 3),
                   "same_outputs": sum(a == b for a, b in zip(outs["new"], outs["old"]))}
line = json.dumps({"threads": torch.get_num_threads(), "torch": torch.__version__, **res})
print(line)
if args.json:
    with open(args.json, "a", encoding="utf-8") as f:
        f.write(line + "\n")
