#!/usr/bin/env python
"""Decoding speed of this checkout's TransformerSeq2Seq against the same class from another version of
transformer.py, side by side in one process: the small config's dimensions, the same random weights, greedy and
beam 5 on the same 4 batches of 64 random source sentences (10-39 tokens), alternating which goes first, with the
default step limit (a random model runs to it: the most steps, so the KV cache's cost at its largest). Reports the
seconds of each and how many outputs are the same (all should be).

    git show COMMIT:src/attnlab/nn/transformer.py > /tmp/old_transformer.py
    python benchmarks/transformer_decode_ab.py /tmp/old_transformer.py [THREADS=2] [keep]

`keep`: glibc's malloc keeps freed memory in this process (`attnlab.kernels.memory.keep_freed_memory`, as `Translator`
does on the CPU); without it, malloc as it comes.
"""
import importlib.util
import json
import sys
import time

import torch

from attnlab.families.translation import load_experiment
from attnlab.kernels.memory import keep_freed_memory
from attnlab.decode.search import beam_search, greedy_search, max_output_length
from attnlab.nn.transformer import TransformerSeq2Seq
spec = importlib.util.spec_from_file_location("old_transformer", sys.argv[1])
old = importlib.util.module_from_spec(spec); sys.modules[spec.name] = old; spec.loader.exec_module(old)
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
keep = len(sys.argv) > 3 and sys.argv[3] == "keep" and keep_freed_memory()
cfg = load_experiment("configs/bible-transformer-small.toml").model.transformer
torch.manual_seed(0)
new_m = TransformerSeq2Seq(8000, 8000, cfg).eval()
old_m = old.TransformerSeq2Seq(8000, 8000, cfg).eval()
old_m.load_state_dict(new_m.state_dict())
g = torch.Generator().manual_seed(1)
batches = []
for _ in range(4):
    lengths = torch.randint(10, 40, (64,), generator=g)
    src = torch.randint(4, 8000, (64, int(lengths.max())), generator=g)
    src[torch.arange(src.size(1))[None, :] >= lengths[:, None]] = 0
    batches.append((src, lengths))
res = {}
for search, k in (("greedy", 1), ("beam", 5)):
    secs = {"new": 0.0, "old": 0.0}; outs = {"new": [], "old": []}
    for r, (src, lengths) in enumerate(batches):
        limit = max_output_length(lengths)
        for name in (("new", "old") if r % 2 == 0 else ("old", "new")):
            m = new_m if name == "new" else old_m
            t = time.perf_counter()
            hyps = greedy_search(m, src, lengths, limit) if k == 1 else beam_search(m, src, lengths, k, limit)
            secs[name] += time.perf_counter() - t
            outs[name] += [h[0].tokens for h in hyps]
    res[search] = {"new_s": round(secs["new"], 3), "old_s": round(secs["old"], 3),
                   "old_over_new": round(secs["old"] / secs["new"], 3),
                   "same_outputs": sum(a == b for a, b in zip(outs["new"], outs["old"])), "sentences": len(outs["new"])}
print(json.dumps({"threads": torch.get_num_threads(), "torch": torch.__version__, "keep_freed_memory": keep, **res}))
