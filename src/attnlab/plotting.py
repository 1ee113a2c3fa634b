"""Plots as pure functions of numbers and labels (never of models): they take arrays, write PNG/SVG."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402


def plot_bleu_by_length(runs: Mapping[str, Sequence[dict]], path: Path | str, title: str = "") -> Path:
    """BLEU per source-length bucket, one line per run.

    Args:
        runs: {run name: rows of attnlab.metrics.bleu_by_length} (each row: bucket, sentences, bleu).
        path: output file; the suffix (.png, .svg, .pdf) picks the format.
    """
    path = Path(path)
    fig, ax = plt.subplots(figsize=(7, 4))
    buckets: list[str] = []
    for rows in runs.values():
        buckets += [r["bucket"] for r in rows if r["bucket"] not in buckets]
    for name, rows in runs.items():
        by_bucket = {r["bucket"]: r["bleu"] for r in rows}
        xs = [i for i, b in enumerate(buckets) if b in by_bucket]
        ax.plot(xs, [by_bucket[buckets[i]] for i in xs], marker="o", label=name)
    counts = {}
    for rows in runs.values():
        for r in rows:
            counts.setdefault(r["bucket"], r["sentences"])
    ax.set_xticks(range(len(buckets)), [f"{b}\n({counts[b]})" for b in buckets])
    ax.set_xlabel("source length in words (sentences)")
    ax.set_ylabel("BLEU")
    ax.set_title(title or "BLEU by source sentence length")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
