"""Metrics through sacrebleu, and BLEU by source length, against direct sacrebleu calls."""

import json
from pathlib import Path

import pytest
import sacrebleu

from attnlab.core.metrics import bleu_by_length, corpus_scores, is_length_rows
from attnlab.core.plotting import plot_bleu_by_length


def test_corpus_scores_equal_sacrebleu():
    hyps = ["the cat sat on the mat", "a dog barks", "hello there world"]
    refs = ["the cat sat on a mat", "the dog barks", "hello world"]
    s = corpus_scores(hyps, refs)
    assert s.bleu == sacrebleu.corpus_bleu(hyps, [refs]).score
    assert s.chrf == sacrebleu.corpus_chrf(hyps, [refs]).score
    assert s.bleu_signature.startswith("nrefs:1|case:mixed")


def test_bleu_by_length_buckets(tmp_path):
    src = ["one two", "w " * 15, "w " * 65, "a b c"]
    hyps = ["x y", "same words here", "good", "a b c d"]
    refs = ["x y", "same words here", "bad", "a b c d"]
    rows = bleu_by_length(src, hyps, refs)
    assert [(r["bucket"], r["sentences"]) for r in rows] == [("1-10", 2), ("11-20", 1), ("31+", 1)]
    assert rows[0]["bleu"] == sacrebleu.corpus_bleu(["x y", "a b c d"], [["x y", "a b c d"]]).score
    assert rows[2]["bleu"] == 0.0
    out = plot_bleu_by_length({"run": rows}, tmp_path / "p.png")
    assert out.stat().st_size > 1000
    assert is_length_rows(rows) and is_length_rows(json.loads(json.dumps(rows)))  # as written, as read back


@pytest.mark.parametrize("rows", [
    {"bucket": "1-10", "sentences": 2, "bleu": 1.0},  # a row, not a list
    [{"bucket": "1-10", "sentences": 2, "bleu": True}],  # a bool is not a score
    [{"bucket": "1-10", "sentences": "2", "bleu": 1.0}],
    [{"bucket": "1-10", "sentences": 2.0, "bleu": 1.0}],
    [{"bucket": 10, "sentences": 2, "bleu": 1.0}],
    [{"sentences": 2, "bleu": 1.0}],
    [["1-10", 2, 1.0]],
    None,
])
def test_rows_that_bleu_by_length_never_writes_are_refused(rows):
    assert not is_length_rows(rows)


def test_plot_attention_checks_labels(tmp_path):
    import numpy as np
    import pytest

    from attnlab.core.plotting import clean_piece, plot_attention

    w = np.eye(3)[:2]  # 2 outputs x 3 sources
    out = plot_attention(w, ["\u2581a", "b", "</s>"], ["\u2581x", "</s>"], tmp_path / "a.svg", title="t")
    assert out.read_text().count("<svg") == 1
    assert clean_piece("\u2581house") == "_house"
    assert clean_piece("<0x27>") == "'" and clean_piece("<0xC3>") == "<0xC3>"  # a byte of a longer character stays
    with pytest.raises(ValueError, match="do not match"):
        plot_attention(w, ["a", "b"], ["x", "y"], tmp_path / "b.png")


def test_plot_curves(tmp_path):
    from attnlab.core.plotting import plot_curves

    runs = {"a": [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0, "bleu": 1.0}], "b": [{"step": 1, "loss": 2.5}]}
    assert plot_curves(runs, tmp_path / "c.png").stat().st_size > 1000


def test_plot_curves_names_every_run_in_one_colour(tmp_path, monkeypatch):
    """Runs whose records lack the last panel's key (language models have no BLEU) still get a legend, with every
    run, and a run has one colour in every panel (each panel drew its own colour order before)."""
    from attnlab.core import plotting

    figures = []
    monkeypatch.setattr(plotting, "save_figure", lambda fig, path, dpi=120: figures.append(fig) or Path(path))
    runs = {"lm": [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0, "dev_loss": 2.5}],
            "mt": [{"step": 1, "dev_loss": 2.9}],  # no training loss: absent from the first panel
            "pair": [{"step": 1, "loss": 1.0, "dev_loss": 1.1}]}
    plotting.plot_curves(runs, tmp_path / "c.png")
    axes = figures[0].axes
    legend = next(ax.get_legend() for ax in axes if ax.get_legend() is not None)
    assert [t.get_text() for t in legend.get_texts()] == ["lm", "mt", "pair"]
    colours = {}
    for ax in axes:
        for line in ax.get_lines():
            colours.setdefault(line.get_label(), set()).add(line.get_color())
    assert all(len(c) == 1 for c in colours.values()) and len({next(iter(c)) for c in colours.values()}) == 3
