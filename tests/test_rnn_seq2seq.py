"""RNN encoder-decoders: the step-wise decoder (used by search) agrees with teacher forcing (used in
training); attention weights are proper distributions over real source tokens; padding does not leak."""

import pytest
import torch

from attnlab.nn.rnn_seq2seq import RNNModelConfig, RNNSeq2Seq

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


# ---------------------------------------------------------------------------------------------- Keras char model
def _keras_char_model(**kw):
    """The seed's character-level LSTM encoder-decoder, small: one-hot in, final (h, c) copied, one bias/gate."""
    torch.manual_seed(0)
    args = dict(cell="lstm", impl="scratch", keras_bias=True, embedding="onehot", bridge="copy", attention="none",
                feed_context=False, bidirectional=False, hidden_dim=12, dropout=0.0)
    cfg = RNNModelConfig(**{**args, **kw})
    return RNNSeq2Seq(V_SRC, V_TGT, cfg).eval()


def test_keras_char_model_counts_and_matches_torch_lstms():
    """Keras' counts, 4 (V + H + 1) H per LSTM and (H + 1) V for the Dense; teacher forcing equals torch.nn.LSTMs
    fed one-hot vectors, the decoder started from the encoder's final (h, c) (zero b_hh: Keras' single bias)."""
    import torch.nn.functional as F
    from torch.nn.utils.rnn import pack_padded_sequence

    model, H = _keras_char_model(), 12
    assert sum(p.numel() for p in model.encoder.parameters()) == 4 * (V_SRC + H + 1) * H
    assert sum(p.numel() for p in model.rnn.parameters()) == 4 * (V_TGT + H + 1) * H
    assert sum(p.numel() for p in model.parameters()) == 4 * (V_SRC + H + 1) * H + 4 * (V_TGT + H + 1) * H \
        + (H + 1) * V_TGT
    enc_ref, dec_ref = model.encoder.rnn.to_torch(), model.rnn.to_torch()
    assert torch.all(enc_ref.bias_hh_l0 == 0)
    src, lengths, tgt_in = _batch()
    with torch.no_grad():
        x = F.one_hot(src, V_SRC).float()
        _, (h, c) = enc_ref(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
        out, _ = dec_ref(F.one_hot(tgt_in, V_TGT).float(), (h, c))
        ref = out @ model.generator.weight.T + model.generator.bias
        torch.testing.assert_close(model(src, lengths, tgt_in), ref)


def test_keras_char_model_step_decoding_and_beam_reorder():
    from attnlab.decode.search import select_batch

    model = _keras_char_model()
    src, lengths, tgt_in = _batch()
    with torch.no_grad():
        full = torch.log_softmax(model(src, lengths, tgt_in), dim=-1)  # (B, T, V)
        enc = model.encode(src, lengths)
        assert enc.final_h.shape == enc.final_c.shape == (3, 1, 12)
        state = model.init_state(select_batch(enc, torch.tensor([2, 1, 0])))  # a beam reorders the copied state
        for t in range(tgt_in.size(1)):
            logp, state, _ = model.step(tgt_in.flip(0)[:, t], state, select_batch(enc, torch.tensor([2, 1, 0])))
            torch.testing.assert_close(logp, full.flip(0)[:, t])


@pytest.mark.parametrize("kw, message", [({"bidirectional": True}, "bridge = 'copy' needs a unidirectional"),
                                         ({"dec_layers": 2}, "enc_layers \\(1\\) == dec_layers \\(2\\)"),
                                         ({"tie_embeddings": True}, "tie_embeddings needs embedding = 'learned'")])
def test_keras_char_model_config_errors(kw, message):
    from attnlab.core.errors import AttnlabError

    with pytest.raises(AttnlabError, match=message):
        _keras_char_model(**kw)
