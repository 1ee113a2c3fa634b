"""attnlab.kernels.dropout against closed forms: the kept fraction 1 - k/65536 (k = round(p * 65536)) within 5 standard
deviations over ~1M elements, overall and in each 16-bit lane of a 64-bit draw; kept elements scaled by exactly
65536 / (65536 - k); the backward pass with the forward's mask (written out, and float64 gradcheck); torch.nn.Dropout
compatibility. The statistical checks are themselves checked against deliberately broken masks. With the kernels
off, the twin `F.dropout` itself. The random words: the same for any thread count, the two streams independent, and
a forked child's worker its own. The tests are about the kernel, so they turn the kernels on whatever
ATTNLAB_KERNELS says (`kernels_on`)."""

import math
import multiprocessing

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlab.kernels.dropout as dropout_module
from attnlab import kernels
from attnlab.kernels.dropout import Dropout, dropout, keep_mask
from conftest import torch_threads


@pytest.fixture(autouse=True)
def kernels_on():
    with kernels.override(True):
        yield

LEVELS = 65536
N = 2**20  # elements of the statistical checks: 5 sd of the kept fraction at p = 0.5 is 0.0024
P_VALUES = (0.1, 0.2, 0.5)


def _k(p: float) -> int:
    """The number of the 65536 16-bit values that drop an element (the module docstring's k)."""
    return round(p * LEVELS)


def _keep_prob(p: float) -> float:
    return 1 - _k(p) / LEVELS


def _kept(p: float, n: int = N, seed: int = 0) -> torch.Tensor:
    """Which of n ones `dropout` keeps, in draw order: (n,) bool."""
    torch.manual_seed(seed)
    return dropout(torch.ones(n), p, training=True) != 0


def _assert_fraction(keep: torch.Tensor, q: float, what: str) -> None:
    """The kept fraction of `keep` within 5 binomial standard deviations of q."""
    n = keep.numel()
    frac = keep.double().mean().item()
    sd = math.sqrt(q * (1 - q) / n)
    assert abs(frac - q) < 5 * sd, f"{what}: kept fraction {frac:.6f}, expected {q:.6f} +- {5 * sd:.6f} (5 sd)"


def _assert_lanes_unbiased(keep: torch.Tensor, q: float) -> None:
    """Element i takes bits 16 (i % 4) .. 16 (i % 4) + 15 of its 64-bit draw: each lane must keep a fraction q."""
    for lane in range(4):
        _assert_fraction(keep[lane::4], q, f"lane {lane}")


def _assert_neighbours_uncorrelated(keep: torch.Tensor) -> None:
    """Pearson correlation of keep[i] and keep[i + lag] within 5 / sqrt(n) of 0: lags 1-3 share a 64-bit draw,
    lag 4 is the same lane of the next draw."""
    x = keep.double()
    for lag in (1, 2, 3, 4):
        a, b = x[:-lag], x[lag:]
        corr = ((a - a.mean()) * (b - b.mean())).mean() / (a.std(unbiased=False) * b.std(unbiased=False))
        bound = 5 / math.sqrt(a.numel())
        assert abs(corr.item()) < bound, f"lag {lag}: correlation {corr.item():.5f}, bound {bound:.5f}"


# ---------------------------------------------------------------------------------------------- statistics
@pytest.mark.parametrize("p", P_VALUES)
def test_kept_fraction_is_one_minus_k_over_65536(p):
    torch.manual_seed(0)
    keep, scale = keep_mask(torch.Size([N]), p, torch.device("cpu"))
    assert keep.dtype == torch.bool and keep.shape == (N,)
    assert scale == LEVELS / (LEVELS - _k(p))
    _assert_fraction(keep, _keep_prob(p), f"keep_mask p={p}")
    _assert_fraction(_kept(p), _keep_prob(p), f"dropout p={p}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_a_mask_in_the_inputs_dtype_is_the_bool_mask_of_the_same_draws(dtype):
    """The mask `dropout` multiplies by is in x's dtype: 1 where the bool mask of the same seed is True, else 0;
    and the output is x * that bool mask * scale, as before (the bool mask written out)."""
    torch.manual_seed(4)
    keep, scale = keep_mask(torch.Size([64, 513]), 0.1, torch.device("cpu"))
    torch.manual_seed(4)
    ones, same_scale = keep_mask(torch.Size([64, 513]), 0.1, torch.device("cpu"), dtype)
    assert ones.dtype == dtype and same_scale == scale
    assert torch.equal(ones, torch.where(keep, 1.0, 0.0).to(dtype))
    x = torch.randn(64, 513).to(dtype)
    torch.manual_seed(4)
    assert torch.equal(dropout(x, 0.1, training=True), x.mul(keep).mul_(scale))


@pytest.mark.parametrize("p", P_VALUES)
def test_each_16_bit_lane_is_unbiased(p):
    _assert_lanes_unbiased(_kept(p), _keep_prob(p))


@pytest.mark.parametrize("p", (0.1, 0.5))
def test_neighbouring_elements_are_uncorrelated(p):
    _assert_neighbours_uncorrelated(_kept(p))


def _keep_mask_without_sign_bit(shape, p, device, dtype=torch.bool):
    """keep_mask with `random_()` instead of `random_(-2**63, None)`: draws in [0, 2**63), so the top 16-bit lane
    (lane 3 on a little-endian CPU) never has its sign bit set and keeps every element for p <= 0.5."""
    k = min(max(round(p * LEVELS), 1), LEVELS - 1)
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_()
    u = words.view(torch.int16)[:n].view(shape)
    return (u >= k - LEVELS // 2).to(dtype), LEVELS / (LEVELS - k)


def _keep_mask_pairs(shape, p, device, dtype=torch.bool):
    """A broken mask whose 16-bit numbers each serve two neighbouring elements."""
    k = min(max(round(p * LEVELS), 1), LEVELS - 1)
    n = shape.numel()
    words = torch.empty((n + 7) // 8, dtype=torch.int64, device=device).random_(-2**63, None)
    u = words.view(torch.int16).repeat_interleave(2)[:n].view(shape)
    return (u >= k - LEVELS // 2).to(dtype), LEVELS / (LEVELS - k)


@pytest.mark.parametrize("broken, check", [
    (_keep_mask_without_sign_bit, lambda keep, q: _assert_lanes_unbiased(keep, q)),
    (_keep_mask_pairs, lambda keep, q: _assert_neighbours_uncorrelated(keep)),
], ids=["sign-bit-lane", "paired-elements"])
@pytest.mark.parametrize("p", (0.1, 0.5))
def test_statistical_checks_catch_broken_masks(monkeypatch, broken, check, p):
    """The lane and correlation checks above fail for a mask with these bugs (patched in through `dropout`'s
    module, so the same code path as the real checks)."""
    check(_kept(p), _keep_prob(p))  # the real mask passes
    monkeypatch.setattr(dropout_module, "keep_mask", broken)
    with pytest.raises(AssertionError):
        check(_kept(p), _keep_prob(p))


# ---------------------------------------------------------------------------------------------- values
@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 0.0), (torch.float32, 2**-23), (torch.bfloat16, 2**-7)])
@pytest.mark.parametrize("p", (0.1, 0.5))
def test_kept_elements_scaled_by_65536_over_65536_minus_k_dropped_exactly_zero(dtype, rtol, p):
    """float64: exactly x * 65536 / (65536 - k); lower precisions: that product rounded once to the dtype (within
    one unit in the last place, since the scale itself is rounded to the dtype's compute precision)."""
    torch.manual_seed(0)
    x = (torch.rand(4000, dtype=torch.float64) + 0.5).neg_().to(dtype)  # in [-1.5, -0.5): never zero
    torch.manual_seed(1)
    y = dropout(x, p, training=True)
    assert y.dtype == dtype and y.shape == x.shape
    kept = y != 0
    assert 0 < kept.sum() < x.numel()
    expected = x[kept].double() * (LEVELS / (LEVELS - _k(p)))  # exact in float64
    if rtol == 0.0:
        assert torch.equal(y[kept], expected)
    else:
        torch.testing.assert_close(y[kept].double(), expected, rtol=rtol, atol=0.0)
    assert torch.all(y[~kept] == 0)


@pytest.mark.parametrize("p", P_VALUES)
def test_expected_output_equals_input(p):
    """E[dropout(1)] = 1: the mean over N ones within 5 standard deviations (scale * sqrt(q (1 - q) / N))."""
    q, scale = _keep_prob(p), LEVELS / (LEVELS - _k(p))
    torch.manual_seed(0)
    y = dropout(torch.ones(N, dtype=torch.float64), p, training=True)
    sd = scale * math.sqrt(q * (1 - q) / N)
    assert abs(y.mean().item() - 1.0) < 5 * sd


# ---------------------------------------------------------------------------------------------- backward
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_backward_uses_the_forward_mask(dtype):
    torch.manual_seed(0)
    x = (torch.rand(64, 33, dtype=torch.float64) + 0.5).to(dtype).requires_grad_()  # never zero
    grad_out = torch.randn(64, 33, dtype=torch.float64).to(dtype)
    torch.manual_seed(1)
    y = dropout(x, 0.3, training=True)
    y.backward(grad_out)
    keep = (y != 0).double()  # the forward's mask, read off its zeros
    assert 0 < keep.sum() < keep.numel()
    expected = grad_out.double() * keep * (LEVELS / (LEVELS - _k(0.3)))
    rtol = {torch.float64: 1e-15, torch.float32: 2**-23, torch.bfloat16: 2**-7}[dtype]
    assert x.grad.dtype == dtype
    torch.testing.assert_close(x.grad.double(), expected, rtol=rtol, atol=0.0)
    assert torch.all(x.grad[y == 0] == 0)


def test_gradcheck_float64():
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)

    def f(a):
        torch.manual_seed(3)  # the same mask at every evaluation
        return dropout(a, 0.4, training=True)

    dropped = f(x.detach()) == 0
    assert 0 < dropped.sum() < dropped.numel()
    assert torch.autograd.gradcheck(f, (x,))


# ---------------------------------------------------------------------------------------------- module, seeds
def test_p_zero_and_eval_mode_return_the_input():
    x = torch.randn(3, 4)
    assert dropout(x, 0.0, training=True) is x
    assert dropout(x, 0.5, training=False) is x
    assert Dropout(0.0)(x) is x
    assert Dropout(0.5).eval()(x) is x


def test_p_one_drops_everything():
    x = torch.randn(3, 4, requires_grad=True)
    y = dropout(x, 1.0, training=True)
    assert torch.all(y == 0)
    y.sum().backward()
    assert torch.all(x.grad == 0)


def test_module_is_a_torch_dropout_drawing_the_same_mask_as_the_function():
    module = Dropout(0.25)
    assert isinstance(module, nn.Dropout) and module.p == 0.25 and module.training
    x = torch.randn(50, 40)
    torch.manual_seed(7)
    by_module = module(x)
    torch.manual_seed(7)
    assert torch.equal(by_module, dropout(x, 0.25, training=True))
    assert (by_module == 0).any() and (by_module != 0).any()
    with pytest.raises(ValueError):
        Dropout(1.5)  # torch.nn.Dropout's own check


def test_inplace_module_drops_in_place():
    """inplace=True is torch.nn.Dropout's: the input itself is changed (F.dropout's scale 1 / (1 - p))."""
    x = torch.rand(20, 30) + 0.5
    before = x.clone()
    out = Dropout(0.5, inplace=True)(x)
    assert out is x
    kept = x != 0
    assert 0 < kept.sum() < x.numel()
    assert torch.equal(x[kept], before[kept] * 2)


def test_same_seed_same_mask_different_calls_different_masks():
    x = torch.ones(10_000)
    torch.manual_seed(11)
    a = dropout(x, 0.5, training=True)
    b = dropout(x, 0.5, training=True)
    torch.manual_seed(11)
    c = dropout(x, 0.5, training=True)
    assert torch.equal(a, c)
    assert not torch.equal(a, b)
    torch.manual_seed(12)
    assert not torch.equal(a, dropout(x, 0.5, training=True))


def test_same_distribution_as_torch_dropout():
    """Against F.dropout itself: both keep about 1 - p of the elements and scale them by about 1 / (1 - p)."""
    torch.manual_seed(0)
    x = torch.ones(N)
    ours, theirs = dropout(x, 0.2, training=True), F.dropout(x, 0.2, training=True)
    sd = math.sqrt(0.2 * 0.8 / N)
    assert abs((ours != 0).double().mean() - (theirs != 0).double().mean()) < 5 * math.sqrt(2) * sd
    torch.testing.assert_close(ours[ours != 0][0], theirs[theirs != 0][0], rtol=1e-4, atol=0.0)


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_a_probability_outside_0_1_is_refused_as_f_dropout_does(p):
    with pytest.raises(ValueError, match="between 0 and 1"):
        dropout(torch.ones(4), p)


@pytest.mark.parametrize("p", (0.1, 0.5))
def test_with_the_kernels_off_it_is_f_dropout(monkeypatch, p):
    """kernels.disabled(): `dropout` and `Dropout` are `F.dropout` (its own mask from the same generator: the same
    output and gradient for the same seed), and the 16-bit mask is never drawn."""
    x = torch.randn(64, 33, requires_grad=True)
    torch.manual_seed(5)
    expected = F.dropout(x, p, training=True)
    monkeypatch.setattr(dropout_module, "keep_mask", lambda *a: pytest.fail("the 16-bit mask was drawn"))
    with kernels.disabled():
        torch.manual_seed(5)
        y = dropout(x, p, training=True)
        torch.manual_seed(5)
        by_module = Dropout(p)(x)
    assert torch.equal(y, expected) and torch.equal(by_module, expected)
    y.sum().backward()
    assert torch.equal(x.grad, (expected != 0) / (1 - p))


# ---------------------------------------------------------------------------------------------- the random words
BIG = (300, 1024)  # 76,800 words: past dropout_module.PARALLEL_WORDS, so two threads fill the two streams


def _big_mask(seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    return keep_mask(torch.Size(BIG), 0.5, torch.device("cpu"))[0]


def test_the_mask_depends_on_the_seed_not_on_the_thread_count():
    """Two streams filled by one thread or by two give the same words: a run's masks do not change with
    train.num_threads."""
    assert math.prod(BIG) // 4 >= dropout_module.PARALLEL_WORDS
    with torch_threads(1):
        one = _big_mask(3)
    with torch_threads(2):
        two, again = _big_mask(3), _big_mask(3)
    assert torch.equal(one, two) and torch.equal(two, again)
    assert not torch.equal(two, _big_mask(4))


@pytest.mark.parametrize("shape", [(0,), (3, 0, 5), (1,), (3,), (4,), (5,), (7, 3), (2, 1, 9)])
def test_small_and_empty_shapes(shape):
    """A mask of a few elements (a stream with no words to fill) or none has x's shape; every element is dropped or
    kept at p = 0.5, and the kept ones scaled by 65536 / (65536 - 32768) = 2."""
    x = torch.ones(shape)
    torch.manual_seed(0)
    y = dropout(x, 0.5, training=True)
    assert y.shape == x.shape and torch.all((y == 0) | (y == 2))


def _assert_halves_uncorrelated(keep: torch.Tensor) -> None:
    """The two streams' halves of a p = 0.5 mask, element by element: Pearson correlation within 5 / sqrt(n) of 0."""
    x = keep.reshape(-1).double()
    half = x.numel() // 2
    a, b = x[:half], x[half:2 * half]
    corr = ((a - a.mean()) * (b - b.mean())).mean() / (a.std(unbiased=False) * b.std(unbiased=False))
    assert abs(corr.item()) < 5 / math.sqrt(half), f"halves correlated: {corr.item():.5f}"


def test_the_two_streams_are_independent(monkeypatch):
    """Each stream has its own seed: the halves of a mask are uncorrelated. The check fails for a broken
    `random_words` whose second stream repeats the first (the same seed twice)."""
    with torch_threads(2):
        _assert_halves_uncorrelated(_big_mask(0))
        _assert_fraction(_big_mask(0), 0.5, "two streams, p = 0.5")
        real = dropout_module.random_words

        def same_seed_twice(n, device):
            first = real(n, device)[0]
            return [first, first.clone()]

        monkeypatch.setattr(dropout_module, "random_words", same_seed_twice)
        with pytest.raises(AssertionError, match="halves correlated"):
            _assert_halves_uncorrelated(_big_mask(0))


def _words_sums(seed: int) -> list[int]:
    """The sums of a big mask's two pieces of random words (int64, wrapping), drawn at two threads: the worker
    fills the second."""
    torch.manual_seed(seed)
    with torch_threads(2):
        return [int(w.numpy().sum()) for w in dropout_module.random_words(math.prod(BIG) // 4, torch.device("cpu"))]


def _child_words(queue) -> None:
    queue.put(_words_sums(5))


def test_a_forked_child_draws_the_same_words():
    """A process forked after the worker thread started (a data loader's fork, say) starts its own worker instead
    of waiting on the parent's, which the child does not have, and draws the same words for the same seed. (The
    words only, summed by numpy: torch's own OpenMP operators hang in a child forked from a parent that ran them
    on two threads.)"""
    expected = _words_sums(5)  # the parent's worker thread now runs
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_words, args=(queue,))
    child.start()
    child.join(timeout=30)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive and child.exitcode == 0, "the forked child hung or failed drawing the words"
    assert queue.get(timeout=5) == expected
