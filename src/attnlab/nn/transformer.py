"""The Transformer encoder-decoder (Vaswani et al. 2017, "Attention Is All You Need").

- Embeddings scaled by sqrt(d_model) plus sinusoidal (3.5) or learned positions, then dropout (5.4).
- Encoder layer: self-attention and the position-wise FFN (3.3), each in a residual block with LayerNorm.
  ``norm = "post"`` is the paper's LayerNorm(x + Dropout(Sublayer(x))) (5.4); ``norm = "pre"`` is
  x + Dropout(Sublayer(LayerNorm(x))), with a final LayerNorm after each stack.
- Decoder layer: masked self-attention, encoder-decoder (cross) attention, FFN (3.1).
- Dropout placement and parameter names follow `torch.nn.TransformerEncoderLayer` / `TransformerDecoderLayer`,
  so the tests load the same weights into both and compare outputs.

Step-wise decoding (the `attnlab.decode.search` interface) keeps a KV cache: each step projects only its own token
and attends to the cached keys/values of the earlier ones; the cross-attention keys/values of every decoder
layer are projected once per sentence in `encode`. A step therefore costs O(t), not a re-run of the prefix. The
cache has room to grow (`TransformerState`: a step writes in place, a beam's reorder copies the decoded positions
once), and the beams of a sentence share its encoder output (`TransformerEncoderOutput.beams`). Because a step
writes in place, a state steps once: stepping it again is an error (`CacheClock`), and `state.fork()` makes the
copy a branching search steps instead.

All attention goes through `attnlab.nn.attention.MultiHeadAttention` with boolean masks (True = may attend); the
fused kernel runs unless attention weights are requested.

Shape legend: B batch, S source length, T target length, t target positions decoded so far, D d_model,
H heads (h), Dh head dim (D / h), F d_ff, N layers, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.core.config import MAX_DIM, MAX_LAYERS, MAX_LEN
from attnlab.core.errors import AttnlabError
from attnlab.kernels.dropout import Dropout
from attnlab.kernels.linear_ce import linear_cross_entropy
from attnlab.nn.attention import MultiHeadAttention, Segments, padding_mask, segment_mask


@dataclass
class TransformerConfig:
    """A Transformer encoder-decoder; the defaults are the paper's base model (Table 3), post-norm."""

    d_model: int = 512
    h: int = 8
    d_ff: int = 2048
    enc_layers: int = 6
    dec_layers: int = 6
    dropout: float = 0.1  # P_drop: sublayer outputs, embeddings + positions, inside the FFN
    attn_dropout: float = 0.0  # on the attention weights
    activation: str = "relu"
    norm: str = "post"
    positions: str = "sinusoidal"
    max_len: int = 1024  # longest sequence the positions cover
    tie_embeddings: str = "none"  # decoder: target embedding = output layer; all: source too (joint vocab)
    layer_norm_eps: float = 1e-5
    bias: bool = True  # biases of the linear layers and LayerNorms
    # an output-layer bias next to tied embeddings (an imported MarianMT's final_logits_bias); untied has one anyway
    generator_bias: bool = False

    # gelu: exact (erf); gelu_tanh: its tanh approximation (Hendrycks & Gimpel 2016, 2), GPT-2's "gelu_new"
    CHOICES: ClassVar[dict] = {"activation": ("relu", "gelu", "gelu_tanh", "silu", "swish"), "norm": ("post", "pre"),
                               "positions": ("sinusoidal", "learned"), "tie_embeddings": ("none", "decoder", "all")}
    LIMITS: ClassVar[dict] = {"d_model": (1, MAX_DIM), "h": (1, MAX_DIM), "d_ff": (1, 4 * MAX_DIM),
                              "enc_layers": (1, MAX_LAYERS), "dec_layers": (1, MAX_LAYERS), "dropout": (0.0, 1.0),
                              "attn_dropout": (0.0, 1.0), "max_len": (1, MAX_LEN), "layer_norm_eps": (0.0, 1.0)}

    def __post_init__(self) -> None:
        for name in ("d_model", "h", "d_ff", "enc_layers", "dec_layers", "max_len"):
            if getattr(self, name) < 1:
                raise AttnlabError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.h != 0:
            raise AttnlabError(f"d_model ({self.d_model}) must be divisible by the number of heads h ({self.h})")
        for name in ("dropout", "attn_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise AttnlabError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.layer_norm_eps <= 0:
            raise AttnlabError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps}")
        for name, options in self.CHOICES.items():
            if getattr(self, name) not in options:
                raise AttnlabError(f"{name}: {getattr(self, name)!r} is not one of "
                                   f"{', '.join(repr(o) for o in options)}")


@dataclass
class TransformerEncoderOutput:
    memory: Tensor  # (B, S, D) top encoder layer (after the final LayerNorm for pre-norm)
    mask: Tensor  # (B, S) bool, True at real tokens
    # heads before layers: a layer's slice [:, :, i] then folds (B, H) into one batch dimension of a matmul
    # without a copy, where the (B, N_dec, ...) layout's slice [:, i] made every attention product copy it
    k: Tensor  # (B, H, N_dec, S, Dh) cross-attention keys of every decoder layer
    v: Tensor  # (B, H, N_dec, S, Dh) cross-attention values
    # decoder rows per sentence: beam search decodes B * beams rows, row r in sentence r // beams, and every beam
    # of a sentence attends to the one copy of its memory (its K queries in one product, not K copies read)
    beams: int = 1

    def select_batch(self, index: Tensor) -> TransformerEncoderOutput:
        """Decoder rows `index` (`attnlab.decode.search.select_batch` calls it). Rows that come in whole groups of one
        sentence each (beam search's start: each sentence K times in a row; later, the beams of the sentences still
        searching) share one memory row per group, without a copy when every sentence stays; other rows are
        copied one memory row each."""
        B, n = self.mask.size(0), index.numel()
        rows = index.to(self.mask.device) // self.beams  # (n,) the memory row of each decoder row asked for
        group = self.beams if self.beams > 1 else max(n // B, 1)  # decoder rows per sentence
        beams = 1
        if group > 1 and n % group == 0:
            groups = rows.view(-1, group)  # (n / group, group)
            if torch.equal(groups, groups[:, :1].expand_as(groups)):
                rows, beams = groups[:, 0], group
        if beams > 1 and torch.equal(rows, torch.arange(B, device=rows.device)):
            return dataclasses.replace(self, beams=beams)
        return TransformerEncoderOutput(*(x.index_select(0, rows) for x in (self.memory, self.mask, self.k, self.v)),
                                        beams=beams)


CACHE_ROOM = 16  # positions a self-attention cache first makes room for; it doubles when full


class CacheClock:
    """The positions written so far into one pair of cache buffers, shared by every `TransformerState` on them.

    A state of t positions may step (write slot t) only while its buffers hold exactly t: it is the newest state on
    them. Stepping an older one would overwrite the slot a later state reads, so `decoder_step` refuses it.
    """

    __slots__ = ("positions",)

    def __init__(self, positions: int) -> None:
        self.positions = positions


@dataclass
class TransformerState:
    """The self-attention keys and values of the positions decoded so far, every layer, in buffers with room for
    more: a step writes its own position in place (no copy of the cache), and the room doubles when full.

    A step writes slot t of the buffers it was given, so each state steps once: stepping one state twice (a
    branching search) raises an AttnlabError, since the second step would overwrite the first one's keys and
    values. To branch, step `state.fork()` (a copy of the t decoded positions), or `select_batch` the rows first
    (beam search does: its reorder copies the rows it keeps).

    Example (one state, two continuations):
        >>> model = TransformerSeq2Seq(12, 12, TransformerConfig(d_model=8, h=2, d_ff=16, enc_layers=1,
        ...                                                      dec_layers=1)).eval()
        >>> enc = model.encode(torch.tensor([[5, 6, 2]]), torch.tensor([3]))
        >>> _, state, _ = model.step(torch.tensor([1]), model.init_state(enc), enc)
        >>> lp_a, _, _ = model.step(torch.tensor([7]), state.fork(), enc)
        >>> lp_b, _, _ = model.step(torch.tensor([8]), state, enc)
        >>> _ = model.step(torch.tensor([9]), state, enc)
        Traceback (most recent call last):
        attnlab.core.errors.AttnlabError: this TransformerState (1 position) was stepped already: ...
    """

    k_room: Tensor  # (B, H, N_dec, C, Dh), C >= t (heads before layers, as in TransformerEncoderOutput)
    v_room: Tensor  # (B, H, N_dec, C, Dh)
    t: int  # positions decoded so far (the same for every row)
    clock: CacheClock | None = dataclasses.field(default=None, repr=False, compare=False)  # None: new buffers

    def __post_init__(self) -> None:
        if self.clock is None:
            self.clock = CacheClock(self.t)

    @property
    def k(self) -> Tensor:
        return self.k_room[:, :, :, :self.t]  # (B, H, N_dec, t, Dh)

    @property
    def v(self) -> Tensor:
        return self.v_room[:, :, :, :self.t]  # (B, H, N_dec, t, Dh)

    def select_batch(self, index: Tensor) -> TransformerState:
        """Rows `index` of the cache (a beam's reorder) in new buffers of the same room, in one pass: only the t
        positions decoded so far are copied. `attnlab.decode.search.select_batch` calls it."""
        index = index.to(self.k_room.device)
        rooms = []
        for cache, room in ((self.k, self.k_room), (self.v, self.v_room)):
            new = room.new_empty((index.numel(),) + room.shape[1:])
            torch.index_select(cache, 0, index, out=new[:, :, :, :self.t])
            rooms.append(new)
        return TransformerState(rooms[0], rooms[1], self.t)

    def fork(self) -> TransformerState:
        """A copy to step independently of this state (a branch of a search): new buffers of the same room, the t
        decoded positions copied."""
        rooms = []
        for cache, room in ((self.k, self.k_room), (self.v, self.v_room)):
            new = room.new_empty(room.shape)
            new[:, :, :, :self.t] = cache
            rooms.append(new)
        return TransformerState(rooms[0], rooms[1], self.t)


# ---------------------------------------------------------------------------------------------- embeddings
class PositionalEncoding(nn.Module):
    """Adds position information: sinusoids (3.5), PE(pos, 2i) = sin(pos / 10000^(2i/D)),
    PE(pos, 2i+1) = cos(pos / 10000^(2i/D)), or a learned (max_len, D) table (3.5, "learned positional
    embeddings", Table 3 row E).

    Shape: x (B, L, D) -> (B, L, D) with the positions offset .. offset + L - 1 added (offset: incremental
    decoding), or with `positions` (B, L) (packed rows: each sentence counts from 0).
    """

    def __init__(self, d_model: int, max_len: int = 1024, learned: bool = False) -> None:
        super().__init__()
        self.max_len = max_len
        self.learned = nn.Embedding(max_len, d_model) if learned else None
        # made on the CPU whatever the default device (a model counted on the meta device still computes its table
        # natively, without torch's Python reference ops) and moved with the model
        pos = torch.arange(max_len, dtype=torch.float64, device="cpu")[:, None]  # (L, 1)
        inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64, device="cpu") / d_model)
        pe = torch.zeros(max_len, d_model, dtype=torch.float64, device="cpu")
        pe[:, 0::2] = torch.sin(pos * inv_freq)
        pe[:, 1::2] = torch.cos(pos * inv_freq[: d_model // 2])
        # not persistent: a function of the config, so checkpoints need not carry it
        self.register_buffer("pe", None if learned else pe.float(), persistent=False)

    def forward(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        L = x.size(1)
        if offset + L > self.max_len:
            raise AttnlabError(f"sequence positions up to {offset + L} exceed the model's max_len ({self.max_len})")
        table = self.learned.weight if self.learned is not None else self.pe
        if positions is not None:
            return x + table[positions].to(x.dtype)  # (B, L, D)
        return x + table[offset:offset + L].to(x.dtype)  # (B, L, D)


# ---------------------------------------------------------------------------------------------- layers
def gelu_tanh(x: Tensor) -> Tensor:
    """GELU's tanh approximation (Hendrycks & Gimpel 2016, 2): Hugging Face's "gelu_new" and "gelu_pytorch_tanh"."""
    return F.gelu(x, approximate="tanh")


class FeedForward(nn.Module):
    """Position-wise FFN (3.3, eq. 2): FFN(x) = act(x W_1 + b_1) W_2 + b_2, dropout after the activation."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.linear1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.linear2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        self.dropout = Dropout(cfg.dropout)
        # silu = swish (Ramachandran et al. 2017, x * sigmoid(x)): MarianMT's OPUS models use it; gelu_tanh:
        # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), GPT-2's
        self.activation = {"gelu": F.gelu, "gelu_tanh": gelu_tanh, "silu": F.silu, "swish": F.silu
                           }.get(cfg.activation, F.relu)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))  # (B, L, D)


class _Residual(nn.Module):
    """Shared residual plumbing of the encoder and decoder layers: `inp` gives a sublayer its input,
    `add` closes the block. Post-norm: LayerNorm(x + Dropout(sublayer(x))); pre-norm: x + Dropout(sublayer(LN(x)))."""

    def __init__(self, cfg: TransformerConfig, n_norms: int) -> None:
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.dropout = Dropout(cfg.dropout)
        for i in range(1, n_norms + 1):  # norm1, norm2, (norm3): torch's names
            self.add_module(f"norm{i}", nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps, bias=cfg.bias))

    def inp(self, x: Tensor, norm: nn.LayerNorm) -> Tensor:
        return norm(x) if self.pre else x

    def add(self, x: Tensor, sub: Tensor, norm: nn.LayerNorm) -> Tensor:
        x = x + self.dropout(sub)
        return x if self.pre else norm(x)


class EncoderLayer(_Residual):
    """Self-attention + FFN, each in a residual block (3.1).

    Shape: x (B, S, D), mask bool broadcastable to (B, H, S, S) (e.g. (B, 1, 1, S) key padding) or None
    -> x (B, S, D), self-attention weights (B, H, S, S) or None.
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__(cfg, n_norms=2)
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.h, cfg.attn_dropout, cfg.bias)
        self.ff = FeedForward(cfg)

    def forward(self, x: Tensor, mask: Tensor | None = None, need_weights: bool = False
                ) -> tuple[Tensor, Tensor | None]:
        h = self.inp(x, self.norm1)
        a, weights = self.self_attn(h, h, h, mask, need_weights)  # (B, S, D)
        x = self.add(x, a, self.norm1)
        x = self.add(x, self.ff(self.inp(x, self.norm2)), self.norm2)
        return x, weights


class DecoderLayer(_Residual):
    """Masked self-attention, cross-attention over the encoder output, FFN (3.1).

    cross_attention=False drops the middle block: the layer of a decoder-only language model (`attnlab.families.lm`).
    Its norms are then norm1 (self-attention) and norm2 (FFN), the names of `torch.nn.TransformerEncoderLayer`,
    which computes the same with a causal mask; with cross-attention they are norm1, norm2 (cross), norm3 (FFN),
    the names of `torch.nn.TransformerDecoderLayer`.

    `forward` runs all T positions at once (teacher forcing); `step` runs one position against a KV cache.
    """

    def __init__(self, cfg: TransformerConfig, cross_attention: bool = True) -> None:
        super().__init__(cfg, n_norms=3 if cross_attention else 2)
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.h, cfg.attn_dropout, cfg.bias)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.h, cfg.attn_dropout, cfg.bias) if cross_attention \
            else None
        self.ff = FeedForward(cfg)

    @property
    def ff_norm(self) -> nn.LayerNorm:
        return self.norm3 if self.cross_attn is not None else self.norm2

    def forward(self, y: Tensor, memory: Tensor | None = None, self_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, need_weights: bool = False, causal: bool = True
                ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Shape: y (B, T, D), memory (B, S, D) (None without cross-attention), self_mask bool broadcastable to
        (B, H, T, T) and/or causal=True (the fused kernel's own causal mode), memory_mask broadcastable to
        (B, H, T, S) -> y (B, T, D), self weights (B, H, T, T), cross weights (B, H, T, S) (None without
        need_weights or without cross-attention)."""
        h = self.inp(y, self.norm1)
        a, self_w = self.self_attn(h, h, h, self_mask, need_weights, causal=causal)  # (B, T, D)
        y = self.add(y, a, self.norm1)
        memory_kv = self.cross_attn.project_kv(memory, memory) if self.cross_attn is not None else None
        y, cross_w = self._cross_ff(y, memory_kv, memory_mask, need_weights)
        return y, self_w, cross_w

    def step(self, y_t: Tensor, cache: tuple[Tensor, Tensor], memory_kv: tuple[Tensor, Tensor] | None = None,
             memory_mask: Tensor | None = None, need_weights: bool = False, beams: int = 1
             ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """One position t against the cached keys/values of positions 0..t-1.

        `cache` holds positions 0..t-1 and room for position t: this step writes its own key and value into the
        last slot, in place, and attends over all t + 1 (`decoder_step` gives it a view of the state's buffers,
        which have room for later positions: the cache is not copied to grow).

        Shape: y_t (B, 1, D), cache (k, v) (B, H, t + 1, Dh) each, memory_kv (k, v) (B / beams, H, S, Dh) each
        from `self.cross_attn.project_kv(memory, memory)` (None without cross-attention), memory_mask
        broadcastable to (B / beams, H, 1, S) -> y_t (B, 1, D), self weights (B, H, 1, t + 1), cross weights
        (B, H, 1, S) (None without need_weights). beams: rows per memory row (`TransformerEncoderOutput.beams`).
        """
        h = self.inp(y_t, self.norm1)
        k_t, v_t = self.self_attn.project_kv(h, h)  # (B, H, 1, Dh)
        k, v = cache
        k[:, :, -1:] = k_t
        v[:, :, -1:] = v_t
        a, self_w = self.self_attn.attend_projected(h, k, v, None, need_weights)  # no future keys exist yet
        y_t = self.add(y_t, a, self.norm1)
        y_t, cross_w = self._cross_ff(y_t, memory_kv, memory_mask, need_weights, beams)
        return y_t, self_w, cross_w

    def _cross_ff(self, y: Tensor, memory_kv: tuple[Tensor, Tensor] | None, memory_mask: Tensor | None,
                  need_weights: bool, beams: int = 1) -> tuple[Tensor, Tensor | None]:
        """Cross-attention and FFN blocks. beams > 1 (one position, y (B, 1, D)): the beams of a sentence are its
        `beams` queries against its one memory row, (B / beams, beams, D)."""
        cross_w = None
        if self.cross_attn is not None:
            h = self.inp(y, self.norm2)
            B, T, D = h.shape
            if beams > 1:
                h = h.reshape(B // beams, beams * T, D)  # T == 1
            a, cross_w = self.cross_attn.attend_projected(h, *memory_kv, memory_mask, need_weights)  # (B, T, D)
            if beams > 1:
                a = a.reshape(B, T, D)
                if cross_w is not None:  # (B / beams, H, beams, S) -> (B, H, 1, S)
                    cross_w = cross_w.transpose(1, 2).reshape(B, cross_w.size(1), T, cross_w.size(-1))
            y = self.add(y, a, self.norm2)
        return self.add(y, self.ff(self.inp(y, self.ff_norm)), self.ff_norm), cross_w


def decoder_step(layers: nn.ModuleList, y: Tensor, state: TransformerState,
                 memory_kv: tuple[Tensor, Tensor] | None = None, memory_mask: Tensor | None = None,
                 need_weights: bool = False, beams: int = 1
                 ) -> tuple[Tensor, TransformerState, Tensor | None, Tensor | None]:
    """One position through a stack of `DecoderLayer`s with the KV cache: the one cached step of the
    encoder-decoder and of the decoder-only LM.

    Shape: y (B, 1, D) (embedded token at position state.t), state.k/v (B, H, N, t, Dh), memory_kv (k, v)
    (B / beams, H, N, S, Dh) each or None (beams: `TransformerEncoderOutput.beams`) -> y (B, 1, D), state with
    k/v (B, H, N, t + 1, Dh) (the same buffers unless they were full: see `TransformerState`), self weights
    (B, N, H, t + 1) and cross weights (B, N, H, S) (None without need_weights or cross-attention).
    """
    B, H, N, room, Dh = state.k_room.shape
    t = state.t
    k, v, clock = state.k_room, state.v_room, state.clock
    if t == room:  # full: double the room of every layer's cache, one copy each (the cache keeps its dtype)
        room = max(2 * room, CACHE_ROOM)
        k, v, clock = k.new_empty(B, H, N, room, Dh), v.new_empty(B, H, N, room, Dh), CacheClock(t)
        k[:, :, :, :t] = state.k
        v[:, :, :, :t] = state.v
    elif clock.positions != t:  # slot t belongs to a later state already: writing it would change that state
        raise AttnlabError(f"this TransformerState ({t} position{'s' * (t != 1)}) was stepped already: its cache "
                           f"buffers hold {clock.positions} positions, and stepping it again would overwrite the "
                           "later state's keys and values; step state.fork() to branch")
    self_ws, cross_ws = [], []
    for i, layer in enumerate(layers):
        kv_i = (memory_kv[0][:, :, i], memory_kv[1][:, :, i]) if memory_kv is not None else None
        cache = (k[:, :, i, :t + 1], v[:, :, i, :t + 1])  # (B, H, t + 1, Dh) each, slot t written by the layer
        y, self_w, cross_w = layer.step(y, cache, kv_i, memory_mask, need_weights, beams)  # (B, 1, D)
        self_ws.append(self_w)
        cross_ws.append(cross_w)
    clock.positions = t + 1  # slot t is this step's: the state it was given is spent
    state = TransformerState(k, v, t + 1, clock)  # (B, H, N, t + 1, Dh) decoded
    self_w = torch.stack(self_ws, dim=1)[:, :, :, 0] if need_weights else None  # (B, N, H, t + 1)
    cross_w = torch.stack(cross_ws, dim=1)[:, :, :, 0] if need_weights and memory_kv is not None else None
    return y, state, self_w, cross_w  # cross_w (B, N, H, S)


def empty_state(batch: int, layers: int, heads: int, head_dim: int, like: Tensor) -> TransformerState:
    """Empty self-attention caches (B, H, N, 0, Dh) with the dtype and device of `like` (no room yet)."""
    return TransformerState(like.new_empty(batch, heads, layers, 0, head_dim),
                            like.new_empty(batch, heads, layers, 0, head_dim), 0)


# ---------------------------------------------------------------------------------------------- model
def init_transformer_weights(model: nn.Module, d_model: int) -> None:
    """Xavier-uniform matrices and zero biases (as torch.nn.Transformer and the Annotated Transformer do for
    matrices); embeddings N(0, D^-0.5), so that scaled by sqrt(D) they have unit variance; padding rows zero."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=d_model ** -0.5)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()


class TransformerSeq2Seq(nn.Module):
    """Transformer encoder-decoder implementing the `attnlab.decode.search` interface.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes (must be equal for ``tie_embeddings = "all"``).
        cfg: the `TransformerConfig`.

    Shape:
        forward: src (B, S), src_lengths (B,), tgt_in (B, T) -> logits (B, T, V); for packed rows (several
        sentences per row, `attnlab.data.batching.collate_packed_seq2seq`) also src_segments (B, S) and
        tgt_segments (B, T), which restrict every attention to the sentence's own tokens.
        step: prev (B,) -> log-probs (B, V) float32, state, cross-attention weights (B, N_dec, H, S) of every
        decoder layer and head for this step (None without need_weights).

    Example:
        >>> model = TransformerSeq2Seq(20, 20, TransformerConfig(d_model=16, h=4, d_ff=32)).eval()
        >>> model(torch.randint(4, 20, (2, 7)), torch.tensor([7, 5]), torch.randint(4, 20, (2, 6))).shape
        torch.Size([2, 6, 20])
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, cfg: TransformerConfig) -> None:
        super().__init__()
        if cfg.tie_embeddings == "all" and src_vocab != tgt_vocab:
            raise AttnlabError(f"tie_embeddings = 'all' needs a joint vocabulary, but src_vocab ({src_vocab}) "
                               f"!= tgt_vocab ({tgt_vocab})")
        self.cfg = cfg
        D = cfg.d_model
        self.src_embed = nn.Embedding(src_vocab, D, padding_idx=0)
        self.tgt_embed = nn.Embedding(tgt_vocab, D, padding_idx=0)
        self.src_pos = PositionalEncoding(D, cfg.max_len, learned=cfg.positions == "learned")
        self.tgt_pos = PositionalEncoding(D, cfg.max_len, learned=cfg.positions == "learned")
        self.dropout = Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.enc_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.dec_layers))
        pre = cfg.norm == "pre"  # pre-norm leaves the residual stream unnormalized: normalize the stack output
        self.enc_norm = nn.LayerNorm(D, eps=cfg.layer_norm_eps, bias=cfg.bias) if pre else nn.Identity()
        self.dec_norm = nn.LayerNorm(D, eps=cfg.layer_norm_eps, bias=cfg.bias) if pre else nn.Identity()
        self.generator = nn.Linear(D, tgt_vocab, bias=cfg.tie_embeddings == "none" or cfg.generator_bias)
        self._init_weights()
        if cfg.tie_embeddings in ("decoder", "all"):  # 3.4: one matrix for embeddings and pre-softmax layer
            self.generator.weight = self.tgt_embed.weight
        if cfg.tie_embeddings == "all":
            self.src_embed.weight = self.tgt_embed.weight

    def _init_weights(self) -> None:
        init_transformer_weights(self, self.cfg.d_model)

    # ------------------------------------------------------------------------------------------ stacks
    def _embed(self, tokens: Tensor, embed: nn.Embedding, pos: PositionalEncoding, offset: int = 0,
               positions: Tensor | None = None) -> Tensor:
        """3.4 and 3.5: tokens (B, L) -> Dropout(sqrt(D) * E[tokens] + PE) (B, L, D)."""
        return self.dropout(pos(embed(tokens) * math.sqrt(self.cfg.d_model), offset, positions))

    def _encode(self, src: Tensor, src_lengths: Tensor, need_weights: bool = False,
                segments: Segments | None = None) -> tuple[Tensor, Tensor, list[Tensor | None]]:
        """src (B, S) -> memory (B, S, D), mask (B, S), self-attention weights per layer (B, H, S, S)."""
        mask = padding_mask(src_lengths, src.size(1))  # (B, S)
        self_mask = mask[:, None, None, :] if segments is None else segment_mask(segments.ids, segments.ids)
        x = self._embed(src, self.src_embed, self.src_pos,
                        positions=None if segments is None else segments.pos)  # (B, S, D)
        weights = []
        for layer in self.encoder:
            x, w = layer(x, self_mask, need_weights)  # (B, S, D)
            weights.append(w)
        return self.enc_norm(x), mask, weights

    def _decode(self, tgt_in: Tensor, memory: Tensor, mask: Tensor, need_weights: bool = False,
                segments: tuple[Segments, Segments] | None = None
                ) -> tuple[Tensor, list[Tensor | None], list[Tensor | None]]:
        """tgt_in (B, T) -> top decoder output (B, T, D), self weights (B, H, T, T) and cross weights
        (B, H, T, S) per layer. segments: (source, target) segments of packed rows."""
        if segments is None:
            self_mask, memory_mask, positions = None, mask[:, None, None, :], None  # memory mask (B, 1, 1, S)
        else:
            src_seg, tgt_seg = segments
            self_mask = segment_mask(tgt_seg.ids, tgt_seg.ids)  # (B, 1, T, T), and causal below
            memory_mask, positions = segment_mask(tgt_seg.ids, src_seg.ids), tgt_seg.pos  # (B, 1, T, S)
        y = self._embed(tgt_in, self.tgt_embed, self.tgt_pos, positions=positions)  # (B, T, D)
        self_ws, cross_ws = [], []
        for layer in self.decoder:
            y, self_w, cross_w = layer(y, memory, self_mask, memory_mask, need_weights)  # (B, T, D), causal
            self_ws.append(self_w)
            cross_ws.append(cross_w)
        return self.dec_norm(y), self_ws, cross_ws

    # ------------------------------------------------------------------------------------------ interface
    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, src_segments: Segments | None = None,
                tgt_segments: Segments | None = None, targets: Tensor | None = None, label_smoothing: float = 0.0,
                ignore_index: int = 0) -> Tensor:
        """Teacher forcing: logits (B, T, V) for target inputs tgt_in (B, T) (BOS-prefixed); packed rows pass
        both segments. With targets (B, T): the label-smoothed cross-entropy summed over the targets that are not
        ignore_index, from the output layer and the loss in one (`linear_cross_entropy`: the (B, T, V) logits
        never exist whole; `train.fused_loss`)."""
        if (src_segments is None) != (tgt_segments is None):
            raise AttnlabError("packed rows need both src_segments and tgt_segments")
        memory, mask, _ = self._encode(src, src_lengths, segments=src_segments)
        y, _, _ = self._decode(tgt_in, memory, mask,
                               segments=None if src_segments is None else (src_segments, tgt_segments))
        if targets is not None:
            return linear_cross_entropy(y.flatten(0, 1), self.generator.weight, self.generator.bias,
                                        targets.flatten(), label_smoothing, ignore_index)  # ()
        return self.generator(y)  # (B, T, V)

    def encode(self, src: Tensor, src_lengths: Tensor) -> TransformerEncoderOutput:
        """Encoder output plus the cross-attention keys/values of every decoder layer, projected once."""
        memory, mask, _ = self._encode(src, src_lengths)
        kv = [layer.cross_attn.project_kv(memory, memory) for layer in self.decoder]  # N x (B, H, S, Dh)
        k = torch.stack([k for k, _ in kv], dim=2)  # (B, H, N, S, Dh)
        v = torch.stack([v for _, v in kv], dim=2)  # (B, H, N, S, Dh)
        return TransformerEncoderOutput(memory, mask, k, v)

    def init_state(self, enc: TransformerEncoderOutput) -> TransformerState:
        """Empty self-attention caches: (B, H, N, 0, Dh)."""
        B, H, N, _, Dh = enc.k.shape
        return empty_state(B * enc.beams, N, H, Dh, enc.k)

    def step(self, prev: Tensor, state: TransformerState, enc: TransformerEncoderOutput, need_weights: bool = False
             ) -> tuple[Tensor, TransformerState, Tensor | None]:
        """One decoding step at position state.t.

        Shape: prev (B,) -> log-probs (B, V) float32, state with caches (B, H, N, t + 1, Dh), and with
        need_weights the cross-attention weights (B, N_dec, H, S) of every decoder layer and head.
        """
        y = self._embed(prev[:, None], self.tgt_embed, self.tgt_pos, offset=state.t)  # (B, 1, D)
        y, state, _, cross = decoder_step(self.decoder, y, state, (enc.k, enc.v), enc.mask[:, None, None, :],
                                          need_weights, enc.beams)  # (B, 1, D)
        logits = self.generator(self.dec_norm(y)[:, 0])  # (B, V)
        return F.log_softmax(logits.float(), dim=-1), state, cross

    @torch.no_grad()
    def attention_maps(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> dict[str, Tensor]:
        """All attention weights of a teacher-forced pass (explicit path), for plotting.

        Returns:
            enc_self (B, N_enc, H, S, S), dec_self (B, N_dec, H, T, T), cross (B, N_dec, H, T, S).
        """
        memory, mask, enc_ws = self._encode(src, src_lengths, need_weights=True)
        _, self_ws, cross_ws = self._decode(tgt_in, memory, mask, need_weights=True)
        return {"enc_self": torch.stack(enc_ws, dim=1), "dec_self": torch.stack(self_ws, dim=1),
                "cross": torch.stack(cross_ws, dim=1)}
