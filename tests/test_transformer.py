"""Transformer: layers agree with torch.nn.TransformerEncoderLayer / TransformerDecoderLayer given the same
weights; fused and explicit attention agree; cached step-wise decoding (used by search) agrees with teacher
forcing and with an uncached brute-force decode; attention weights are distributions over real tokens."""

import math

import pytest
import torch

from attnlab.nn.attention import causal_mask, padding_mask
from attnlab.data.batching import collate_packed_seq2seq, collate_seq2seq
from attnlab.core.errors import AttnlabError
from attnlab.decode.search import beam_search, greedy_search, select_batch
from attnlab.data.tokenizers import BOS_ID, EOS_ID, PAD_ID
from attnlab.training.optim import optimizer_groups
from attnlab.training.trainer import Seq2SeqTask
from attnlab.nn.transformer import (CACHE_ROOM, DecoderLayer, EncoderLayer, PositionalEncoding, TransformerConfig,
                                 TransformerEncoderOutput, TransformerSeq2Seq)

D, H, FF = 16, 4, 32
V_SRC, V_TGT = 23, 19
VARIANTS = [(norm, pos) for norm in ("post", "pre") for pos in ("sinusoidal", "learned")]


def _cfg(**kw) -> TransformerConfig:
    return TransformerConfig(**{"d_model": D, "h": H, "d_ff": FF, "enc_layers": 2, "dec_layers": 2,
                                "dropout": 0.0, "max_len": 64, **kw})


def _model(src_vocab=V_SRC, tgt_vocab=V_TGT, **kw) -> TransformerSeq2Seq:
    torch.manual_seed(0)
    model = TransformerSeq2Seq(src_vocab, tgt_vocab, _cfg(**kw)).double().eval()
    with torch.no_grad():  # an untrained model's zero biases and unit LayerNorms would hide mix-ups
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _batch(B=3, S=7, T=5):
    torch.manual_seed(1)
    lengths = torch.tensor([S, 4, 2][:B])
    src = torch.randint(4, V_SRC, (B, S))
    src[torch.arange(S)[None, :] >= lengths[:, None]] = PAD_ID
    tgt_in = torch.randint(4, V_TGT, (B, T))
    tgt_in[:, 0] = BOS_ID
    return src, lengths, tgt_in


# ---------------------------------------------------------------------------------------------- config
def test_config_validation_names_the_values():
    with pytest.raises(AttnlabError, match=r"d_model \(10\).*h \(4\)"):
        TransformerConfig(d_model=10, h=4)
    with pytest.raises(AttnlabError, match="d_ff must be >= 1, got 0"):
        TransformerConfig(d_ff=0)
    with pytest.raises(AttnlabError, match="'sideways' is not one of 'post', 'pre'"):
        TransformerConfig(norm="sideways")
    with pytest.raises(AttnlabError, match="dropout"):
        TransformerConfig(dropout=1.0)


# ---------------------------------------------------------------------------------------------- positions
def test_sinusoidal_positions_closed_form_and_offset():
    pe = PositionalEncoding(8, max_len=20)
    x = torch.zeros(1, 10, 8)
    out = pe(x)[0]  # (10, 8)
    pos, i = 7, 2
    assert out[pos, 2 * i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / 8)), abs=1e-6)
    assert out[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos / 10000 ** (2 * i / 8)), abs=1e-6)
    torch.testing.assert_close(pe(x[:, :3], offset=4)[0], out[4:7])
    with pytest.raises(AttnlabError, match="max_len"):
        pe(x, offset=15)


def test_learned_positions_offset():
    pe = PositionalEncoding(8, max_len=20, learned=True)
    x = torch.zeros(2, 10, 8)
    torch.testing.assert_close(pe(x[:, :1], offset=6), pe(x)[:, 6:7])


# ---------------------------------------------------------------------------------------------- vs torch
def _load_mha(ours, theirs):
    wq, wk, wv = theirs.in_proj_weight.chunk(3)
    bq, bk, bv = theirs.in_proj_bias.chunk(3)
    for lin, w, b in ((ours.W_Q, wq, bq), (ours.W_K, wk, bk), (ours.W_V, wv, bv),
                      (ours.W_O, theirs.out_proj.weight, theirs.out_proj.bias)):
        lin.weight.copy_(w)
        lin.bias.copy_(b)


def _load_common(ours, theirs, n_norms):
    ours.ff.linear1.load_state_dict(theirs.linear1.state_dict())
    ours.ff.linear2.load_state_dict(theirs.linear2.state_dict())
    for i in range(1, n_norms + 1):
        getattr(ours, f"norm{i}").load_state_dict(getattr(theirs, f"norm{i}").state_dict())


def _randomize(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.dim() == 1 and p.numel() == D else 0.0))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encoder_layer_matches_torch(norm, activation):
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation=activation, batch_first=True,
                                              norm_first=norm == "pre").double()
    _randomize(theirs)
    ours = EncoderLayer(_cfg(norm=norm, activation=activation)).double()
    with torch.no_grad():
        _load_mha(ours.self_attn, theirs.self_attn)
        _load_common(ours, theirs, 2)
    x = torch.randn(3, 6, D, dtype=torch.float64)
    keep = padding_mask(torch.tensor([6, 3, 1]))  # (B, S)
    expected = theirs(x, src_key_padding_mask=~keep)
    for need_weights in (False, True):
        out, w = ours(x, keep[:, None, None, :], need_weights=need_weights)
        torch.testing.assert_close(out, expected)
        assert (w is None) != need_weights


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_layer_matches_torch(norm, activation):
    torch.manual_seed(0)
    theirs = torch.nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, activation=activation, batch_first=True,
                                              norm_first=norm == "pre").double()
    _randomize(theirs)
    ours = DecoderLayer(_cfg(norm=norm, activation=activation)).double()
    with torch.no_grad():
        _load_mha(ours.self_attn, theirs.self_attn)
        _load_mha(ours.cross_attn, theirs.multihead_attn)
        _load_common(ours, theirs, 3)
    y = torch.randn(3, 5, D, dtype=torch.float64)
    memory = torch.randn(3, 6, D, dtype=torch.float64)
    keep = padding_mask(torch.tensor([6, 3, 1]))  # (B, S)
    causal = causal_mask(5)  # (T, T)
    expected = theirs(y, memory, tgt_mask=~causal, memory_key_padding_mask=~keep)
    for need_weights in (False, True):
        out, self_w, cross_w = ours(y, memory, causal[None, None], keep[:, None, None, :], need_weights)
        torch.testing.assert_close(out, expected)
        assert (self_w is None) != need_weights and (cross_w is None) != need_weights

    # the cached step, one position at a time, gives the same rows; it writes its key and value into the room
    # left for them at the end of the cache, and the keys it wrote are the teacher-forced pass's
    memory_kv = ours.cross_attn.project_kv(memory, memory)
    k, v = torch.full((3, H, 5, D // H), torch.nan, dtype=torch.float64), torch.full((3, H, 5, D // H), torch.nan,
                                                                                   dtype=torch.float64)
    for t in range(5):
        out_t, _, _ = ours.step(y[:, t:t + 1], (k[:, :, :t + 1], v[:, :, :t + 1]), memory_kv, keep[:, None, None, :])
        torch.testing.assert_close(out_t[:, 0], expected[:, t])
    h = ours.inp(y, ours.norm1)
    k_full, v_full = ours.self_attn.project_kv(h, h)  # (B, H, 5, Dh)
    torch.testing.assert_close(k, k_full)
    torch.testing.assert_close(v, v_full)


# ---------------------------------------------------------------------------------------------- model
@pytest.mark.parametrize("norm,positions", VARIANTS)
def test_step_decoding_matches_teacher_forcing(norm, positions):
    model = _model(norm=norm, positions=positions)
    src, lengths, tgt_in = _batch()
    with torch.no_grad():
        full = torch.log_softmax(model(src, lengths, tgt_in), dim=-1)  # (B, T, V)
        enc = model.encode(src, lengths)
        state = model.init_state(enc)
        assert state.k.shape == (3, H, 2, 0, D // H)
        for t in range(tgt_in.size(1)):
            for need_weights in (False, True):  # fused and explicit paths agree (a state steps once: fork)
                logp, new_state, w = model.step(tgt_in[:, t], state if need_weights else state.fork(), enc,
                                                need_weights=need_weights)
                assert logp.dtype == torch.float32
                torch.testing.assert_close(logp, full[:, t].float())
            state = new_state
            assert state.t == t + 1 and state.k.shape == (3, H, 2, t + 1, D // H)
            assert w.shape == (3, 2, H, 7)  # (B, N_dec, H, S)
            torch.testing.assert_close(w.sum(-1), torch.ones(3, 2, H, dtype=torch.float64))
            assert torch.all(w.permute(0, 3, 1, 2)[torch.arange(7)[None, :] >= lengths[:, None]] == 0)


def test_attention_maps_shapes_and_distributions():
    model = _model()
    src, lengths, tgt_in = _batch()
    maps = model.attention_maps(src, lengths, tgt_in)
    B, S, T = 3, 7, 5
    assert maps["enc_self"].shape == (B, 2, H, S, S)
    assert maps["dec_self"].shape == (B, 2, H, T, T)
    assert maps["cross"].shape == (B, 2, H, T, S)
    for name in ("enc_self", "dec_self", "cross"):
        torch.testing.assert_close(maps[name].sum(-1), torch.ones(maps[name].shape[:-1], dtype=torch.float64))
    pad = torch.arange(S)[None, :] >= lengths[:, None]  # (B, S)
    assert torch.all(maps["enc_self"].permute(0, 4, 1, 2, 3)[pad] == 0)
    assert torch.all(maps["cross"].permute(0, 4, 1, 2, 3)[pad] == 0)
    assert torch.all(maps["dec_self"][..., ~causal_mask(T)] == 0)


def test_causal_future_tokens_do_not_change_earlier_logits():
    model = _model()
    src, lengths, tgt_in = _batch()
    changed = tgt_in.clone()
    changed[:, 3] = (changed[:, 3] + 1 - 4) % (V_TGT - 4) + 4
    with torch.no_grad():
        a, b = model(src, lengths, tgt_in), model(src, lengths, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_padding_does_not_change_a_sentence():
    model = _model()
    src, lengths, tgt_in = _batch()
    with torch.no_grad():
        together = model(src, lengths, tgt_in)[2]
        alone = model(src[2:3, :2], lengths[2:3], tgt_in[2:3])[0]
    torch.testing.assert_close(together, alone)


def test_tied_embeddings():
    model = TransformerSeq2Seq(V_TGT, V_TGT, _cfg(tie_embeddings="all"))
    assert model.src_embed.weight is model.tgt_embed.weight is model.generator.weight
    untied = TransformerSeq2Seq(V_TGT, V_TGT, _cfg())
    n = sum(p.numel() for p in model.parameters())
    assert n == sum(p.numel() for p in untied.parameters()) - 2 * V_TGT * D - V_TGT  # two matrices, one bias
    dec = TransformerSeq2Seq(V_SRC, V_TGT, _cfg(tie_embeddings="decoder"))
    assert dec.generator.weight is dec.tgt_embed.weight and dec.src_embed.weight is not dec.tgt_embed.weight
    with pytest.raises(AttnlabError, match=rf"src_vocab \({V_SRC}\) != tgt_vocab \({V_TGT}\)"):
        TransformerSeq2Seq(V_SRC, V_TGT, _cfg(tie_embeddings="all"))


def test_init_and_optimizer_groups():
    torch.manual_seed(0)
    model = TransformerSeq2Seq(V_SRC, V_TGT, _cfg(tie_embeddings="decoder", norm="pre"))
    assert torch.all(model.src_embed.weight[PAD_ID] == 0)
    # the std of 15 x 16 = 240 draws: a relative sd of 1 / sqrt(2 x 240) = 4.6 %; 30 % is 6.5 sd
    assert model.tgt_embed.weight[4:].std().item() == pytest.approx(D ** -0.5, rel=0.3)
    assert torch.all(model.decoder[0].ff.linear1.bias == 0)
    decay, no_decay = optimizer_groups(model, 0.1)
    assert {id(p) for p in decay["params"]} | {id(p) for p in no_decay["params"]} == \
        {id(p) for p in model.parameters()}
    assert all(p.dim() >= 2 for p in decay["params"]) and no_decay["weight_decay"] == 0.0
    no_decay_ids = {id(p) for p in no_decay["params"]}
    norms_biases_embeddings = [model.decoder[0].norm1.weight, model.decoder[0].ff.linear1.bias, model.src_embed.weight,
                               model.tgt_embed.weight, model.generator.weight]  # the generator is tied to tgt_embed
    assert all(id(p) in no_decay_ids for p in norms_biases_embeddings)
    assert id(model.decoder[0].ff.linear1.weight) in {id(p) for p in decay["params"]}


def test_gradients_reach_every_parameter():
    model = _model(norm="pre", positions="learned", dropout=0.1, attn_dropout=0.1).float().train()
    src, lengths, tgt_in = _batch()
    model(src, lengths, tgt_in).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert missing == []


# ---------------------------------------------------------------------------------------------- search
class Uncached:
    """The search interface by brute force: every step re-runs the teacher-forced forward on the prefix."""

    def __init__(self, model):
        self.model = model

    def encode(self, src, src_lengths):
        return src, src_lengths

    def init_state(self, enc):
        return enc[0].new_zeros(enc[0].size(0), 0)  # (B, 0) prefix

    def step(self, prev, prefix, enc, need_weights=False):
        prefix = torch.cat([prefix, prev[:, None]], dim=1)  # (B, t + 1)
        logits = self.model(enc[0], enc[1], prefix)[:, -1]  # (B, V)
        return torch.log_softmax(logits.float(), dim=-1), prefix, None


def _brute_force_greedy(model, src, lengths, max_len):
    out = []
    with torch.no_grad():
        for b in range(src.size(0)):
            prefix, total = [BOS_ID], 0.0
            for _ in range(max_len):
                logits = model(src[b:b + 1], lengths[b:b + 1], torch.tensor([prefix]))[0, -1]  # (V,)
                logp = torch.log_softmax(logits.float(), dim=-1)
                logp[[PAD_ID, BOS_ID]] = -math.inf
                tok = int(logp.argmax())
                total += logp[tok].item()
                prefix.append(tok)
                if tok == EOS_ID:
                    break
            out.append((prefix[1:], total))
    return out


def _eos_friendly(model):
    """Make EOS likely enough that some hypotheses finish before max_len."""
    with torch.no_grad():
        model.generator.bias[EOS_ID] += 2.0
    return model


@pytest.mark.parametrize("norm,positions", [("post", "sinusoidal"), ("pre", "learned")])
def test_greedy_search_matches_brute_force(norm, positions):
    model = _eos_friendly(_model(norm=norm, positions=positions))
    src, lengths, _ = _batch()
    hyps = greedy_search(model, src, lengths, max_len=8, need_weights=True)
    for (hyp,), (tokens, total) in zip(hyps, _brute_force_greedy(model, src, lengths, 8)):
        assert hyp.tokens + [EOS_ID] * hyp.finished == tokens
        assert hyp.log_prob == pytest.approx(total, abs=1e-4)
        assert hyp.attention.shape == (len(tokens), 2, H, 7)


@pytest.mark.parametrize("norm,positions,max_len", [("post", "learned", 8), ("pre", "sinusoidal", 8),
                                                    ("pre", "learned", 2 * CACHE_ROOM + 3)])
def test_beam_search_matches_uncached(norm, positions, max_len):
    """The cached search equals re-running the prefix, also past the caches' first two rooms (max_len 35: the
    untrained model's beams run to the limit, every step a reorder of the cache)."""
    model = _model(norm=norm, positions=positions)
    model = _eos_friendly(model) if max_len < CACHE_ROOM else model
    src, lengths, _ = _batch()
    cached = beam_search(model, src, lengths, beam_size=3, max_len=max_len, length_penalty=0.6, n_best=2)
    brute = beam_search(Uncached(model), src, lengths, beam_size=3, max_len=max_len, length_penalty=0.6, n_best=2)
    for ours, ref in zip(cached, brute):
        assert [h.tokens for h in ours] == [h.tokens for h in ref]
        assert [h.finished for h in ours] == [h.finished for h in ref]
        assert [h.score for h in ours] == pytest.approx([h.score for h in ref], abs=1e-5)
    if max_len < CACHE_ROOM:
        assert any(h.finished for hyps in cached for h in hyps)
    else:
        assert max(len(h.tokens) for hyps in cached for h in hyps) > 2 * CACHE_ROOM


def test_cache_makes_room_without_copying_every_step():
    """Steps write into the state's buffers in place; the room doubles (16, 32, 64) only when full; every step
    still equals teacher forcing."""
    model = _model()
    T = 2 * CACHE_ROOM + 1
    src, lengths, _ = _batch()
    torch.manual_seed(2)
    tgt_in = torch.cat([torch.full((3, 1), BOS_ID), torch.randint(4, V_TGT, (3, T - 1))], dim=1)
    with torch.no_grad():
        full = torch.log_softmax(model(src, lengths, tgt_in), dim=-1)  # (B, T, V)
        enc = model.encode(src, lengths)
        state = model.init_state(enc)
        for t in range(T):
            logp, new, _ = model.step(tgt_in[:, t], state, enc)
            torch.testing.assert_close(logp, full[:, t].float())
            room = CACHE_ROOM * 2 ** (t // CACHE_ROOM)
            assert new.t == t + 1 and new.k_room.size(3) == room and new.k.shape == (3, H, 2, t + 1, D // H)
            if t % CACHE_ROOM:  # not full: the same buffers
                assert new.k_room.data_ptr() == state.k_room.data_ptr()
                assert new.v_room.data_ptr() == state.v_room.data_ptr()
            state = new


def test_state_select_batch_copies_the_decoded_rows_only():
    model = _model()
    src, lengths, tgt_in = _batch()
    with torch.no_grad():
        enc = model.encode(src, lengths)
        state = model.init_state(enc)
        for t in range(3):
            _, state, _ = model.step(tgt_in[:, t], state, enc)
        rows = torch.tensor([2, 0, 0])
        picked = select_batch(state, rows)
        assert picked.t == 3 and picked.k_room.shape == state.k_room.shape
        torch.testing.assert_close(picked.k, state.k[rows], rtol=0, atol=0)
        torch.testing.assert_close(picked.v, state.v[rows], rtol=0, atol=0)
        before = state.k.clone()
        model.step(tgt_in[:, 3], picked, select_batch(enc, rows))  # writes into the copy, not the original
        torch.testing.assert_close(state.k, before, rtol=0, atol=0)


def test_beams_share_the_memory_of_their_sentence():
    """Beam search's start (each sentence K times in a row) shares the encoder's tensors; a step then equals
    the step on copied rows, log-probs and cross-attention weights; other rows are copies."""
    model = _model()
    src, lengths, tgt_in = _batch()
    K = 4
    with torch.no_grad():
        enc = model.encode(src, lengths)
        shared = select_batch(enc, torch.arange(3).repeat_interleave(K))
        assert shared.beams == K and shared.k is enc.k and shared.mask is enc.mask
        copied = TransformerEncoderOutput(*(x.repeat_interleave(K, dim=0) for x in (enc.memory, enc.mask, enc.k,
                                                                                   enc.v)))
        state_s, state_c = model.init_state(shared), model.init_state(copied)
        prev = tgt_in[:, :3].repeat_interleave(K, dim=0)  # (3K, 3): the beams differ from the second token
        prev[1::K, 1] = 5
        for t in range(3):
            for need_weights in (False, True):  # a state steps once: the first of the two steps a fork
                logp_s, new_s, w_s = model.step(prev[:, t], state_s if need_weights else state_s.fork(), shared,
                                                need_weights=need_weights)
                logp_c, new_c, w_c = model.step(prev[:, t], state_c if need_weights else state_c.fork(), copied,
                                                need_weights=need_weights)
                torch.testing.assert_close(logp_s, logp_c)
                if need_weights:
                    assert w_s.shape == (3 * K, 2, H, 7)
                    torch.testing.assert_close(w_s, w_c)
            state_s, state_c = new_s, new_c
        rows = torch.tensor([5, 0, 11])  # sentences 1, 0, 2
        again = select_batch(shared, rows)
        assert again.beams == 1
        torch.testing.assert_close(again.k, enc.k[rows // K], rtol=0, atol=0)
        torch.testing.assert_close(again.mask, enc.mask[rows // K])
        searching = select_batch(shared, torch.arange(K, 3 * K))  # sentence 0 stopped: the beams of 1 and 2 stay
        assert searching.beams == K and searching.k.size(0) == 2
        torch.testing.assert_close(searching.v, enc.v[1:], rtol=0, atol=0)
        torch.testing.assert_close(searching.memory, enc.memory[1:], rtol=0, atol=0)
        mixed = select_batch(shared, torch.arange(1, K + 1))  # not whole groups: rows copied
        assert mixed.beams == 1 and torch.equal(mixed.mask, enc.mask[torch.arange(1, K + 1) // K])


def test_beam_search_with_shared_memory_equals_copied_memory(monkeypatch):
    """Hypotheses, scores and attention histories of beam search are those of the copied-memory path."""
    model = _eos_friendly(_model())
    src, lengths, _ = _batch()
    shared = beam_search(model, src, lengths, beam_size=3, max_len=10, n_best=2, need_weights=True)
    monkeypatch.setattr(TransformerEncoderOutput, "select_batch", lambda self, index: TransformerEncoderOutput(
        *(x.index_select(0, index // self.beams) for x in (self.memory, self.mask, self.k, self.v))))
    copied = beam_search(model, src, lengths, beam_size=3, max_len=10, n_best=2, need_weights=True)
    for ours, ref in zip(shared, copied):
        assert [h.tokens for h in ours] == [h.tokens for h in ref]
        assert [h.score for h in ours] == pytest.approx([h.score for h in ref], abs=1e-9)
        for a, b in zip(ours, ref):
            torch.testing.assert_close(a.attention, b.attention)


# ---------------------------------------------------------------------------------------------- packing
def _per_example_nll(logits, batch) -> dict[int, float]:
    """Summed NLL of each example of a padded or packed batch, keyed by its dataset index."""
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=PAD_ID,
                                            reduction="none")  # (B, T)
    if batch.tgt_segments is None:
        return {int(i): float(row.sum()) for i, row in zip(batch.indices, nll)}
    out, order = {}, iter(batch.indices.tolist())
    for r in range(nll.size(0)):
        for k in range(1, int(batch.tgt_segments.ids[r].max()) + 1):
            out[next(order)] = float(nll[r][batch.tgt_segments.ids[r] == k].sum())
    return out


@pytest.mark.parametrize("norm,positions", VARIANTS)
def test_packed_rows_equal_the_padded_batch(norm, positions):
    """Several sentences per row with per-sentence masks and positions compute what each computes in a padded
    batch: the same summed loss to 1e-5 in float32, and the same loss per sentence to 1e-10 in float64."""
    rng = torch.Generator().manual_seed(2)
    examples = [(i, torch.randint(4, V_SRC, (int(torch.randint(1, 10, (1,), generator=rng)),), generator=rng).tolist(),
                 torch.randint(4, V_TGT, (int(torch.randint(1, 10, (1,), generator=rng)),), generator=rng).tolist())
                for i in range(12)]
    padded, packed = collate_seq2seq(examples), collate_packed_seq2seq(examples, row_len=20)
    assert packed.src.size(0) < padded.src.size(0) // 2  # the rows really are shared
    model = _model(norm=norm, positions=positions)
    with torch.no_grad():
        exact = {name: _per_example_nll(model(*args), b) for name, b, args in (
            ("padded", padded, (padded.src, padded.src_lengths, padded.tgt_in)),
            ("packed", packed, (packed.src, packed.src_lengths, packed.tgt_in, packed.src_segments,
                                packed.tgt_segments)))}
        assert exact["padded"].keys() == exact["packed"].keys() == set(range(12))
        for i in range(12):
            assert exact["packed"][i] == pytest.approx(exact["padded"][i], rel=1e-10)
        model = model.float()
        loss_padded, n_padded = Seq2SeqTask().loss(model, padded, 0.1)
        loss_packed, n_packed = Seq2SeqTask().loss(model, packed, 0.1)
    assert n_padded == n_packed
    assert loss_packed.dtype == torch.float32
    assert abs(loss_packed.item() - loss_padded.item()) <= 1e-5 * abs(loss_padded.item())


def test_packed_rows_need_both_segments():
    packed = collate_packed_seq2seq([(0, [5, 6], [7]), (1, [8], [9, 10])], row_len=8)
    with pytest.raises(AttnlabError, match="both src_segments and tgt_segments"):
        _model()(packed.src, packed.src_lengths, packed.tgt_in, packed.src_segments)
