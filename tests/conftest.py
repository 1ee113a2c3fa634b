"""Shared fixtures: a tiny synthetic parallel corpus that models can learn in seconds."""

import random

import pytest

WORDS = {"the": "la", "house": "casa", "is": "es", "big": "grande", "small": "pequeña", "red": "roja",
         "a": "una", "cat": "gata", "sees": "ve", "and": "y", "old": "vieja", "my": "mi", "door": "puerta",
         "green": "verde", "window": "ventana", "opens": "abre"}


def make_pairs(n: int, seed: int = 0, max_words: int = 7) -> list[tuple[str, str]]:
    """Word-for-word 'translations' in reversed order: learnable only with some alignment."""
    rng = random.Random(seed)
    vocab = sorted(WORDS)
    pairs = []
    for _ in range(n):
        words = [rng.choice(vocab) for _ in range(rng.randint(2, max_words))]
        pairs.append((" ".join(words), " ".join(WORDS[w] for w in reversed(words))))
    return pairs


@pytest.fixture(scope="session")
def tiny_tsv(tmp_path_factory):
    """train.tsv / dev.tsv / test.tsv of the synthetic task; returns the directory."""
    d = tmp_path_factory.mktemp("tiny")
    for name, n, seed in (("train", 1500, 0), ("dev", 40, 1), ("test", 40, 2)):
        (d / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in make_pairs(n, seed)), encoding="utf-8")
    return d
