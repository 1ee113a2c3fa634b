"""attnlab.kernels as a whole: the one switch (ATTNLAB_KERNELS, `disabled`, `override`, per thread), and a handful of
the suite's representative steps run with every kernel off, which must pass and equal the kernels' results: a GRU
encoder-decoder with Bahdanau attention trained one step by the trainer (every kernel runs in it: the two
recurrences, the additive score, the one-query context, the loss), and a Transformer's loss and training step.

`make test-plain` runs the whole suite with ATTNLAB_KERNELS=0; this module keeps the comparison in `make test`.
Each kernel's own test holds it against its twin in detail: tests/test_recurrence.py, test_attention.py,
test_dropout.py, test_loss.py, test_memory.py."""

import threading
from unittest import mock

import pytest
import torch

import attnlab.kernels.attention as attention_kernels
import attnlab.kernels.dropout as dropout_kernel
import attnlab.kernels.loss as loss_kernel
import attnlab.kernels.recurrence as recurrence_kernels
import attnlab.nn.attention as attention_module
from attnlab import kernels
from attnlab.core.errors import AttnlabError
from attnlab.data.batching import Seq2SeqDataset, collate_seq2seq
from attnlab.nn.rnn_seq2seq import RNNModelConfig, RNNSeq2Seq
from attnlab.nn.transformer import TransformerConfig, TransformerSeq2Seq
from attnlab.training.trainer import Seq2SeqTask, TrainConfig, Trainer

pytestmark = pytest.mark.usefixtures("single_thread")

V = 12
DATA = Seq2SeqDataset([[5, 6, 7], [8, 9], [5, 5, 5, 5, 6, 7], [7]], [[4, 5], [6, 7, 8, 9, 10], [9], [4, 4, 4]])

# (module, name) of every kernel a model reaches through the switch
KERNELS = {"GRURecurrence": (recurrence_kernels.GRURecurrence, "apply"),
           "BahdanauGRURecurrence": (recurrence_kernels.BahdanauGRURecurrence, "apply"),
           "additive_scores": (attention_kernels, "additive_scores"),
           "one_query_context": (attention_kernels, "one_query_context"),
           "keep_mask": (dropout_kernel, "keep_mask"),
           "FusedSmoothedCE": (loss_kernel.FusedSmoothedCE, "apply")}


# ---------------------------------------------------------------------------------------------- the switch
@pytest.mark.parametrize("value, on", [(None, True), ("1", True), ("on", True), (" ON ", True), ("", True),
                                       ("0", False), ("off", False), ("False", False), ("no", False)])
def test_the_environment_variable_turns_every_kernel_on_or_off(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv(kernels.ENV, raising=False)
    else:
        monkeypatch.setenv(kernels.ENV, value)
    assert kernels.enabled() is on


def test_a_value_neither_on_nor_off_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "fast")
    with pytest.raises(AttnlabError, match="ATTNLAB_KERNELS='fast' is neither on .* nor off"):
        kernels.enabled()


def test_override_and_disabled_nest_and_restore(monkeypatch):
    monkeypatch.setenv(kernels.ENV, "0")
    assert not kernels.enabled()
    with kernels.override(True):
        assert kernels.enabled()
        with kernels.disabled():
            assert not kernels.enabled()
        assert kernels.enabled()
    assert not kernels.enabled()
    with pytest.raises(RuntimeError), kernels.override(True):
        raise RuntimeError("the block fails")
    assert not kernels.enabled()


def test_the_override_holds_in_its_own_thread_only(monkeypatch):
    """A block with the kernels off in one thread leaves another thread (a server's other request) as it was."""
    monkeypatch.delenv(kernels.ENV, raising=False)
    seen = {}
    with kernels.disabled():
        worker = threading.Thread(target=lambda: seen.setdefault("other", kernels.enabled()))
        worker.start()
        worker.join()
        seen["own"] = kernels.enabled()
    assert seen == {"other": True, "own": False}


# ---------------------------------------------------------------------------------------------- the suite, off
def _spies(monkeypatch) -> dict:
    spies = {}
    for name, (owner, attr) in KERNELS.items():
        spies[name] = mock.Mock(wraps=getattr(owner, attr))
        monkeypatch.setattr(owner, attr, spies[name])
    # the attention core calls its kernels by the names it imported
    monkeypatch.setattr(attention_module, "additive_scores", spies["additive_scores"])
    monkeypatch.setattr(attention_module, "one_query_context", spies["one_query_context"])
    return spies


def _gru_model(dropout: float = 0.0, dec_layers: int = 1) -> RNNSeq2Seq:
    """A bidirectional 2-layer GRU encoder and a Bahdanau GRU decoder: one decoder layer trains through the
    decoder's recurrence kernel, two step by step through the attention core (and a GRU kernel per step)."""
    torch.manual_seed(0)
    return RNNSeq2Seq(V, V, RNNModelConfig(cell="gru", emb_dim=8, hidden_dim=12, enc_layers=2, bidirectional=True,
                                           dec_layers=dec_layers, dropout=dropout, attention="bahdanau"))


def _gru_model_stepwise(dropout: float = 0.0) -> RNNSeq2Seq:
    return _gru_model(dropout, dec_layers=2)


def _transformer(dropout: float = 0.0) -> TransformerSeq2Seq:
    torch.manual_seed(0)
    return TransformerSeq2Seq(V, V, TransformerConfig(d_model=16, h=2, d_ff=32, enc_layers=1, dec_layers=2,
                                                      dropout=dropout, norm="pre"))


def _train_step(model, tmp_path, on: bool) -> tuple[float, list[torch.Tensor], list[torch.Tensor]]:
    """One update by the trainer (fp32, label smoothing 0.1, clipping): the loss, the gradients (kept by the test
    before the trainer zeroes them) and the weights after it. Plain SGD instead of the trainer's Adam: Adam's
    first step moves every weight by about lr whatever its gradient's size, so a gradient of 1e-9 against 0 (a
    rounding difference) would move a weight by lr in one path and not at all in the other."""
    cfg = TrainConfig(max_tokens=64, device="cpu", amp="none", lr=0.1, progress=False)
    with kernels.override(on):
        trainer = Trainer(model, cfg, DATA, DATA, tmp_path / f"kernels-{on}")
        trainer.optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        grads = []
        trainer.optimizer.zero_grad = lambda set_to_none=True: grads.extend(
            p.grad.clone() for p in model.parameters())
        loss, ntok = trainer.train_step([collate_seq2seq([DATA[i] for i in range(4)])])
    assert ntok == 15 and grads
    return float(loss), grads, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("build, used", [
    (_gru_model, {"GRURecurrence", "BahdanauGRURecurrence", "FusedSmoothedCE"}),
    (_gru_model_stepwise, {"GRURecurrence", "additive_scores", "one_query_context", "FusedSmoothedCE"}),
    (_transformer, {"FusedSmoothedCE"}),
], ids=["rnn", "rnn-stepwise", "transformer"])
def test_a_training_step_with_the_kernels_off_equals_the_step_with_them_on(monkeypatch, tmp_path, build, used):
    """The same model, batch and update with every kernel on and with every kernel off: the kernels that apply
    run only when on, and the loss, the gradients and the updated weights agree to float32 rounding (the
    kernels sum in another order). Dropout 0: the kernel's mask and F.dropout's differ by design."""
    spies = _spies(monkeypatch)
    results = {}
    for on in (True, False):
        for spy in spies.values():
            spy.reset_mock()
        results[on] = _train_step(build(), tmp_path, on)
        ran = {name for name, spy in spies.items() if spy.called}
        assert ran == (used if on else set()), f"kernels on={on}: ran {sorted(ran)}"
    (loss_on, grads_on, weights_on), (loss_off, grads_off, weights_off) = results[True], results[False]
    assert loss_off == pytest.approx(loss_on, rel=1e-5)
    for a, b in zip(grads_on, grads_off, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    for a, b in zip(weights_on, weights_off, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_the_transformer_loss_with_the_kernels_off_equals_it_with_them_on():
    """Seq2SeqTask.loss, the trainer's loss of a translation batch: summed label-smoothed cross-entropy and its
    count of target tokens, in training mode with a gradient (the fused loss) and without one (the dev loss)."""
    batch = collate_seq2seq([DATA[i] for i in range(4)])
    model = _transformer()
    values = {}
    for on in (True, False):
        with kernels.override(on):
            model.zero_grad()
            loss, n = Seq2SeqTask().loss(model.train(), batch, 0.1)
            loss.backward()
            with torch.no_grad():
                dev, _ = Seq2SeqTask().loss(model.eval(), batch, 0.1)
        values[on] = (loss.item(), n, dev.item(), [p.grad.clone() for p in model.parameters()])
    assert values[True][1] == values[False][1] == 15
    assert values[False][0] == pytest.approx(values[True][0], rel=1e-6)
    assert values[False][2] == values[True][2]  # without a gradient no kernel applies: the same ops
    for a, b in zip(values[True][3], values[False][3], strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("build", [_gru_model, _transformer], ids=["rnn", "transformer"])
def test_with_dropout_and_the_kernels_off_a_step_trains_through_f_dropout(monkeypatch, tmp_path, build):
    """With dropout the two paths draw different masks, so only the off path's own behaviour is checked: no kernel
    runs, F.dropout does, and the step gives a finite loss and moves the weights."""
    spies = _spies(monkeypatch)
    model = build(dropout=0.2)
    before = [p.detach().clone() for p in model.parameters()]
    with mock.patch.object(torch.nn.functional, "dropout", wraps=torch.nn.functional.dropout) as f_dropout:
        loss, _, after = _train_step(model, tmp_path, on=False)
    assert f_dropout.called
    assert not any(spy.called for spy in spies.values())
    assert loss == loss and loss > 0  # finite, not NaN
    assert any(not torch.equal(a, b) for a, b in zip(before, after))
