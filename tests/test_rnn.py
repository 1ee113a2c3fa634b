"""RNN cells written from their equations against torch's own RNNs with the same weights."""

import pytest
import torch
from torch import nn

from attnlab.errors import AttnlabError
from attnlab.rnn import ElmanCell, GRUCell, LSTMCell, RNNLayer

TORCH_CELLS = {"elman": (ElmanCell, nn.RNNCell), "lstm": (LSTMCell, nn.LSTMCell), "gru": (GRUCell, nn.GRUCell)}
TORCH_LAYERS = {"elman": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("cell", ["elman", "lstm", "gru"])
def test_cell_matches_torch_outputs_and_gradients(cell):
    mine_cls, ref_cls = TORCH_CELLS[cell]
    ref = ref_cls(5, 7)
    mine = mine_cls(5, 7)
    mine.load_state_dict(ref.state_dict())
    x = torch.randn(4, 5, requires_grad=True)
    state = (torch.randn(4, 7), torch.randn(4, 7)) if cell == "lstm" else torch.randn(4, 7)
    out_ref, out_mine = ref(x, state), mine(x, state)
    if cell == "lstm":
        for a, b in zip(out_mine, out_ref):
            torch.testing.assert_close(a, b)
        loss_ref, loss_mine = sum(o.pow(2).sum() for o in out_ref), sum(o.pow(2).sum() for o in out_mine)
    else:
        torch.testing.assert_close(out_mine, out_ref)
        loss_ref, loss_mine = out_ref.pow(2).sum(), out_mine.pow(2).sum()
    g_ref = torch.autograd.grad(loss_ref, [x, *ref.parameters()])
    g_mine = torch.autograd.grad(loss_mine, [x, *mine.parameters()])
    for a, b in zip(g_mine, g_ref):
        torch.testing.assert_close(a, b)


def _pair(cell, layers, bidirectional):
    ref = TORCH_LAYERS[cell](6, 5, layers, batch_first=True, bidirectional=bidirectional)
    mine = RNNLayer(cell, 6, 5, layers, bidirectional=bidirectional, impl="scratch")
    mine.load_torch_weights(ref)
    fused = RNNLayer(cell, 6, 5, layers, bidirectional=bidirectional, impl="fused")
    fused.load_torch_weights(ref)
    return mine, fused


@pytest.mark.parametrize("cell", ["elman", "lstm", "gru"])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_scratch_layer_matches_fused_with_padding(cell, layers, bidirectional):
    mine, fused = _pair(cell, layers, bidirectional)
    lengths = torch.tensor([6, 3, 1])
    x = torch.randn(3, 6, 6)
    x_a, x_b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    out_a, fin_a = mine(x_a, lengths)
    out_b, fin_b = fused(x_b, lengths)
    real = (torch.arange(6)[None, :] < lengths[:, None])[..., None]  # (B, L, 1)
    torch.testing.assert_close(out_a * real, out_b * real, atol=1e-6, rtol=1e-5)
    assert torch.all(out_a[~real.expand_as(out_a)] == 0)
    fa = fin_a if isinstance(fin_a, tuple) else (fin_a,)
    fb = fin_b if isinstance(fin_b, tuple) else (fin_b,)
    for a, b in zip(fa, fb):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    loss_a = (out_a * real).pow(2).sum() + sum(f.sum() for f in fa)
    loss_b = (out_b * real).pow(2).sum() + sum(f.sum() for f in fb)
    loss_a.backward()
    loss_b.backward()
    torch.testing.assert_close(x_a.grad, x_b.grad, atol=1e-6, rtol=1e-5)
    grads_fused = dict(fused.rnn.named_parameters())
    for k, c in enumerate(mine.cells):
        suffix = f"_l{k // mine.dirs}" + ("_reverse" if k % mine.dirs else "")
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            torch.testing.assert_close(getattr(c, name).grad, grads_fused[name + suffix].grad,
                                       atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("cell", ["elman", "lstm", "gru"])
def test_scratch_layer_gradcheck(cell):
    layer = RNNLayer(cell, 3, 2, 2, bidirectional=True, impl="scratch").double()
    x = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([4, 2])
    assert torch.autograd.gradcheck(lambda a: layer(a, lengths)[0], (x,))


@pytest.mark.parametrize("impl", ["fused", "scratch"])
@pytest.mark.parametrize("cell", ["elman", "lstm", "gru"])
def test_step_equals_forward(impl, cell):
    layer = RNNLayer(cell, 4, 3, 2, impl=impl).eval()
    x = torch.randn(2, 5, 4)
    full, final = layer(x)
    state, outs = None, []
    for t in range(5):
        o, state = layer.step(x[:, t], state)
        outs.append(o)
    torch.testing.assert_close(torch.stack(outs, 1), full[..., -3:])
    for a, b in zip(state if isinstance(state, tuple) else (state,), final if isinstance(final, tuple) else (final,)):
        torch.testing.assert_close(a, b)


def test_keras_parameter_counts():
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(ElmanCell(1, 2, keras_bias=True)) == 8  # seed: SimpleRNN(2) on 1 feature
    assert count(LSTMCell(74, 256, keras_bias=True)) == 338_944  # seed: encoder LSTM(256), 74 characters
    assert count(LSTMCell(78, 256, keras_bias=True)) == 343_040  # seed: decoder LSTM(256), 78 characters
    assert count(ElmanCell(1, 2)) == 10  # torch keeps two biases


def test_bad_names():
    with pytest.raises(AttnlabError, match="elman, lstm, gru"):
        RNNLayer("transformer", 2, 2)
    with pytest.raises(AttnlabError, match="fused, scratch"):
        RNNLayer("gru", 2, 2, impl="cudnn")
