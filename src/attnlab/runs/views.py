"""An exploration and its views: the attention maps of one input (`Exploration`), what the explorer page is sent
(`summary`, `weights_payload`, `neuron_payload`), the words toggle, the files of `attnlab plot explore`, the
explorer inline in a notebook (`exploration_html`, `Exploration._repr_html_`) and explorations of any attention
a user computed (`attention_exploration`, what `attnlab.show` draws). `attnlab.runs.explore` computes explorations
from trained runs (each family's explorer hook records them: `attnlab.families.explorer`).

`merge_words` aggregates subword pieces into words (Clark et al. 2019, "What Does BERT Look At?", sec. 2:
attention *to* a word is the sum over its pieces, attention *from* a word the mean over its pieces).

`exploration_html` shows an exploration inline in a notebook: the explorer page (static/index.html, its
script modules joined by `explorer_script`, style.css) with its data embedded, in an iframe, offline.

Shape legend: L layers, H heads, R rows (query tokens), C columns (key tokens), Dh head dim.
"""

from __future__ import annotations

import html
import json
import logging
import math
import re
from dataclasses import fields
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write_text
from attnlab.core.plotting import (clean_piece, piece_byte, plot_attention, plot_attention_grid, plot_head_view,
                                   plot_neuron_view)
from attnlab.data.tokenizers import EOS_ID, SPECIALS
from attnlab.families.explorer import AttentionMap, DecodingSteps, Recording
from attnlab.runs.script import STATIC, explorer_script

SPECIAL_PIECES = frozenset(SPECIALS) | {"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"}

log = logging.getLogger("attnlab")


# ---------------------------------------------------------------------------------------------- an exploration
class Exploration(Recording):
    """Everything the explorer shows for one input of one run: a recording (`attnlab.families.explorer.Recording`,
    what a family's explore hook returns) with its views, inline in a notebook and as a standalone page."""

    @classmethod
    def of(cls, recording: Recording) -> Exploration:
        """The exploration of a family's recording (the same fields; a recording already one is returned)."""
        if isinstance(recording, cls):
            return recording
        return cls(**{f.name: getattr(recording, f.name) for f in fields(recording)})

    def _repr_html_(self) -> str:  # Jupyter, JupyterLab, VS Code: the explorer inline
        return exploration_html(self)

    def save_html(self, path: Path | str, title: str | None = None) -> Path:
        """The explorer of this exploration as a standalone page (offline), written atomically."""
        atomic_write_text(path, explorer_page(self, title))
        return Path(path)


# ---------------------------------------------------------------------------------------------- words


def word_groups(pieces: Sequence[str], scheme: str) -> list[int]:
    """The word index of each piece. sentencepiece: a piece starting with U+2581 starts a word; wordpiece: every
    piece not starting with ## does; char: a space is a word of its own and starts the next. Special tokens
    (</s>, [CLS]) are words of their own everywhere."""
    groups: list[int] = []
    prev_alone = True
    for p in pieces:
        alone = p in SPECIAL_PIECES or p.isspace()
        starts = (prev_alone or alone or (scheme == "sentencepiece" and p.startswith("\u2581"))
                  or (scheme == "wordpiece" and not p.startswith("##")))
        groups.append(groups[-1] + (1 if starts else 0) if groups else 0)
        prev_alone = alone
    return groups


def word_labels(pieces: Sequence[str], groups: Sequence[int]) -> list[str]:
    """One readable label per word: its pieces joined (word marks and ## removed)."""
    words: list[list[str]] = [[] for _ in range(groups[-1] + 1 if groups else 0)]
    for p, g in zip(pieces, groups):
        words[g].append(p)
    return [_word_text(w) or "_" for w in words]


def _word_text(pieces: Sequence[str]) -> str:
    """A word's pieces as text: word marks and ## removed, runs of byte-fallback pieces decoded together as UTF-8
    ("<0xC3><0xB1>" -> "ñ"), specials and spaces as `clean_piece` shows them."""
    text, raw = "", b""
    for p in pieces:
        byte = piece_byte(p)
        if byte is not None:
            raw += bytes([byte])
            continue
        text += raw.decode("utf-8", errors="replace")
        raw = b""
        text += clean_piece(p) if p.isspace() or p in SPECIAL_PIECES else p.replace("\u2581", "").removeprefix("##")
    return text + raw.decode("utf-8", errors="replace")


def map_groups(m: AttentionMap, scheme: str) -> tuple[list[int], list[int]]:
    """The word index of each row and each column piece of a map (`word_groups`); a pair map's (`AttentionMap.split`)
    two sentences are grouped apart, so that no word spans the split."""
    def groups(pieces: Sequence[str]) -> list[int]:
        if m.split is None:
            return word_groups(pieces, scheme)
        a, b = word_groups(pieces[:m.split], scheme), word_groups(pieces[m.split:], scheme)
        return a + [g + (a[-1] + 1 if a else 0) for g in b]

    return groups(m.rows), groups(m.cols)


def merge_words(weights: Tensor, row_groups: Sequence[int], col_groups: Sequence[int]) -> Tensor:
    """Word-level attention: (..., R, C) -> (..., R', C'); columns of one word summed (attention to the word),
    rows of one word averaged (attention from it), so rows that summed to 1 still do."""
    rg, cg = torch.tensor(row_groups), torch.tensor(col_groups)
    to_cols = torch.zeros(len(col_groups), int(cg.max()) + 1).index_put_((torch.arange(len(cg)), cg), torch.tensor(1.0))
    to_rows = torch.zeros(int(rg.max()) + 1, len(row_groups)).index_put_((rg, torch.arange(len(rg))), torch.tensor(1.0))
    to_rows = to_rows / to_rows.sum(1, keepdim=True)  # (R', R): the mean over a word's pieces
    return to_rows @ weights.float() @ to_cols  # (..., R', C')


def strip_label(piece: str) -> str:
    """A piece as the page's token strips show it, words joined: a sentencepiece word mark (U+2581) becomes the
    space it stands for (never a visible "_" or "\u2581"), a character-level space stays visible, specials as
    they are, a byte-fallback piece of a printable ASCII character that character (`clean_piece`)."""
    if piece.isspace() or piece in SPECIAL_PIECES or piece_byte(piece) is not None:
        return clean_piece(piece)
    return piece.replace("\u2581", " ")


# ---------------------------------------------------------------------------------------------- degenerate output
EOS_PIECE = SPECIALS[EOS_ID]
MAX_UNIT = 3  # pieces in the unit a degenerate output repeats (",", or "sus" + "tent")


def degenerate(pieces: Sequence[str]) -> str | None:
    """Why an output looks like a broken or untrained model's, or None. pieces: the output's pieces, ending with
    </s> when the search finished it (`Translation.tgt_tokens`, an exploration's generated choices). Degenerate:
    an empty output (only </s>), or one that ran to the length limit (no </s>) while repeating one unit of at most
    MAX_UNIT pieces over at least its second half (",,,," or "sustent" 34 times)."""
    if not pieces:
        return None
    if list(pieces) == [EOS_PIECE]:
        return "the output is empty: the model ended at once (untrained, or broken)"
    if pieces[-1] == EOS_PIECE or len(pieces) < 4:
        return None
    for k in range(1, MAX_UNIT + 1):
        tail = 0  # how many pieces at the end repeat with period k
        while tail + k < len(pieces) and pieces[-1 - tail - k] == pieces[-1 - tail]:
            tail += 1
        if tail + k >= max(4, len(pieces) / 2):
            unit = "".join(strip_label(p) for p in pieces[len(pieces) - k:]).strip() or strip_label(pieces[-1])
            return (f"the output repeats {unit!r} up to the length limit: the model is probably untrained or "
                    "broken, and its attention maps mean little")
    return None


def degenerate_warning(outputs: Sequence[Sequence[str] | None]) -> str | None:
    """One line about the degenerate outputs among a batch's best hypotheses (each its pieces, None for an input
    that had none), or None when there are none: how many, which (1-based), and the first one's reason."""
    bad = [(i, why) for i, pieces in enumerate(outputs) if pieces is not None
           for why in [degenerate(pieces)] if why]
    if not bad:
        return None
    which = ", ".join(str(i + 1) for i, _ in bad[:10]) + (", ..." if len(bad) > 10 else "")
    return (f"warning: {len(bad)} of {len(outputs)} output(s) look degenerate (sentence {which}): {bad[0][1]}")


# ---------------------------------------------------------------------------------------------- the page's payloads


def rounded(t: Tensor, decimals: int = 4) -> list:
    """Nested lists of floats rounded to `decimals` (bounded JSON); -inf (a masked score) becomes None."""
    t = t.double().round(decimals=decimals)  # float64: the JSON then holds "0.1234", not float32 digits
    if torch.isinf(t).any():
        return [[None if math.isinf(x) else x for x in row] for row in t.tolist()]
    return t.tolist()


def find_map(ex: Exploration, key: str) -> AttentionMap:
    if key not in ex.maps:
        raise AttnlabError(f"map {key!r} is not one of this input's maps: {', '.join(ex.maps)}")
    return ex.maps[key]


def check_index(value: int, n: int, what: str) -> int:
    if not 0 <= value < n:
        raise AttnlabError(f"{what} {value} is out of range: this map has {n} (0..{n - 1})")
    return value


def summary(ex: Exploration) -> dict:
    """What the page needs before any weights: the output, n-best, token choices and each map's shape and
    labels (pieces and words)."""
    def label(p: str) -> str:
        return clean_piece(p)

    maps = []
    for m in ex.maps.values():
        rg, cg = map_groups(m, ex.scheme)
        maps.append({"key": m.key, "title": m.title, "layers": m.layers, "heads": m.heads, "causal": m.causal,
                     "neuron": m.q is not None, "row_name": m.axis_names[0], "col_name": m.axis_names[1],
                     "rows": [label(p) for p in m.rows], "cols": [label(p) for p in m.cols],
                     "row_words": word_labels(m.rows, rg), "col_words": word_labels(m.cols, cg),
                     "col_strip": [strip_label(p) for p in m.cols],
                     # a pair map: sentence b's first row and column, in pieces and in words (the sentence filter)
                     "split": m.split, "split_words": None if m.split is None else rg[m.split]})
    choices = [{"piece": c.piece, "label": label(c.piece), "strip": strip_label(c.piece), "prob": round(c.prob, 4),
                "generated": c.generated,
                "top": [{"piece": p, "label": label(p), "prob": round(x, 4)} for p, x in c.top]} for c in ex.choices]
    return {"family": ex.family, "output": ex.output, "input": ex.input, "score": ex.score, "scheme": ex.scheme,
            # rounded as the beam tree's scores are: the player's ended hypotheses then show the n-best list's
            "nbest": [{"text": t, "score": round(s, 4)} for t, s in ex.nbest], "choices": choices, "maps": maps,
            "steps": steps_summary(ex.steps),
            "warning": degenerate([c.piece for c in ex.choices if c.generated])}


def steps_summary(steps: DecodingSteps | None) -> dict | None:
    """The step player's part of the summary: which map, the context's shape and meaning, and beam search's tree:
    a list over steps of {"step", "candidates": [{"parent", "piece", "label", "log_prob", "score", "status",
    "slot"} (+ "text" for finished and unfinished ones)]}, candidates best first, parent and slot as in
    `attnlab.decode.search.TraceStep`."""
    if steps is None:
        return None
    tree = None
    if steps.tree is not None:
        tree = []
        for rec in steps.tree:
            cands = []
            for j, (parent, tok, lp, score, status, slot) in enumerate(zip(rec.parent, rec.token, rec.log_prob,
                                                                          rec.score, rec.status, rec.slot)):
                piece = steps.pieces[tok]
                c = {"parent": parent, "piece": piece, "label": clean_piece(piece), "log_prob": round(lp, 4),
                     "score": round(score, 4), "status": status, "slot": slot}
                if (rec.step, j) in steps.texts:
                    c["text"] = steps.texts[rec.step, j]
                cands.append(c)
            tree.append({"step": rec.step, "candidates": cands})
    L, T, D = steps.context.shape  # context (L, T, Dc)
    return {"map": steps.map, "layers": L, "steps": T, "dim": D, "heads": steps.heads,
            "context": steps.context_title, "tree": tree}


def steps_payload(ex: Exploration, layer: int) -> dict:
    """The context vector of every step at one layer: context (T, Dc) rounded to 4 decimals."""
    if ex.steps is None:
        raise AttnlabError("this exploration has no decoding steps (only translation runs with attention have)")
    L = ex.steps.context.size(0)
    return {"layer": layer, "context": rounded(ex.steps.context[check_index(layer, L, "layer")])}


def layer_weights(ex: Exploration, key: str, layer: int, words: bool = False) -> Tensor:
    """(H, R, C) weights of one layer of one map, or (H, R', C') merged into words."""
    m = find_map(ex, key)
    w = m.weights[check_index(layer, m.layers, "layer")]  # (H, R, C)
    if words:
        w = merge_words(w, *map_groups(m, ex.scheme))
    return w


def weights_payload(ex: Exploration, key: str, layer: int, words: bool = False) -> dict:
    w = layer_weights(ex, key, layer, words)
    return {"map": key, "layer": layer, "words": words, "heads": w.size(0), "weights": [rounded(h) for h in w]}


def neuron_payload(ex: Exploration, key: str, layer: int, head: int) -> dict:
    """The neuron view of one head: q (R, Dh), k (C, Dh), the pre-softmax scores q . k * scale (R, C; None where
    masked) and the weights (R, C)."""
    m = find_map(ex, key)
    check_index(layer, m.layers, "layer")
    check_index(head, m.heads, "head")
    scores = m.scores(layer, head)  # an AttnlabError for maps without queries and keys
    return {"map": key, "layer": layer, "head": head, "scale": m.scale, "q": rounded(m.q[layer, head]),
            "k": rounded(m.k[layer, head]), "scores": rounded(scores),
            "weights": rounded(m.weights[layer, head])}


# ---------------------------------------------------------------------------------------------- files and text

VIEWS = ("heatmap", "model", "head", "neuron")


def write_views(ex: Exploration, out: Path, keys: Sequence[str] = (), views: Sequence[str] = VIEWS,
                layer: int = -1, head: str = "mean", words: bool = False, formats: Sequence[str] = ("png",),
                query: int | None = None) -> list[Path]:
    """The explorer's views as files (`attnlab plot explore`), OUT/<map>_<view>.<format> for each map in `keys`
    (default: all): heatmap of one layer (one head or the mean), model view (every layer and head), head view
    (the layer's heads as lines), neuron view (one head, the query token `query`; None: the map's
    `default_query`, the last row of a causal map). Drawn in the browser explorer's palette, axes named by the
    map (`AttentionMap.axis_names`), titled with the input. Returns the paths written."""
    bad = [v for v in views if v not in VIEWS]
    if bad:
        raise AttnlabError(f"view {bad[0]!r} is not one of {', '.join(VIEWS)}")
    paths: list[Path] = []
    for key in keys or list(ex.maps):
        m = find_map(ex, key)
        li = check_index(layer if layer >= 0 else m.layers + layer, m.layers, "layer")
        hi = None if head == "mean" else check_index(int(head), m.heads, "head")
        rows, cols = m.rows, m.cols
        if words:
            rg, cg = map_groups(m, ex.scheme)
            rows, cols = word_labels(rows, rg), word_labels(cols, cg)
        w = layer_weights(ex, key, li, words).numpy()  # (H, R, C)
        what = which_text(m, li, hi, words)
        row_name, col_name = m.axis_names
        about = f"{ex.family}: {ex.input!r}, {m.title}" if ex.input else m.title
        for fmt in formats:
            def path(view: str) -> Path:  # the view's name, then what it shows: OUT/cross_heatmap_layer2_mean.png
                shows = {"heatmap": which_name(m, li, hi, words), "model": "words" if words else "",
                         "head": "_".join(x for x in which_name(m, li, None, words).split("_") if x != "mean"),
                         "neuron": which_name(m, li, 0 if hi is None else hi, False)}[view]
                return out / f"{key}_{view}{'_' + shows if shows else ''}.{fmt.strip()}"

            if "heatmap" in views:
                paths.append(plot_attention(w.mean(0) if hi is None else w[hi], cols, rows, path("heatmap"),
                                            title=", ".join(x for x in (about, what) if x), xlabel=col_name, ylabel=row_name))
            if "model" in views:
                grid = [layer_weights(ex, key, lay, words).numpy()[h] for lay in range(m.layers)
                        for h in range(m.heads)]
                names = [which_text(m, lay, h, False) or m.title for lay in range(m.layers) for h in range(m.heads)]
                paths.append(plot_attention_grid(grid, cols, rows, path("model"), names, ncols=m.heads,
                                                 suptitle=f"{about}: every layer and head", xlabel=col_name,
                                                 ylabel=row_name))
            if "head" in views:
                heads = range(m.heads) if hi is None else [hi]
                paths.append(plot_head_view(w[list(heads)], rows, cols, path("head"),
                                            [f"head {h + 1}" if m.heads > 1 else m.title for h in heads],
                                            title=", ".join(x for x in (about, which_text(m, li, 0, words)) if x),
                                            row_name=row_name, col_name=col_name))
            if "neuron" in views and m.q is None:
                log.info("no neuron view of %s: it has no queries and keys (maps that have: %s)", key,
                         ", ".join(k for k, x in ex.maps.items() if x.q is not None) or "none in this exploration")
            if "neuron" in views and m.q is not None:
                h = 0 if hi is None else hi
                i = check_index(m.default_query() if query is None else query, len(m.rows), "query token")
                s = m.scores(li, h)[i].double().numpy()
                s[s == float("-inf")] = float("nan")
                paths.append(plot_neuron_view(m.q[li, h, i].numpy(), m.k[li, h].numpy(), s, m.cols, path("neuron"),
                                              m.rows[i], m.scale, f"{about}, {which_text(m, li, h, False)}, "
                                              f"query {i + 1}"))
    return paths


def which_text(m: AttentionMap, layer: int, head: int | None, words: bool = False) -> str:
    """What one view of a map shows, for titles: "layer 2, mean of heads", "layer 1, head 3"; a map of one layer
    and one head (an RNN's alignment, a one-layer rollout) names neither, one of one head (a rollout) no head;
    ", words" when merged. "" when nothing is left to say."""
    parts = [f"layer {layer + 1}"] if m.layers > 1 or m.heads > 1 else []
    if m.heads > 1:
        parts.append("mean of heads" if head is None else f"head {head + 1}")
    return ", ".join(parts + (["words"] if words else []))


def which_name(m: AttentionMap, layer: int, head: int | None, words: bool = False) -> str:
    """`which_text` for a file name: "layer2_mean", "layer1_head3_words", "" (an RNN's alignment, in pieces)."""
    parts = [f"layer{layer + 1}"] if m.layers > 1 or m.heads > 1 else []
    if m.heads > 1:
        parts.append("mean" if head is None else f"head{head + 1}")
    return "_".join(parts + (["words"] if words else []))


def format_decoding(ex: Exploration) -> str:
    """The n-best list and each output token's probability with its top alternatives, as text."""
    lines = [f"{ex.output}"]
    lines += [f"  {rank}. {score:.4f}  {text or '(empty)'}" for rank, (text, score) in enumerate(ex.nbest, 1)]
    for c in ex.choices:
        alts = ", ".join(f"{clean_piece(p)} {x:.3f}" for p, x in c.top)
        lines.append(f"  {clean_piece(c.piece):>12} p={c.prob:.3f}{'' if c.generated else ' (prompt)'}   top: {alts}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- any attention (attnlab.show)

SCHEMES = ("sentencepiece", "wordpiece", "char")

ATTENTION_FORMS = "(R, C), (H, R, C), (L, H, R, C), or a list over layers of (1, H, R, C) (Hugging Face)"


def float_tensor(x, what: str = "attention") -> Tensor:
    """x (a torch tensor, a numpy array, nested lists) as a float32 CPU tensor; AttnlabError if it is not numbers."""
    try:
        t = x.detach() if isinstance(x, Tensor) else torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError):
        raise AttnlabError(f"{what} must be a torch tensor or numpy array of numbers, not {type(x).__name__}") from None
    if t.is_complex():
        raise AttnlabError(f"{what} must hold real numbers, not {t.dtype}")
    return t.to("cpu", torch.float32)


def attention_tensor(attention) -> Tensor:
    """Any accepted form of attention weights as (L, H, R, C): (R, C), (H, R, C), (L, H, R, C), (L, 1, H, R, C)
    (`torch.stack(outputs.attentions)`), or a list/tuple over layers of (1, H, R, C) (`outputs.attentions`) or of
    (H, R, C). A batch must be of one example. Values must be finite and >= 0 (weights, not scores)."""
    if isinstance(attention, (tuple, list)) and attention and all(hasattr(a, "shape") for a in attention):
        layers = [float_tensor(a, f"attention[{i}]") for i, a in enumerate(attention)]
        shapes = list(dict.fromkeys(tuple(a.shape) for a in layers))
        if len(shapes) > 1:
            raise AttnlabError(f"the layers' attentions differ in shape: {', '.join(map(str, shapes))}")
        if len(shapes[0]) not in (3, 4):
            raise AttnlabError(f"each layer's attention must be (1, H, R, C) or (H, R, C), got shape {shapes[0]}")
        w = torch.stack(layers, 1 if len(shapes[0]) == 4 else 0)  # (B, L, H, R, C) or (L, H, R, C)
    else:
        w = float_tensor(attention)
        if w.dim() == 5:
            w = w.transpose(0, 1)  # (L, B, H, R, C) -> (B, L, H, R, C)
    if w.dim() == 5:
        if w.size(0) != 1:
            raise AttnlabError(f"attention of a batch of {w.size(0)} examples: pass one, e.g. "
                               "[a[i:i + 1] for a in outputs.attentions]")
        w = w[0]  # (L, H, R, C)
    if w.dim() not in (2, 3, 4):
        raise AttnlabError(f"attention must be {ATTENTION_FORMS}; got shape {tuple(w.shape)}")
    w = w.reshape((1,) * (4 - w.dim()) + tuple(w.shape))  # (L, H, R, C)
    if w.numel() == 0:
        raise AttnlabError(f"attention of shape {tuple(w.shape)} is empty")
    bad = int((~torch.isfinite(w)).sum())
    if bad:
        raise AttnlabError(f"attention holds {bad} NaN or infinite value(s) of {w.numel()}")
    if float(w.min()) < 0:
        raise AttnlabError(f"attention weights must be >= 0 (the smallest is {float(w.min()):.4g}): pass the weights "
                           "after the softmax, not the scores")
    return w


def token_list(tokens, what: str) -> list[str]:
    if isinstance(tokens, str):
        raise AttnlabError(f"{what} must be a list of token strings, not one string: split it first "
                           "(e.g. sentence.split(), or tokenizer.tokenize(sentence))")
    try:
        out = list(tokens)
    except TypeError:
        raise AttnlabError(f"{what} must be a list of token strings, not {type(tokens).__name__}") from None
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise AttnlabError(f"{what}[{i}] is a {type(t).__name__}, not a token string: give the tokens, e.g. "
                               "tokenizer.convert_ids_to_tokens(ids)")
    return out


def attention_exploration(attention, src_tokens: Sequence[str], tgt_tokens: Sequence[str] | None = None, *,
                          title: str = "attention", scheme: str | None = None) -> Exploration:
    """An Exploration of attention weights a user computed (any model: the use of bertviz's `head_view`), to show
    with `exploration_html` (a notebook displays it inline) or `Exploration.save_html`.

    Args:
        attention: a torch tensor or numpy array (R, C), (H, R, C) or (L, H, R, C); or Hugging Face's
            `outputs.attentions` (a tuple over layers of (1, H, R, C)) or its `torch.stack` (L, 1, H, R, C).
            Shown as given: not renormalised; finite and >= 0.
        src_tokens: the C key tokens (columns); with tgt_tokens None also the R query tokens (self-attention).
        tgt_tokens: the R query tokens (rows) of a cross-attention (e.g. decoder tokens attending to the source).
        title: the map's name on the page.
        scheme: how tokens form words for the word toggle: "sentencepiece" (U+2581 starts a word), "wordpiece"
            (## continues one) or "char"; default "sentencepiece" if any token starts with U+2581, else
            "wordpiece" (plain words are a word each).

    Returns an Exploration with one map, "attention" (L, H, R, C), without queries and keys: the neuron view says
    it is unavailable. Shape: L layers, H heads, R rows (queries), C columns (keys).
    """
    w = attention_tensor(attention)  # (L, H, R, C)
    cols = token_list(src_tokens, "src_tokens")
    rows = cols if tgt_tokens is None else token_list(tgt_tokens, "tgt_tokens")
    R, C = w.shape[2:]  # w (L, H, R, C)
    if tgt_tokens is None and R != C:
        raise AttnlabError(f"attention is {R} x {C} (rows x columns), not square: give tgt_tokens for its {R} rows "
                           "(a cross-attention), src_tokens for its columns")
    if len(cols) != C:
        raise AttnlabError(f"attention has {C} columns (keys) but src_tokens has {len(cols)} tokens")
    if len(rows) != R:
        raise AttnlabError(f"attention has {R} rows (queries) but tgt_tokens has {len(rows)} tokens")
    if scheme is None:
        scheme = "sentencepiece" if any(t.startswith("\u2581") for t in rows + cols) else "wordpiece"
    if scheme not in SCHEMES:
        raise AttnlabError(f"scheme {scheme!r} is not one of {', '.join(SCHEMES)}")
    return Exploration(family="custom", output="", scheme=scheme,
                       maps={"attention": AttentionMap("attention", str(title), w, rows, cols)})


# ---------------------------------------------------------------------------------------------- inline (notebooks)

def embedded_data(ex: Exploration, title: str) -> dict:
    """What the explorer page asks the server for, answered in advance (app.js's embedded mode): the models list,
    the summary, every layer's weights (pieces and words), every head's neuron payload and every layer's
    decoding steps."""
    weights, neuron = {}, {}
    steps = {str(layer): steps_payload(ex, layer) for layer in range(ex.steps.context.size(0))} if ex.steps else {}
    for key, m in ex.maps.items():
        for layer in range(m.layers):
            for words in (False, True):
                weights[f"{key}/{layer}/{str(words).lower()}"] = weights_payload(ex, key, layer, words)["weights"]
            if m.q is not None:
                for head in range(m.heads):
                    neuron[f"{key}/{layer}/{head}"] = neuron_payload(ex, key, layer, head)
    first = next(iter(ex.maps.values()), None)
    model = {"name": title, "family": ex.family, "kind": "embedded", "attention": "embedded",
             "layers": first.layers if first else 0, "heads": first.heads if first else 0, "beam": None}
    exploration = {"id": "embedded", "model": title, "kind": "embedded", "seconds": None, **summary(ex)}
    return {"models": [model], "exploration": exploration, "weights": weights, "neuron": neuron, "steps": steps}


def default_title(ex: Exploration) -> str:
    """A user's attention (`attention_exploration`) is named by its map's title, a run's exploration by family."""
    if ex.family == "custom" and ex.maps:
        return next(iter(ex.maps.values())).title
    return f"attnlab explorer, {ex.family} run"


def explorer_page(ex: Exploration, title: str | None = None) -> str:
    """The explorer page (static/index.html) with its CSS, its modules (`explorer_script`) and `ex` inlined: a
    standalone HTML document that shows the exploration without a server or a network."""
    title = title or default_title(ex)
    page, css = ((STATIC / name).read_text(encoding="utf-8") for name in ("index.html", "style.css"))
    js = explorer_script()
    assert "</script" not in js.lower() and "</style" not in css.lower(), "the scripts/style.css cannot be inlined"
    # "<" escaped: no "</script>" or "<!--" inside the JSON can end its script element
    data = json.dumps(embedded_data(ex, title), separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    parts = {'<link rel="stylesheet" href="/static/style.css">': f"<style>\n{css}</style>",
             '<script type="module" src="/static/app.js"></script>':
                 f'<script type="application/json" id="attnlab-data">{data}</script>\n<script>\n{js}</script>',
             "<title>attnlab attention explorer</title>": f"<title>{html.escape(title)}</title>"}
    for old, new in parts.items():
        assert page.count(old) == 1, f"static/index.html no longer has {old}"
        page = page.replace(old, new)
    # what only a server can show (the compare view asks it for every model's translation): left out
    page = re.sub(r"<!-- served only -->.*?<!-- /served only -->\n?", "", page, flags=re.S)
    # the served page's icon (a data URI, so the browser asks for no /favicon.ico); an inline frame needs none
    return re.sub(r'<link rel="icon" href="data:[^"]*">\n', "", page, count=1)


def frame_height(ex: Exploration) -> int:
    """A first height (px) for the iframe, before its page resizes it to its content (where the host lets it)."""
    rows = max((len(m.rows) for m in ex.maps.values()), default=0)
    label = max((len(clean_piece(t)) for m in ex.maps.values() for t in m.cols), default=0)
    return min(1400, 200 + 22 * rows + 7 * label)


def exploration_html(ex: Exploration, title: str | None = None, height: int | None = None) -> str:
    """The explorer of `ex` as an HTML snippet for a notebook output: an <iframe srcdoc> holding the explorer page
    (`explorer_page`: index.html, style.css and the explorer's modules inlined, the data embedded as JSON). No
    CDN, no network: it works in Jupyter, JupyterLab, VS Code and in a notebook exported to HTML (nbconvert). The
    frame follows its content's height where the host lets it (`height` px at first; default from the token count).

    Size: the page itself (~145 KB with the srcdoc's escaping), then every layer of every map twice, pieces and
    words, at 4 decimals (`rounded`): about 14 bytes per weight of a map with the HTML escaping, plus, for maps with
    queries and keys (a run's Transformer maps), every head's neuron payload (q, k, scores, weights). Measured for
    `attention_exploration`: 2 layers x 4 heads x 12 x 12 tokens 163 KB, 6 x 12 x 13 x 13 320 KB, 6 x 8 x 50 x 50
    1.8 MB; all of it is stored in the notebook file. Explore long inputs with `attnlab serve` instead.
    """
    title = title or default_title(ex)
    doc = explorer_page(ex, title)
    h = height if height is not None else frame_height(ex)
    return (f'<iframe class="attnlab-explorer" title="{html.escape(title)}" '
            f'style="width: 100%; height: {int(h)}px; border: 0;" srcdoc="{html.escape(doc, quote=True)}"></iframe>')
