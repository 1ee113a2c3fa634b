"""The many-to-one RNN of the IF3270 notes for series regression: an RNN over a window, then Dense(1) on the last
state h_T or on the context of the learned-query attention layer (e_t = tanh(h_t . w + b_t), a = softmax(e),
c = sum_t a_t h_t: `attnlab.nn.attention.LearnedQueryAttention`). The series, the task and the study are the
family's (`attnlab.families.series`).

Shape legend: B batch, T window length (time steps), H hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from attnlab.core.config import MAX_DIM
from attnlab.core.errors import AttnlabError
from attnlab.nn.attention import LearnedQueryAttention
from attnlab.nn.rnn import RNNLayer


@dataclass
class SeriesModelConfig:
    """RNN(hidden_dim) over the window, then the last state or the attention context, then Dense(1).
    init = "keras": glorot-uniform input weights, orthogonal recurrent weights, zero biases (Keras' defaults);
    "torch": U(-1/sqrt(H), 1/sqrt(H)) everywhere."""

    cell: str = "elman"
    hidden_dim: int = 2
    attention: bool = False
    keras_bias: bool = True  # one bias per gate, as Keras counts (SimpleRNN(2) on 1 input: 8 params)
    output_activation: str = "linear"  # the seed's Dense(1, activation='linear'); the blog used tanh
    init: str = "keras"

    CHOICES: ClassVar[dict] = {"cell": ("elman", "lstm", "gru"), "output_activation": ("linear", "tanh"),
                               "init": ("keras", "torch")}
    LIMITS: ClassVar[dict] = {"hidden_dim": (1, MAX_DIM)}

    def __post_init__(self) -> None:
        if self.hidden_dim < 1:
            raise AttnlabError(f"model.hidden_dim must be >= 1, got {self.hidden_dim}")


class SeriesRNN(nn.Module):
    """RNN over a window, then Dense(1) on the last state or on the attention context.

    Shape:
        x (B, T) or (B, T, 1) -> prediction (B,), attention weights (B, T) or None.
    """

    def __init__(self, cfg: SeriesModelConfig, window: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.rnn = RNNLayer(cfg.cell, 1, cfg.hidden_dim, impl="scratch", keras_bias=cfg.keras_bias)
        self.attention = LearnedQueryAttention(cfg.hidden_dim, window) if cfg.attention else None
        self.dense = nn.Linear(cfg.hidden_dim, 1)
        if cfg.init == "keras":
            self._keras_init()

    @torch.no_grad()
    def _keras_init(self) -> None:
        for cell in self.rnn.cells:
            nn.init.xavier_uniform_(cell.weight_ih)  # glorot_uniform over (I, G*H), symmetric in fan in/out
            H = cell.hidden_size
            for g in range(cell.gates):  # Keras: one orthogonal (H, G*H) matrix; here one per gate block
                nn.init.orthogonal_(cell.weight_hh[g * H:(g + 1) * H])
            cell.bias_ih.zero_()
            if cell.bias_hh is not None:
                cell.bias_hh.zero_()
            if self.cfg.cell == "lstm":
                cell.bias_ih[H:2 * H] = 1.0  # Keras' unit_forget_bias
        nn.init.xavier_uniform_(self.dense.weight)
        self.dense.bias.zero_()

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        if x.dim() == 2:
            x = x[:, :, None]  # (B, T, 1)
        h, _ = self.rnn(x)  # (B, T, H)
        weights = None
        if self.attention is not None:
            summary, weights = self.attention(h)  # (B, H), (B, T)
        else:
            summary = h[:, -1]  # (B, H): h_T
        out = self.dense(summary)[:, 0]  # (B,)
        return (torch.tanh(out) if self.cfg.output_activation == "tanh" else out), weights
