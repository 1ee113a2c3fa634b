"""The output layer and the training loss in one: label-smoothed cross-entropy of the logits x W^T + b, computed a
block of rows at a time so that the (N, V) logits never exist whole (Wijmans et al. 2024, "Cut your losses in
large-vocabulary language models"; Liger-Kernel's fused linear cross-entropy).

For a row x (D,) with logits z = W x + b (V,), target y and smoothing eps (as `attnlab.kernels.loss`):

    loss = logsumexp(z) - (1 - eps) z_y - (eps / V) sum_j z_j
    g = d loss / d z = softmax(z) - (1 - eps) onehot(y) - eps / V
    d loss / d x = g W,   d loss / d W = g^T x,   d loss / d b = g

`FusedLinearCE` runs the forward and the backward of a block together: its logits (n, V), their loss, g, and g's
three products, of which it keeps only the sums, d/dx (N, D), d/dW (V, D) and d/db (V,); the block's logits are
then freed. What stays between the forward and the backward is the size of the inputs, not N x V: for the base
Transformer's 8,192 target tokens and V = 8,000 the plain expression keeps 256 MiB of float32 logits and as much
again of their log-probabilities; this keeps 16 + 16 MiB. The backward is then one multiplication per input. The
matrix products are the plain one's, so it costs what they cost; the passes over the logits run on blocks that fit
in a cache.

Its twin is the plain expression, `F.cross_entropy(F.linear(x, W, b).float(), targets, ignore_index=,
label_smoothing=, reduction="sum")`; `linear_cross_entropy` runs the twin when the kernels are off
(`attnlab.kernels.switch`). The Transformer and the LM use it with `train.fused_loss = true`: their `forward` then
takes the targets and returns the loss (`benchmarks/linear_ce_bench.py` measures the kernel beside the twin,
`benchmarks/train_bench.py --fused-loss` a training step).

Shape legend: N rows (target tokens), D model dim, V classes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from attnlab.kernels.switch import enabled

BLOCK_ELEMENTS = 2**21  # logits per block of rows: 8 MiB in float32 (measured on the CPU: benchmarks/linear_ce_bench.py)


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    """The dtype the loss and the gradients are summed in: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def blocked_linear_ce(x: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, eps: float,
                      ignore_index: int, block_rows: int, grads: tuple[bool, ...] = (False, False, False)
                      ) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | None]:
    """The summed loss and, for each of x, weight and bias whose entry in `grads` is true, its gradient (else None),
    `block_rows` rows of logits at a time (see the module docstring). Without gradients (no_grad, evaluation) it
    only sums the loss: `torch.autograd.Function` reports its inputs' requires_grad even under no_grad."""
    N, V = x.size(0), weight.size(0)
    acc = _accumulator(x.dtype)
    keep = targets != ignore_index  # (N,)
    safe = targets.masked_fill(~keep, 0)[:, None]  # (N, 1): ignored rows point at class 0, then zeroed
    total = torch.zeros((), dtype=acc, device=x.device)
    grad_x = torch.empty_like(x) if grads[0] else None  # (N, D)
    grad_w = torch.zeros(weight.shape, dtype=acc, device=x.device) if grads[1] else None  # (V, D)
    grad_b = torch.zeros(V, dtype=acc, device=x.device) if grads[2] and bias is not None else None  # (V,)
    for start in range(0, N, block_rows):
        rows = slice(start, start + block_rows)
        z = F.linear(x[rows], weight, bias).to(acc)  # (n, V): this block's logits only
        t, k = safe[rows], keep[rows, None]  # (n, 1) each
        lse = torch.logsumexp(z, dim=1, keepdim=True)  # (n, 1)
        row_loss = lse - (1.0 - eps) * z.gather(1, t) - (eps / V) * z.sum(dim=1, keepdim=True)  # (n, 1)
        total += row_loss.masked_fill(~k, 0.0).sum()
        if not any(grads):
            continue
        g = z.sub_(lse).exp_().sub_(eps / V)  # softmax - eps / V: (n, V), in place of the logits
        g.scatter_add_(1, t, torch.full_like(lse, eps - 1.0))  # - (1 - eps) at the target
        g.mul_(k)  # ignored rows: no gradient
        g_in = g.to(x.dtype)  # (n, V) in the inputs' precision for the products
        if grad_x is not None:
            grad_x[rows] = g_in @ weight  # (n, D)
        if grad_w is not None:
            grad_w += (g_in.t() @ x[rows]).to(acc)  # (V, D)
        if grad_b is not None:
            grad_b += g.sum(dim=0)  # (V,)
    return total, grad_x, grad_w, grad_b


class FusedLinearCE(torch.autograd.Function):
    """Summed label-smoothed cross-entropy of x W^T + b whose gradients are computed in the forward pass, a block
    of rows at a time (see the module docstring).

    Shape: x (N, D), weight (V, D), bias (V,) or None, targets (N,) int -> loss () in float32 (float64 for float64
    inputs).
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, eps: float, ignore_index: int,
                block_rows: int) -> Tensor:
        total, grad_x, grad_w, grad_b = blocked_linear_ce(x, weight, bias, targets, eps, ignore_index, block_rows,
                                                          ctx.needs_input_grad[:3])
        ctx.save_for_backward(grad_x, None if grad_w is None else grad_w.to(weight.dtype),
                              None if grad_b is None else grad_b.to(bias.dtype))
        return total

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        grad_x, grad_w, grad_b = ctx.saved_tensors
        return (*(None if g is None else g * grad_out.to(g.dtype) for g in (grad_x, grad_w, grad_b)),
                None, None, None, None)


def fused_applies() -> bool:
    """Whether `linear_cross_entropy` runs `FusedLinearCE`: with the kernels on (`attnlab.kernels.switch`)."""
    return enabled()


def linear_cross_entropy(x: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, label_smoothing: float,
                         ignore_index: int, block_elements: int = BLOCK_ELEMENTS) -> Tensor:
    """Label-smoothed cross-entropy of the logits x W^T + b, summed over the targets that are not `ignore_index`:
    `F.cross_entropy(F.linear(x, weight, bias).float(), targets, ignore_index=, label_smoothing=, reduction="sum")`
    (float64 stays float64), without the (N, V) logits when the kernels are on (`FusedLinearCE`, blocks of
    `block_elements` logits).

    Shape: x (N, D), weight (V, D), bias (V,) or None, targets (N,) -> ().
    """
    if x.dim() != 2 or weight.dim() != 2 or x.size(1) != weight.size(1) or targets.shape != (x.size(0),):
        raise ValueError(f"linear_cross_entropy: x {tuple(x.shape)} and weight {tuple(weight.shape)} must be (N, D) "
                         f"and (V, D), targets {tuple(targets.shape)} (N,)")
    if fused_applies():
        block_rows = max(1, block_elements // max(weight.size(0), 1))
        if not (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))):
            return blocked_linear_ce(x, weight, bias, targets, float(label_smoothing), int(ignore_index),
                                     block_rows)[0]
        return FusedLinearCE.apply(x, weight, bias, targets, float(label_smoothing), int(ignore_index), block_rows)
    logits = F.linear(x, weight, bias)  # (N, V)
    return F.cross_entropy(logits.to(_accumulator(logits.dtype)), targets, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction="sum")
