"""Plots as pure functions of numbers and labels (never of models): they take arrays, write PNG/SVG."""

from __future__ import annotations

import io
import re
import textwrap
from pathlib import Path
from typing import Mapping, Sequence

from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write_bytes


# The browser explorer's palette (static/state.js), so a file and the page it was drawn from look alike: weights on a
# white-to-blue ramp, signed values (the neuron view's q, k, q x k) red-white-blue, one colour per head.
ATTENTION_BLUE = "#0d47a1"
SIGNED_COLORS = ("#b2182b", "#ffffff", "#2166ac")
HEAD_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
               "#7f7f7f", "#393b79", "#637939")


def _pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display). Imported when a plot is drawn: it costs
    about half a second, which every `attnlab` command (even --help) would pay at start if imported above. Where
    pyplot is already in use (a notebook's inline backend) its backend stays: switching it would stop the
    notebook's own figures from showing, and the figures drawn here are saved and closed, never shown."""
    import sys

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def attention_cmap():
    """White (weight 0) to the explorer's blue (the largest weight shown)."""
    from matplotlib.colors import LinearSegmentedColormap  # matplotlib: imported when needed (_pyplot)

    return LinearSegmentedColormap.from_list("attnlab", ["#ffffff", ATTENTION_BLUE])


def signed_cmap():
    """Negative red, zero white, positive blue: the explorer's neuron-view colours."""
    from matplotlib.colors import LinearSegmentedColormap  # matplotlib: imported when needed (_pyplot)

    return LinearSegmentedColormap.from_list("attnlab_signed", list(SIGNED_COLORS))


def plot_bleu_by_length(runs: Mapping[str, Sequence[dict]], path: Path | str, title: str = "") -> Path:
    """BLEU per source-length bucket, one line per run.

    Args:
        runs: {run name: rows of attnlab.core.metrics.bleu_by_length} (each row: bucket, sentences, bleu).
        path: output file; the suffix (.png, .svg, .pdf) picks the format.
    """
    path = Path(path)
    fig, ax = _pyplot().subplots(figsize=(7, 4))
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
    return save_figure(fig, path, dpi=120)


BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte fallback: one UTF-8 byte of an unknown char


def piece_byte(piece: str) -> int | None:
    """The byte a byte-fallback piece ("<0x27>") stands for; None for any other piece."""
    m = BYTE_PIECE.fullmatch(piece)
    return int(m.group(1), 16) if m else None


def clean_piece(piece: str) -> str:
    """A readable label for a subword piece: the sentencepiece word mark becomes a leading space marker, and a
    byte-fallback piece of a printable ASCII character is that character ("<0x27>" -> "'"; the bytes of a longer
    UTF-8 character stay as they are, since one alone is no character)."""
    if piece.isspace():
        return "\u2423"  # a character-level space, visible
    byte = piece_byte(piece)
    if byte is not None and 0x21 <= byte <= 0x7E:
        return chr(byte)
    return piece.replace("\u2581", "_")


def plot_attention(weights, src_labels: Sequence[str], tgt_labels: Sequence[str], path: Path | str,
                   title: str = "", ax=None, xlabel: str = "source", ylabel: str = "output", vmax: float | None = None):
    """Heatmap of attention weights: one row per target token, one column per source token, white (0) to blue
    (vmax; default the largest weight), the browser explorer's palette.

    Args:
        weights: (T, S) array-like, rows = target tokens, columns = source tokens.
        src_labels: S labels. tgt_labels: T labels.
        path: .png / .svg / .pdf (ignored when ax is given).
        ax: draw into this matplotlib Axes (for grids of heads) instead of a new figure.
        xlabel / ylabel: axis titles (e.g. the two sentences of a pair instead of source / output).
        vmax: the weight drawn darkest (a shared scale for a grid of heads).
    """
    import numpy as np

    w = np.asarray(weights, dtype=float)
    if w.shape != (len(tgt_labels), len(src_labels)):
        raise ValueError(f"weights {w.shape} do not match {len(tgt_labels)} target x {len(src_labels)} source labels")
    own = ax is None
    if own:
        fig, ax = _pyplot().subplots(figsize=(max(4.0, 0.32 * w.shape[1] + 2), max(3.0, 0.3 * w.shape[0] + 1.5)))
    top = max(float(w.max()) if vmax is None else vmax, 1e-9)
    im = ax.imshow(w, cmap=attention_cmap(), vmin=0.0, vmax=top, aspect="auto")
    ax.set_xticks(range(w.shape[1]), [clean_piece(s) for s in src_labels], rotation=90, fontsize=8)
    ax.set_yticks(range(w.shape[0]), [clean_piece(t) for t in tgt_labels], fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title("\n".join(textwrap.wrap(title, width=max(40, 6 * w.shape[1]))), fontsize=9)
    if own:
        fig.colorbar(im, ax=ax, fraction=0.03, label="attention weight")
        fig.tight_layout()
        return save_figure(fig, path, dpi=120)
    return im


def plot_curves(runs: Mapping[str, Sequence[dict]], path: Path | str, keys: Sequence[str] = ("loss", "dev_loss", "bleu")
                ) -> Path:
    """Training curves from metrics.jsonl records, one panel per key, one line per run.

    Args:
        runs: {run name: records with "step" and some of `keys`}.
    """
    path = Path(path)
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.4), squeeze=False)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colours = {name: cycle[i % len(cycle)] for i, name in enumerate(runs)}  # a run has one colour in every panel
    for ax, key in zip(axes[0], keys):
        for name, records in runs.items():
            pts = [(r["step"], r[key]) for r in records if key in r]
            if pts:
                ax.plot(*zip(*pts), marker="." if len(pts) < 40 else None, label=name, color=colours[name])
        ax.set_xlabel("step")
        ax.set_title({"loss": "train loss (label-smoothed)", "dev_loss": "dev loss", "bleu": "dev BLEU (greedy)",
                      "chrf": "dev chrF", "dev_ppl": "dev perplexity"}.get(key, key), fontsize=10)
        ax.grid(alpha=0.3)
    handles = {line.get_label(): line for ax in axes[0] for line in ax.get_lines()}  # every run that has a curve
    if handles:
        axes[0][0].legend([handles[n] for n in runs if n in handles], [n for n in runs if n in handles], fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


def plot_attention_grid(weights, src_labels: Sequence[str], tgt_labels: Sequence[str], path: Path | str,
                        titles: Sequence[str], ncols: int = 4, suptitle: str = "", xlabel: str = "source",
                        ylabel: str = "output") -> Path:
    """Several heatmaps (e.g. one per head) on one figure, on one shared scale (0 to the largest weight of all)
    with one colour bar. weights: (K, T, S) with K titles; xlabel / ylabel: the axes' names."""
    import numpy as np

    w = np.asarray(weights, dtype=float)
    k = w.shape[0]
    ncols = min(ncols, k)
    nrows = (k + ncols - 1) // ncols
    cell_w, cell_h = max(3.0, 0.25 * w.shape[2] + 1.5), max(2.5, 0.22 * w.shape[1] + 1.2)
    fig, axes = _pyplot().subplots(nrows, ncols, figsize=(cell_w * ncols + 1, cell_h * nrows), squeeze=False,
                                   layout="constrained")
    vmax = float(w.max())
    for i, ax in enumerate(axes.flat):
        if i < k:
            im = plot_attention(w[i], src_labels, tgt_labels, path, title=titles[i], ax=ax, xlabel=xlabel,
                                ylabel=ylabel, vmax=vmax)
        else:
            ax.axis("off")
    fig.colorbar(im, ax=axes.ravel().tolist(), fraction=0.02, label="attention weight (shared scale)")
    if suptitle:
        fig.suptitle("\n".join(textwrap.wrap(suptitle, width=40 * ncols)), fontsize=10)
    return save_figure(fig, path, dpi=110)


def supported_formats() -> list[str]:
    """The file formats matplotlib's Agg backend (the one attnlab draws with) writes: png, svg, pdf, jpg, ..."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # matplotlib: imported when needed (_pyplot)

    return sorted(FigureCanvasAgg.get_supported_filetypes())


def image_format(path: Path | str) -> str:
    """The format an output path's suffix asks for (no suffix: png); a format matplotlib does not write is an
    AttnlabError naming the path and the formats it does."""
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    if fmt not in supported_formats():
        raise AttnlabError(f"{path}: matplotlib cannot write {fmt!r} files; the suffix picks the format, one of "
                           f"{', '.join(supported_formats())}")
    return fmt


def save_figure(fig, path: Path | str, dpi: int = 120) -> Path:
    """Writes a figure atomically in the format of the path's suffix (png, svg, pdf; `image_format`) and closes
    it; a symlink at `path` is replaced, never followed."""
    path = Path(path)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, dpi=dpi, format=image_format(path))
    except (RuntimeError, OSError) as e:  # e.g. pgf without a TeX installation
        raise AttnlabError(f"{path}: matplotlib cannot write it ({str(e).splitlines()[0] if str(e) else e!r})") \
            from None
    finally:
        _pyplot().close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path


def plot_head_view(weights, row_labels: Sequence[str], col_labels: Sequence[str], path: Path | str,
                   head_names: Sequence[str], title: str = "", row_name: str = "queries",
                   col_name: str = "keys") -> Path:
    """The head view (bertviz's): row tokens on the left, column tokens on the right, a line per pair and head
    with the weight as its opacity, one colour per head (the explorer's colours).

    Args:
        weights: (K, R, C) array-like, K heads (or layers) to draw, each (rows, columns).
        head_names: K legend entries.
        row_name / col_name: what the two sides are (e.g. "target" / "source"), written above them.
    """
    import numpy as np

    w = np.asarray(weights, dtype=float)
    if w.ndim != 3 or w.shape[1:] != (len(row_labels), len(col_labels)) or w.shape[0] != len(head_names):
        raise ValueError(f"weights {w.shape} do not match {len(head_names)} heads x {len(row_labels)} rows x "
                         f"{len(col_labels)} columns")
    n = max(len(row_labels), len(col_labels))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, max(3.0, 0.22 * n + 1.2)))
    def colors(h: int) -> str:
        return HEAD_COLORS[h % len(HEAD_COLORS)]

    for h in range(w.shape[0]):
        for i in range(w.shape[1]):
            for j in range(w.shape[2]):
                if w[h, i, j] >= 0.01:  # invisible anyway; keeps long inputs' files small
                    ax.plot([0, 1], [i, j], color=colors(h), alpha=float(min(w[h, i, j], 1.0)), lw=1.5)
        ax.plot([], [], color=colors(h), label=head_names[h])
    for i, t in enumerate(row_labels):
        ax.text(-0.03, i, clean_piece(t), ha="right", va="center", fontsize=8)
    for j, t in enumerate(col_labels):
        ax.text(1.03, j, clean_piece(t), ha="left", va="center", fontsize=8)
    ax.text(-0.03, -1.2, row_name, ha="right", va="center", fontsize=8, fontweight="bold")
    ax.text(1.03, -1.2, col_name, ha="left", va="center", fontsize=8, fontweight="bold")
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(n - 0.5, -1.7)
    ax.axis("off")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(4, w.shape[0]), frameon=False)
    if title:
        ax.set_title("\n".join(textwrap.wrap(title, width=60)), fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)


def plot_neuron_view(q, k, scores, key_labels: Sequence[str], path: Path | str, query_label: str = "",
                     scale: float = 1.0, title: str = "") -> Path:
    """The neuron view of one query (bertviz's): the query vector q, each key k_j, their elementwise products
    q * k_j and the score sum(q * k_j) * scale before the softmax.

    Args:
        q: (Dh,) the query. k: (C, Dh) the keys. scores: (C,) pre-softmax scores (nan where masked).
    """
    import numpy as np

    q, k, s = np.asarray(q, dtype=float), np.asarray(k, dtype=float), np.asarray(scores, dtype=float)
    if k.ndim != 2 or k.shape != (len(key_labels), q.shape[0]) or s.shape != (len(key_labels),):
        raise ValueError(f"q {q.shape}, k {k.shape}, scores {s.shape} do not match {len(key_labels)} keys")
    prod = q[None, :] * k  # (C, Dh)
    C, Dh = k.shape
    fig, axes = _pyplot().subplots(2, 3, figsize=(max(6.0, 0.12 * Dh * 2 + 3), max(3.0, 0.25 * C + 1.6)),
                             gridspec_kw={"height_ratios": [1, max(C, 1)], "width_ratios": [Dh, Dh, 6]},
                             squeeze=False)
    vmax = max(np.abs(np.concatenate([q, k.ravel()])).max(), 1e-9)
    pmax = max(np.abs(prod).max(), 1e-9)
    axes[0][0].imshow(q[None, :], cmap=signed_cmap(), vmin=-vmax, vmax=vmax, aspect="auto")
    axes[0][0].set_title(f"query q ({clean_piece(query_label)})", fontsize=8)
    axes[1][0].imshow(k, cmap=signed_cmap(), vmin=-vmax, vmax=vmax, aspect="auto")
    axes[1][0].set_yticks(range(C), [clean_piece(t) for t in key_labels], fontsize=7)
    axes[1][0].set_title("keys k", fontsize=8)
    axes[1][1].imshow(prod, cmap=signed_cmap(), vmin=-pmax, vmax=pmax, aspect="auto")
    axes[1][1].set_title("q \u00d7 k (elementwise)", fontsize=8)
    axes[1][2].set_ylim(C - 0.5, -0.5)
    axes[1][2].set_xlim(0, 1)
    for j, x in enumerate(s):
        axes[1][2].text(0.05, j, "masked" if np.isnan(x) else f"{x:.3f}", va="center", fontsize=7)
    axes[1][2].set_title(f"sum \u00d7 {scale:.3g}", fontsize=8)
    for ax in (axes[0][0], axes[1][1]):
        ax.set_yticks([])
    for ax in (axes[0][1], axes[0][2], axes[1][2]):
        ax.axis("off")
    for ax in (axes[0][0], axes[1][0], axes[1][1]):
        ax.set_xticks([])
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)
