"""RNN cells written from their equations against torch's own RNNs with the same weights."""

import pytest
import torch
from torch import nn

from attnlab.core.errors import AttnlabError
from attnlab.nn.rnn import ElmanCell, GRUCell, LSTMCell, RNNLayer

CELLS = ["elman", "lstm", "gru"]
TORCH_CELLS = {"elman": (ElmanCell, nn.RNNCell), "lstm": (LSTMCell, nn.LSTMCell), "gru": (GRUCell, nn.GRUCell)}
TORCH_LAYERS = {"elman": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}
TOL = dict(atol=1e-5, rtol=1e-4)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _tuple(state):
    return state if isinstance(state, tuple) else (state,)


def _random_state(cell, *shape, **kw):
    return tuple(torch.randn(*shape, **kw) for _ in range(2)) if cell == "lstm" else torch.randn(*shape, **kw)


def _count(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("cell", CELLS)
def test_cell_matches_torch_outputs_and_gradients(cell):
    mine_cls, ref_cls = TORCH_CELLS[cell]
    ref, mine = ref_cls(5, 7), mine_cls(5, 7)
    assert [n for n, _ in mine.named_parameters()] == [n for n, _ in ref.named_parameters()]
    mine.load_state_dict(ref.state_dict())
    x = torch.randn(4, 5, requires_grad=True)
    state = _random_state(cell, 4, 7)
    out_ref, out_mine = _tuple(ref(x, state)), _tuple(mine(x, state))
    for a, b in zip(out_mine, out_ref, strict=True):
        torch.testing.assert_close(a, b)
    for a, b in zip(_tuple(mine(x)), _tuple(ref(x)), strict=True):  # state None: zeros, as torch
        torch.testing.assert_close(a, b)
    loss_ref = sum(o.pow(2).sum() for o in out_ref)
    loss_mine = sum(o.pow(2).sum() for o in out_mine)
    g_ref = torch.autograd.grad(loss_ref, [x, *ref.parameters()])
    g_mine = torch.autograd.grad(loss_mine, [x, *mine.parameters()])
    assert len(g_mine) == len(g_ref) == 5
    for a, b in zip(g_mine, g_ref, strict=True):
        torch.testing.assert_close(a, b)


def _pair(cell, layers, bidirectional, input_size=6, hidden=5):
    ref = TORCH_LAYERS[cell](input_size, hidden, layers, batch_first=True, bidirectional=bidirectional)
    scratch = RNNLayer(cell, input_size, hidden, layers, bidirectional=bidirectional, impl="scratch")
    fused = RNNLayer(cell, input_size, hidden, layers, bidirectional=bidirectional, impl="fused")
    scratch.load_torch_weights(ref)
    fused.load_torch_weights(ref)
    return scratch, fused


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_scratch_layer_matches_fused_with_padding(cell, layers, bidirectional):
    scratch, fused = _pair(cell, layers, bidirectional)
    lengths = torch.tensor([3, 6, 1, 4])  # unsorted: fused packs with enforce_sorted=False
    x = torch.randn(4, 6, 6)
    state = _random_state(cell, layers * (2 if bidirectional else 1), 4, 5)
    inputs = [(x.clone().requires_grad_(True), tuple(s.clone().requires_grad_(True) for s in _tuple(state)))
              for _ in range(2)]
    real = (torch.arange(6)[None, :] < lengths[:, None])[..., None]  # (B, L, 1)
    results = []
    for layer, (xi, si) in zip([scratch, fused], inputs):
        out, final = layer(xi, lengths, si if cell == "lstm" else si[0])
        assert out.shape == (4, 6, 5 * (2 if bidirectional else 1))
        assert torch.all(out.masked_select(~real) == 0)
        (out.pow(2).sum() + sum((f * torch.linspace(-1, 1, 5)).sum() for f in _tuple(final))).backward()
        results.append((out, _tuple(final)))
    (out_s, fin_s), (out_f, fin_f) = results
    torch.testing.assert_close(out_s, out_f, **TOL)
    for a, b in zip(fin_s, fin_f, strict=True):
        torch.testing.assert_close(a, b, **TOL)
    torch.testing.assert_close(inputs[0][0].grad, inputs[1][0].grad, **TOL)
    for a, b in zip(inputs[0][1], inputs[1][1], strict=True):
        torch.testing.assert_close(a.grad, b.grad, **TOL)
    grads_fused = dict(fused.rnn.named_parameters())
    for k, c in enumerate(scratch.cells):
        suffix = f"_l{k // scratch.dirs}" + ("_reverse" if k % scratch.dirs else "")
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            torch.testing.assert_close(getattr(c, name).grad, grads_fused[name + suffix].grad, **TOL)


@pytest.mark.parametrize("impl", ["fused", "scratch"])
@pytest.mark.parametrize("cell", CELLS)
def test_padding_does_not_leak(impl, cell):
    """Each padded sequence gives what it gives alone, unpadded, whatever sits in the padding."""
    layer = RNNLayer(cell, 3, 4, 2, bidirectional=True, impl=impl)
    lengths = torch.tensor([2, 5, 3])
    x = torch.randn(3, 5, 3) * 100  # large padding would saturate the state if it leaked in
    out, final = layer(x, lengths)
    for b, n in enumerate(lengths.tolist()):
        alone, alone_final = layer(x[b:b + 1, :n])
        torch.testing.assert_close(out[b:b + 1, :n], alone, **TOL)
        for a, f in zip(_tuple(final), _tuple(alone_final), strict=True):
            torch.testing.assert_close(a[:, b:b + 1], f, **TOL)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_scratch_layer_gradcheck(cell, layers, bidirectional):
    layer = RNNLayer(cell, 2, 2, layers, bidirectional=bidirectional, impl="scratch").double()
    x = torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True)
    state = _tuple(_random_state(cell, layers * (2 if bidirectional else 1), 2, 2, dtype=torch.float64,
                                 requires_grad=True))
    lengths = torch.tensor([3, 2])

    def run(x, *state):
        out, final = layer(x, lengths, state if cell == "lstm" else state[0])
        return out, *_tuple(final)

    assert torch.autograd.gradcheck(run, (x, *state))


@pytest.mark.parametrize("impl", ["fused", "scratch"])
@pytest.mark.parametrize("cell", CELLS)
def test_step_equals_forward(impl, cell):
    layer = RNNLayer(cell, 4, 3, 2, impl=impl).eval()
    x = torch.randn(2, 5, 4)
    full, final = layer(x)
    state, outs = None, []
    for t in range(5):
        o, state = layer.step(x[:, t], state)
        outs.append(o)
    torch.testing.assert_close(torch.stack(outs, 1), full)
    for a, b in zip(_tuple(state), _tuple(final), strict=True):
        torch.testing.assert_close(a, b)


def test_keras_parameter_counts():
    assert _count(ElmanCell(1, 2, keras_bias=True)) == 8  # SimpleRNN(2) on 1 feature: (1 + 2 + 1) * 2
    assert _count(LSTMCell(74, 256, keras_bias=True)) == 338_944  # encoder LSTM(256), 74 characters
    assert _count(LSTMCell(78, 256, keras_bias=True)) == 343_040  # decoder LSTM(256), 78 characters
    assert _count(GRUCell(10, 4, keras_bias=True)) == 3 * (10 + 4 + 2) * 4  # GRU(4), reset_after=True
    assert _count(ElmanCell(1, 2)) == 10  # torch keeps two biases
    assert ElmanCell(1, 2, keras_bias=True).bias_hh is None


@pytest.mark.parametrize("cell", CELLS)
def test_keras_bias_layer_loads_and_exports_torch_weights(cell):
    ref = TORCH_LAYERS[cell](3, 4, 2, batch_first=True, bidirectional=True)
    layer = RNNLayer(cell, 3, 4, 2, bidirectional=True, impl="scratch", keras_bias=True)
    layer.load_torch_weights(ref)  # b_hh folds into b_ih (GRU keeps both)
    x, lengths = torch.randn(2, 5, 3), torch.tensor([5, 2])
    out, final = layer(x, lengths)
    for other in (ref, layer.to_torch()):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        out_o, final_o = other(packed)
        torch.testing.assert_close(out, nn.utils.rnn.pad_packed_sequence(out_o, batch_first=True)[0], **TOL)
        for a, b in zip(_tuple(final), _tuple(final_o), strict=True):
            torch.testing.assert_close(a, b, **TOL)


def test_bad_arguments():
    with pytest.raises(AttnlabError, match="elman, lstm, gru"):
        RNNLayer("transformer", 2, 2)
    with pytest.raises(AttnlabError, match="fused, scratch"):
        RNNLayer("gru", 2, 2, impl="cudnn")
    with pytest.raises(AttnlabError, match="keras_bias"):
        RNNLayer("lstm", 2, 2, impl="fused", keras_bias=True)
    with pytest.raises(AttnlabError, match="unidirectional"):
        RNNLayer("gru", 2, 2, bidirectional=True).step(torch.randn(1, 2), None)
    with pytest.raises(AttnlabError, match="cannot load"):
        RNNLayer("gru", 2, 2, impl="scratch").load_torch_weights(nn.LSTM(2, 2))
    with pytest.raises(AttnlabError, match="lengths"):
        RNNLayer("gru", 2, 2)(torch.randn(2, 3, 2), torch.tensor([3, 0]))
    with pytest.raises(AttnlabError, match=r"expected \(B, L, 2\)"):
        RNNLayer("gru", 2, 2, impl="scratch")(torch.randn(2, 3, 5))
