"""What `train.compile` hands torch.compile compiles whole: a training forward of the Transformer and of the LM, with
dropout on, padded and packed batches, the loss of the logits and the fused loss, is one graph without a break
(`torch._dynamo.explain`; it traces without running the compiler, so it is fast on a CPU). The kernels step aside
while dynamo traces (`attnlab.kernels.switch`); before, each dropout broke the graph (29 graphs for a one-layer
Transformer step)."""

import pytest
import torch

from attnlab import kernels
from attnlab.data.batching import Seq2SeqDataset, collate_packed_seq2seq, collate_seq2seq
from attnlab.families.lm import LMTask
from attnlab.nn.lm import LMModelConfig, TransformerLM
from attnlab.nn.transformer import TransformerConfig, TransformerSeq2Seq
from attnlab.training.trainer import Seq2SeqTask

pytestmark = pytest.mark.usefixtures("single_thread")

DATA = Seq2SeqDataset([[5, 6, 7], [8, 9], [5, 5, 5, 5], [7]], [[4, 5], [6, 7, 8], [9], [4, 4, 4]])
LM_EXAMPLES = [(0, [5, 6, 7]), (1, [8, 9]), (2, [5, 5, 5, 5, 6]), (3, [7])]


def _explain(loss_fn, batch):
    torch._dynamo.reset()
    return torch._dynamo.explain(loss_fn)(batch)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_a_transformer_training_forward_is_one_graph(packed, fused):
    torch.manual_seed(0)
    model = TransformerSeq2Seq(30, 30, TransformerConfig(d_model=16, h=2, d_ff=32, enc_layers=1, dec_layers=1,
                                                         dropout=0.1, norm="pre", tie_embeddings="all")).train()
    examples = [DATA[i] for i in range(4)]
    batch = collate_packed_seq2seq(examples, 8) if packed else collate_seq2seq(examples)
    task = Seq2SeqTask(fused)
    with kernels.override(True):  # the kernels on, as a training run has them
        out = _explain(lambda b: task.loss(model, b, 0.1)[0], batch)
    assert (out.graph_count, out.graph_break_count) == (1, 0), [r.reason for r in out.break_reasons]


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_an_lm_training_forward_is_one_graph(packed, fused):
    torch.manual_seed(0)
    model = TransformerLM(30, LMModelConfig(d_model=16, h=2, d_ff=32, layers=1, dropout=0.1, max_len=32)).train()
    batch = LMTask.collate_packed(LM_EXAMPLES, 12) if packed else LMTask.collate(LM_EXAMPLES)
    task = LMTask(fused)
    with kernels.override(True):
        out = _explain(lambda b: task.loss(model, b, 0.1)[0], batch)
    assert (out.graph_count, out.graph_break_count) == (1, 0), [r.reason for r in out.break_reasons]


def test_the_kernels_still_run_outside_a_compiled_region(monkeypatch):
    """Stepping aside is for tracing only: an eager training forward still draws its dropout mask with the kernel."""
    import attnlab.kernels.dropout as dropout

    calls = []
    real = dropout.keep_mask
    monkeypatch.setattr(dropout, "keep_mask", lambda *a: calls.append(a) or real(*a))
    with kernels.override(True):
        dropout.dropout(torch.ones(4, 8), 0.5)
    assert len(calls) == 1
