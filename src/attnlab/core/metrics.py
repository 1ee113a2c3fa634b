"""Translation metrics through sacrebleu (BLEU, chrF, with their signatures), and BLEU by source length."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sacrebleu.metrics import BLEU, CHRF

from attnlab.core.errors import AttnlabError

# source-length buckets in words: 1-10, 11-20, 21-30, 31+ (the Bible's test split has 160 verses over 30 words, 27
# over 40: finer buckets above 30 held 2 to 21 verses, too few for a corpus BLEU)
LENGTH_BUCKETS = ((1, 10), (11, 20), (21, 30), (31, None))


@dataclass
class Scores:
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    """Corpus BLEU and chrF on detokenized text (sacrebleu defaults: 13a tokenization, chrF n=6, beta=2)."""
    if len(hypotheses) != len(references):
        raise AttnlabError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(list(hypotheses), [list(references)])
    c = chrf.corpus_score(list(hypotheses), [list(references)])
    return Scores(b.score, c.score, str(bleu.get_signature()), str(chrf.get_signature()))


def sentence_chrf(hypothesis: str, reference: str) -> float:
    """chrF of one sentence (sacrebleu's sentence_score, the corpus defaults)."""
    return CHRF().sentence_score(hypothesis, [reference]).score


def bucket_label(lo: int, hi: int | None) -> str:
    return f"{lo}-{hi}" if hi is not None else f"{lo}+"


def bleu_by_length(sources: Sequence[str], hypotheses: Sequence[str], references: Sequence[str]
                   ) -> list[dict]:
    """Corpus BLEU of the sentences in each source-length bucket (words split on whitespace).

    Returns:
        one row per non-empty bucket: {"bucket": "11-20", "sentences": n, "bleu": score, "chrf": score}.
    """
    rows = []
    for lo, hi in LENGTH_BUCKETS:
        idx = [i for i, s in enumerate(sources) if lo <= len(s.split()) and (hi is None or len(s.split()) <= hi)]
        if not idx:
            continue
        s = corpus_scores([hypotheses[i] for i in idx], [references[i] for i in idx])
        rows.append({"bucket": bucket_label(lo, hi), "sentences": len(idx), "bleu": s.bleu, "chrf": s.chrf})
    return rows


def is_score(value: object) -> bool:
    """Whether a value read back from JSON is a score: an int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_length_rows(rows: object) -> bool:
    """Whether `rows` has the form `bleu_by_length` returns, as read back from a JSON file someone may have edited:
    a list of {"bucket": str, "sentences": int, "bleu": score, ...}."""
    return isinstance(rows, list) and all(
        isinstance(r, dict) and isinstance(r.get("bucket"), str) and type(r.get("sentences")) is int
        and is_score(r.get("bleu")) for r in rows)


def format_length_table(rows: list[dict]) -> str:
    lines = [f"{'src words':>9}  {'sents':>5}  {'BLEU':>6}  {'chrF':>6}"]
    lines += [f"{r['bucket']:>9}  {r['sentences']:>5}  {r['bleu']:>6.2f}  {r['chrf']:>6.2f}" for r in rows]
    return "\n".join(lines)
