"""The fixed grid of shapes (issue 40): `train.length_multiple` cuts batches of one grid length each, a fixed number of
sentences per length, padded on both sides to that length; `train.warmup_shapes` runs each shape once before the
clock without changing the run; `decode.length_multiple` pads a decoding batch's sources. Padding is masked, so the
loss, the gradients and the translations are those without the grid."""

import numpy as np
import pytest
import torch

from attnlab.core.errors import AttnlabError
from attnlab.data.batching import (Seq2SeqDataset, TokenBudgetBatchSampler, collate_packed_seq2seq, collate_seq2seq,
                                   grid_length)
from attnlab.data.tokenizers import CharTokenizer, TokenizerPair
from attnlab.decode.translate import DecodeConfig, Translator
from attnlab.nn.rnn_seq2seq import RNNModelConfig, RNNSeq2Seq
from attnlab.nn.transformer import TransformerConfig, TransformerSeq2Seq
from attnlab.training.trainer import Seq2SeqTask, TrainConfig, Trainer
from conftest import make_pairs

pytestmark = pytest.mark.usefixtures("single_thread")

PAIRS = make_pairs(300, seed=4)
TOKENIZERS = TokenizerPair(CharTokenizer.train(s for s, _ in PAIRS), CharTokenizer.train(t for _, t in PAIRS),
                           joint=False)
DATA = Seq2SeqDataset([TOKENIZERS.src.encode(s) for s, _ in PAIRS], [TOKENIZERS.tgt.encode(t) for _, t in PAIRS])


def _model(family: str, dropout: float = 0.0) -> torch.nn.Module:
    torch.manual_seed(0)
    V_src, V_tgt = TOKENIZERS.src.vocab_size, TOKENIZERS.tgt.vocab_size
    if family == "rnn":
        return RNNSeq2Seq(V_src, V_tgt, RNNModelConfig(cell="gru", emb_dim=16, hidden_dim=24, attention="bahdanau",
                                                       dropout=dropout))
    return TransformerSeq2Seq(V_src, V_tgt, TransformerConfig(d_model=16, h=2, d_ff=32, enc_layers=1, dec_layers=2,
                                                              dropout=dropout, norm="pre"))


# ---------------------------------------------------------------------------------------------- the sampler
@pytest.mark.parametrize("multiple, max_tokens", [(8, 400), (16, 400), (5, 90), (16, 20)])
def test_the_grid_gives_only_grid_shapes(multiple, max_tokens):
    """Every batch of three epochs has a shape of `grid_batches`: (rows, L, L), L a multiple of the grid and rows
    max(1, max_tokens // L) but for one batch per length; each example once per epoch; at most two shapes per grid
    length."""
    sampler = TokenBudgetBatchSampler(DATA.lengths(), max_tokens, seed=3, length_multiple=multiple)
    grid = [collate_seq2seq([DATA[i] for i in idx], multiple) for idx in sampler.grid_batches()]
    shapes = {(b.src.shape, b.tgt_in.shape) for b in grid}
    lengths = {b.src.size(1) for b in grid}
    assert len(shapes) == len(grid) <= 2 * len(lengths)
    for b in grid:
        (B, S), (_, T) = b.src.shape, b.tgt_in.shape
        assert S == T and S % multiple == 0 and B <= max(1, max_tokens // S)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        seen = []
        for idx in sampler:
            b = collate_seq2seq([DATA[i] for i in idx], multiple)
            assert (b.src.shape, b.tgt_in.shape) in shapes
            assert b.tgt_out.shape == b.tgt_in.shape
            seen += idx
        assert sorted(seen) == list(range(len(DATA)))


def test_grid_batches_hold_one_grid_length_and_full_rows():
    lengths = np.array([[3, 4], [9, 2], [7, 8], [8, 8], [16, 1], [17, 3], [1, 1], [2, 2], [9, 9], [15, 16]])
    sampler = TokenBudgetBatchSampler(lengths, 32, shuffle=False, length_multiple=8)
    # costs 4 9 8 8 16 17 1 2 9 16: L 8 holds five (rows of 4, and the rest, 1), L 16 four (2 rows), L 24 one
    assert [len(b) for b in sampler.grid_batches()] == [4, 1, 2, 1]
    costs = lengths.max(axis=1)
    for idx in sampler:
        L = set(grid_length(costs[idx], 8).tolist())
        assert len(L) == 1 and len(idx) <= max(1, 32 // L.pop())
    assert grid_length(0, 8) == 8 and grid_length(np.array([1, 8, 9]), 8).tolist() == [8, 8, 16]


def test_without_the_grid_nothing_changes():
    """length_multiple 0: the batches and their padding are those of before."""
    plain = TokenBudgetBatchSampler(DATA.lengths(), 200, seed=1)
    zero = TokenBudgetBatchSampler(DATA.lengths(), 200, seed=1, length_multiple=0)
    assert list(plain) == list(zero) and zero.grid_batches() == []
    b = collate_seq2seq([DATA[0], DATA[1]])
    assert b.src.size(1) == max(len(DATA[i][1]) for i in (0, 1)) + 1
    with pytest.raises(AttnlabError, match="length_multiple"):
        TokenBudgetBatchSampler(DATA.lengths(), 200, length_multiple=-8)


def test_packed_rows_are_padded_to_the_grid():
    examples = [DATA[i] for i in range(6)]
    packed = collate_packed_seq2seq(examples, row_len=40, length_multiple=16)
    plain = collate_packed_seq2seq(examples, row_len=40)
    assert packed.src.size(1) == packed.tgt_in.size(1) == 48 and packed.src_segments.ids.size(1) == 48
    S, T = plain.src.size(1), plain.tgt_in.size(1)
    assert torch.equal(packed.src[:, :S], plain.src) and torch.equal(packed.tgt_out[:, :T], plain.tgt_out)
    assert packed.src[:, S:].eq(0).all() and packed.src_segments.ids[:, S:].eq(0).all()


# ---------------------------------------------------------------------------------------------- training
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_loss_and_gradients_do_not_depend_on_the_grid(family):
    """The same examples with and without the grid (padding only): the summed loss and every gradient agree to
    float32 rounding."""
    model = _model(family)
    sampler = TokenBudgetBatchSampler(DATA.lengths(), 300, seed=2, length_multiple=16)
    for idx in list(sampler)[:4]:
        results = []
        for multiple in (0, 16):
            batch = collate_seq2seq([DATA[i] for i in idx], multiple)
            model.zero_grad(set_to_none=True)
            loss, n = Seq2SeqTask().loss(model, batch, 0.1)
            loss.backward()
            results.append((loss.detach(), n, [p.grad.clone() for p in model.parameters()], batch.src.size(1)))
        (plain, n0, g0, S0), (grid, n1, g1, S1) = results
        assert n0 == n1 and S1 % 16 == 0 and S1 >= S0
        torch.testing.assert_close(grid, plain, rtol=1e-5, atol=1e-5)
        for a, b in zip(g1, g0):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def _trainer(tmp_path, name: str, **train) -> Trainer:
    cfg = TrainConfig(max_steps=6, max_tokens=300, device="cpu", amp="none", lr=0.01, progress=False, eval_every=6,
                      seed=5, length_multiple=16, **train)
    return Trainer(_model("transformer", dropout=0.2), cfg, DATA, Seq2SeqDataset(DATA.src_ids[:8], DATA.tgt_ids[:8]),
                   tmp_path / name)


def test_the_warm_up_runs_each_shape_and_changes_nothing(tmp_path, monkeypatch):
    """N updates with and without the warm-up give the same weights bit for bit (dropout on: the random state is
    restored); the warm-up ran one forward of each grid shape and left no gradient behind."""
    warm = _trainer(tmp_path, "warm", warmup_shapes=True)
    calls = []
    real_loss = warm.task.loss
    monkeypatch.setattr(warm.task, "loss", lambda model, batch, eps: calls.append(batch.src.shape) or real_loss(
        model, batch, eps), raising=False)
    warm.warm_up()
    assert len(calls) == len(warm.sampler.grid_batches()) == len(set(calls)) > 1
    assert all(p.grad is None for p in warm.raw_model.parameters())
    monkeypatch.undo()
    warm = _trainer(tmp_path, "warm2", warmup_shapes=True)
    cold = _trainer(tmp_path, "cold")
    for trainer in (warm, cold):
        torch.manual_seed(11)  # the pipeline seeds before training; dropout then draws the same masks
        trainer.fit()
    assert warm.state.step == cold.state.step == 6
    for a, b in zip(warm.raw_model.parameters(), cold.raw_model.parameters()):
        assert torch.equal(a, b)


def test_warm_up_needs_the_grid_and_a_task_that_takes_it(tmp_path):
    with pytest.raises(AttnlabError, match="warmup_shapes = true needs the grid"):
        TrainConfig(warmup_shapes=True)

    class NoGrid:
        perplexity = True
        collate = staticmethod(collate_seq2seq)
        loss = Seq2SeqTask().loss

    with pytest.raises(AttnlabError, match="train.length_multiple: the batches of NoGrid cannot be padded"):
        Trainer(_model("rnn"), TrainConfig(length_multiple=8, device="cpu", progress=False), DATA, DATA, tmp_path,
                task=NoGrid())


# ---------------------------------------------------------------------------------------------- decoding
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Both models trained a few dozen updates on the grid (the outputs are then not near-ties of a random model)."""
    models = {}
    for family in ("rnn", "transformer"):
        cfg = TrainConfig(max_steps=40, max_tokens=400, device="cpu", amp="none", lr=0.01, progress=False,
                          eval_every=40, length_multiple=8)
        trainer = Trainer(_model(family), cfg, DATA, Seq2SeqDataset(DATA.src_ids[:8], DATA.tgt_ids[:8]),
                          tmp_path_factory.mktemp(family))
        trainer.fit()
        models[family] = trainer.raw_model.eval()
    return models


@pytest.mark.parametrize("family", ["rnn", "transformer"])
@pytest.mark.parametrize("beam", [1, 3])
def test_decoding_on_the_grid_equals_decoding_without(trained, family, beam):
    sentences = [s for s, _ in make_pairs(24, seed=9)]
    outputs = {}
    for multiple in (0, 16):
        translator = Translator(trained[family], TOKENIZERS, DecodeConfig(beam_size=beam, batch_size=7,
                                                                           length_multiple=multiple))
        outputs[multiple] = translator.translate(sentences)
    assert [[t.tgt_tokens for t in nbest] for nbest in outputs[16]] == [[t.tgt_tokens for t in nbest]
                                                                       for nbest in outputs[0]]
    assert [t.score for nbest in outputs[16] for t in nbest] == pytest.approx(
        [t.score for nbest in outputs[0] for t in nbest], rel=1e-5)
