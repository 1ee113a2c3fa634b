"""The decoder-only Transformer language model (GPT-style): the Transformer's own decoder stack without
cross-attention (`attnlab.nn.transformer.DecoderLayer` with cross_attention=False: causal self-attention, position
t sees 0..t, and the FFN), token embeddings scaled by sqrt(D) plus positions, a final LayerNorm for pre-norm, and
an output layer tied to the embeddings by default. Generation keeps a key/value cache per layer (`step`, the
decoder's one cached step `attnlab.nn.transformer.decoder_step`), so each new token costs O(t).

GPT-2 (Radford et al. 2019) is one setting of this model: learned positions, no sqrt(D) embedding scale
(`scale_embeddings = false`), pre-norm with the final LayerNorm, the tanh GELU, biases, and the output layer tied
to the embeddings. Training, data and sampling are the family's (`attnlab.families.lm`).

Shape legend: B batch, T tokens, t tokens so far, D d_model, H heads, Dh head dim, N layers, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.core.config import MAX_LAYERS
from attnlab.kernels.dropout import Dropout
from attnlab.kernels.linear_ce import linear_cross_entropy
from attnlab.nn.attention import Segments, segment_mask
from attnlab.nn.transformer import (DecoderLayer, PositionalEncoding, TransformerConfig, TransformerState,
                                    decoder_step, empty_state, init_transformer_weights)


@dataclass
class LMModelConfig:
    """A decoder-only Transformer; the fields mean what they mean in `TransformerConfig` (layers: the stack's
    depth; tie_embeddings: the output layer shares the embedding matrix; generator_bias: an output bias next to
    tied embeddings). scale_embeddings: multiply the embeddings by sqrt(d_model) (Vaswani et al. 2017, 3.4;
    GPT-2 does not)."""

    d_model: int = 256
    h: int = 4
    d_ff: int = 1024
    layers: int = 4
    dropout: float = 0.1
    attn_dropout: float = 0.0
    activation: str = "relu"
    norm: str = "pre"
    positions: str = "sinusoidal"
    max_len: int = 512
    tie_embeddings: bool = True
    layer_norm_eps: float = 1e-5
    bias: bool = True
    scale_embeddings: bool = True
    generator_bias: bool = False

    LIMITS: ClassVar[dict] = {**{k: v for k, v in TransformerConfig.LIMITS.items() if not k.endswith("_layers")},
                              "layers": (1, MAX_LAYERS)}

    def __post_init__(self) -> None:
        self.transformer()  # validates every field with TransformerConfig's checks

    def transformer(self) -> TransformerConfig:
        """The equivalent `TransformerConfig` (its layers are built from it)."""
        return TransformerConfig(d_model=self.d_model, h=self.h, d_ff=self.d_ff, enc_layers=self.layers,
                                 dec_layers=self.layers, dropout=self.dropout, attn_dropout=self.attn_dropout,
                                 activation=self.activation, norm=self.norm, positions=self.positions,
                                 max_len=self.max_len, tie_embeddings="decoder" if self.tie_embeddings else "none",
                                 layer_norm_eps=self.layer_norm_eps, bias=self.bias,
                                 generator_bias=self.generator_bias)


class TransformerLM(nn.Module):
    """Decoder-only Transformer LM: the Transformer's decoder layers without cross-attention.

    Shape:
        forward: tokens (B, T) (BOS-prefixed, right-padded) -> logits (B, T, V).
        step: prev (B,) -> log-probs (B, V) float32, state with caches (B, H, N, t + 1, Dh), self-attention weights
        (B, N, H, t + 1) of every layer and head for this position (None without need_weights).

    Example:
        >>> lm = TransformerLM(30, LMModelConfig(d_model=16, h=4, d_ff=32, layers=2)).eval()
        >>> lm(torch.randint(4, 30, (2, 5))).shape
        torch.Size([2, 5, 30])
    """

    def __init__(self, vocab: int, cfg: LMModelConfig, pad_id: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        tcfg = cfg.transformer()
        D = cfg.d_model
        self.embed = nn.Embedding(vocab, D, padding_idx=pad_id)
        self.pos = PositionalEncoding(D, cfg.max_len, learned=cfg.positions == "learned")
        self.dropout = Dropout(cfg.dropout)
        self.layers = nn.ModuleList(DecoderLayer(tcfg, cross_attention=False) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(D, eps=cfg.layer_norm_eps, bias=cfg.bias) if cfg.norm == "pre" else nn.Identity()
        self.generator = nn.Linear(D, vocab, bias=not cfg.tie_embeddings or cfg.generator_bias)
        init_transformer_weights(self, D)
        if cfg.tie_embeddings:
            self.generator.weight = self.embed.weight

    def _embed(self, tokens: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """tokens (B, L) -> Dropout(sqrt(D) * E[tokens] + PE) (B, L, D); without scale_embeddings E[tokens] + PE."""
        x = self.embed(tokens)  # (B, L, D)
        if self.cfg.scale_embeddings:
            x = x * math.sqrt(self.cfg.d_model)
        return self.dropout(self.pos(x, offset, positions))

    def hidden(self, tokens: Tensor, need_weights: bool = False, segments: Segments | None = None
               ) -> tuple[Tensor, list[Tensor | None]]:
        """tokens (B, T) -> top hidden states (B, T, D), self-attention weights (B, H, T, T) per layer.
        Right padding needs no mask: under the causal mask a real token never sees the pads after it. Packed
        rows (segments (B, T)) attend within their own sentence and count positions from its start."""
        x = self._embed(tokens, positions=None if segments is None else segments.pos)  # (B, T, D)
        mask = None if segments is None else segment_mask(segments.ids, segments.ids)  # (B, 1, T, T)
        weights = []
        for layer in self.layers:
            x, w, _ = layer(x, None, mask, None, need_weights)  # (B, T, D), causal
            weights.append(w)
        return self.norm(x), weights

    def forward(self, tokens: Tensor, segments: Segments | None = None, targets: Tensor | None = None,
                label_smoothing: float = 0.0, ignore_index: int = 0) -> Tensor:
        """Logits (B, T, V); with targets (B, T) the summed label-smoothed cross-entropy instead, from the output
        layer and the loss in one (`linear_cross_entropy`, `train.fused_loss`)."""
        y = self.hidden(tokens, segments=segments)[0]  # (B, T, D)
        if targets is not None:
            return linear_cross_entropy(y.flatten(0, 1), self.generator.weight, self.generator.bias,
                                        targets.flatten(), label_smoothing, ignore_index)  # ()
        return self.generator(y)  # (B, T, V)

    def init_state(self, batch: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
                   ) -> TransformerState:
        """Empty caches (B, H, N, 0, Dh)."""
        like = torch.empty(0, device=device, dtype=dtype)
        return empty_state(batch, self.cfg.layers, self.cfg.h, self.cfg.d_model // self.cfg.h, like)

    def step(self, prev: Tensor, state: TransformerState, need_weights: bool = False
             ) -> tuple[Tensor, TransformerState, Tensor | None]:
        """One position: feeds token prev (B,) at position state.t, returns the next token's log-probs."""
        x = self._embed(prev[:, None], offset=state.t)  # (B, 1, D)
        x, state, weights, _ = decoder_step(self.layers, x, state, need_weights=need_weights)  # (B, 1, D)
        logits = self.generator(self.norm(x)[:, 0])  # (B, V)
        return F.log_softmax(logits.float(), dim=-1), state, weights

    @torch.no_grad()
    def attention_maps(self, tokens: Tensor) -> Tensor:
        """Self-attention weights of every layer and head: tokens (B, T) -> (B, N, H, T, T)."""
        return torch.stack(self.hidden(tokens, need_weights=True)[1], dim=1)
