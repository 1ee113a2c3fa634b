"""attnlab.kernels.recurrence: the GRU recurrences whose backward is derived by hand (CPU training) against their
twins: `GRURecurrence` against torch.nn.GRU over a packed sequence with the same weights, `BahdanauGRURecurrence`
against the model's own step-by-step decoder through autograd (torch's GRU step and the attention core), and both
against numerical gradients (gradcheck, float64). The kernels are switched on and off here explicitly
(`attnlab.kernels.override`), so these tests hold the kernel against its twin whatever ATTNLAB_KERNELS says."""

from unittest import mock

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnlab import kernels
from attnlab.kernels.recurrence import BahdanauGRURecurrence, GRURecurrence, by_hand
from attnlab.nn.rnn import RNNLayer
from attnlab.nn.rnn_seq2seq import RNNModelConfig, RNNSeq2Seq

F64 = dict(dtype=torch.float64)


def _grads(tensors):
    return [t.grad.clone() for t in tensors]


def test_used_for_cpu_training_with_the_kernels_on_only(monkeypatch):
    x = torch.zeros(2, 3)
    with kernels.override(True):
        assert by_hand(x)
        with torch.no_grad():
            assert not by_hand(x)
        with kernels.disabled():
            assert not by_hand(x)
        assert by_hand(x)
        assert not by_hand(torch.zeros(2, 3, device="meta"))
    monkeypatch.setenv(kernels.ENV, "0")
    assert not by_hand(x)


@pytest.mark.parametrize("layers,bidirectional", [(1, True), (2, False), (2, True)])
def test_gru_layer_matches_torch_gru_over_a_packed_sequence(layers, bidirectional):
    torch.manual_seed(0)
    B, L, I, H, D = 4, 6, 5, 3, 2 if bidirectional else 1
    layer = RNNLayer("gru", I, H, num_layers=layers, bidirectional=bidirectional).double()
    torch_gru = nn.GRU(I, H, layers, batch_first=True, bidirectional=bidirectional).double()
    torch_gru.load_state_dict(layer.rnn.state_dict())
    lengths = torch.tensor([6, 2, 4, 1])
    x = torch.randn(B, L, I, **F64, requires_grad=True)
    h0 = torch.randn(layers * D, B, H, **F64, requires_grad=True)
    probe = torch.randn(B, L, D * H, **F64)

    with mock.patch.object(GRURecurrence, "apply", wraps=GRURecurrence.apply) as called, kernels.override(True):
        out, h_n = layer(x, lengths, h0)
    assert called.call_count == layers
    ((out * probe).sum() + h_n.pow(2).sum()).backward()
    ours = [out, h_n] + _grads([x, h0, *layer.parameters()])

    x.grad = h0.grad = None
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    ref_packed, ref_h_n = torch_gru(packed, h0)
    ref_out, _ = pad_packed_sequence(ref_packed, batch_first=True, total_length=L)
    ((ref_out * probe).sum() + ref_h_n.pow(2).sum()).backward()
    ref = [ref_out, ref_h_n] + _grads([x, h0, *torch_gru.parameters()])
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)
    assert (out[1, 2:] == 0).all()  # padded steps output zeros, as pad_packed_sequence


def test_gru_recurrence_gradcheck():
    torch.manual_seed(1)
    S, D, B, H = 4, 2, 3, 2
    keep = torch.ones(S, D, B, 1, **F64)
    keep[2:, 0, 1] = 0  # sequence 1 has 2 steps: the forward direction's last two are padding,
    keep[:2, 1, 1] = 0  # the reverse direction's first two
    inputs = (torch.randn(S, D, B, 3 * H, **F64, requires_grad=True), keep,
              torch.randn(D, B, H, **F64, requires_grad=True), torch.randn(D, 3 * H, H, **F64, requires_grad=True),
              torch.randn(D, 3 * H, **F64, requires_grad=True))
    assert torch.autograd.gradcheck(GRURecurrence.apply, inputs)


def _seq2seq(attn_dim=7):
    torch.manual_seed(0)
    cfg = RNNModelConfig(cell="gru", emb_dim=6, hidden_dim=5, bidirectional=True, dropout=0.0,
                         attention="bahdanau", attn_dim=attn_dim)
    return RNNSeq2Seq(11, 13, cfg)


def _batch():
    torch.manual_seed(2)
    lengths = torch.tensor([7, 3, 5, 1])
    src = torch.randint(4, 11, (4, 7))
    src[torch.arange(7)[None, :] >= lengths[:, None]] = 0
    return src, lengths, torch.randint(4, 13, (4, 9))  # longer targets than sources


def test_bahdanau_decoder_matches_the_step_by_step_model():
    model = _seq2seq().double()
    src, lengths, tgt_in = _batch()
    probe = torch.randn(4, 9, 13, **F64)
    results = []
    for on in (True, False):
        model.zero_grad()
        spy = mock.patch.object(BahdanauGRURecurrence, "apply", wraps=BahdanauGRURecurrence.apply)
        with spy as called, kernels.override(on):
            logits = model(src, lengths, tgt_in)
        assert called.call_count == int(on)
        (logits.log_softmax(-1) * probe).sum().backward()
        results.append([logits] + _grads(model.parameters()))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)


def test_bahdanau_recurrence_gradcheck():
    torch.manual_seed(3)
    B, T, S, H, A = 3, 4, 5, 2, 3
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    inputs = (torch.randn(B, T, 3 * H, **F64, requires_grad=True), torch.randn(B, H, **F64, requires_grad=True),
              torch.randn(B, S, A, **F64, requires_grad=True), torch.randn(B, S, 3 * H, **F64, requires_grad=True),
              mask, torch.randn(3 * H + A, H, **F64, requires_grad=True), torch.randn(3 * H, **F64, requires_grad=True),
              torch.randn(A, **F64, requires_grad=True))
    assert torch.autograd.gradcheck(BahdanauGRURecurrence.apply, inputs)
    _, alphas = BahdanauGRURecurrence.apply(*inputs)
    assert (alphas[~mask[:, None, :].expand_as(alphas)] == 0).all()
    torch.testing.assert_close(alphas.sum(-1), torch.ones(B, T, **F64))


def test_bf16_autocast_trains_the_same_model():
    """Under CPU bf16 autocast (train.amp on CPUs with bf16) the recurrences run in fp32 and the products
    around them in bf16: the loss and its gradients stay within bf16's rounding of the autograd path's."""
    model = _seq2seq(attn_dim=16)
    src, lengths, tgt_in = _batch()
    target = torch.randint(1, 13, (4, 9))
    results = []
    for on in (True, False):
        model.zero_grad()
        with kernels.override(on), torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(src, lengths, tgt_in)
        loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten())
        loss.backward()
        results.append((loss.item(), torch.cat([p.grad.flatten() for p in model.parameters()])))
    (loss_a, grad_a), (loss_b, grad_b) = results
    assert loss_a == pytest.approx(loss_b, rel=1e-2)
    assert torch.nn.functional.cosine_similarity(grad_a, grad_b, dim=0) > 0.99
