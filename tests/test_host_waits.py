"""No host waits in the hot loops (issue 40): on a GPU, reading a tensor on the host (`.item()`, `.tolist()`, `.cpu()`,
`.numpy()`, `float(t)`, `int(t)`, `bool(t)` / `if t`) waits for every step queued before it. This module counts
those reads on the CPU, where every tensor is a host tensor, by patching `torch.Tensor`'s methods: a read counts when
attnlab's own code makes it (the calling frame is in the package; torch's internals, such as Adam's step counters
that torch itself keeps on the host, are torch's), and a read of a tensor that a counted `.cpu()` returned is the
same copy, not another.

The budgets, per unit of the loop (the docstrings of `attnlab.training.trainer` and `attnlab.decode.search` say
why):
- the trainer, between two log records: 0 per update for the Transformer (with or without train.fused_loss) and
  the LM; the loss is summed on the device and read once per record. The RNN's encoder reads its lengths on the
  host every update (`attnlab.nn.rnn`: torch's `pack_padded_sequence` takes them on the CPU): RNN_UPDATE_READS.
- greedy search: 1 per step (the rows still going on).
- beam search: 1 per step (the step's bookkeeping in one copy), 2 on a step where a hypothesis finishes or a
  sentence reaches its limit (its tokens).

Adding a `.item()` to a loop fails here (`test_the_counter_sees_a_read_in_the_loop`).

One read is not counted: `attnlab.kernels.dropout.random_words` reads its two stream seeds on the host, on the CPU
only (on another device the words come from torch's `random_` there, with no read: checked on the meta device
below), where a read waits for nothing."""

import contextlib
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab.data.batching import Seq2SeqDataset
from attnlab.data.tokenizers import EOS_ID
from attnlab.decode.search import beam_search, greedy_search
from attnlab.families.lm import LMDataset, LMTask
from attnlab.kernels.dropout import keep_mask
from attnlab.nn.lm import LMModelConfig, TransformerLM
from attnlab.nn.rnn_seq2seq import RNNModelConfig, RNNSeq2Seq
from attnlab.nn.transformer import TransformerConfig, TransformerSeq2Seq
from attnlab.training.trainer import TrainConfig, Trainer

pytestmark = pytest.mark.usefixtures("single_thread")

PACKAGE = str(Path(attnlab.__file__).parent)
READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")
CPU_ONLY_READS = {("random_words", "dropout.py")}  # (function, file): reads on a code path only the CPU takes
RNN_UPDATE_READS = 3  # nn/rnn.py: the encoder's lengths on the host (check and pack_padded_sequence)
V = 20


class HostReads:
    """Records each read of a tensor on the host made by code under `roots`: (method, function, file:line)."""

    def __init__(self, roots: tuple[str, ...] = (PACKAGE,)) -> None:
        self.roots, self.calls, self._copies = roots, [], []

    def mark(self) -> int:
        return len(self.calls)

    def _wrap(self, name: str, real):
        def read(tensor, *args, **kwargs):
            out = real(tensor, *args, **kwargs)
            frame = sys._getframe(1)
            cpu_only = (frame.f_code.co_name, Path(frame.f_code.co_filename).name) in CPU_ONLY_READS
            if (frame.f_code.co_filename.startswith(self.roots) and not cpu_only
                    and not any(tensor is c for c in self._copies)):
                self.calls.append((name, frame.f_code.co_name,
                                   f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"))
                if name == "cpu":  # its result is on the host: reading it again is the same copy
                    self._copies.append(out)
            return out
        return read

    @contextlib.contextmanager
    def counting(self):
        saved = {name: torch.Tensor.__dict__.get(name) for name in READS}
        try:
            for name in READS:
                setattr(torch.Tensor, name, self._wrap(name, getattr(torch.Tensor, name)))
            yield self
        finally:
            for name, real in saved.items():
                if real is None:
                    delattr(torch.Tensor, name)
                else:
                    setattr(torch.Tensor, name, real)
            self._copies.clear()


def _model(family: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if family == "rnn":
        return RNNSeq2Seq(V, V, RNNModelConfig(cell="gru", emb_dim=16, hidden_dim=24, attention="bahdanau"))
    return TransformerSeq2Seq(V, V, TransformerConfig(d_model=16, h=2, d_ff=32, enc_layers=1, dec_layers=2,
                                                      norm="pre"))


def _data(n: int = 64) -> Seq2SeqDataset:
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(2, 9, (n, 2), generator=g).tolist()
    return Seq2SeqDataset([torch.randint(4, V, (s,), generator=g).tolist() for s, _ in lengths],
                          [torch.randint(4, V, (t,), generator=g).tolist() for _, t in lengths])


def _per_step(reads: HostReads, marks: list[int]) -> list[list[tuple]]:
    """The reads between each two consecutive marks."""
    return [reads.calls[a:b] for a, b in zip(marks, marks[1:])]


# ---------------------------------------------------------------------------------------------- training
@pytest.mark.parametrize("family, budget", [("transformer", 0), ("rnn", RNN_UPDATE_READS)])
@pytest.mark.parametrize("grid", [0, 8])
def test_the_trainer_does_not_wait_between_log_records(tmp_path, monkeypatch, family, budget, grid):
    """Eight updates between two log records (accumulating two batches each, dropout on): the reads from the start
    of one update to the start of the next (the step, the loader, the loop's bookkeeping) are within the budget."""
    cfg = TrainConfig(max_steps=8, max_tokens=60, accum_steps=2, device="cpu", amp="none", progress=False,
                      log_every=1000, eval_every=1000, length_multiple=grid)
    data = _data()
    trainer = Trainer(_model(family), cfg, data, Seq2SeqDataset(data.src_ids[:4], data.tgt_ids[:4]), tmp_path)
    reads, marks = HostReads(), []
    real_step = trainer.train_step

    def step(batches):
        marks.append(reads.mark())
        return real_step(batches)

    monkeypatch.setattr(trainer, "train_step", step)
    with reads.counting():
        trainer.fit()
    steps = _per_step(reads, marks)
    assert len(steps) == 7
    for calls in steps:
        assert len(calls) <= 2 * budget, calls  # accum_steps 2: two forward passes per update
        assert all(c[2].startswith("rnn.py") for c in calls), calls


@pytest.mark.parametrize("family", ["transformer", "lm"])
def test_the_fused_loss_and_the_lm_do_not_wait_either(tmp_path, monkeypatch, family):
    """train.fused_loss (the loss computed with the output layer, blocks of rows) and the language model's updates:
    no read at all between two log records (the LM read its target count back from the device every update
    before its batches counted them when collating)."""
    cfg = TrainConfig(max_steps=6, max_tokens=60, device="cpu", amp="none", progress=False, log_every=1000,
                      eval_every=1000, fused_loss=family == "transformer")
    data = _data()
    if family == "lm":
        torch.manual_seed(0)
        model = TransformerLM(V, LMModelConfig(d_model=16, h=2, d_ff=32, layers=2, max_len=32))
        ids = LMDataset(data.tgt_ids)
        trainer = Trainer(model, cfg, ids, LMDataset(data.tgt_ids[:4]), tmp_path, task=LMTask())
    else:
        trainer = Trainer(_model(family), cfg, data, Seq2SeqDataset(data.src_ids[:4], data.tgt_ids[:4]), tmp_path)
        assert trainer.task.fused_loss
    reads, marks = HostReads(), []
    real_step = trainer.train_step
    monkeypatch.setattr(trainer, "train_step", lambda batches: marks.append(reads.mark()) or real_step(batches))
    with reads.counting():
        trainer.fit()
    steps = _per_step(reads, marks)
    assert len(steps) == 5 and all(calls == [] for calls in steps), steps


# ---------------------------------------------------------------------------------------------- decoding
def _stepping(model, reads: HostReads, marks: list[int], never_eos: bool = False):
    """model with its `step` marking the reads (and, never_eos, never giving EOS: every step goes on)."""
    real = model.step

    def step(prev, state, enc, need_weights=False):
        marks.append(reads.mark())
        log_probs, state, weights = real(prev, state, enc, need_weights)
        return (log_probs.index_fill(-1, torch.tensor([EOS_ID]), float("-inf")) if never_eos else log_probs,
                state, weights)

    model.step = step
    return model


def _source(B: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    lengths = torch.randint(3, 9, (B,), generator=g)
    src = torch.randint(4, V, (B, int(lengths.max())), generator=g) * (torch.arange(int(lengths.max())) <
                                                                       lengths[:, None])
    return src, lengths


@pytest.mark.parametrize("family", ["rnn", "transformer"])
@pytest.mark.parametrize("never_eos", [True, False])
def test_greedy_search_reads_once_per_step(family, never_eos):
    reads, marks = HostReads(), []
    model = _stepping(_model(family).eval(), reads, marks, never_eos)
    src, lengths = _source()
    with reads.counting():
        greedy_search(model, src, lengths, 12)
    steps = _per_step(reads, marks)
    assert len(steps) >= (11 if never_eos else 1)
    for calls in steps:
        assert [c[:2] for c in calls] == [("tolist", "greedy_search")], calls


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_beam_search_copies_once_per_step(family):
    """No sentence ends before its limit (EOS never given): every step is one copy."""
    reads, marks = HostReads(), []
    model = _stepping(_model(family).eval(), reads, marks, never_eos=True)
    src, lengths = _source()
    with reads.counting():
        beam_search(model, src, lengths, 4, 12, n_best=2)
    steps = _per_step(reads, marks)
    assert len(steps) == 11
    for calls in steps:
        assert [c[:2] for c in calls] == [("cpu", "beam_prune")], calls


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_beam_search_copies_the_history_only_where_a_hypothesis_ends(family):
    reads, marks = HostReads(), []
    model = _stepping(_model(family).eval(), reads, marks)
    src, lengths = _source(8)
    with reads.counting():
        beam_search(model, src, lengths, 3, 15, n_best=3)
    steps = _per_step(reads, marks)
    assert steps and all(1 <= len(calls) <= 2 and {c[:2] for c in calls} == {("cpu", "beam_prune")}
                         for calls in steps), steps


def test_the_counter_sees_a_read_in_the_loop(monkeypatch):
    """The counter itself: a `.item()` added to a step (here a wrapper in this file, counted as if it were the
    package's) is seen, and so are `if tensor`, `float(tensor)` and `.tolist()`; a read of a `.cpu()` copy is not
    another read."""
    import attnlab.decode.search as search

    reads = HostReads((PACKAGE, __file__))
    real = search.mask_banned

    def mask_banned(log_probs, banned):
        log_probs[0, 0].item()
        if log_probs.isnan().any():
            pass
        float(log_probs.sum())
        copy = log_probs.cpu()
        copy.tolist()
        copy.numpy()
        return real(log_probs, banned)

    monkeypatch.setattr(search, "mask_banned", mask_banned)
    marks = []
    model = _stepping(_model("transformer").eval(), reads, marks, never_eos=True)
    src, lengths = _source()
    with reads.counting():
        greedy_search(model, src, lengths, 5)
    per_step = [Counter(c[0] for c in calls) for calls in _per_step(reads, marks)]
    assert per_step and all(c == Counter({"item": 1, "__bool__": 1, "__float__": 1, "cpu": 1, "tolist": 1})
                            for c in per_step), per_step


def test_dropout_masks_read_nothing_off_the_cpu(monkeypatch):
    """The one read the counter leaves out (CPU_ONLY_READS) is on the CPU's path only: a mask on another device
    (meta: shapes without data) is drawn with no read at all, and on the CPU the read is there and left out."""
    reads = HostReads()
    with reads.counting():
        keep_mask(torch.Size([64, 1024]), 0.1, torch.device("meta"), torch.float32)
        assert reads.calls == []
        keep_mask(torch.Size([64, 1024]), 0.1, torch.device("cpu"), torch.float32)
    assert reads.calls == []
    monkeypatch.setattr(sys.modules[__name__], "CPU_ONLY_READS", set())  # without the exception the read is seen
    with reads.counting():
        keep_mask(torch.Size([64, 1024]), 0.1, torch.device("cpu"), torch.float32)
    assert [c[:2] for c in reads.calls] == [("tolist", "random_words")]
