"""Dropout (Srivastava et al. 2014) with a mask the CPU draws faster than `torch.nn.functional.dropout`.

On the CPU, `F.dropout` draws one Bernoulli sample per element (`bernoulli_`): in a training step of the small
Transformer (six dropouts over (B, T, d_ff) and seventeen over (B, L, D) per step) that costs more than its
attention. Here each 64-bit random word gives four independent 16-bit numbers u, uniform on [0, 65536): an element
is dropped when u < k, k = round(p * 65536), and the kept ones are scaled by 65536 / (65536 - k). So the dropout
probability is p rounded to a multiple of 1/65536 (0.1 becomes 0.1000061), and E[output] = input exactly, as with
`F.dropout`.

The words (`random_words`): torch's own generator (`random_`, seeded by `torch.manual_seed`, saved and restored
with the rest of torch's RNG state) draws two 64-bit seeds per mask; each seeds one stream of numpy's PCG64DXSM
(O'Neill's permuted congruential generator with the DXSM output, numpy's recommended bit generator), which fills
half of the words. torch's CPU generator is a serial Mersenne Twister at about 9 ns a word, a tenth of a small
Transformer's training step; PCG64DXSM takes about 2.4 ns, and with more than one torch thread the two halves are
filled at once (the second on a worker thread, numpy releasing the GIL). The mask depends on the seed and the
shape only, never on the thread count.

The comparison writes the mask in the input's dtype (1 kept, 0 dropped), which is kept for the backward pass: a
bool mask is converted on each multiplication. The saved mask therefore takes the memory of x (2 bytes an element
in bf16, 4 in float32, against 1 for a bool), as much as the activation that the next layer saves. Times of a
forward and backward pass against `F.dropout` are in docs/results.md (`benchmarks/dropout_bench.py`). On other
devices, and with the kernels off (`attnlab.kernels.switch`), `F.dropout` runs: the twin, which draws another mask
from the same generator.

Measured by `benchmarks/train_bench.py` (docs/results.md, issue 23).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from attnlab.kernels.switch import enabled

LEVELS = 65536  # 16 random bits per element
STREAMS = 2  # PCG64DXSM streams per mask, each filling its share of the words
PARALLEL_WORDS = 1 << 16  # below this many words one thread fills both streams: a worker's hand-off costs more

_pool: ThreadPoolExecutor | None = None
_pool_pid = -1  # the process that started _pool's thread: a forked child starts its own


def _worker() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        _pool, _pool_pid = ThreadPoolExecutor(1, thread_name_prefix="attnlab-dropout"), os.getpid()
    return _pool


def random_words(n: int, device: torch.device) -> list[Tensor]:
    """n uniform 64-bit words (int64, every bit random), in consecutive pieces: on the CPU one piece from each of
    STREAMS PCG64DXSM streams whose seeds are drawn from torch's generator (so `torch.manual_seed` fixes them); on
    other devices one piece from torch's `random_`. Pieces, not one tensor, so that no copy joins them.
    () -> [(n_1,), (n_2,), ...], n_1 + n_2 + ... = n."""
    if device.type != "cpu":
        return [torch.empty(n, dtype=torch.int64, device=device).random_(-2**63, None)]
    seeds = torch.empty(STREAMS, dtype=torch.int64).random_(-2**63, None).tolist()
    bounds = [n * i // STREAMS for i in range(STREAMS + 1)]
    counts = [end - start for start, end in zip(bounds, bounds[1:])]

    def fill(i: int) -> Tensor:  # stream i's words; numpy releases the GIL while it draws them
        if counts[i] == 0:  # numpy's empty array comes back with stride 0, which no int16 view takes
            return torch.empty(0, dtype=torch.int64)
        return torch.from_numpy(np.random.PCG64DXSM(seeds[i] % 2**64).random_raw(counts[i]).view(np.int64))

    if n >= PARALLEL_WORDS and torch.get_num_threads() > 1:
        rest = [_worker().submit(fill, i) for i in range(1, STREAMS)]
        return [fill(0)] + [f.result() for f in rest]
    return [fill(i) for i in range(STREAMS)]


def keep_mask(shape: torch.Size, p: float, device: torch.device,
              dtype: torch.dtype = torch.bool) -> tuple[Tensor, float]:
    """A mask of `shape` and `dtype`, each element kept (True, or 1) with probability 1 - k / 65536
    (k = round(p * 65536), at least 1), independently, else False (0), and the scale 65536 / (65536 - k) of the
    kept elements. The same draws give the same mask in every dtype."""
    k = min(max(round(p * LEVELS), 1), LEVELS - 1)
    n = shape.numel()
    keep = torch.empty(shape, dtype=dtype, device=device)
    flat, start = keep.view(-1), 0  # (n,): element i takes 16 bits of word i // 4
    for words in random_words((n + 3) // 4, device):  # 64 random bits each
        u = words.view(torch.int16)[:n - start]  # 16 random bits per element, as a signed number in [-32768, 32768)
        torch.ge(u, k - LEVELS // 2, out=flat[start:start + u.numel()])
        start += u.numel()
    return keep, LEVELS / (LEVELS - k)


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
