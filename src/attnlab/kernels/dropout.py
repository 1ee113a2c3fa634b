"""Dropout (Srivastava et al. 2014) with a mask the CPU draws faster than `torch.nn.functional.dropout`.

On the CPU, `F.dropout` draws one Bernoulli sample per element (`bernoulli_`): in a training step of the small
Transformer (six dropouts over (B, T, d_ff) and seventeen over (B, L, D) per step) that costs more than its
attention. Here one 64-bit draw of the same generator (`random_`, seeded by
`torch.manual_seed`) gives four independent 16-bit numbers u, uniform on [0, 65536): an element is dropped when
u < k, k = round(p * 65536), and the kept ones are scaled by 65536 / (65536 - k). So the dropout probability is p
rounded to a multiple of 1/65536 (0.1 becomes 0.1000061), and E[output] = input exactly, as with `F.dropout`.
The comparison writes the mask in the input's dtype (1 kept, 0 dropped), which is kept for the backward pass: a
bool mask is converted on each multiplication. The saved mask therefore takes the memory of x (2 bytes an element
in bf16, 4 in float32, against 1 for a bool), as much as the activation that the next layer saves. A forward and
backward pass over a (3000, 1024) bf16 activation took 11.2 ms with it, 19.3 ms with a bool mask and 40.3 ms with
`F.dropout` (`benchmarks/dropout_bench.py`, 2 threads, docs/results.md). On other devices, and with the kernels off
(`attnlab.kernels.switch`), `F.dropout` runs: the twin, which draws another mask from the same generator.

Measured by `benchmarks/train_bench.py` (docs/results.md, issue 23).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from attnlab.kernels.switch import enabled

LEVELS = 65536  # 16 random bits per element


def keep_mask(shape: torch.Size, p: float, device: torch.device,
              dtype: torch.dtype = torch.bool) -> tuple[Tensor, float]:
    """A mask of `shape` and `dtype`, each element kept (True, or 1) with probability 1 - k / 65536
    (k = round(p * 65536), at least 1), independently, else False (0), and the scale 65536 / (65536 - k) of the
    kept elements. The same draws give the same mask in every dtype."""
    k = min(max(round(p * LEVELS), 1), LEVELS - 1)
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-2**63, None)  # 64 random bits each
    u = words.view(torch.int16)[:n].view(shape)  # 16 random bits per element, as a signed number in [-32768, 32768)
    keep = torch.empty(shape, dtype=dtype, device=device)
    return torch.ge(u, k - LEVELS // 2, out=keep), LEVELS / (LEVELS - k)


class MaskedScale(torch.autograd.Function):
    """x * keep * scale, with the mask saved for the backward pass: `dropout`'s multiplication. keep is x's shape,
    0 or 1 in x's dtype (what `dropout` gives it) or bool (the same values, converted at each multiplication)."""

    @staticmethod
    def forward(ctx, x: Tensor, keep: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(keep).mul_(scale)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None, None


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Zeroes each element of x with probability p (rounded to 1/65536 on the CPU) and scales the rest by
    1 / (1 - p): `F.dropout`, with the faster mask on the CPU when the kernels are on. x (...) -> (...)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0 or not x.is_floating_point() or not enabled():
        return F.dropout(x, p, training)
    keep, scale = keep_mask(x.shape, p, x.device, x.dtype)
    return MaskedScale.apply(x, keep, scale)


class Dropout(nn.Dropout):
    """`torch.nn.Dropout` (same argument, same `p`, an instance of it) drawing its mask with `dropout`."""

    def forward(self, x: Tensor) -> Tensor:
        if self.inplace:
            return F.dropout(x, self.p, self.training, inplace=True)
        return dropout(x, self.p, self.training)
