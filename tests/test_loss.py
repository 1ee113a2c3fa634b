"""attnlab.kernels.loss against torch's own label-smoothed cross-entropy in float64 (value and gradient), with ignored targets,
several blocks of rows with a ragged last one, a non-unit upstream gradient, and float64 gradcheck; with the kernels
off, the twin itself. The tests are about the kernel, so they turn the kernels on whatever ATTNLAB_KERNELS says
(`kernels_on`)."""

import pytest
import torch
import torch.nn.functional as F

import attnlab.kernels.loss as loss_module
from attnlab import kernels
from attnlab.kernels.loss import smoothed_cross_entropy


@pytest.fixture(autouse=True)
def kernels_on():
    with kernels.override(True):
        yield

N, V = 37, 11

# Tolerances of the float32 loss (the fused path computes in float32 whatever the logits' dtype) and of the gradient,
# which is float32-accurate and then rounded to the logits' dtype.
LOSS_TOL = dict(rtol=1e-5, atol=1e-5)
GRAD_TOL = {torch.float64: dict(rtol=1e-5, atol=1e-6), torch.float32: dict(rtol=1e-5, atol=1e-6),
            torch.bfloat16: dict(rtol=2**-7, atol=1e-6)}


def _case(dtype, ignore_index, n=N, v=V, seed=0):
    """logits (n, v) of `dtype` (leaf, requires grad) and targets (n,) of which about a quarter are ignore_index."""
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(n, v, generator=g, dtype=torch.float64)).to(dtype).requires_grad_()
    targets = torch.randint(0, v, (n,), generator=g)
    targets[torch.rand(n, generator=g) < 0.25] = ignore_index
    assert (targets == ignore_index).any() and (targets != ignore_index).any()
    return logits, targets


def _reference(logits, targets, eps, ignore_index, scale=1.0):
    """torch's F.cross_entropy in float64 and its gradient (the gradient of scale * loss)."""
    x = logits.detach().double().requires_grad_()
    loss = F.cross_entropy(x, targets, ignore_index=ignore_index, label_smoothing=eps, reduction="sum")
    (loss * scale).backward()
    return loss.detach(), x.grad


def _fused(logits, targets, eps, ignore_index, scale=1.0):
    loss = smoothed_cross_entropy(logits, targets, eps, ignore_index)
    assert type(loss.grad_fn).__name__ == "FusedSmoothedCEBackward", "the fused path did not run"
    (loss * scale).backward()
    return loss.detach(), logits.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("ignore_index", [-100, 0])
@pytest.mark.parametrize("block_elements", [None, 3 * V + 2, V - 1], ids=["one-block", "3-rows", "1-row"])
def test_value_and_gradient_match_torch_float64(monkeypatch, dtype, eps, ignore_index, block_elements):
    """One block of N rows; blocks of 3 rows (13 blocks, the last of 1 row); blocks of 1 row (V > BLOCK_ELEMENTS)."""
    if block_elements is not None:
        monkeypatch.setattr(loss_module, "BLOCK_ELEMENTS", block_elements)
    logits, targets = _case(dtype, ignore_index)
    ref_loss, ref_grad = _reference(logits, targets, eps, ignore_index)
    loss, grad = _fused(logits, targets, eps, ignore_index)
    assert loss.dtype == torch.float32 and loss.shape == ()
    torch.testing.assert_close(loss.double(), ref_loss, **LOSS_TOL)
    assert grad.dtype == dtype
    torch.testing.assert_close(grad.double(), ref_grad, **GRAD_TOL[dtype])
    assert torch.all(grad[targets == ignore_index] == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_logits_are_not_modified(dtype):
    """The loss reads its logits, it does not write them (an autograd input may be needed by another node)."""
    logits, targets = _case(dtype, -100)
    before = logits.detach().clone()
    smoothed_cross_entropy(logits, targets, 0.1, -100).backward()
    assert torch.equal(logits.detach(), before)


def test_logits_saved_by_their_producer_survive_the_loss():
    """Logits that an earlier op saved for its own backward (exp saves its output) must still be intact there."""
    z, targets = _case(torch.float32, -100)
    smoothed_cross_entropy(z.exp(), targets, 0.1, -100).backward()
    _, ref_grad_of_logits = _reference(z.detach().double().exp(), targets, 0.1, -100)
    expected = ref_grad_of_logits * z.detach().double().exp()  # chain rule through exp
    torch.testing.assert_close(z.grad.double(), expected, **GRAD_TOL[torch.float32])


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_all_rows_ignored(eps):
    logits = torch.randn(5, V, requires_grad=True)
    targets = torch.full((5,), -100)
    loss = smoothed_cross_entropy(logits, targets, eps, -100)
    assert loss.item() == 0.0
    loss.backward()
    assert torch.equal(logits.grad, torch.zeros(5, V))
    ref_loss, _ = _reference(logits, targets, eps, -100)
    assert ref_loss.item() == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_non_unit_upstream_gradient(monkeypatch, dtype):
    monkeypatch.setattr(loss_module, "BLOCK_ELEMENTS", 4 * V)
    logits, targets = _case(dtype, -100)
    ref_loss, ref_grad = _reference(logits, targets, 0.1, -100, scale=1 / 7)
    loss, grad = _fused(logits, targets, 0.1, -100, scale=1 / 7)
    torch.testing.assert_close(loss.double(), ref_loss, **LOSS_TOL)
    torch.testing.assert_close(grad.double(), ref_grad, **GRAD_TOL[dtype])


def test_gradcheck_float64():
    """gradcheck with finite differences wide enough for the float32 arithmetic of the fused path (eps 1e-3:
    rounding error ~ 1e-6 / 1e-3); the smoothing term alone (eps / V = 0.02 per element) is far above atol."""
    logits, targets = _case(torch.float64, -100, n=4, v=5, seed=1)
    targets[0] = -100
    f = lambda x: smoothed_cross_entropy(x, targets, 0.1, -100)  # noqa: E731
    assert type(f(logits).grad_fn).__name__ == "FusedSmoothedCEBackward"
    assert torch.autograd.gradcheck(f, (logits,), eps=1e-3, atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_without_a_gradient_falls_back_to_torch(monkeypatch, eps):
    """No requires_grad, or torch.no_grad: F.cross_entropy in float32 (called, and the same value); with a gradient:
    the fused path (F.cross_entropy not called)."""
    calls = []
    real = F.cross_entropy

    def spy(*args, **kwargs):
        calls.append(args[0].dtype)
        return real(*args, **kwargs)

    logits, targets = _case(torch.bfloat16, -100)
    expected = real(logits.detach().float(), targets, ignore_index=-100, label_smoothing=eps, reduction="sum")
    monkeypatch.setattr(F, "cross_entropy", spy)
    plain = smoothed_cross_entropy(logits.detach(), targets, eps, -100)
    with torch.no_grad():
        no_grad = smoothed_cross_entropy(logits, targets, eps, -100)
    assert calls == [torch.float32, torch.float32]
    assert torch.equal(plain, expected) and torch.equal(no_grad, expected)
    fused = smoothed_cross_entropy(logits, targets, eps, -100)
    assert len(calls) == 2
    torch.testing.assert_close(fused, expected, **LOSS_TOL)


def test_with_the_kernels_off_it_is_torchs_cross_entropy(monkeypatch):
    """kernels.disabled(): F.cross_entropy in float32 with a gradient too (the fused Function never runs), the same
    value and gradient to the last bit."""
    logits, targets = _case(torch.bfloat16, -100)
    expected = F.cross_entropy(logits.float(), targets, ignore_index=-100, label_smoothing=0.1, reduction="sum")
    expected.backward()
    expected_grad, logits.grad = logits.grad.clone(), None
    monkeypatch.setattr(loss_module.FusedSmoothedCE, "apply", lambda *a: pytest.fail("the fused loss ran"))
    with kernels.disabled():
        loss = smoothed_cross_entropy(logits, targets, 0.1, -100)
    loss.backward()
    assert torch.equal(loss, expected) and torch.equal(logits.grad, expected_grad)
