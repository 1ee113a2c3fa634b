"""The one attention core every attnlab model uses.

Score functions (query q, key k; each returns scores of shape (B, T, S)):

- ``dot``            q . k                                  (Luong et al. 2015, eq. 8, "dot")
- ``general``        q^T W_a k                              (Luong et al. 2015, eq. 8, "general")
- ``additive``       v_a^T tanh(W_a q + U_a k)              (Bahdanau et al. 2015, A.1.2)
- ``scaled_dot``     q . k / sqrt(d_k)                      (Vaswani et al. 2017, eq. 1)
- ``parameterized``  (W^Q q) . (W^K k), values W^V v        (seed ML:IX "parameterized attention")

plus `MultiHeadAttention` (Vaswani et al. 2017, 3.2.2) with the output projection W^O, and
`LearnedQueryAttention`, the many-to-one pooling of the IF3270 notes: no query input, a learned vector w
and a bias per position, e_s = tanh(k_s . w + b_s) (seed IF3270 "Many to One with Attention").

Masks are boolean and mean "may attend": True keeps a key, False removes it. A masked key gets exactly
zero weight. A query whose keys are all masked (a fully masked row) is a defined result, never NaN: its
weights are all zero and its context vector is the zero vector.

When the weights are not requested, the dot-product family runs through
`torch.nn.functional.scaled_dot_product_attention` (flash / memory-efficient kernels where the hardware has
them; never cuDNN's, which plans anew for every shape: `FUSED_BACKENDS`), except on the CPU for short sequences,
where the explicit path is faster (`explicit_is_faster`); when they are, the explicit path computes the same
numbers and returns the weights. That choice stays here, outside the kernels' switch (`attnlab.kernels`): both
paths are torch's own expressions of eq. 1 (the fused one is what torch.nn.MultiheadAttention calls, the
explicit one the paper's equation written out), the caller chooses per call (`kernel="auto" | "fused" |
"explicit"`), and tests/test_attention.py holds all three equal to torch's in float64. The two CPU rewrites that
are attnlab's own, the additive score through sigmoid and one trained query's context as a broadcast product, are
kernels (`attnlab.kernels.attention`), used while the kernels are on.

Shape legend: B batch, H heads, T query length, S key length, D model dim, Dh head dim,
Dq / Dk / Dv query / key / value feature dims, A attention (hidden) dim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnlab.core.errors import AttnlabError
from attnlab.kernels.attention import additive_applies, additive_scores, one_query_applies, one_query_context
from attnlab.kernels.dropout import dropout

SCORE_KINDS = ("dot", "general", "additive", "scaled_dot", "parameterized")


# ---------------------------------------------------------------------------------------------- masks
def padding_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """Key mask from sequence lengths.

    Args:
        lengths: (B,) number of real tokens per sequence.
        max_len: S, the padded length (default: lengths.max()).
    Returns:
        (B, S) bool, True at real tokens.
    """
    S = int(lengths.max()) if max_len is None else max_len
    return torch.arange(S, device=lengths.device)[None, :] < lengths[:, None]  # (B, S)


def causal_mask(T: int, S: int | None = None, device: torch.device | None = None) -> Tensor:
    """Causal mask: query t may attend keys 0..t (+ S - T when S > T, i.e. earlier cached keys).

    Returns:
        (T, S) bool, True where attending is allowed.
    """
    S = T if S is None else S
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)


@dataclass
class Segments:
    """Which sentence of its row each token of a packed batch belongs to.

    Shape: ids (B, L): 1, 2, ... for the sentences of the row, 0 at padding; pos (B, L): each token's position
    inside its own sentence (0 at its first token; 0 at padding).
    """

    ids: torch.Tensor
    pos: torch.Tensor

    @classmethod
    def of_rows(cls, rows: Sequence[Sequence[int]]) -> Segments:
        """From the lengths of the sentences of each row: rows[r] = [len_1, len_2, ...]."""
        width = max((sum(r) for r in rows), default=0)
        ids = torch.zeros(len(rows), width, dtype=torch.long)  # (B, L)
        pos = torch.zeros(len(rows), width, dtype=torch.long)  # (B, L)
        for r, lengths in enumerate(rows):
            start = 0
            for k, n in enumerate(lengths, start=1):
                ids[r, start:start + n] = k
                pos[r, start:start + n] = torch.arange(n)
                start += n
        return cls(ids, pos)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Segments:
        return Segments(self.ids.to(device, non_blocking=non_blocking), self.pos.to(device, non_blocking=non_blocking))


def segment_mask(query_ids: Tensor, key_ids: Tensor) -> Tensor:
    """Block-diagonal mask of packed rows (`Segments`): a query may attend a key of its own
    sentence only; padding keys (id 0) never.

    Args:
        query_ids: (B, T) sentence ids of the queries; key_ids: (B, S) of the keys (0 = padding).
    Returns:
        (B, 1, T, S) bool, True where attending is allowed.
    """
    return ((query_ids[:, :, None] == key_ids[:, None, :]) & (key_ids[:, None, :] > 0))[:, None]  # (B, 1, T, S)


def _as_4d(mask: Tensor | None) -> Tensor | None:
    """Brings a mask to a shape broadcastable to (B, H, T, S): (B, S) -> (B, 1, 1, S); (B, T, S) -> (B, 1, T, S)."""
    if mask is None:
        return None
    if mask.dtype != torch.bool:
        raise AttnlabError(f"attention masks must be bool (True = may attend), got {mask.dtype}")
    if mask.dim() == 2:
        return mask[:, None, None, :]  # (B, 1, 1, S)
    if mask.dim() == 3:
        return mask[:, None, :, :]  # (B, 1, T, S)
    if mask.dim() == 4:
        return mask
    raise AttnlabError(f"attention mask must have 2, 3 or 4 dims, got shape {tuple(mask.shape)}")


# ---------------------------------------------------------------------------------------------- core
def masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Softmax over the last dim with masked positions at exactly zero; fully masked rows are all zero.

    Args:
        scores: (..., T, S) float.
        mask: bool, broadcastable to scores, True = keep; or None.
    Returns:
        (..., T, S) weights: each row sums to 1 over kept keys, or to 0 if it keeps none.
    """
    if mask is None:
        return scores.softmax(dim=-1)
    # The most negative finite value instead of -inf: a fully masked row then gives finite (uniform) values
    # rather than NaN, and the final multiplication sets every masked weight, in every row, to exactly 0.
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return filled.softmax(dim=-1) * mask


def attend(scores: Tensor, values: Tensor, mask: Tensor | None = None,
           dropout_p: float = 0.0, training: bool = False) -> tuple[Tensor, Tensor]:
    """Weights and context from raw scores (the explicit path).

    Args:
        scores: (..., T, S); values: (..., S, Dv); mask: bool broadcastable to scores, True = keep.
    Returns:
        context (..., T, Dv) and weights (..., T, S) (before dropout).
    """
    weights = masked_softmax(scores, mask)
    dropped = dropout(weights, dropout_p, training) if dropout_p > 0 else weights
    if one_query_applies(dropped, values):  # one query trained step by step (a kernel)
        return one_query_context(dropped, values), weights  # (..., 1, Dv)
    return dropped @ values, weights  # (..., T, Dv)


# Longest key sequence for which the explicit path beats `F.scaled_dot_product_attention` on the CPU, forward and
# backward, by the query dtype (measured with benchmarks/attention_bench.py: in bf16 the CPU's flash kernel is
# several times slower at short key lengths; in fp32 the two cross near 100 keys; figures in the record). Above `EXPLICIT_MAX_SCORES` score elements the fused kernel runs whatever the length, so the
# explicit path never holds an unbounded (B, H, T, S) tensor.
EXPLICIT_MAX_KEYS = {torch.bfloat16: 512, torch.float16: 512, torch.float32: 96}
EXPLICIT_MAX_SCORES = 2**25


def explicit_is_faster(q: Tensor, k: Tensor) -> bool:
    """Whether the explicit path computes softmax(q k^T) v faster than the fused kernel for these shapes: on the CPU,
    for short key sequences (`EXPLICIT_MAX_KEYS`, by dtype) and at most `EXPLICIT_MAX_SCORES` scores."""
    if q.device.type != "cpu":
        return False
    S = k.size(-2)
    return S <= EXPLICIT_MAX_KEYS.get(q.dtype, 0) and q.numel() // q.size(-1) * S <= EXPLICIT_MAX_SCORES


# The kernels `F.scaled_dot_product_attention` may choose from for CUDA half-precision inputs: all but cuDNN's. cuDNN's
# attention builds an execution plan for every new input shape (torch 2.11 tries it first for a padding mask in
# bf16 on recent GPUs), and attnlab's shapes change at nearly every step: length-bucketed batches in training, a key
# cache one longer at each decoding step (what a new shape costs: benchmarks/trainer_steps.py, docs/results.md).
FUSED_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def planned_per_shape(q: Tensor) -> bool:
    """Whether `F.scaled_dot_product_attention` could pick cuDNN's attention, which plans per shape, for q: CUDA
    and half precision (its only dtypes)."""
    return q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)


def fused_attention(q: Tensor, k: Tensor, v: Tensor, **kwargs) -> Tensor:
    """`F.scaled_dot_product_attention(q, k, v, **kwargs)` without cuDNN's kernel (see `FUSED_BACKENDS`)."""
    if not planned_per_shape(q):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)
    with sdpa_kernel(FUSED_BACKENDS):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                                 scale: float | None = None, dropout_p: float = 0.0, training: bool = False,
                                 need_weights: bool = False, causal: bool = False, kernel: str = "auto"
                                 ) -> tuple[Tensor, Tensor | None]:
    """softmax(q k^T * scale) v (Vaswani et al. 2017, eq. 1); scale defaults to 1/sqrt(Dh).

    Args:
        q: (B, H, T, Dh); k: (B, H, S, Dh); v: (B, H, S, Dv).
        mask: bool broadcastable to (B, H, T, S), True = may attend; or None.
        need_weights: if True, the explicit path runs and returns the weights.
        causal: query t attends keys 0..t + (S - T) only: aligned bottom-right, so with S > T the queries are
            the last T positions of the keys (a decoder continuing after S - T cached keys), as `causal_mask`
            says; S < T is refused. With S == T and no other mask the fused kernel uses its built-in causal
            mode (flash attention on GPUs, which aligns top-left and so is used only when both agree).
        kernel: without need_weights, which path computes the context: "fused"
            (`F.scaled_dot_product_attention`), "explicit" (the weights written out, then dropped), or "auto":
            the explicit path where `explicit_is_faster` (short sequences on the CPU), else the fused one.
    Returns:
        context (B, H, T, Dv) and weights (B, H, T, S) or None.
    """
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    if causal and q.size(-2) > k.size(-2):
        raise AttnlabError(f"causal attention needs at least as many keys as queries, got T={q.size(-2)} queries "
                           f"and S={k.size(-2)} keys")
    if kernel not in ("auto", "fused", "explicit"):
        raise AttnlabError(f"attention kernel {kernel!r} is not one of 'auto', 'fused', 'explicit'")
    explicit = need_weights or kernel == "explicit" or (kernel == "auto" and explicit_is_faster(q, k))
    if causal and mask is None and not explicit and q.size(-2) == k.size(-2):
        out = fused_attention(q, k, v, dropout_p=dropout_p if training else 0.0, scale=scale, is_causal=True)
        return out, None
    if causal:
        tri = causal_mask(q.size(-2), k.size(-2), device=q.device)  # (T, S)
        mask = tri if mask is None else mask & tri
    if explicit:
        scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, S)
        context, weights = attend(scores, v, mask, dropout_p, training)
        return context, weights if need_weights else None
    if mask is None:
        out = fused_attention(q, k, v, dropout_p=dropout_p if training else 0.0, scale=scale)
        return out, None
    # Kernels differ on fully masked rows (NaN on some): give those rows every key, then zero their output.
    has_key = mask.any(dim=-1, keepdim=True)  # (B|1, H|1, T|1, 1)
    safe_mask = mask | ~has_key
    out = fused_attention(q, k, v, attn_mask=safe_mask, dropout_p=dropout_p if training else 0.0, scale=scale)
    return out * has_key, None  # (B, H, T, Dv)


# ---------------------------------------------------------------------------------------------- scores
class AdditiveScore(nn.Module):
    """Bahdanau et al. (2015), A.1.2: e_ts = v_a^T tanh(W_a q_t + U_a k_s).

    U_a k does not depend on the query: `project_keys` computes it once per sentence for step-wise decoding.
    In float32 on the CPU the same scores come from `attnlab.kernels.attention.additive_scores` (through sigmoid,
    faster there) while the kernels are on.
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int) -> None:
        super().__init__()
        self.W_a = nn.Linear(query_dim, attn_dim, bias=False)
        self.U_a = nn.Linear(key_dim, attn_dim, bias=True)
        self.v_a = nn.Linear(attn_dim, 1, bias=False)

    def project_keys(self, keys: Tensor) -> Tensor:
        """(B, S, Dk) -> (B, S, A)."""
        return self.U_a(keys)

    def forward(self, query: Tensor, proj_keys: Tensor) -> Tensor:
        """query (B, T, Dq), proj_keys (B, S, A) from `project_keys` -> scores (B, T, S)."""
        hidden = self.W_a(query)[:, :, None, :] + proj_keys[:, None, :, :]  # (B, T, S, A)
        if additive_applies(hidden):
            return additive_scores(hidden, self.v_a.weight[0])  # (B, T, S)
        return self.v_a(torch.tanh(hidden)).squeeze(-1)  # (B, T, S)


class Attention(nn.Module):
    """Single-head attention of the encoder-decoder literature, one score function chosen by `kind`.

    Args:
        kind: one of "dot", "general", "additive", "scaled_dot", "parameterized" (see module docstring).
        query_dim: Dq. key_dim: Dk (must equal Dq for "dot" and "scaled_dot"). value_dim: Dv (default Dk).
        attn_dim: A, the hidden size of "additive" and the projection size of "parameterized"
            (default Dq).
        scaled: divide the "dot", "general" and "parameterized" scores by sqrt of the query's size, as
            "scaled_dot" does (Vaswani et al. 2017, sec. 3.2.1): unscaled scores grow with training until the
            softmax is one-hot on one source position and learns no more (the Luong models of docs/results.md).

    Shape:
        query (B, T, Dq), keys (B, S, Dk), values (B, S, Dv) (default: keys), mask (B, S) or (B, T, S) bool.
        Returns context (B, T, Dv) -- (B, T, A) for "parameterized", whose values pass W^V -- and weights
        (B, T, S), or None when need_weights is False and a fused kernel computed the context.
    """

    def __init__(self, kind: str, query_dim: int, key_dim: int, value_dim: int | None = None,
                 attn_dim: int | None = None, scaled: bool = False) -> None:
        super().__init__()
        if kind not in SCORE_KINDS:
            raise AttnlabError(f"attention kind {kind!r} is not one of {', '.join(SCORE_KINDS)}")
        if kind in ("dot", "scaled_dot") and query_dim != key_dim:
            raise AttnlabError(f"{kind} attention needs query_dim ({query_dim}) == key_dim ({key_dim})")
        if scaled and kind == "additive":
            raise AttnlabError("additive attention has no scale (its scores pass tanh and v_a)")
        self.kind = kind
        self.scaled = scaled or kind == "scaled_dot"
        value_dim = key_dim if value_dim is None else value_dim
        attn_dim = query_dim if attn_dim is None else attn_dim
        self.out_dim = attn_dim if kind == "parameterized" else value_dim
        if kind == "general":
            self.W_a = nn.Linear(key_dim, query_dim, bias=False)  # q^T W_a k computed as q . (W_a k)
        elif kind == "additive":
            self.score = AdditiveScore(query_dim, key_dim, attn_dim)
        elif kind == "parameterized":
            self.W_Q = nn.Linear(query_dim, attn_dim, bias=False)
            self.W_K = nn.Linear(key_dim, attn_dim, bias=False)
            self.W_V = nn.Linear(value_dim, attn_dim, bias=False)

    def precompute(self, keys: Tensor, values: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The query-independent part, computed once per source sentence.

        Args:
            keys (B, S, Dk), values (B, S, Dv) or None (= keys).
        Returns:
            (keys', values') to pass to `forward(..., precomputed=True)`.
        """
        values = keys if values is None else values
        if self.kind == "general":
            return self.W_a(keys), values  # (B, S, Dq)
        if self.kind == "additive":
            return self.score.project_keys(keys), values  # (B, S, A)
        if self.kind == "parameterized":
            return self.W_K(keys), self.W_V(values)  # (B, S, A) each
        return keys, values

    def forward(self, query: Tensor, keys: Tensor, values: Tensor | None = None, mask: Tensor | None = None,
                need_weights: bool = True, precomputed: bool = False) -> tuple[Tensor, Tensor | None]:
        if not precomputed:
            keys, values = self.precompute(keys, values)
        elif values is None:
            values = keys
        if mask is not None and mask.dim() == 2:
            mask = mask[:, None, :]  # (B, 1, S)
        if self.kind == "additive":
            return attend(self.score(query, keys), values, mask)
        q = self.W_Q(query) if self.kind == "parameterized" else query
        scale = 1.0 / math.sqrt(q.size(-1)) if self.scaled else 1.0
        heads_mask = None if mask is None else mask[:, None]  # (B, 1, T|1, S)
        context, weights = scaled_dot_product_attention(
            q[:, None], keys[:, None], values[:, None], heads_mask, scale=scale, need_weights=need_weights)
        return context[:, 0], None if weights is None else weights[:, 0]  # (B, T, Dv), (B, T, S)


# ---------------------------------------------------------------------------------------------- learned query
class LearnedQueryAttention(nn.Module):
    """Many-to-one attention of the IF3270 notes (the Keras `attention` layer of their Fibonacci example):
    e_s = tanh(k_s . w + b_s), a = softmax_s(e), c = sum_s a_s k_s.

    The query is a learned vector w (Dk) instead of a decoder state, and every position s has its own bias b_s,
    so the layer works at one fixed length S: Dk + S parameters (22 for H = 2 states over 20 time steps).
    Initialised as the Keras layer: w ~ N(0, 0.05^2), b = 0.

    Args:
        key_dim: Dk, the size of each state k_s. length: S, the number of positions.

    Shape:
        keys (B, S, Dk), mask (B, S) bool or None (True = may attend).
        Returns context (B, Dk) and weights (B, S).
    """

    def __init__(self, key_dim: int, length: int) -> None:
        super().__init__()
        if key_dim < 1 or length < 1:
            raise AttnlabError(f"LearnedQueryAttention needs key_dim ({key_dim}) and length ({length}) >= 1")
        self.length = length
        self.w = nn.Parameter(torch.randn(key_dim) * 0.05)
        self.b = nn.Parameter(torch.zeros(length))

    def score(self, keys: Tensor) -> Tensor:
        """keys (B, S, Dk) -> e (B, S)."""
        if keys.dim() != 3 or keys.size(1) != self.length or keys.size(2) != self.w.numel():
            raise AttnlabError(f"LearnedQueryAttention expects keys of shape (B, {self.length}, {self.w.numel()}), "
                               f"got {tuple(keys.shape)}")
        return torch.tanh(keys @ self.w + self.b)  # (B, S)

    def forward(self, keys: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        scores = self.score(keys)[:, None, :]  # (B, 1, S): one (learned) query
        context, weights = attend(scores, keys, None if mask is None else mask[:, None, :])
        return context[:, 0], weights[:, 0]  # (B, Dk), (B, S)


# ---------------------------------------------------------------------------------------------- multi-head
class MultiHeadAttention(nn.Module):
    """Multi-head attention, Vaswani et al. (2017) 3.2.2: Concat(head_1..head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) with scaled dot-product scores.

    Args:
        d_model: D. h: number of heads (D must be divisible by h). dropout: on the attention weights.
        bias: biases on the four projections. kdim / vdim: key / value feature dims (default D).

    Shape:
        query (B, T, D), key (B, S, kdim), value (B, S, vdim); mask bool broadcastable to (B, H, T, S)
        ((B, S) key-padding and (B, T, S) masks are accepted too), True = may attend.
        Returns output (B, T, D) and weights (B, H, T, S) or None.

    Example:
        >>> mha = MultiHeadAttention(d_model=16, h=4)
        >>> x = torch.randn(2, 5, 16)
        >>> out, w = mha(x, x, x, need_weights=True)
        >>> out.shape, w.shape
        (torch.Size([2, 5, 16]), torch.Size([2, 4, 5, 5]))
    """

    def __init__(self, d_model: int, h: int, dropout: float = 0.0, bias: bool = True,
                 kdim: int | None = None, vdim: int | None = None) -> None:
        super().__init__()
        if d_model % h != 0:
            raise AttnlabError(f"d_model ({d_model}) must be divisible by the number of heads h ({h})")
        self.d_model, self.h, self.d_head, self.dropout = d_model, h, d_model // h, dropout
        self.W_Q = nn.Linear(d_model, d_model, bias=bias)
        self.W_K = nn.Linear(kdim or d_model, d_model, bias=bias)
        self.W_V = nn.Linear(vdim or d_model, d_model, bias=bias)
        self.W_O = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, H, L, Dh)."""
        B, L, _ = x.shape
        return x.view(B, L, self.h, self.d_head).transpose(1, 2)  # (B, H, L, Dh)

    def _packed(self, x: Tensor, linears: tuple[nn.Linear, ...]) -> tuple[Tensor, ...]:
        """Several projections of the same input as one matmul (one large GEMM is faster than three small
        ones), split back: (B, L, D) -> tuple of (B, L, D)."""
        weight = torch.cat([lin.weight for lin in linears])  # (k*D, D)
        bias = None if linears[0].bias is None else torch.cat([lin.bias for lin in linears])
        return F.linear(x, weight, bias).chunk(len(linears), dim=-1)

    def project_kv(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values projected and split into heads: (B, S, *) -> (B, H, S, Dh) each."""
        if key is value and self.W_K.in_features == self.W_V.in_features:
            k, v = self._packed(key, (self.W_K, self.W_V))
        else:
            k, v = self.W_K(key), self.W_V(value)
        return self.split_heads(k), self.split_heads(v)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                need_weights: bool = False, causal: bool = False) -> tuple[Tensor, Tensor | None]:
        """causal: self-attention where position t sees 0..t (combined with `mask` if given)."""
        if query is key and key is value and self.W_Q.in_features == self.W_K.in_features == self.W_V.in_features:
            q, k, v = (self.split_heads(t) for t in self._packed(query, (self.W_Q, self.W_K, self.W_V)))
            return self._attend_heads(q, k, v, mask, need_weights, causal)
        k, v = self.project_kv(key, value)  # (B, H, S, Dh)
        return self._attend_heads(self.split_heads(self.W_Q(query)), k, v, mask, need_weights, causal)

    def attend_projected(self, query: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                         need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """Attention with keys/values already projected (e.g. from a cache).

        Args:
            query (B, T, D); k, v (B, H, S, Dh); mask as in `forward`.
        Returns:
            output (B, T, D), weights (B, H, T, S) or None.
        """
        return self._attend_heads(self.split_heads(self.W_Q(query)), k, v, mask, need_weights)

    def _attend_heads(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, need_weights: bool,
                      causal: bool = False) -> tuple[Tensor, Tensor | None]:
        """q (B, H, T, Dh), k, v (B, H, S, Dh) -> W^O Concat(heads) (B, T, D), weights (B, H, T, S) or None."""
        B, _, T, _ = q.shape
        context, weights = scaled_dot_product_attention(
            q, k, v, _as_4d(mask), dropout_p=self.dropout, training=self.training, need_weights=need_weights,
            causal=causal)
        context = context.transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, D)
        return self.W_O(context), weights
