"""What a family's explorer hook (`attnlab.families.base.Explorer`) records of one input, and the tools it records
with. The families' own modules say which maps their models have; the explorer page, `attnlab plot explore` and
`Run.explore` (`attnlab.runs.explore`, `attnlab.runs.views`) show them without knowing which family made them.

A `Recording` holds, for one input, each attention map the run's model computes, as (layers, heads, rows,
columns) weights with the token pieces of its rows (queries) and columns (keys):

- translation runs (`attnlab.families.translation`): a Transformer's encoder self-attention ``enc_self``, decoder
  masked self-attention ``dec_self`` and cross-attention ``cross`` of a teacher-forced pass over the best
  hypothesis (the search's own cross-attention to float rounding); an RNN's attention alignment ``align`` (the
  search's weights);
- language-model runs (`attnlab.families.lm`): the causal self-attention ``lm_self`` of [BOS] + prompt + greedy
  continuation;
- sentence-pair runs (`attnlab.families.pairs`): the decomposable model's soft alignments ``a_to_b``, ``b_to_a``
  (and intra-sentence ``intra_a``, ``intra_b``); MiniLM (a siamese encoder: each sentence is encoded alone) the
  encoder self-attention of each sentence, ``a_self`` and ``b_self``; and each a ``pair`` map over both sentences
  with their split (`AttentionMap.split`) for the sentence filter: the decomposable model's four maps as the
  blocks of one, MiniLM's encoder reading the pair as one input the way BERT does ([CLS] a [SEP] b [SEP]);
- attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", sec. 3) of every
  non-causal or causal self-attention stack (``*_rollout``): with heads averaged, A~_l = 0.5 A_l + 0.5 I,
  rows renormalised, R_l = A~_l R_{l-1}; its layer l is the rollout through layer l;
- for multi-head maps, the queries and keys of every head (each layer's attention inputs captured with forward
  pre-hooks and projected with the layer's own W^Q and W^K) for the neuron view: q_i . k_j * scale is the
  pre-softmax score whose softmax is the weight;
- the decoding: the n-best list with scores, and per output token its probability and the top 5 alternatives;
- the decoding step by step (translation runs with attention, `DecodingSteps`): each step's context vector,
  captured by hooks in the teacher-forced pass (RNN: the attention module's output c_t; Transformer: each
  cross-attention's W^O input, the heads concatenated), and beam search's own trace
  (`attnlab.decode.search.TraceStep`).

Shape legend: L layers, H heads, R rows (query tokens), C columns (key tokens), Dh head dim, V vocabulary.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor, nn

from attnlab.core.errors import AttnlabError
from attnlab.data.tokenizers import BOS_ID, PAD_ID
from attnlab.decode.search import TraceStep
from attnlab.nn.attention import MultiHeadAttention

MAX_NBEST = 5
TOP_K = 5


# ---------------------------------------------------------------------------------------------- a recording
# What a map's rows and columns are, by its key (a rollout's are its map's): the names of the heatmap's axes and
# of the head view's two sides, in the browser and in the files. Any other map: queries and keys.
AXIS_NAMES = {"cross": ("target", "source"), "align": ("target", "source"),
              "enc_self": ("queries (source)", "keys (source)"), "dec_self": ("queries (target)", "keys (target)"),
              "a_to_b": ("sentence a", "sentence b"), "b_to_a": ("sentence b", "sentence a"),
              "intra_a": ("queries (a)", "keys (a)"), "intra_b": ("queries (b)", "keys (b)"),
              "a_self": ("queries (a)", "keys (a)"), "b_self": ("queries (b)", "keys (b)"),
              "pair": ("queries (a, then b)", "keys (a, then b)")}


@dataclass
class AttentionMap:
    """One kind of attention of one input. weights (L, H, R, C); q (L, H, R, Dh) and k (L, H, C, Dh) for the
    neuron view (None where the scores are not dot products of projected vectors); scale: 1/sqrt(Dh). split: in a
    map over a sentence pair read as one sequence (rows = columns = a's pieces, then b's), the index of b's first
    piece (bertviz's sentence_b_start), for the page's sentence filter (A->A, A->B, B->A, B->B); None otherwise."""

    key: str
    title: str
    weights: Tensor
    rows: list[str]
    cols: list[str]
    causal: bool = False
    q: Tensor | None = None
    k: Tensor | None = None
    scale: float = 1.0
    split: int | None = None

    @property
    def layers(self) -> int:
        return self.weights.size(0)

    @property
    def heads(self) -> int:
        return self.weights.size(1)

    @property
    def axis_names(self) -> tuple[str, str]:
        """What the rows and the columns are: ("target", "source") for cross-attention, ("queries (source)",
        "keys (source)") for encoder self-attention, ("queries", "keys") when the key says nothing more."""
        return AXIS_NAMES.get(self.key.removesuffix("_rollout"), ("queries", "keys"))

    def default_query(self) -> int:
        """The neuron view's first query row: the last one of a causal map (the first sees one key, the rest
        masked), else the first."""
        return len(self.rows) - 1 if self.causal else 0

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
class DecodingSteps:
    """The decoder's steps of a translation's best hypothesis, for the step player: step t's attention is row t of
    the map `map`, its output distribution `Exploration.choices[t]`, its context vector row t of `context`.

    context (L, T, Dc): per layer, the context vector of each step. RNN (L = 1): the attention context c_t the
    decoder uses, sum_j a_tj v_j over the encoder outputs. Transformer: each decoder layer's cross-attention
    output before W^O, the H heads concatenated (Dc = D; head h's segment of Dh values is sum_j a_htj v_hj).
    tree: beam search's own record (`attnlab.decode.search.TraceStep`, one per step; None for greedy search), with
    `pieces` the target pieces of its token ids and `texts` the detokenized text of each ended hypothesis, keyed
    (step, candidate index)."""

    map: str
    context: Tensor
    context_title: str
    heads: int = 1  # segments of a context vector (one per head)
    tree: list[TraceStep] | None = None
    pieces: dict[int, str] = field(default_factory=dict)
    texts: dict[tuple[int, int], str] = field(default_factory=dict)


@dataclass
class Recording:
    """Everything a family's explore hook records of one input of one run. `attnlab.runs.views.Exploration` is a
    recording with its views (inline in a notebook, a standalone page)."""

    family: str
    output: str  # translation, prompt + continuation, or the pair's prediction
    maps: dict[str, AttentionMap]
    scheme: str  # how pieces form words: "sentencepiece", "char" or "wordpiece"
    score: float | None = None
    nbest: list[tuple[str, float]] = field(default_factory=list)
    choices: list[TokenChoice] = field(default_factory=list)
    input: str = ""  # the sentence explored (a pair's two joined by " / "), for titles; "" when not known
    steps: DecodingSteps | None = None  # translation runs with attention: the step player

    def nbytes(self) -> int:
        """The bytes it holds, what keeping it costs a server: its tensors' storage (weights, queries and keys of
        every map, the steps' context vectors) and every Python object it reaches (labels, the beam's record, each
        token's alternatives), each counted once (`held_bytes`). Counting the tensors alone missed 99% of a GRU
        exploration at beam 12 (issue 47: about 710 B counted, about 71 KB held)."""
        return held_bytes(self)


def held_bytes(obj: object) -> int:
    """The memory an object holds with everything it reaches through dataclass fields, dicts, lists, tuples and
    sets, each object counted once: sys.getsizeof of each, plus a tensor's storage (numel x element size)."""
    seen: set[int] = set()
    stack, total = [obj], 0
    while stack:
        o = stack.pop()
        if id(o) in seen or o is None:
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, Tensor):
            total += o.numel() * o.element_size()
        elif isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif is_dataclass(o) and not isinstance(o, type):
            stack.extend(getattr(o, f.name) for f in fields(o))
    return total


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
                                          attention_rollout(m.weights)[:, None], m.rows, m.cols, m.causal,
                                          split=m.split)


# ---------------------------------------------------------------------------------------------- threads
def this_thread_only(hook: Callable) -> Callable:
    """`hook` called only for the forward passes of the thread that made it (others pass through untouched).

    The explorer records a shared model's inputs and outputs with hooks while other threads (the server's other
    lane, `Run.explore` or `Run.translate` from user threads) run the same modules: a hook bound to its thread
    records one exploration's own forward calls and nothing of theirs, so any number of explorations and
    translations can run at once.
    """
    owner = threading.get_ident()

    def bound(*args):
        if threading.get_ident() == owner:
            return hook(*args)
        return None

    return bound


# ---------------------------------------------------------------------------------------------- queries and keys
class QKCapture:
    """Forward pre-hooks on MultiHeadAttention modules that keep their query and key inputs; `projected(i)`
    gives attention i's q (B, H, R, Dh) and k (B, H, C, Dh) from its own W^Q and W^K.

    Self-attention modules are hooked on `forward` (query and key are its first two arguments). A cross-attention
    is queried through `attend_projected` with keys projected once: hook its W^Q's input (the query) and give
    the keys' input (the encoder memory) with `set_keys`. The hooks see only the calling thread's forward passes
    (`this_thread_only`).
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

        self.handles.append(attn.register_forward_pre_hook(this_thread_only(hook)))

    def add_cross(self, attn: MultiHeadAttention) -> int:
        i = self._add(attn)

        def hook(module, args):
            self.queries[i] = args[0].detach()

        self.handles.append(attn.W_Q.register_forward_pre_hook(this_thread_only(hook)))
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


@contextlib.contextmanager
def captured(modules: Sequence[nn.Module], inputs: bool) -> Iterator[list[list[Tensor]]]:
    """Per module, its first input (inputs=True, a forward pre-hook) or its output's first tensor (a forward hook)
    of each call this thread makes while the context is open (`this_thread_only`); hooks removed on exit."""
    seen: list[list[Tensor]] = [[] for _ in modules]

    def keep(i: int, x) -> None:
        seen[i].append((x[0] if isinstance(x, tuple) else x).detach())

    handles = [m.register_forward_pre_hook(this_thread_only(lambda mod, args, i=i: keep(i, args))) if inputs
               else m.register_forward_hook(this_thread_only(lambda mod, args, out, i=i: keep(i, out)))
               for i, m in enumerate(modules)]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def stacked_qk(cap: QKCapture, indices: Sequence[int]) -> tuple[Tensor, Tensor, float]:
    """q (L, H, R, Dh), k (L, H, C, Dh) of the first sentence of the batch, and the scale 1/sqrt(Dh)."""
    qs, ks = zip(*(cap.projected(i) for i in indices))
    q, k = torch.stack([x[0] for x in qs]).float(), torch.stack([x[0] for x in ks]).float()
    return q, k, 1.0 / math.sqrt(q.size(-1))


# ---------------------------------------------------------------------------------------------- decoding
def token_choices(log_probs: Tensor, targets: Sequence[int], piece, generated: Sequence[bool] | None = None,
                  banned: Sequence[int] = ()) -> list[TokenChoice]:
    """Per position, the target's probability and the TOP_K most probable tokens (PAD, BOS and `banned`, the
    tokenizer's `control_ids`, never are: the searches never generate them). log_probs (T, V), targets T ids,
    piece(id) -> str."""
    lp = log_probs.float().clone()
    lp[:, [PAD_ID, BOS_ID, *banned]] = float("-inf")
    top = lp.topk(min(TOP_K, lp.size(-1)), dim=-1)
    out = []
    for t, target in enumerate(targets):
        alts = [(piece(i), math.exp(v)) for v, i in zip(top.values[t].tolist(), top.indices[t].tolist())
                if v > float("-inf")]
        out.append(TokenChoice(piece(target), math.exp(float(lp[t, target])), alts,
                               True if generated is None else generated[t]))
    return out


def scheme_of(tokenizer) -> str:
    """How a tokenizer's pieces form words, for the word toggle: "char", "sentencepiece" or "wordpiece" (an
    imported tokenizer says which: `attnlab.data.tokenizers.ImportedTokenizer.scheme`)."""
    if isinstance(getattr(tokenizer, "scheme", None), str):
        return tokenizer.scheme
    kind = getattr(tokenizer, "kind", "wordpiece")  # "marian": an imported MarianMT's SentencePiece pieces
    return "char" if kind == "char" else "sentencepiece" if kind in ("bpe", "unigram", "marian") else "wordpiece"


def encoder_self_attention(x: Tensor, layers: nn.ModuleList) -> Tensor:
    """Runs `attnlab.nn.transformer.EncoderLayer`s over one unpadded sentence x (1, T, D) asking for weights:
    (N, H, T, T)."""
    weights = []
    for layer in layers:
        x, w = layer(x, None, need_weights=True)  # (1, T, D)
        weights.append(w[0])
    return torch.stack(weights).float().cpu()
