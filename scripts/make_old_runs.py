#!/usr/bin/env python
"""Makes tests/data/old_runs/: run directories trained by an older attnlab, and what that attnlab translated with
them, so that `tests/test_old_runs.py` can show that today's code still loads and translates them identically
(issue 48: a run made before the move into packages).

    git worktree add /tmp/old f0f0eb6
    PYTHONPATH=/tmp/old/src .venv/bin/python scripts/make_old_runs.py tests/data/old_runs

Everything goes through the command line of the attnlab on PYTHONPATH (`python -m attnlab train`, `translate`), whose
commit is recorded in expected.json. The data is the tests' synthetic word-reversal task (tests/conftest.py), the
models tiny (an SentencePiece unigram tokenizer of 300 pieces, a GRU with Bahdanau attention and a pre-norm
Transformer), trained 300 steps; only the best checkpoint's weights are kept (the optimizer's state is not needed to
translate), about 200 KB in all.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WORDS = {"red": "rojo", "house": "casa", "big": "grande", "cat": "gato", "dog": "perro", "old": "viejo",
         "door": "puerta", "green": "verde", "sees": "ve", "the": "el", "window": "ventana", "small": "chico"}
SENTENCES = ["the red house", "the big old dog sees the cat", "green door", "a small window sees the red cat",
             "house house house", "Zürich"]
MODELS = {
    "gru": '[model.rnn]\ncell = "gru"\nemb_dim = 16\nhidden_dim = 32\nattention = "bahdanau"\n',
    "transformer": 'family = "transformer"\n[model.transformer]\nd_model = 16\nh = 2\nd_ff = 32\nenc_layers = 1\n'
                   'dec_layers = 2\nnorm = "pre"\n',
}


def pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    vocab = sorted(WORDS)
    out = []
    for _ in range(n):
        words = [rng.choice(vocab) for _ in range(rng.randint(2, 6))]
        out.append((" ".join(words), " ".join(WORDS[w] for w in reversed(words))))
    return out


def attnlab(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "attnlab", *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"attnlab {' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}")
    return done.stdout


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/old_runs")
    if out.exists():
        raise SystemExit(f"{out}: exists")
    import attnlab as package  # the one on PYTHONPATH: its checkout's commit is recorded
    src = Path(package.__file__).resolve().parents[2]
    commit = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="old-runs-"))
    for name, n, seed in (("train", 1200, 0), ("dev", 30, 1), ("test", 30, 2)):
        (work / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs(n, seed)), encoding="utf-8")
    (work / "in.txt").write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    expected: dict = {"commit": commit, "sentences": SENTENCES, "runs": {}}
    out.mkdir(parents=True)
    for name, model in MODELS.items():
        config = work / f"{name}.toml"
        config.write_text(
            f'[data]\ncorpus = "files"\ntrain = ["{work}/train.tsv"]\ndev = ["{work}/dev.tsv"]\n'
            f'test = ["{work}/test.tsv"]\n[tokenizer]\nkind = "unigram"\nvocab_size = 300\njoint = true\n'
            f'[model]\n{model}\n[train]\nmax_steps = 300\nmax_tokens = 1000\nlr = 0.01\neval_every = 300\n'
            'log_every = 20\nseed = 3\nprogress = false\nkeep_last = 1\neval_max_sentences = 10\n'
            '[decode]\nbeam_size = 3\n', encoding="utf-8")
        attnlab("train", str(config), "--out", str(work / name))
        expected["runs"][name] = {f"beam{b}": attnlab("translate", str(work / name), str(work / "in.txt"), "--beam",
                                                      str(b)).splitlines() for b in (1, 3)}
        shutil.copytree(work / name, out / name, ignore=shutil.ignore_patterns("ctranslate2-*", "*.tmp",
                                                                           "*.train.safetensors"))
    (out / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
