"""The training loss: label-smoothed cross-entropy summed over the non-ignored targets (Szegedy et al. 2016, sec. 7;
Vaswani et al. 2017, 5.4), with a fused CPU path for training.

For a row of logits x (V classes) with target y and smoothing eps:

    loss = logsumexp(x) - (1 - eps) x_y - (eps / V) sum_j x_j      (= F.cross_entropy(..., label_smoothing=eps))
    d loss / d x = softmax(x) - (1 - eps) onehot(y) - eps / V

`torch.nn.functional.cross_entropy` computes this through log_softmax and keeps the (N, V) log-probabilities; its
backward then makes several more passes over them (fill, scatter, add, log_softmax's backward, the cast back to
the logits' dtype). On the CPU these passes over a (3,000 x 4,000) float32 matrix took a fifth of a training step of
the small Transformer in bf16. `FusedSmoothedCE` instead computes the loss and its gradient together, a cache-sized
block of rows at a time in float32, and keeps only the gradient, in the logits' dtype, for the backward pass, which
is then one multiplication. It is used where it pays: on the CPU, when a gradient is needed, with the kernels on
(`attnlab.kernels.switch`); otherwise its twin, `F.cross_entropy`, runs.

Shape legend: N rows (targets), V classes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from attnlab.kernels.switch import enabled

BLOCK_ELEMENTS = 2**19  # float32 elements per block of rows: 2 MiB, so a block's passes stay in the CPU's cache


class FusedSmoothedCE(torch.autograd.Function):
    """Summed label-smoothed cross-entropy whose gradient is computed in the forward pass (see the module
    docstring). logits (N, V) float (any precision), targets (N,) int -> loss () float32."""

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, eps: float, ignore_index: int) -> Tensor:
        N, V = logits.shape
        keep = targets != ignore_index  # (N,)
        safe = targets.masked_fill(~keep, 0)[:, None]  # (N, 1): ignored rows point at class 0, then zeroed
        grad = torch.empty_like(logits)  # (N, V), the logits' dtype
        total = torch.zeros((), dtype=torch.float32, device=logits.device)
        rows = max(1, BLOCK_ELEMENTS // V)
        for start in range(0, N, rows):
            block = slice(start, start + rows)
            # (n, V), always a copy: changed in place below (clone, not .to(copy=True): on the CPU that takes 7x
            # as long for a float32 block)
            x = logits[block].clone() if logits.dtype == torch.float32 else logits[block].float()
            t, k = safe[block], keep[block, None]  # (n, 1) each
            lse = torch.logsumexp(x, dim=1, keepdim=True)  # (n, 1)
            row_loss = lse - (1.0 - eps) * x.gather(1, t) - (eps / V) * x.sum(dim=1, keepdim=True)  # (n, 1)
            total += row_loss.masked_fill(~k, 0.0).sum()
            p = x.sub_(lse).exp_().sub_(eps / V)  # softmax - eps / V: (n, V)
            p.scatter_add_(1, t, torch.full_like(lse, eps - 1.0))  # - (1 - eps) at the target
            grad[block] = p.mul_(k)  # ignored rows: zero gradient
        ctx.save_for_backward(grad)
        return total

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor, None, None, None]:
        (grad,) = ctx.saved_tensors
        return grad * grad_out.to(grad.dtype), None, None, None


def smoothed_cross_entropy(logits: Tensor, targets: Tensor, label_smoothing: float, ignore_index: int) -> Tensor:
    """Label-smoothed cross-entropy summed over the targets that are not `ignore_index`, as
    `F.cross_entropy(logits.float(), targets, ignore_index=, label_smoothing=, reduction="sum")`; fused
    (`FusedSmoothedCE`) on the CPU when a gradient is needed and the kernels are on. logits (N, V), targets (N,) ->
    () float32."""
    if logits.device.type == "cpu" and logits.requires_grad and torch.is_grad_enabled() and enabled():
        return FusedSmoothedCE.apply(logits, targets, float(label_smoothing), int(ignore_index))
    return F.cross_entropy(logits.float(), targets, ignore_index=ignore_index, label_smoothing=label_smoothing,
                           reduction="sum")
