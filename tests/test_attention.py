"""The attention core against independent references: torch.nn.MultiheadAttention,
F.scaled_dot_product_attention, closed forms written out in the test, and float64 gradcheck."""

import math
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlab.nn.attention as attention_module
from attnlab import kernels
from attnlab.nn.attention import (EXPLICIT_MAX_KEYS, EXPLICIT_MAX_SCORES, SCORE_KINDS, Attention, LearnedQueryAttention,
                               MultiHeadAttention, causal_mask, explicit_is_faster, masked_softmax, padding_mask,
                               scaled_dot_product_attention)
from attnlab.core.errors import AttnlabError

B, T, S, D, H = 3, 4, 6, 16, 4


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _lengths_mask():
    lengths = torch.tensor([6, 3, 1])
    return lengths, padding_mask(lengths, S)  # (B, S)


def test_masks():
    _, m = _lengths_mask()
    assert m.tolist()[1] == [True, True, True, False, False, False]
    assert torch.equal(causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))
    # with 2 cached keys, the last query sees all 4 keys and the first sees 3
    assert causal_mask(2, 4).sum(-1).tolist() == [3, 4]


def _copy_from_torch(mine: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    Wq, Wk, Wv = ref.in_proj_weight.detach().chunk(3)
    bq, bk, bv = ref.in_proj_bias.detach().chunk(3)
    with torch.no_grad():
        for lin, w, b in ((mine.W_Q, Wq, bq), (mine.W_K, Wk, bk), (mine.W_V, Wv, bv),
                          (mine.W_O, ref.out_proj.weight, ref.out_proj.bias)):
            lin.weight.copy_(w)
            lin.bias.copy_(b)


@pytest.mark.parametrize("masking", ["none", "padding", "causal", "both"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_matches_torch(masking, need_weights):
    ref = nn.MultiheadAttention(D, H, batch_first=True).eval()
    mine = MultiHeadAttention(D, H).eval()
    _copy_from_torch(mine, ref)
    x = torch.randn(B, S, D)
    q = x if masking in ("causal", "both") else torch.randn(B, T, D)
    Tq = q.size(1)
    _, keep = _lengths_mask()
    kpm = ~keep if masking in ("padding", "both") else None
    am = ~causal_mask(Tq, S) if masking in ("causal", "both") else None
    if masking == "both":
        kpm = ~padding_mask(torch.tensor([6, 5, 4]), S)  # causal + padding must leave every row a key
    ref_out, ref_w = ref(q, x, x, key_padding_mask=kpm, attn_mask=am, need_weights=True,
                         average_attn_weights=False)
    mask = None
    if kpm is not None:
        mask = (~kpm)[:, None, None, :]
    if am is not None:
        mask = (~am)[None, None] if mask is None else mask & (~am)[None, None]
    out, w = mine(q, x, x, mask=mask, need_weights=need_weights)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=1e-6, rtol=1e-5)
    else:
        assert w is None


@pytest.mark.parametrize("use_mask", [False, True])
def test_sdpa_explicit_and_fused_match_torch(use_mask):
    q, k, v = torch.randn(B, H, T, 8), torch.randn(B, H, S, 8), torch.randn(B, H, S, 5)
    mask = padding_mask(torch.tensor([6, 3, 1]), S)[:, None, None, :] if use_mask else None
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    fused, w_none = scaled_dot_product_attention(q, k, v, mask, kernel="fused")
    explicit, w = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    assert w_none is None
    torch.testing.assert_close(fused, ref)
    torch.testing.assert_close(explicit, ref, atol=1e-6, rtol=1e-5)
    # weights by hand: softmax of q.k/sqrt(d) over kept keys only
    scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(8)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(w, scores.softmax(-1), atol=1e-6, rtol=1e-5)


def _reference_scores(att: Attention, query, keys):
    """Each score function written out per (t, s) pair, independently of the module's vectorised code."""
    Bq, Tq, Sq = query.size(0), query.size(1), keys.size(1)
    out = torch.empty(Bq, Tq, Sq, dtype=query.dtype)
    for b in range(Bq):
        for t in range(Tq):
            for s in range(Sq):
                qv, kv = query[b, t], keys[b, s]
                if att.kind == "dot":
                    e = qv @ kv
                elif att.kind == "scaled_dot":
                    e = qv @ kv / math.sqrt(qv.numel())
                elif att.kind == "general":
                    e = qv @ att.W_a.weight @ kv
                elif att.kind == "additive":
                    sc = att.score
                    e = sc.v_a.weight[0] @ torch.tanh(sc.W_a.weight @ qv + sc.U_a.weight @ kv + sc.U_a.bias)
                else:  # parameterized
                    e = (att.W_Q.weight @ qv) @ (att.W_K.weight @ kv)
                out[b, t, s] = e
    return out


def _dims(kind):
    return (8, 8) if kind in ("dot", "scaled_dot") else (8, 6)


@pytest.mark.parametrize("kind", SCORE_KINDS)
def test_attention_matches_written_out_formula(kind):
    dq, dk = _dims(kind)
    att = Attention(kind, dq, dk, attn_dim=7).double()
    query, keys = torch.randn(B, T, dq, dtype=torch.float64), torch.randn(B, S, dk, dtype=torch.float64)
    _, keep = _lengths_mask()
    with torch.no_grad():
        context, w = att(query, keys, mask=keep, need_weights=True)
        scores = _reference_scores(att, query, keys).masked_fill(~keep[:, None, :], float("-inf"))
        ref_w = scores.softmax(-1)
        values = att.W_V(keys) if kind == "parameterized" else keys
    torch.testing.assert_close(w, ref_w)
    torch.testing.assert_close(context, ref_w @ values)
    # weights sum to 1 over kept keys and are exactly 0 elsewhere
    torch.testing.assert_close(w.sum(-1), torch.ones(B, T, dtype=torch.float64))
    assert torch.all(w.masked_select(~keep[:, None, :].expand_as(w)) == 0)


@pytest.mark.parametrize("kind", ["dot", "general", "parameterized"])
def test_scaled_scores_divide_the_written_out_scores_by_sqrt_of_the_query_size(kind):
    """Attention(scaled=True): softmax(score / sqrt(d)), d the query's size after W^Q ("parameterized": attn_dim);
    the unscaled module's written-out scores are the reference."""
    dq, dk = _dims(kind)
    plain = Attention(kind, dq, dk, attn_dim=7).double()
    scaled = Attention(kind, dq, dk, attn_dim=7, scaled=True).double()
    scaled.load_state_dict(plain.state_dict())
    query, keys = torch.randn(B, T, dq, dtype=torch.float64) * 3, torch.randn(B, S, dk, dtype=torch.float64)
    _, keep = _lengths_mask()
    d = 7 if kind == "parameterized" else dq
    with torch.no_grad():
        _, w = scaled(query, keys, mask=keep, need_weights=True)
        ref_w = (_reference_scores(plain, query, keys) / math.sqrt(d)).masked_fill(~keep[:, None, :], float("-inf"))
    torch.testing.assert_close(w, ref_w.softmax(-1))
    with pytest.raises(AttnlabError, match="additive attention has no scale"):
        Attention("additive", dq, dk, scaled=True)


@pytest.mark.parametrize("kind", SCORE_KINDS)
def test_attention_gradcheck(kind):
    dq, dk = _dims(kind)
    att = Attention(kind, dq, dk, attn_dim=5).double()
    query = torch.randn(2, 3, dq, dtype=torch.float64, requires_grad=True)
    keys = torch.randn(2, 4, dk, dtype=torch.float64, requires_grad=True)
    keep = padding_mask(torch.tensor([4, 2]), 4)
    assert torch.autograd.gradcheck(lambda q, k: att(q, k, mask=keep, need_weights=True)[0], (query, keys))
    assert torch.autograd.gradcheck(lambda q, k: att(q, k, mask=keep, need_weights=False)[0], (query, keys))


@pytest.mark.parametrize("on", [True, False], ids=["kernel", "plain"])
def test_additive_float32_sigmoid_form_matches_tanh_in_float64(monkeypatch, on):
    """In float32 on the CPU, with the kernels on, the additive score is 2 v.sigmoid(2x) - sum(v)
    (`attnlab.kernels.attention.additive_scores`): the same scores and gradients as the written-out v.tanh(x),
    computed in float64 from the same weights; under bf16 autocast, or with the kernels off, it is tanh."""
    spy = mock.Mock(wraps=attention_module.additive_scores)
    monkeypatch.setattr(attention_module, "additive_scores", spy)
    with kernels.override(on):
        att = Attention("additive", 8, 6, attn_dim=32)
        ref = Attention("additive", 8, 6, attn_dim=32).double()
        ref.load_state_dict(att.state_dict())
        query = (3 * torch.randn(B, T, 8)).requires_grad_()  # large enough that tanh saturates for some pairs
        keys = (3 * torch.randn(B, S, 6)).requires_grad_()
        q64, k64 = query.detach().double().requires_grad_(), keys.detach().double().requires_grad_()
        scores = att.score(query, att.precompute(keys)[0])
        with torch.no_grad():
            expected = _reference_scores(ref, q64, k64)
        torch.testing.assert_close(scores.double(), expected, atol=2e-5, rtol=1e-5)
        g = torch.randn(B, T, S, dtype=torch.float64)
        (scores * g.float()).sum().backward()
        (ref.score(q64, ref.precompute(k64)[0]) * g).sum().backward()
        torch.testing.assert_close(query.grad.double(), q64.grad, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(keys.grad.double(), k64.grad, atol=1e-4, rtol=1e-4)
        for p32, p64 in zip(att.parameters(), ref.parameters()):
            torch.testing.assert_close(p32.grad.double(), p64.grad, atol=1e-4, rtol=1e-4)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            low = att.score(query, att.precompute(keys)[0])
        assert low.dtype == torch.bfloat16  # the tanh form: the sigmoid form's output would be float32
        torch.testing.assert_close(low.double(), expected, atol=0.15, rtol=0.05)
    assert spy.call_count == int(on)  # the float32 scores only


@pytest.mark.parametrize("on", [True, False], ids=["kernel", "plain"])
@pytest.mark.parametrize("grad", [False, True])
def test_single_query_context_with_and_without_backward(monkeypatch, grad, on):
    """One query per row (step-wise decoding): the matmul without a backward, the broadcast product with one
    (`attnlab.kernels.attention.one_query_context`, with the kernels on); both equal the context written out, and
    the gradients match autograd through the einsum."""
    spy = mock.Mock(wraps=attention_module.one_query_context)
    monkeypatch.setattr(attention_module, "one_query_context", spy)
    scores = torch.randn(B, 1, S, dtype=torch.float64, requires_grad=grad)
    values = torch.randn(B, S, 5, dtype=torch.float64, requires_grad=grad)
    _, keep = _lengths_mask()
    with torch.set_grad_enabled(grad), kernels.override(on):
        context, w = attention_module.attend(scores, values, keep[:, None, :])
        if grad:
            assert torch.autograd.gradcheck(lambda a, v: attention_module.attend(a, v, keep[:, None, :])[0],
                                            (scores, values))
    torch.testing.assert_close(context, torch.einsum("bts,bsd->btd", w, values))
    assert spy.called == (grad and on)


def test_mha_gradcheck():
    mha = MultiHeadAttention(8, 2).double()
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    keep = padding_mask(torch.tensor([3, 2]), 3)
    assert torch.autograd.gradcheck(lambda a: mha(a, a, a, mask=keep, need_weights=True)[0], (x,))


@pytest.mark.parametrize("kind", ["dot", "general", "scaled_dot", "parameterized"])
def test_fused_and_explicit_agree(monkeypatch, kind):
    monkeypatch.setattr(attention_module, "explicit_is_faster", lambda q, k: False)  # "auto" picks the fused kernel
    dq, dk = _dims(kind)
    att = Attention(kind, dq, dk)
    query, keys = torch.randn(B, T, dq), torch.randn(B, S, dk)
    _, keep = _lengths_mask()
    fused, none = att(query, keys, mask=keep, need_weights=False)
    explicit, _ = att(query, keys, mask=keep, need_weights=True)
    assert none is None
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)


def test_fully_masked_row_is_zero_not_nan():
    q, k, v = torch.randn(2, 1, 3, 4), torch.randn(2, 1, 5, 4), torch.randn(2, 1, 5, 4)
    q.requires_grad_(True)
    mask = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    mask[1, :, 2] = False  # batch 1, query 2 sees no key
    for need in (True, False):
        out, w = scaled_dot_product_attention(q, k, v, mask, need_weights=need)
        assert torch.isfinite(out).all()
        assert torch.all(out[1, :, 2] == 0)
        if need:
            assert torch.all(w[1, :, 2] == 0)
            torch.testing.assert_close(w[0].sum(-1), torch.ones(1, 3))
        out.sum().backward()
        assert torch.isfinite(q.grad).all()
        q.grad = None


def test_masked_softmax_exact_zeros():
    scores = torch.randn(4, 7) * 50
    mask = torch.rand(4, 7) > 0.5
    mask[:, 0] = True
    w = masked_softmax(scores, mask)
    assert torch.all(w[~mask] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(4))


def test_user_errors():
    with pytest.raises(AttnlabError, match="additive"):
        Attention("cosine", 4, 4)
    with pytest.raises(AttnlabError, match=r"query_dim \(4\) == key_dim \(5\)"):
        Attention("dot", 4, 5)
    with pytest.raises(AttnlabError, match=r"d_model \(10\) must be divisible .* \(4\)"):
        MultiHeadAttention(10, 4)
    with pytest.raises(AttnlabError, match="bool"):
        MultiHeadAttention(8, 2)(torch.randn(1, 2, 8), torch.randn(1, 2, 8), torch.randn(1, 2, 8),
                                 mask=torch.ones(1, 2))


@pytest.mark.parametrize("need_weights", [True, False])
def test_causal_flag_equals_causal_mask(need_weights):
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(B, S, D)
    ref, _ = mha(x, x, x, mask=causal_mask(S)[None, None], need_weights=True)
    out, _ = mha(x, x, x, causal=True, need_weights=need_weights)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    keep = padding_mask(torch.tensor([6, 4, 2]), S)
    both, _ = mha(x, x, x, mask=keep, causal=True, need_weights=need_weights)
    ref_both, _ = mha(x, x, x, mask=keep[:, None, None, :] & causal_mask(S)[None, None], need_weights=True)
    torch.testing.assert_close(both, ref_both, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------- learned query
def test_learned_query_attention_matches_the_seed_formula():
    """IF3270's layer written out per position with Python loops: e_t = tanh(h_t . w + b_t), a = softmax(e),
    c = sum_t a_t h_t; Dk + S parameters (2 + 20 = 22 in the seed)."""
    att = LearnedQueryAttention(2, 20).double()
    assert sum(p.numel() for p in att.parameters()) == 22
    with torch.no_grad():
        att.b.copy_(torch.randn(20, dtype=torch.float64))
    h = torch.randn(3, 20, 2, dtype=torch.float64)
    context, weights = att(h)
    w, b, hs = att.w.tolist(), att.b.tolist(), h.tolist()
    for i in range(3):
        e = [math.tanh(hs[i][t][0] * w[0] + hs[i][t][1] * w[1] + b[t]) for t in range(20)]
        z = sum(math.exp(v) for v in e)
        a = [math.exp(v) / z for v in e]
        c = [sum(a[t] * hs[i][t][j] for t in range(20)) for j in range(2)]
        torch.testing.assert_close(weights[i], torch.tensor(a, dtype=torch.float64))
        torch.testing.assert_close(context[i], torch.tensor(c, dtype=torch.float64))


def test_learned_query_attention_mask_gradcheck_and_errors():
    att = LearnedQueryAttention(3, 5).double()
    keys = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    keep = padding_mask(torch.tensor([5, 2]), 5)
    _, w = att(keys, keep)
    assert torch.all(w[1, 2:] == 0) and torch.allclose(w.sum(-1), torch.ones(2, dtype=torch.float64))
    assert torch.autograd.gradcheck(lambda k: att(k, keep)[0], (keys,))
    with pytest.raises(AttnlabError, match=r"\(B, 5, 3\)"):
        att(torch.randn(2, 6, 3, dtype=torch.float64))


@pytest.mark.parametrize("T_q, S_k", [(4, 4), (3, 7), (1, 5)])
def test_causal_with_fewer_queries_than_keys_is_bottom_right_on_both_paths(T_q, S_k):
    """causal=True: query i sees keys 0 .. i + (S - T) (the last T positions of a sequence whose first S - T keys
    are cached), on the fused and on the explicit path alike; checked against softmax written out per query."""
    q = torch.randn(2, H, T_q, D // H, dtype=torch.float64)
    k = torch.randn(2, H, S_k, D // H, dtype=torch.float64)
    v = torch.randn(2, H, S_k, D // H, dtype=torch.float64)
    fused, _ = scaled_dot_product_attention(q, k, v, causal=True, kernel="fused")
    explicit, w = scaled_dot_product_attention(q, k, v, causal=True, need_weights=True)
    expected = torch.empty_like(fused)
    for i in range(T_q):
        visible = i + (S_k - T_q) + 1
        scores = q[:, :, i:i + 1] @ k[:, :, :visible].transpose(-2, -1) / math.sqrt(D // H)  # (2, H, 1, visible)
        expected[:, :, i:i + 1] = scores.softmax(-1) @ v[:, :, :visible]
        assert torch.all(w[:, :, i, visible:] == 0)
    torch.testing.assert_close(fused, expected)
    torch.testing.assert_close(explicit, expected)
    with_mask, _ = scaled_dot_product_attention(q, k, v, torch.ones(2, 1, 1, S_k, dtype=torch.bool), causal=True)
    torch.testing.assert_close(with_mask, expected)


def test_causal_with_more_queries_than_keys_is_refused():
    q, k = torch.randn(1, 1, 5, 4), torch.randn(1, 1, 3, 4)
    with pytest.raises(AttnlabError, match="T=5 queries and S=3 keys"):
        scaled_dot_product_attention(q, k, k, causal=True)


# ---------------------------------------------------------------------------------------------- kernels
KERNELS = ("auto", "fused", "explicit")
_TORCH_SDPA = F.scaled_dot_product_attention


def _kernel_case(case: str, dtype: torch.dtype):
    """q (B, H, T, 8), k (B, H, Sk, 8), v (B, H, Sk, 5); the bool mask to pass (or None) and causal flag; the full
    (B, 1|H, T, Sk) mask they mean, written out here (bottom-right causal: query t sees keys 0 .. t + Sk - T)."""
    Sk = T if case == "causal-square" else S
    q, k, v = (torch.randn(B, H, n, d, dtype=torch.float64).to(dtype) for n, d in ((T, 8), (Sk, 8), (Sk, 5)))
    pad = torch.arange(Sk)[None, :] < torch.tensor([Sk, 3, 1])[:, None]  # (B, Sk)
    tri = torch.arange(Sk)[None, :] <= torch.arange(T)[:, None] + (Sk - T)  # (T, Sk)
    if case == "padding":
        return (q, k, v), pad[:, None, None, :], False, pad[:, None, None, :].expand(B, 1, T, Sk)
    if case in ("causal-square", "causal-cached"):
        return (q, k, v), None, True, tri.expand(B, 1, T, Sk)
    if case == "padding-causal":
        return (q, k, v), pad[:, None, None, :], True, pad[:, None, None, :] & tri
    # fully masked rows: batch 1 query 2 and batch 2 query 0 see no key, every head
    mask = torch.rand(B, 1, T, Sk) > 0.3
    mask[..., 0] = True
    mask[1, :, 2] = False
    mask[2, :, 0] = False
    return (q, k, v), mask, False, mask


def _reference_context(q, k, v, full_mask):
    """torch's F.scaled_dot_product_attention in float64 with fully masked rows set to zero (the attnlab
    convention; torch gives NaN there)."""
    has_key = full_mask.any(-1, keepdim=True)
    ref = _TORCH_SDPA(q.double(), k.double(), v.double(), attn_mask=full_mask)
    return torch.where(has_key, ref, torch.zeros(()))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("case", ["padding", "causal-square", "causal-cached", "padding-causal", "fully-masked"])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_kernels_match_torch_sdpa(kernel, case, dtype, tol):
    (q, k, v), mask, causal, full_mask = _kernel_case(case, dtype)
    q.requires_grad_(True)
    out, w = scaled_dot_product_attention(q, k, v, mask, causal=causal, kernel=kernel)
    assert w is None and out.dtype == dtype and out.shape == (B, H, T, 5)
    torch.testing.assert_close(out.double(), _reference_context(q, k, v, full_mask), atol=tol, rtol=tol)
    out.double().pow(2).sum().backward()
    assert torch.isfinite(q.grad).all()
    empty_rows = ~full_mask.any(-1).expand(B, H, T)  # (B, H, T)
    assert torch.all(out[empty_rows] == 0) and torch.all(q.grad[empty_rows] == 0)


@pytest.mark.parametrize("case", ["padding", "causal-cached", "padding-causal"])
def test_kernel_gradients_match_torch_float64(case):
    (q, k, v), mask, causal, full_mask = _kernel_case(case, torch.float64)
    ref_inputs = [t.clone().requires_grad_() for t in (q, k, v)]
    _TORCH_SDPA(*ref_inputs, attn_mask=full_mask).sum().backward()
    for kernel in KERNELS:
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        scaled_dot_product_attention(*inputs, mask, causal=causal, kernel=kernel)[0].sum().backward()
        for mine, ref in zip(inputs, ref_inputs):
            torch.testing.assert_close(mine.grad, ref.grad, msg=lambda m: f"kernel={kernel}: {m}")


def test_unknown_kernel_is_refused_by_name():
    q = torch.randn(1, 1, 2, 4)
    with pytest.raises(AttnlabError, match="'flash'.*'auto', 'fused', 'explicit'"):
        scaled_dot_product_attention(q, q, q, kernel="flash")


def _shape(B_, H_, L, Dh=8, dtype=torch.bfloat16, device="cpu"):
    """A (B_, H_, L, Dh) tensor without the memory: explicit_is_faster reads only shapes, dtype and device."""
    return torch.zeros((), dtype=dtype, device=device).expand(B_, H_, L, Dh)


def test_explicit_is_faster_for_short_cpu_sequences_only():
    q = _shape(8, 4, 30)
    assert explicit_is_faster(q, _shape(8, 4, 30))
    for dtype in (torch.bfloat16, torch.float32):
        top = EXPLICIT_MAX_KEYS[dtype]
        assert explicit_is_faster(_shape(2, 4, 10, dtype=dtype), _shape(2, 4, top, dtype=dtype))
        assert not explicit_is_faster(_shape(2, 4, 10, dtype=dtype), _shape(2, 4, top + 1, dtype=dtype))
    assert not explicit_is_faster(_shape(2, 4, 10, dtype=torch.float64), _shape(2, 4, 10, dtype=torch.float64))
    # B H T S score elements: exactly EXPLICIT_MAX_SCORES is allowed, one more query row is not
    rows = EXPLICIT_MAX_SCORES // 32
    assert explicit_is_faster(_shape(1, 4, rows // 4), _shape(1, 4, 32))
    assert not explicit_is_faster(_shape(1, 4, rows // 4 + 1), _shape(1, 4, 32))
    assert not explicit_is_faster(_shape(8, 4, 30, device="meta"), _shape(8, 4, 30, device="meta"))


@pytest.mark.parametrize("dtype, Sk, fused_expected", [
    (torch.bfloat16, S, False),  # short bf16 on the CPU: the explicit path
    (torch.float32, 200, True),  # beyond EXPLICIT_MAX_KEYS[float32]
    (torch.float64, S, True),  # no explicit threshold for float64
])
def test_auto_kernel_follows_explicit_is_faster_and_returns_no_weights(monkeypatch, dtype, Sk, fused_expected):
    calls = []
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **kw: calls.append(1) or _TORCH_SDPA(*a, **kw))
    q, k, v = torch.randn(B, H, T, 8, dtype=dtype), torch.randn(B, H, Sk, 8, dtype=dtype), torch.randn(B, H, Sk, 8,
                                                                                                     dtype=dtype)
    mask = padding_mask(torch.tensor([Sk, 3, 1]), Sk)[:, None, None, :]
    out, w = scaled_dot_product_attention(q, k, v, mask, kernel="auto")
    assert w is None
    assert bool(calls) == fused_expected
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out.double(), _reference_context(q, k, v, mask.expand(B, 1, T, Sk)), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["auto-explicit", "auto-fused"])
def test_kernel_choice_runs_that_kernel(monkeypatch, dtype):
    """fused: F.scaled_dot_product_attention; explicit, or any kernel with need_weights: not (weights returned);
    whichever kernel "auto" would pick for these inputs."""
    calls = []
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **kw: calls.append(1) or _TORCH_SDPA(*a, **kw))
    q, k, v = (torch.randn(B, H, L, 8, dtype=dtype) for L in (T, S, S))
    for causal in (False, True):
        calls.clear()
        assert scaled_dot_product_attention(q, k, v, causal=causal, kernel="fused")[1] is None and calls == [1]
        calls.clear()
        assert scaled_dot_product_attention(q, k, v, causal=causal, kernel="explicit")[1] is None and calls == []
        for kernel in KERNELS:
            _, w = scaled_dot_product_attention(q, k, v, causal=causal, kernel=kernel, need_weights=True)
            assert w.shape == (B, H, T, S) and calls == []


@pytest.mark.parametrize("masked", [False, True])
def test_fused_path_keeps_cudnn_out_where_it_could_be_chosen(monkeypatch, masked):
    """Where cuDNN's attention could be picked (CUDA, half precision: simulated here), the fused path calls
    torch's kernel with cuDNN's backend off, and turns it back on afterwards; elsewhere it leaves the flags alone.
    Both give torch's own result."""
    seen = []
    torch_sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return torch_sdpa(*args, **kwargs)

    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", spy)
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 2, 3, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])[:, None, None, :] if masked else None
    want = torch_sdpa(q, k, v, attn_mask=mask)
    assert torch.backends.cuda.cudnn_sdp_enabled()
    for simulated, cudnn_during in ((False, True), (True, False)):
        monkeypatch.setattr(attention_module, "planned_per_shape", lambda q, s=simulated: s)
        out, _ = scaled_dot_product_attention(q, k, v, mask, kernel="fused")
        torch.testing.assert_close(out, want)
        assert seen[-1] is cudnn_during and torch.backends.cuda.cudnn_sdp_enabled()
    monkeypatch.undo()
    assert not attention_module.planned_per_shape(q) and not attention_module.planned_per_shape(q.bfloat16())
