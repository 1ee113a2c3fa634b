#!/usr/bin/env python
"""How sharp a translation run's attention is: teacher-forced on one verse (Ruth 1:3, KJV and RV 1909), the mean
entropy of each output step's attention weights (log S is uniform, 0 one-hot), the mean largest weight, and the
source position each step attends to most. A Luong model whose softmax saturated on one position shows entropy
near 0 and one position repeated (docs/results.md, "Trained models in the box").

    python benchmarks/attention_entropy.py RUN_DIR [RUN_DIR ...]     # a run directory or pretrained:NAME
"""

import argparse
import math

import torch

from attnlab.data.tokenizers import BOS_ID, EOS_ID
from attnlab.runs.workflow import load_run

SOURCE = "And Elimelech Naomi's husband died; and she was left, and her two sons."
TARGET = "Y murió Elimelech, marido de Noemi, y quedó ella con sus dos hijos."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args()
    for name in args.runs:
        run = load_run(name, "best", "cpu")
        model, tok = run.model, run.tokenizers
        src_ids = tok.src.encode(SOURCE) + [EOS_ID]
        src, lengths = torch.tensor([src_ids]), torch.tensor([len(src_ids)])
        entropies, largest, argmax = [], [], []
        with torch.no_grad():
            enc = model.encode(src, lengths)
            state = model.init_state(enc)
            for token in [BOS_ID] + tok.tgt.encode(TARGET):
                _, state, w = model.step(torch.tensor([token]), state, enc, need_weights=True)
                w = w[0]
                entropies.append(float(-(w * (w + 1e-12).log()).sum()))
                largest.append(float(w.max()))
                argmax.append(int(w.argmax()))
        print(f"{name} S= {len(src_ids)} uniform entropy {math.log(len(src_ids)):.2f} mean entropy "
              f"{sum(entropies) / len(entropies):.2f} mean max weight {sum(largest) / len(largest):.3f}")
        print("argmax", argmax)


if __name__ == "__main__":
    main()
