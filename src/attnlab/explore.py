"""Every attention of a run for one input, for the explorer page (`attnlab serve`) and `attnlab plot explore`.

An `Exploration` holds, for one input, each attention map the run's model computes, as (layers, heads, rows,
columns) weights with the token pieces of its rows (queries) and columns (keys):

- translation runs: a Transformer's encoder self-attention ``enc_self``, decoder masked self-attention
  ``dec_self`` and cross-attention ``cross`` of a teacher-forced pass over the best hypothesis (the search's own
  cross-attention to float rounding); an RNN's attention alignment ``align`` (the search's weights);
- language-model runs: the causal self-attention ``lm_self`` of [BOS] + prompt + greedy continuation;
- sentence-pair runs: the decomposable model's soft alignments ``a_to_b``, ``b_to_a`` (and intra-sentence
  ``intra_a``, ``intra_b``); MiniLM (a siamese encoder: each sentence is encoded alone) the encoder
  self-attention of each sentence, ``a_self`` and ``b_self``;
- attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", sec. 3) of every
  non-causal or causal self-attention stack (``*_rollout``): with heads averaged, A~_l = 0.5 A_l + 0.5 I,
  rows renormalised, R_l = A~_l R_{l-1}; its layer l is the rollout through layer l;
- for multi-head maps, the queries and keys of every head (each layer's attention inputs captured with forward
  pre-hooks and projected with the layer's own W^Q and W^K) for the neuron view: q_i . k_j * scale is the
  pre-softmax score whose softmax is the weight;
- the decoding: the n-best list with scores, and per output token its probability and the top 5 alternatives.

`merge_words` aggregates subword pieces into words (Clark et al. 2019, "What Does BERT Look At?", sec. 2:
attention *to* a word is the sum over its pieces, attention *from* a word the mean over its pieces).

`attention_exploration` makes an Exploration of any attention a user computed (bertviz's `head_view` use), and
`exploration_html` (`Exploration._repr_html_`) shows an exploration inline in a notebook: the explorer page with
its data embedded, in an iframe, offline.

Shape legend: L layers, H heads, R rows (query tokens), C columns (key tokens), Dh head dim, V vocabulary.
"""

from __future__ import annotations

import contextlib
import html
import json
import math
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Iterator, Sequence

import torch
from torch import Tensor, nn

from attnlab.attention import MultiHeadAttention
from attnlab.batching import pad_sequences
from attnlab.corpus import normalize
from attnlab.errors import AttnlabError
from attnlab.fileio import atomic_write_text
from attnlab.lm import generate
from attnlab.pairs import pair_ids
from attnlab.plotting import clean_piece, plot_attention, plot_attention_grid, plot_head_view, plot_neuron_view
from attnlab.runs import LoadedRun
from attnlab.tokenizers import BOS_ID, EOS_ID, PAD_ID, SPECIALS
from attnlab.transformer import TransformerSeq2Seq
from attnlab.translate import Translator

MAX_NBEST = 5
TOP_K = 5
SPECIAL_PIECES = frozenset(SPECIALS) | {"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"}


@dataclass
class AttentionMap:
    """One kind of attention of one input. weights (L, H, R, C); q (L, H, R, Dh) and k (L, H, C, Dh) for the
    neuron view (None where the scores are not dot products of projected vectors); scale: 1/sqrt(Dh)."""

    key: str
    title: str
    weights: Tensor
    rows: list[str]
    cols: list[str]
    causal: bool = False
    q: Tensor | None = None
    k: Tensor | None = None
    scale: float = 1.0

    @property
    def layers(self) -> int:
        return self.weights.size(0)

    @property
    def heads(self) -> int:
        return self.weights.size(1)

    def scores(self, layer: int, head: int) -> Tensor:
        """Pre-softmax scores q_i . k_j * scale (R, C) of one head; -inf where the causal mask hides a key."""
        if self.q is None or self.k is None:
            raise AttnlabError(f"the {self.title} has no query/key vectors (not a dot-product attention)")
        s = (self.q[layer, head] @ self.k[layer, head].T) * self.scale  # (R, C)
        if self.causal:
            R, C = s.shape
            s = s.masked_fill(~torch.ones(R, C, dtype=torch.bool).tril(C - R), float("-inf"))
        return s


@dataclass
class TokenChoice:
    """An output token with its probability under the model and the TOP_K most probable tokens at its step."""

    piece: str
    prob: float
    top: list[tuple[str, float]]
    generated: bool = True  # False: a prompt token (language models)


@dataclass
class Exploration:
    """Everything the explorer shows for one input of one run."""

    family: str
    output: str  # translation, prompt + continuation, or the pair's prediction
    maps: dict[str, AttentionMap]
    scheme: str  # how pieces form words: "sentencepiece", "char" or "wordpiece"
    score: float | None = None
    nbest: list[tuple[str, float]] = field(default_factory=list)
    choices: list[TokenChoice] = field(default_factory=list)

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
    words = [""] * (groups[-1] + 1 if groups else 0)
    for p, g in zip(pieces, groups):
        words[g] += clean_piece(p) if p.isspace() or p in SPECIAL_PIECES else p.replace("\u2581", "").removeprefix("##")
    return [w or "_" for w in words]


def merge_words(weights: Tensor, row_groups: Sequence[int], col_groups: Sequence[int]) -> Tensor:
    """Word-level attention: (..., R, C) -> (..., R', C'); columns of one word summed (attention to the word),
    rows of one word averaged (attention from it), so rows that summed to 1 still do."""
    rg, cg = torch.tensor(row_groups), torch.tensor(col_groups)
    to_cols = torch.zeros(len(col_groups), int(cg.max()) + 1).index_put_((torch.arange(len(cg)), cg), torch.tensor(1.0))
    to_rows = torch.zeros(int(rg.max()) + 1, len(row_groups)).index_put_((rg, torch.arange(len(rg))), torch.tensor(1.0))
    to_rows = to_rows / to_rows.sum(1, keepdim=True)  # (R', R): the mean over a word's pieces
    return to_rows @ weights.float() @ to_cols  # (..., R', C')


# ---------------------------------------------------------------------------------------------- rollout
def attention_rollout(weights: Tensor) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020, sec. 3) through each layer of a self-attention stack.

    Heads are averaged, the residual connection is modelled as A~ = 0.5 A + 0.5 I with rows renormalised, and
    R_1 = A~_1, R_l = A~_l R_{l-1}. Shape: weights (L, H, T, T) -> (L, T, T), row l the rollout through layer l.
    """
    L, _, T, _ = weights.shape
    a = 0.5 * weights.double().mean(1) + 0.5 * torch.eye(T, dtype=torch.float64)  # (L, T, T)
    a = a / a.sum(-1, keepdim=True)
    out, r = [], torch.eye(T, dtype=torch.float64)
    for layer in range(L):
        r = a[layer] @ r  # (T, T)
        out.append(r)
    return torch.stack(out).float()


def with_rollout(maps: dict[str, AttentionMap], key: str) -> None:
    """Adds `<key>_rollout` (L, 1, T, T) after the self-attention map `key`."""
    m = maps[key]
    maps[f"{key}_rollout"] = AttentionMap(f"{key}_rollout", f"rollout of the {m.title}",
                                          attention_rollout(m.weights)[:, None], m.rows, m.cols, m.causal)


# ---------------------------------------------------------------------------------------------- queries and keys
class QKCapture:
    """Forward pre-hooks on MultiHeadAttention modules that keep their query and key inputs; `projected(i)`
    gives attention i's q (B, H, R, Dh) and k (B, H, C, Dh) from its own W^Q and W^K.

    Self-attention modules are hooked on `forward` (query and key are its first two arguments). A cross-attention
    is queried through `attend_projected` with keys projected once: hook its W^Q's input (the query) and give
    the keys' input (the encoder memory) with `set_keys`.
    """

    def __init__(self) -> None:
        self.attns: list[MultiHeadAttention] = []
        self.queries: list[Tensor | None] = []
        self.keys: list[Tensor | None] = []
        self.handles: list = []

    def add_self(self, attn: MultiHeadAttention) -> None:
        i = self._add(attn)

        def hook(module, args):
            self.queries[i], self.keys[i] = args[0].detach(), args[1].detach()

        self.handles.append(attn.register_forward_pre_hook(hook))

    def add_cross(self, attn: MultiHeadAttention) -> int:
        i = self._add(attn)

        def hook(module, args):
            self.queries[i] = args[0].detach()

        self.handles.append(attn.W_Q.register_forward_pre_hook(hook))
        return i

    def set_keys(self, i: int, key_input: Tensor) -> None:
        self.keys[i] = key_input.detach()

    def _add(self, attn: MultiHeadAttention) -> int:
        self.attns.append(attn)
        self.queries.append(None)
        self.keys.append(None)
        return len(self.attns) - 1

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    def projected(self, i: int) -> tuple[Tensor, Tensor]:
        attn = self.attns[i]
        assert self.queries[i] is not None and self.keys[i] is not None, "attention inputs not captured"
        return attn.split_heads(attn.W_Q(self.queries[i])), attn.split_heads(attn.W_K(self.keys[i]))


@contextlib.contextmanager
def capture(self_attns: Sequence[MultiHeadAttention] = (), cross_attns: Sequence[MultiHeadAttention] = ()
            ) -> Iterator[QKCapture]:
    """QKCapture with the given modules hooked; hooks removed on exit. Cross modules come after self ones."""
    cap = QKCapture()
    for a in self_attns:
        cap.add_self(a)
    for a in cross_attns:
        cap.add_cross(a)
    try:
        yield cap
    finally:
        cap.remove()


def stacked_qk(cap: QKCapture, indices: Sequence[int]) -> tuple[Tensor, Tensor, float]:
    """q (L, H, R, Dh), k (L, H, C, Dh) of the first sentence of the batch, and the scale 1/sqrt(Dh)."""
    qs, ks = zip(*(cap.projected(i) for i in indices))
    q, k = torch.stack([x[0] for x in qs]).float(), torch.stack([x[0] for x in ks]).float()
    return q, k, 1.0 / math.sqrt(q.size(-1))


# ---------------------------------------------------------------------------------------------- decoding
def token_choices(log_probs: Tensor, targets: Sequence[int], piece, generated: Sequence[bool] | None = None
                  ) -> list[TokenChoice]:
    """Per position, the target's probability and the TOP_K most probable tokens (PAD and BOS never are: the
    search never generates them). log_probs (T, V), targets T ids, piece(id) -> str."""
    lp = log_probs.float().clone()
    lp[:, [PAD_ID, BOS_ID]] = float("-inf")
    top = lp.topk(min(TOP_K, lp.size(-1)), dim=-1)
    out = []
    for t, target in enumerate(targets):
        alts = [(piece(i), math.exp(v)) for v, i in zip(top.values[t].tolist(), top.indices[t].tolist())]
        out.append(TokenChoice(piece(target), math.exp(float(lp[t, target])), alts,
                               True if generated is None else generated[t]))
    return out


def scheme_of(tokenizer) -> str:
    kind = getattr(tokenizer, "kind", "wordpiece")
    return "char" if kind == "char" else "sentencepiece" if kind in ("bpe", "unigram") else "wordpiece"


# ---------------------------------------------------------------------------------------------- families
@torch.no_grad()
def explore_translation(translator, sentence: str, beam: int) -> Exploration:
    """All attention of a translation run (`attnlab.translate.Translator`) for one sentence, beam search with
    up to MAX_NBEST hypotheses, the best one's token probabilities from a teacher-forced pass."""

    model, tgt = translator.model, translator.tokenizers.tgt
    nbest = translator.translate([sentence], beam_size=beam, n_best=min(beam, MAX_NBEST), need_weights=True)[0]
    best = nbest[0]
    src_ids = translator.encode_source([sentence])[0]
    piece_ids = {tgt.id_to_piece(i): i for i in range(tgt.vocab_size)}
    out_ids = [piece_ids[p] for p in best.tgt_tokens]  # the output pieces, </s> included when finished
    device = translator.device
    src = torch.tensor([src_ids], device=device)  # (1, S)
    lengths = torch.tensor([len(src_ids)], device=device)
    tgt_in = pad_sequences([[BOS_ID] + out_ids[:-1]]).to(device)  # (1, T)
    tgt_in_pieces = [SPECIALS[BOS_ID]] + best.tgt_tokens[:-1]
    maps: dict[str, AttentionMap] = {}
    if isinstance(model, TransformerSeq2Seq):
        n_enc, n_dec = len(model.encoder), len(model.decoder)
        with capture([l.self_attn for l in model.encoder] + [l.self_attn for l in model.decoder],
                     [l.cross_attn for l in model.decoder]) as cap:
            memory = []
            hook = model.enc_norm.register_forward_hook(lambda m, i, o: memory.append(o.detach()))
            try:
                att = model.attention_maps(src, lengths, tgt_in)  # (1, N, H, ., .) each
            finally:
                hook.remove()
            for i in range(n_enc + n_dec, n_enc + 2 * n_dec):
                cap.set_keys(i, memory[-1])
            specs = (("enc_self", "encoder self-attention", best.src_tokens, best.src_tokens, False, range(n_enc)),
                     ("dec_self", "decoder masked self-attention", tgt_in_pieces, tgt_in_pieces, True,
                      range(n_enc, n_enc + n_dec)),
                     ("cross", "cross-attention", best.tgt_tokens, best.src_tokens, False,
                      range(n_enc + n_dec, n_enc + 2 * n_dec)))
            for key, title, rows, cols, causal, idx in specs:
                q, k, scale = stacked_qk(cap, idx)
                maps[key] = AttentionMap(key, title, att[key][0].float().cpu(), rows, cols, causal, q.cpu(), k.cpu(),
                                         scale)
        with_rollout(maps, "enc_self")
        maps = {k: maps[k] for k in ("cross", "enc_self", "enc_self_rollout", "dec_self")}
    elif best.attention is not None:
        maps["align"] = AttentionMap("align", f"{model.cfg.attention} attention", best.attention[None, None].float(),
                                     best.tgt_tokens, best.src_tokens)
    log_probs = model(src, lengths, tgt_in)[0].log_softmax(-1).cpu()  # (T, V)
    return Exploration(family="transformer" if isinstance(model, TransformerSeq2Seq) else "rnn", output=best.text,
                       maps=maps, scheme=scheme_of(tgt), score=best.score, nbest=[(t.text, t.score) for t in nbest],
                       choices=token_choices(log_probs, out_ids, tgt.id_to_piece))


@torch.no_grad()
def explore_generation(run: LoadedRun, prompt: str, max_new: int) -> Exploration:
    """The causal self-attention of a language model over [BOS] + prompt + its greedy continuation (at most
    max_new tokens), its rollout, and every token's probability with the top 5 alternatives."""

    model, tok = run.model, run.tokenizers.tgt
    sample = generate(model, tok, prompt, num=1, max_len=max_new, temperature=0.0, device=run.device)[0]
    prompt_ids = tok.encode(normalize(prompt))
    ids = [BOS_ID, *prompt_ids, *sample.tokens]  # the model's input; EOS is predicted, never fed
    targets = ids[1:] + ([EOS_ID] if sample.finished else [])
    tokens = torch.tensor([ids], device=run.device)  # (1, T)
    with capture([l.self_attn for l in model.layers]) as cap:
        weights = model.attention_maps(tokens)[0].float().cpu()  # (N, H, T, T)
        q, k, scale = stacked_qk(cap, range(len(model.layers)))
    pieces = [tok.id_to_piece(i) for i in ids]
    maps = {"lm_self": AttentionMap("lm_self", "causal self-attention", weights, pieces, pieces, True, q.cpu(),
                                    k.cpu(), scale)}
    with_rollout(maps, "lm_self")
    log_probs = model(tokens)[0].log_softmax(-1).cpu()[: len(targets)]  # (T, V)
    generated = [t > len(prompt_ids) for t in range(1, len(targets) + 1)]
    return Exploration(family="lm", output=sample.text, maps=maps, scheme=scheme_of(tok), score=sample.logprob,
                       choices=token_choices(log_probs, targets, tok.id_to_piece, generated))


@torch.no_grad()
def explore_pair(run: LoadedRun, a: str, b: str) -> Exploration:
    """A sentence pair: the decomposable model's soft alignments, or MiniLM's self-attention of each sentence
    (its encoder reads each sentence alone), with P(same verse)."""
    model, ids = run.model, pair_ids(run.cfg, run.tokenizers)
    ta, tb = (torch.tensor([x], device=run.device) for x in ids.ids([a, b]))
    logits = model(ta, ta > -1, tb, tb > -1)  # one pair, no padding
    p_same = logits.softmax(-1)[0, 1].item()
    maps: dict[str, AttentionMap] = {}
    if hasattr(model, "forward_with_weights"):
        la, lb = ids.pieces(a), ids.pieces(b)
        _, w = model.forward_with_weights(ta, ta > -1, tb, tb > -1)
        specs = (("a_to_b", "alignment a -> b (rows: softmax over b)", w.a_to_b, la, lb),
                 ("b_to_a", "alignment b -> a (rows: softmax over a)", w.b_to_a, lb, la),
                 ("intra_a", "intra-sentence attention of a", w.intra_a, la, la),
                 ("intra_b", "intra-sentence attention of b", w.intra_b, lb, lb))
        for key, title, weights, rows, cols in specs:
            if weights is not None:  # intra-sentence attention is optional
                maps[key] = AttentionMap(key, title, weights[0, None, None].float().cpu(), rows, cols)  # (1, 1, R, C)
        scheme = scheme_of(run.tokenizers.src)
    else:
        encoder = model.encoder
        for key, side, t in (("a_self", "a", ta), ("b_self", "b", tb)):
            with capture([layer.self_attn for layer in encoder.layers]) as cap:
                weights = encoder_self_attention(encoder.embeddings(t), encoder.layers)
                q, k, scale = stacked_qk(cap, range(len(encoder.layers)))
            pieces = ids.tok.encode(a if side == "a" else b).tokens
            maps[key] = AttentionMap(key, f"encoder self-attention of {side}", weights, pieces, pieces, False, q, k,
                                     scale)
            with_rollout(maps, key)
        scheme = "wordpiece"
    return Exploration(family=run.cfg.model.family, output=f"P(same verse) = {p_same:.3f}", maps=maps, scheme=scheme,
                       score=p_same)


def encoder_self_attention(x: Tensor, layers: nn.ModuleList) -> Tensor:
    """Runs `attnlab.transformer.EncoderLayer`s over one unpadded sentence x (1, T, D) asking for weights:
    (N, H, T, T)."""
    weights = []
    for layer in layers:
        x, w = layer(x, None, need_weights=True)  # (1, T, D)
        weights.append(w[0])
    return torch.stack(weights).float().cpu()


# ---------------------------------------------------------------------------------------------- payloads
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
        rg, cg = word_groups(m.rows, ex.scheme), word_groups(m.cols, ex.scheme)
        maps.append({"key": m.key, "title": m.title, "layers": m.layers, "heads": m.heads, "causal": m.causal,
                     "neuron": m.q is not None, "rows": [label(p) for p in m.rows], "cols": [label(p) for p in m.cols],
                     "row_words": word_labels(m.rows, rg), "col_words": word_labels(m.cols, cg)})
    choices = [{"piece": c.piece, "label": label(c.piece), "prob": round(c.prob, 4), "generated": c.generated,
                "top": [{"piece": p, "label": label(p), "prob": round(x, 4)} for p, x in c.top]} for c in ex.choices]
    return {"family": ex.family, "output": ex.output, "score": ex.score, "scheme": ex.scheme,
            "nbest": [{"text": t, "score": s} for t, s in ex.nbest], "choices": choices, "maps": maps}


def layer_weights(ex: Exploration, key: str, layer: int, words: bool = False) -> Tensor:
    """(H, R, C) weights of one layer of one map, or (H, R', C') merged into words."""
    m = find_map(ex, key)
    w = m.weights[check_index(layer, m.layers, "layer")]  # (H, R, C)
    if words:
        w = merge_words(w, word_groups(m.rows, ex.scheme), word_groups(m.cols, ex.scheme))
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


# ---------------------------------------------------------------------------------------------- runs, files
def explore_run(run: LoadedRun, sentence: str, sentence_b: str | None = None, beam: int | None = None,
                max_new: int = 40, translator=None) -> Exploration:
    """The exploration of one input of a loaded run of any family with attention: a translation run (beam: the
    run's by default; `translator`: a ready `attnlab.translate.Translator` of it), a language model (sentence is
    the prompt) or a sentence-pair run (sentence and sentence_b)."""
    family = run.family.name
    if family in ("rnn", "transformer"):
        if translator is None:
            translator = Translator(run.model, run.tokenizers, run.cfg.decode, run.device)
        return explore_translation(translator, sentence, run.cfg.decode.beam_size if beam is None else beam)
    if family == "lm":
        return explore_generation(run, sentence, max_new)
    if family == "pair":
        if not sentence_b:
            raise AttnlabError("a sentence-pair run needs the second sentence of the pair (sentence b)")
        return explore_pair(run, sentence, sentence_b)
    raise AttnlabError(f"{run.run_dir}: a {run.family.title} run has no attention to explore")


VIEWS = ("heatmap", "model", "head", "neuron")


def write_views(ex: Exploration, out: Path, keys: Sequence[str] = (), views: Sequence[str] = VIEWS,
                layer: int = -1, head: str = "mean", words: bool = False, formats: Sequence[str] = ("png",),
                query: int = 0) -> list[Path]:
    """The explorer's views as files (`attnlab plot explore`), OUT/<map>_<view>.<format> for each map in `keys`
    (default: all): heatmap of one layer (one head or the mean), model view (every layer and head), head view
    (the layer's heads as lines), neuron view (one head, the query token `query`). Returns the paths written."""
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
            rg, cg = word_groups(rows, ex.scheme), word_groups(cols, ex.scheme)
            rows, cols = word_labels(rows, rg), word_labels(cols, cg)
        w = layer_weights(ex, key, li, words).numpy()  # (H, R, C)
        what = f"layer {li + 1}, " + ("mean of heads" if hi is None else f"head {hi + 1}")
        for fmt in formats:
            def path(view: str) -> Path:
                return out / f"{key}_{view}.{fmt.strip()}"

            if "heatmap" in views:
                paths.append(plot_attention(w.mean(0) if hi is None else w[hi], cols, rows, path("heatmap"),
                                            title=f"{m.title}, {what}", xlabel="keys", ylabel="queries"))
            if "model" in views:
                grid = [layer_weights(ex, key, lay, words).numpy()[h] for lay in range(m.layers)
                        for h in range(m.heads)]
                names = [f"layer {lay + 1} head {h + 1}" for lay in range(m.layers) for h in range(m.heads)]
                paths.append(plot_attention_grid(grid, cols, rows, path("model"), names, ncols=m.heads,
                                                 suptitle=f"{m.title}: every layer and head"))
            if "head" in views:
                heads = range(m.heads) if hi is None else [hi]
                paths.append(plot_head_view(w[list(heads)], rows, cols, path("head"),
                                            [f"head {h + 1}" for h in heads], title=f"{m.title}, layer {li + 1}"))
            if "neuron" in views and m.q is not None:
                h = 0 if hi is None else hi
                i = check_index(query, len(m.rows), "query token")
                s = m.scores(li, h)[i].double().numpy()
                s[s == float("-inf")] = float("nan")
                paths.append(plot_neuron_view(m.q[li, h, i].numpy(), m.k[li, h].numpy(), s, m.cols, path("neuron"),
                                              m.rows[i], m.scale, f"{m.title}, layer {li + 1}, head {h + 1}"))
    return paths


def format_decoding(ex: Exploration) -> str:
    """The n-best list and each output token's probability with its top alternatives, as text."""
    lines = [f"{ex.output}"]
    lines += [f"  {rank}. {score:.4f}  {text}" for rank, (text, score) in enumerate(ex.nbest, 1)]
    for c in ex.choices:
        alts = ", ".join(f"{clean_piece(p)} {x:.3f}" for p, x in c.top)
        lines.append(f"  {clean_piece(c.piece):>12} p={c.prob:.3f}{'' if c.generated else ' (prompt)'}   top: {alts}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- any attention
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
STATIC = files("attnlab") / "static"


def embedded_data(ex: Exploration, title: str) -> dict:
    """What the explorer page asks the server for, answered in advance (app.js's embedded mode): the models list,
    the summary, every layer's weights (pieces and words) and every head's neuron payload."""
    weights, neuron = {}, {}
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
    return {"models": [model], "exploration": exploration, "weights": weights, "neuron": neuron}


def default_title(ex: Exploration) -> str:
    """A user's attention (`attention_exploration`) is named by its map's title, a run's exploration by family."""
    if ex.family == "custom" and ex.maps:
        return next(iter(ex.maps.values())).title
    return f"attnlab explorer, {ex.family} run"


def explorer_page(ex: Exploration, title: str | None = None) -> str:
    """The explorer page (static/index.html) with its CSS, its script and `ex` inlined: a standalone HTML
    document that shows the exploration without a server or a network."""
    title = title or default_title(ex)
    page, css, js = ((STATIC / name).read_text(encoding="utf-8") for name in ("index.html", "style.css", "app.js"))
    assert "</script" not in js.lower() and "</style" not in css.lower(), "app.js/style.css cannot be inlined"
    # "<" escaped: no "</script>" or "<!--" inside the JSON can end its script element
    data = json.dumps(embedded_data(ex, title), separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    parts = {'<link rel="stylesheet" href="/static/style.css">': f"<style>\n{css}</style>",
             '<script src="/static/app.js"></script>':
                 f'<script type="application/json" id="attnlab-data">{data}</script>\n<script>\n{js}</script>',
             "<title>attnlab attention explorer</title>": f"<title>{html.escape(title)}</title>"}
    for old, new in parts.items():
        assert page.count(old) == 1, f"static/index.html no longer has {old}"
        page = page.replace(old, new)
    return page


def frame_height(ex: Exploration) -> int:
    """A first height (px) for the iframe, before its page resizes it to its content (where the host lets it)."""
    rows = max((len(m.rows) for m in ex.maps.values()), default=0)
    label = max((len(clean_piece(t)) for m in ex.maps.values() for t in m.cols), default=0)
    return min(1400, 200 + 22 * rows + 7 * label)


def exploration_html(ex: Exploration, title: str | None = None, height: int | None = None) -> str:
    """The explorer of `ex` as an HTML snippet for a notebook output: an <iframe srcdoc> holding the explorer page
    (`explorer_page`: index.html, style.css and app.js inlined, the data embedded as JSON). No CDN, no network:
    it works in Jupyter, JupyterLab, VS Code and in a notebook exported to HTML (nbconvert). The frame follows
    its content's height where the host lets it (`height` px at first; default from the token count).

    Size: the page itself (~48 KB), then every layer of every map twice, pieces and words, at 4 decimals
    (`rounded`): about 14 bytes per weight of a map with the HTML escaping, plus, for maps with queries and keys
    (a run's Transformer maps), every head's neuron payload (q, k, scores, weights). Measured for
    `attention_exploration`: 2 layers x 4 heads x 12 x 12 tokens 65 KB, 6 x 12 x 13 x 13 220 KB, 6 x 8 x 50 x 50
    1.7 MB; all of it is stored in the notebook file. Explore long inputs with `attnlab serve` instead.
    """
    title = title or default_title(ex)
    doc = explorer_page(ex, title)
    h = height if height is not None else frame_height(ex)
    return (f'<iframe class="attnlab-explorer" title="{html.escape(title)}" '
            f'style="width: 100%; height: {int(h)}px; border: 0;" srcdoc="{html.escape(doc, quote=True)}"></iframe>')
