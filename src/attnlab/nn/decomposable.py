"""Decomposable attention for sentence-pair classification (Parikh et al. 2016, "A Decomposable Attention Model
for Natural Language Inference"), the seed "Attention"'s pure-attention model without recurrence.

For sentences a = (a_1..a_La) and b = (b_1..b_Lb) of embedded tokens (sec. 2, "input representation"):

- optional intra-sentence attention (sec. 2.1): f_ij = F_intra(a_i)^T F_intra(a_j),
  a'_i = sum_j softmax_j(f_ij + d_{i-j}) a_j with a learned bias per signed distance (distances beyond
  `max_distance` share one), and a_i is replaced by [a_i; a'_i] (likewise for b);
- attend (sec. 3.1, eq. 1-2): e_ij = F(a_i)^T F(b_j); beta_i = sum_j softmax_j(e_ij) b_j (the part of b softly
  aligned to a_i), alpha_j = sum_i softmax_i(e_ij) a_i;
- compare (sec. 3.2, eq. 3): v1_i = G([a_i; beta_i]), v2_j = G([b_j; alpha_j]);
- aggregate (sec. 3.3, eq. 4-5): v1 = sum_i v1_i, v2 = sum_j v2_j over the real tokens, y = W H([v1; v2]).

F, F_intra, G and H are two-layer ReLU feed-forward networks with dropout on their inputs (sec. 4.1). Every
softmax runs through the one attention core (`attnlab.nn.attention.attend`) with padding masks: padded keys get
exactly zero weight, and the weight rows of padded queries are all zero.

Shape legend: B batch, La / Lb lengths of a / b, E embedding dim, D hidden dim, C classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from attnlab.core.config import MAX_DIM, MAX_LEN
from attnlab.core.errors import AttnlabError
from attnlab.kernels.dropout import Dropout
from attnlab.nn.attention import attend


@dataclass
class DecomposableConfig:
    """[model.decomposable]. The paper (sec. 4.1) projects 300-d GloVe vectors to 200-d and uses 200 hidden
    units; here embeddings are trained from scratch."""

    emb_dim: int = 200
    hidden_dim: int = 200
    dropout: float = 0.2
    intra_attention: bool = False
    max_distance: int = 10  # intra-attention: signed distances beyond this share one bias
    n_classes: int = 2

    LIMITS: ClassVar[dict] = {"emb_dim": (1, MAX_DIM), "hidden_dim": (1, MAX_DIM), "dropout": (0.0, 1.0),
                              "max_distance": (1, MAX_LEN), "n_classes": (2, 2**16)}

    def __post_init__(self) -> None:
        for name in ("emb_dim", "hidden_dim", "max_distance"):
            if getattr(self, name) < 1:
                raise AttnlabError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_classes < 2:
            raise AttnlabError(f"n_classes must be >= 2, got {self.n_classes}")
        if not 0.0 <= self.dropout < 1.0:
            raise AttnlabError(f"dropout must be in [0, 1), got {self.dropout}")


def feed_forward(in_dim: int, hidden_dim: int, dropout: float) -> nn.Sequential:
    """Two ReLU layers with dropout on each layer's input (F, G, H of sec. 4.1): (..., in_dim) -> (..., hidden)."""
    return nn.Sequential(Dropout(dropout), nn.Linear(in_dim, hidden_dim), nn.ReLU(),
                         Dropout(dropout), nn.Linear(hidden_dim, hidden_dim), nn.ReLU())


@dataclass
class AlignmentWeights:
    """Soft alignments of one batch. a_to_b (B, La, Lb): row i = softmax_j(e_ij), the weights of beta_i;
    b_to_a (B, Lb, La): row j = softmax_i(e_ij), the weights of alpha_j; intra_a (B, La, La), intra_b
    (B, Lb, Lb) or None without intra-sentence attention. Rows of padded tokens are zero."""

    a_to_b: Tensor
    b_to_a: Tensor
    intra_a: Tensor | None = None
    intra_b: Tensor | None = None


class DecomposableAttention(nn.Module):
    """Parikh et al. (2016) sentence-pair classifier over token ids.

    Args:
        vocab_size: V. cfg: DecomposableConfig. pad_id: the id of padding (its embedding stays zero).

    Shape:
        a (B, La), b (B, Lb) long; a_mask (B, La), b_mask (B, Lb) bool, True at real tokens -> logits (B, C).

    Example:
        >>> model = DecomposableAttention(100, DecomposableConfig(emb_dim=8, hidden_dim=8))
        >>> a, b = torch.randint(4, 100, (2, 5)), torch.randint(4, 100, (2, 7))
        >>> model(a, a > 0, b, b > 0).shape
        torch.Size([2, 2])
    """

    def __init__(self, vocab_size: int, cfg: DecomposableConfig, pad_id: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        D = cfg.hidden_dim
        self.embed = nn.Embedding(vocab_size, cfg.emb_dim, padding_idx=pad_id)
        self.project = nn.Linear(cfg.emb_dim, D, bias=False)  # sec. 4.1: embeddings projected to D
        if cfg.intra_attention:
            self.F_intra = feed_forward(D, D, cfg.dropout)
            self.distance_bias = nn.Parameter(torch.zeros(2 * cfg.max_distance + 1))  # d_{i-j}, i-j in [-K, K]
        rep = 2 * D if cfg.intra_attention else D  # [a_i; a'_i] with intra-attention
        self.F = feed_forward(rep, D, cfg.dropout)
        self.G = feed_forward(2 * rep, D, cfg.dropout)
        self.H = feed_forward(2 * D, D, cfg.dropout)
        self.out = nn.Linear(D, cfg.n_classes)

    def intra(self, x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Intra-sentence attention (sec. 2.1): x (B, L, D), mask (B, L) -> [x; x'] (B, L, 2D), weights (B, L, L)."""
        Fx = self.F_intra(x)  # (B, L, D)
        L, K = x.size(1), self.cfg.max_distance
        pos = torch.arange(L, device=x.device)
        dist = (pos[:, None] - pos[None, :]).clamp(-K, K) + K  # (L, L), index of d_{i-j}
        scores = Fx @ Fx.transpose(1, 2) + self.distance_bias[dist]  # (B, L, L)
        context, weights = attend(scores, x, mask[:, :, None] & mask[:, None, :])  # (B, L, D), (B, L, L)
        return torch.cat([x, context], dim=-1), weights

    def forward_with_weights(self, a: Tensor, a_mask: Tensor, b: Tensor, b_mask: Tensor
                             ) -> tuple[Tensor, AlignmentWeights]:
        """Logits (B, C) and the attention weights of every step."""
        a_bar, b_bar = self.project(self.embed(a)), self.project(self.embed(b))  # (B, La, D), (B, Lb, D)
        intra_a = intra_b = None
        if self.cfg.intra_attention:
            a_bar, intra_a = self.intra(a_bar, a_mask)  # (B, La, 2D)
            b_bar, intra_b = self.intra(b_bar, b_mask)  # (B, Lb, 2D)
        # attend: one score matrix, normalised over b for beta and over a for alpha
        e = self.F(a_bar) @ self.F(b_bar).transpose(1, 2)  # (B, La, Lb)
        pair_mask = a_mask[:, :, None] & b_mask[:, None, :]  # (B, La, Lb)
        beta, w_ab = attend(e, b_bar, pair_mask)  # (B, La, rep), (B, La, Lb)
        alpha, w_ba = attend(e.transpose(1, 2), a_bar, pair_mask.transpose(1, 2))  # (B, Lb, rep), (B, Lb, La)
        # compare, then aggregate over the real tokens only
        v1 = self.G(torch.cat([a_bar, beta], dim=-1)) * a_mask[:, :, None]  # (B, La, D)
        v2 = self.G(torch.cat([b_bar, alpha], dim=-1)) * b_mask[:, :, None]  # (B, Lb, D)
        logits = self.out(self.H(torch.cat([v1.sum(1), v2.sum(1)], dim=-1)))  # (B, C)
        return logits, AlignmentWeights(w_ab, w_ba, intra_a, intra_b)

    def forward(self, a: Tensor, a_mask: Tensor, b: Tensor, b_mask: Tensor) -> Tensor:
        """Logits (B, C) of the pair classes (the interface of every attnlab pair classifier)."""
        return self.forward_with_weights(a, a_mask, b, b_mask)[0]
