"""Two expressions of the attention core (`attnlab.nn.attention`) written the way the CPU computes them faster.

- The additive score (Bahdanau et al. 2015, A.1.2) e = v_a . tanh(x), x = W_a q + U_a k, as
  2 v_a . sigmoid(2x) - sum(v_a), since tanh(x) = 2 sigmoid(2x) - 1 and torch's CPU tanh is slower than its
  sigmoid on the same tensor. Only in float32 outside autocast: in 16 bits the subtraction would cancel too many
  digits. Twin: v_a . tanh(x).
- One query's context sum_s a_s v_s, when it is trained (a decoder step by step), as a broadcast product and a
  sum: as a matrix product its backward is a batched outer product with inner dimension 1, which CPU BLAS runs
  far slower. Without a backward (decoding) the matrix product is the faster one: the broadcast fills a
  (..., S, Dv) temporary. Twin: a @ V.

Each `..._applies` says whether its kernel runs (the kernels' switch included, `attnlab.kernels.switch`); the
attention core asks it and runs the twin otherwise.

Shape legend: B batch, T query length, S key length, A attention (hidden) dim, Dv value dim.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.kernels.switch import enabled


def additive_applies(hidden: Tensor) -> bool:
    """Whether `additive_scores` runs on these pre-activations: float32 on the CPU outside autocast, kernels on."""
    return (hidden.dtype == torch.float32 and hidden.device.type == "cpu" and not torch.is_autocast_enabled("cpu")
            and enabled())


def additive_scores(hidden: Tensor, v_a: Tensor) -> Tensor:
    """v_a . tanh(hidden) as 2 v_a . sigmoid(2 hidden) - sum(v_a), written over hidden in place (neither the
    sum that made it nor the doubling needs it for its backward). hidden (B, T, S, A), v_a (A,) -> (B, T, S)."""
    half = hidden.mul_(2).sigmoid_()  # (tanh(x) + 1) / 2
    return (half @ (2 * v_a)).sub_(v_a.sum())  # (B, T, S)


def one_query_applies(weights: Tensor, values: Tensor) -> bool:
    """Whether `one_query_context` runs: one query (T = 1) whose context is trained, kernels on."""
    return (weights.size(-2) == 1 and torch.is_grad_enabled() and (weights.requires_grad or values.requires_grad)
            and enabled())


def one_query_context(weights: Tensor, values: Tensor) -> Tensor:
    """weights @ values for one query as a broadcast product and a sum: (..., 1, S), (..., S, Dv) -> (..., 1, Dv)."""
    return (weights.transpose(-2, -1) * values).sum(-2, keepdim=True)  # (..., 1, Dv)
