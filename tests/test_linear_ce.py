"""attnlab.kernels.linear_ce: the output layer and the label-smoothed loss fused, held against its twin, the plain
`F.cross_entropy(x @ W.T + b, y, label_smoothing=, ignore_index=, reduction="sum")`, in values and in the gradients
of x, W and b (float64 and float32, with padding rows, blocks that do not divide the rows), by float64 gradcheck,
and with the kernels off."""

import pytest
import torch
import torch.nn.functional as F

import attnlab.kernels.linear_ce as linear_ce
from attnlab import kernels
from attnlab.kernels.linear_ce import FusedLinearCE, linear_cross_entropy

PAD = 0


def _case(N: int, D: int, V: int, dtype: torch.dtype, bias: bool = True, pad_rows: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, D, generator=g, dtype=dtype).requires_grad_()
    W = (torch.randn(V, D, generator=g, dtype=dtype) / D ** 0.5).requires_grad_()
    b = (torch.randn(V, generator=g, dtype=dtype) if bias else None)
    b = b.requires_grad_() if b is not None else None
    y = torch.randint(1, V, (N,), generator=g)
    y[torch.randperm(N, generator=g)[:pad_rows]] = PAD
    return x, W, b, y


def _plain(x, W, b, y, eps):
    logits = x @ W.T + (b if b is not None else 0)  # (N, V)
    return F.cross_entropy(logits, y, label_smoothing=eps, ignore_index=PAD, reduction="sum")


def _value_and_grads(fn, x, W, b, y, eps):
    inputs = [t for t in (x, W, b) if t is not None]
    loss = fn(x, W, b, y, eps)
    return loss.detach(), torch.autograd.grad(loss, inputs)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("block_elements", [1, 7 * 40, 10**9])  # a row per block, 7 rows, one block
@pytest.mark.parametrize("bias", [True, False])
def test_equal_to_the_plain_loss_in_values_and_gradients(dtype, tol, eps, block_elements, bias):
    x, W, b, y = _case(37, 16, 40, dtype, bias)
    want, want_grads = _value_and_grads(_plain, x, W, b, y, eps)
    got, got_grads = _value_and_grads(
        lambda *a: linear_cross_entropy(*a[:4], a[4], PAD, block_elements=block_elements), x, W, b, y, eps)
    assert got.dtype == want.dtype
    scale = want.abs().item()
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * scale)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)


def test_the_fused_function_runs_and_never_makes_the_whole_logits(monkeypatch):
    """With the kernels on, FusedLinearCE runs, and no matrix product makes more than a block of logits; with
    them off, the twin runs: the same loss and gradients."""
    x, W, b, y = _case(64, 8, 50, torch.float32)
    shapes = []
    real_linear = F.linear
    monkeypatch.setattr(linear_ce.F, "linear", lambda *a: shapes.append(real_linear(*a).shape) or real_linear(*a))
    with kernels.override(True):
        fused, fused_grads = _value_and_grads(
            lambda *a: linear_cross_entropy(*a[:4], a[4], PAD, block_elements=500), x, W, b, y, 0.1)
    assert shapes and all(s[0] <= 10 for s in shapes)  # 500 // 50 rows per block
    shapes.clear()
    with kernels.disabled():
        plain, plain_grads = _value_and_grads(lambda *a: linear_cross_entropy(*a[:4], a[4], PAD), x, W, b, y, 0.1)
    assert shapes == [(64, 50)]  # the twin: the whole logits
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-4)
    for g, w in zip(fused_grads, plain_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_gradcheck_float64():
    x, W, b, y = _case(6, 4, 5, torch.float64, pad_rows=2, seed=3)
    assert torch.autograd.gradcheck(lambda x, W, b: FusedLinearCE.apply(x, W, b, y, 0.1, PAD, 4), (x, W, b))


def test_only_the_inputs_that_need_a_gradient_get_one():
    x, W, b, y = _case(10, 4, 6, torch.float64)
    W.requires_grad_(False)
    loss = FusedLinearCE.apply(x, W, b, y, 0.1, PAD, 3)
    gx, gb = torch.autograd.grad(loss, (x, b))
    want = torch.autograd.grad(_plain(x, W, b, y, 0.1), (x, b))
    torch.testing.assert_close((gx, gb), want)
    with torch.no_grad():
        torch.testing.assert_close(linear_cross_entropy(x, W, b, y, 0.1, PAD), _plain(x, W, b, y, 0.1))


def test_all_rows_padding_and_tied_weights():
    """Every target padding: loss 0 and no gradient. A weight shared with an embedding (tied): its gradient is the
    sum of both uses, as the plain expression's."""
    x, W, b, y = _case(5, 4, 6, torch.float64, pad_rows=5)
    loss = linear_cross_entropy(x, W, b, y, 0.1, PAD)
    assert loss.item() == 0.0 and all(g.abs().max() == 0 for g in torch.autograd.grad(loss, (x, W, b)))
    x, W, b, y = _case(9, 4, 6, torch.float64, bias=False)
    tokens = torch.tensor([1, 2, 3, 4, 5, 1, 2, 3, 4])
    grads = []
    for fn in (lambda h: linear_cross_entropy(h, W, None, y, 0.1, PAD), lambda h: _plain(h, W, None, y, 0.1)):
        h = F.embedding(tokens, W) * 0.5 + x  # (N, D): the embedding and the output layer share W
        grads.append(torch.autograd.grad(fn(h), W)[0])
    torch.testing.assert_close(grads[0], grads[1])


def test_bad_shapes_are_refused_by_name():
    x, W, b, y = _case(5, 4, 6, torch.float32)
    with pytest.raises(ValueError, match=r"x \(5, 4\) and weight \(6, 3\)"):
        linear_cross_entropy(x, W[:, :3], b, y, 0.1, PAD)
