"""benchmarks/length_fall.py (issue 46): corpus BLEU rebuilt from summed sentence statistics must equal sacrebleu's
corpus BLEU of the same sentences (the bootstrap resamples those sums), and the resampling is stratified by bucket
and paired across runs."""

import random

import numpy as np
import pytest
from sacrebleu.metrics import BLEU

from conftest import benchmark_module

lf = benchmark_module("length_fall")

WORDS = "y dijo Dios sea la luz fue hecha en el principio creó los cielos tierra".split()


def sentences(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 25))) + rng.choice([".", "", " ,"])
            for _ in range(n)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_summed_sentence_statistics_give_sacrebleus_corpus_bleu(seed):
    rng = random.Random(seed)
    refs = sentences(rng, 60)
    hyps = [r if rng.random() < 0.3 else h for r, h in zip(refs, sentences(rng, 60))]
    stats = lf.sentence_stats(hyps, refs)
    for idx in (np.arange(60), np.arange(0, 60, 3), np.array([5, 5, 5, 7, 9, 9])):  # repeats: a resample
        want = BLEU().corpus_score([hyps[i] for i in idx], [[refs[i] for i in idx]]).score
        assert lf.bleu_of(stats[idx].sum(0)) == pytest.approx(want, abs=1e-9)


def test_buckets_follow_the_source_length_in_words():
    sources = ["a " * 5, "a " * 11, "a " * 20, "a " * 21, "a " * 31, "a " * 80, "a " * 10]
    got = {k: v.tolist() for k, v in lf.buckets(sources).items()}
    assert got == {"1-10": [0, 6], "11-20": [1, 2], "21-30": [3], "31+": [4, 5]}


def test_fall_is_one_minus_the_ratio_of_the_buckets_bleu():
    rng = random.Random(3)
    refs = sentences(rng, 40)
    hyps = refs[:20] + sentences(rng, 20)  # the first half right, the second mostly wrong
    stats = lf.sentence_stats(hyps, refs)
    short, long = np.arange(20), np.arange(20, 40)
    assert lf.fall(stats, short, long) == pytest.approx(1 - lf.bleu_of(stats[long].sum(0)) / 100, abs=1e-9)
    assert lf.fall(stats, short, long) > 0.5
    if lf.bleu_of(stats[long].sum(0)) > 0:
        assert lf.fall(stats, long, short) < 0
    zero = lf.sentence_stats(["x"] * 3, refs[:3])
    assert np.isnan(lf.fall(zero, np.arange(3), np.arange(3)))  # no BLEU to fall from


def test_interval_is_the_middle_95_percent_of_the_defined_falls():
    assert lf.interval(list(np.linspace(0, 1, 1001))) == [0.025, 0.975]
    assert lf.interval(list(np.linspace(0, 1, 1001)) + [float("nan")] * 5) == [0.025, 0.975]
