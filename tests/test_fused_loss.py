"""`train.fused_loss`: the Transformer's and the LM's forward computing the training loss with their output layer
(`attnlab.kernels.linear_ce`), held against the loss of their logits (`attnlab.training.trainer.sequence_loss`,
i.e. `F.cross_entropy`): the same value and the same gradient of every parameter (float32, 1e-5; padded and packed
batches, tied and untied output layers with and without a bias), the same weights after training, evaluation
without computing gradients, and a clear refusal where a family's loss takes logits."""

import pytest
import torch

from attnlab.core.errors import AttnlabError
from attnlab.data.batching import Seq2SeqDataset, collate_packed_seq2seq, collate_seq2seq
from attnlab.data.tokenizers import BOS_ID, PAD_ID, CharTokenizer, TokenizerPair
from attnlab.families.lm import LMTask
import attnlab.kernels.linear_ce as linear_ce
from attnlab.nn.lm import LMModelConfig, TransformerLM
from attnlab.nn.rnn_seq2seq import RNNModelConfig, RNNSeq2Seq
from attnlab.nn.transformer import TransformerConfig, TransformerSeq2Seq
from attnlab.training.trainer import Seq2SeqTask, TrainConfig, Trainer, sequence_loss
from conftest import make_pairs

pytestmark = pytest.mark.usefixtures("single_thread")

PAIRS = make_pairs(120, seed=6)
_JOINT = CharTokenizer.train(s + t for s, t in PAIRS)
TOKENIZERS = TokenizerPair(_JOINT, _JOINT, joint=True)
DATA = Seq2SeqDataset([TOKENIZERS.src.encode(s) for s, _ in PAIRS], [TOKENIZERS.tgt.encode(t) for _, t in PAIRS])
V = TOKENIZERS.src.vocab_size


def _transformer(tie: str, bias: bool, dropout: float = 0.0) -> TransformerSeq2Seq:
    torch.manual_seed(0)
    model = TransformerSeq2Seq(V, V, TransformerConfig(d_model=16, h=2, d_ff=32, enc_layers=1, dec_layers=2,
                                                       dropout=dropout, norm="pre", tie_embeddings=tie,
                                                       generator_bias=bias))
    with torch.no_grad():  # a zero output bias would hide a missing one
        if model.generator.bias is not None:
            model.generator.bias.normal_(0, 0.5)
    return model


def _grads(model: torch.nn.Module, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _assert_same(fused: tuple, plain: tuple) -> None:
    (loss_f, grads_f), (loss_p, grads_p) = fused, plain
    torch.testing.assert_close(loss_f, loss_p, rtol=1e-5, atol=1e-5)
    assert grads_f.keys() == grads_p.keys() and len(grads_p) > 10
    for name in grads_p:
        torch.testing.assert_close(grads_f[name], grads_p[name], rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("tie, bias", [("all", False), ("none", True), ("decoder", True)])
@pytest.mark.parametrize("packed", [False, True])
def test_the_transformer_loss_equals_the_loss_of_its_logits(tie, bias, packed):
    model = _transformer(tie, bias)
    examples = [DATA[i] for i in range(24)]
    batch = collate_packed_seq2seq(examples, 40) if packed else collate_seq2seq(examples)
    assert (batch.tgt_out == PAD_ID).any()  # padding rows are left out of both
    results = []
    for fused in (True, False):
        loss, n = Seq2SeqTask(fused).loss(model, batch, 0.1)
        results.append((loss.detach(), _grads(model, loss)))
    assert n == int((batch.tgt_out != PAD_ID).sum())
    _assert_same(*results)


@pytest.mark.parametrize("tie", [True, False])
def test_the_lm_loss_equals_the_loss_of_its_logits(tie):
    torch.manual_seed(0)
    model = TransformerLM(V, LMModelConfig(d_model=16, h=4, d_ff=32, layers=2, dropout=0.0, max_len=64,
                                           tie_embeddings=tie))
    g = torch.Generator().manual_seed(2)
    examples = [(i, torch.randint(4, V, (int(torch.randint(1, 12, (1,), generator=g)),), generator=g).tolist())
                for i in range(10)]
    for batch in (LMTask.collate(examples), LMTask.collate_packed(examples, row_len=24)):
        assert batch.inputs[0, 0] == BOS_ID and batch.num_targets == int((batch.targets != PAD_ID).sum())
        results = [(loss.detach(), _grads(model, loss)) for loss in
                   (LMTask(fused).loss(model, batch, 0.1)[0] for fused in (True, False))]
        _assert_same(*results)


def test_the_forward_with_targets_is_the_summed_cross_entropy_of_the_logits():
    """The model's own loss against the plain `F.cross_entropy` of its logits, independently of the trainer."""
    model = _transformer("all", False)
    batch = collate_seq2seq([DATA[i] for i in range(8)])
    logits = model(batch.src, batch.src_lengths, batch.tgt_in)
    plain = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=PAD_ID,
                                              label_smoothing=0.2, reduction="sum")
    fused = model(batch.src, batch.src_lengths, batch.tgt_in, targets=batch.tgt_out, label_smoothing=0.2)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sequence_loss(logits, batch.tgt_out, 0.2), plain, rtol=1e-5, atol=1e-5)


def test_evaluation_computes_no_gradient(monkeypatch):
    """Under no_grad (the dev loss) the loss comes from the blocks alone: the autograd function, which would compute
    the gradients in its forward pass, is not called."""
    model = _transformer("all", False)
    batch = collate_seq2seq([DATA[i] for i in range(8)])
    with torch.no_grad():
        expected = Seq2SeqTask(False).loss(model, batch, 0.1)[0]
        monkeypatch.setattr(linear_ce.FusedLinearCE, "apply", lambda *a: pytest.fail("gradients computed"))
        got = Seq2SeqTask(True).loss(model, batch, 0.1)[0]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def _train(tmp_path, name: str, fused: bool) -> Trainer:
    cfg = TrainConfig(max_steps=5, max_tokens=300, device="cpu", amp="none", lr=0.01, progress=False, eval_every=5,
                      seed=5, fused_loss=fused)
    trainer = Trainer(_transformer("all", False, dropout=0.2), cfg, DATA,
                      Seq2SeqDataset(DATA.src_ids[:8], DATA.tgt_ids[:8]), tmp_path / name)
    torch.manual_seed(11)  # the pipeline seeds before training; dropout then draws the same masks
    trainer.fit()
    return trainer


def test_training_with_the_fused_loss_reaches_the_same_weights(tmp_path):
    fused, plain = _train(tmp_path, "fused", True), _train(tmp_path, "plain", False)
    assert fused.state.step == plain.state.step == 5
    assert isinstance(fused.task, Seq2SeqTask) and fused.task.fused_loss
    for (name, a), b in zip(fused.raw_model.named_parameters(), plain.raw_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=name)


def test_a_model_whose_loss_takes_logits_is_refused(tmp_path):
    torch.manual_seed(0)
    rnn = RNNSeq2Seq(V, V, RNNModelConfig(cell="gru", emb_dim=8, hidden_dim=8))
    with pytest.raises(AttnlabError, match="train.fused_loss = true needs a model whose forward computes its loss"):
        Trainer(rnn, TrainConfig(device="cpu", progress=False, fused_loss=True), DATA, DATA, tmp_path / "rnn",
                task=Seq2SeqTask(False))


@pytest.mark.parametrize("key, message", [("fused_loss", "train.fused_loss = true needs model.family = 'transformer'"),
                                          ("pack", "train.pack needs model.family = 'transformer'")])
def test_an_rnn_config_is_refused_before_any_work(tmp_path, capsys, key, message):
    """With an RNN config, `attnlab train` refuses train.fused_loss (and train.pack) as the config is read: exit 2,
    one line, no corpus built and no run directory left behind."""
    from attnlab.app.cli import main

    out = tmp_path / "run"
    assert main(["train", "demo", "--out", str(out), "--set", f"train.{key}=true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and not out.exists()
