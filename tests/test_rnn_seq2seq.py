"""RNN encoder-decoders: the step-wise decoder (used by search) agrees with teacher forcing (used in
training); attention weights are proper distributions over real source tokens; padding does not leak."""

import pytest
import torch

from attnlab.rnn_seq2seq import RNNModelConfig, RNNSeq2Seq

KINDS = ["none", "bahdanau", "dot", "general", "parameterized"]
V_SRC, V_TGT = 23, 19


def _model(attention, cell="gru", **kw):
    torch.manual_seed(0)
    cfg = RNNModelConfig(cell=cell, emb_dim=8, hidden_dim=12, attention=attention, dropout=0.0, **kw)
    return RNNSeq2Seq(V_SRC, V_TGT, cfg).eval()


def _batch():
    torch.manual_seed(1)
    lengths = torch.tensor([7, 4, 2])
    src = torch.randint(4, V_SRC, (3, 7))
    src[torch.arange(7)[None, :] >= lengths[:, None]] = 0
    tgt_in = torch.randint(4, V_TGT, (3, 5))
    tgt_in[:, 0] = 1
    return src, lengths, tgt_in


@pytest.mark.parametrize("cell", ["gru", "lstm", "elman"])
@pytest.mark.parametrize("attention", KINDS)
@pytest.mark.parametrize("feed", [True, False])
def test_step_decoding_matches_teacher_forcing(attention, cell, feed):
    model = _model(attention, cell, feed_context=feed, input_feeding=feed, enc_layers=2, dec_layers=2)
    src, lengths, tgt_in = _batch()
    with torch.no_grad():
        full = torch.log_softmax(model(src, lengths, tgt_in), dim=-1)  # (B, T, V)
        enc = model.encode(src, lengths)
        state = model.init_state(enc)
        for t in range(tgt_in.size(1)):
            logp, state, w = model.step(tgt_in[:, t], state, enc, need_weights=True)
            torch.testing.assert_close(logp, full[:, t], atol=1e-5, rtol=1e-4)
            if attention == "none":
                assert w is None
            else:
                assert w.shape == (3, 7)
                torch.testing.assert_close(w.sum(-1), torch.ones(3))
                assert torch.all(w[torch.arange(7)[None, :] >= lengths[:, None]] == 0)


@pytest.mark.parametrize("attention", KINDS)
def test_padding_does_not_change_a_sentence(attention):
    model = _model(attention)
    src, lengths, tgt_in = _batch()
    with torch.no_grad():
        together = model(src, lengths, tgt_in)[2]
        alone = model(src[2:3, :2], lengths[2:3], tgt_in[2:3])[0]
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-4)


def test_gradients_reach_every_parameter():
    model = _model("bahdanau", "lstm").train()
    src, lengths, tgt_in = _batch()
    model(src, lengths, tgt_in).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert missing == []
