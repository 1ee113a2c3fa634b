"""The fast paths: code that computes what a plain torch expression computes, only faster on some machine. The
models in `attnlab.nn` are written as the papers write them and call a kernel where one applies; each kernel has a
plain twin and a test that holds the two equal (values and gradients).

- `recurrence`: the GRU layer's recurrence and the Bahdanau GRU decoder's, with their backward derived by hand
  (CPU training), twins torch.nn.GRU and the decoder's step-by-step autograd;
- `attention`: the additive score through sigmoid, and one query's context as a broadcast product when trained
  (CPU), twins tanh and a matrix product;
- `dropout`: a mask of 16-bit random numbers from two PCG64DXSM streams (CPU), twin `F.dropout`;
- `loss`: label-smoothed cross-entropy with its gradient in the same pass (CPU training), twin `F.cross_entropy`;
- `linear_ce`: the output layer and that loss in one, a block of rows at a time, the (N, V) logits never whole,
  twin `F.linear` + `F.cross_entropy`;
- `memory`: glibc's malloc keeping freed memory for the next step, twin glibc's own thresholds.

One switch turns them all off: ``ATTNLAB_KERNELS=0`` for a process (`make test-plain` runs the suite so), or
``with attnlab.kernels.disabled():`` for a block; `attnlab.kernels.enabled()` says which holds (`switch`). Off,
every site runs its twin. Stands on `core` only, and no kernel imports another."""

from attnlab.kernels.switch import ENV, disabled, enabled, override

__all__ = ["ENV", "disabled", "enabled", "override"]
