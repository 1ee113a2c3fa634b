"""The checkpoint format: weights round-trip, tied weights stored once, views of one buffer (as cuDNN's flattened
RNN weights are) saved, mismatches refused with a clear error."""

import pytest
import torch
from safetensors import safe_open
from torch import nn

from attnlab.checkpoint import load_weights, save_weights
from attnlab.errors import AttnlabError
from attnlab.transformer import TransformerConfig, TransformerSeq2Seq


class FlatViews(nn.Module):
    """Two parameters that are views of one flat buffer, like torch.nn.GRU's weights after flatten_parameters."""

    def __init__(self):
        super().__init__()
        flat = torch.randn(12)
        self.a = nn.Parameter(flat[:6].view(2, 3))
        self.b = nn.Parameter(flat[6:].view(3, 2))
        with torch.no_grad():
            self.a.set_(flat.untyped_storage(), 0, (2, 3))
            self.b.set_(flat.untyped_storage(), 6, (3, 2))


def test_views_of_one_buffer_round_trip(tmp_path):
    torch.manual_seed(0)
    m = FlatViews()
    assert m.a.untyped_storage().data_ptr() == m.b.untyped_storage().data_ptr()
    save_weights(m, tmp_path / "w.safetensors")
    m2 = FlatViews()
    load_weights(m2, tmp_path / "w.safetensors")
    assert torch.equal(m2.a, m.a) and torch.equal(m2.b, m.b)


def test_tied_weights_stored_once_and_restored(tmp_path):
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, h=2, d_ff=32, enc_layers=1, dec_layers=1, tie_embeddings="all")
    m = TransformerSeq2Seq(30, 30, cfg)
    save_weights(m, tmp_path / "w.safetensors")
    with safe_open(str(tmp_path / "w.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    assert sum(k in keys for k in ("src_embed.weight", "tgt_embed.weight", "generator.weight")) == 1
    torch.manual_seed(1)
    m2 = TransformerSeq2Seq(30, 30, cfg)
    load_weights(m2, tmp_path / "w.safetensors")
    for (k, v), (_, v2) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(v, v2), k
    assert m2.generator.weight is m2.src_embed.weight


def test_gru_weights_round_trip(tmp_path):
    torch.manual_seed(0)
    m = nn.GRU(4, 5, num_layers=2, bidirectional=True)
    save_weights(m, tmp_path / "w.safetensors")
    m2 = nn.GRU(4, 5, num_layers=2, bidirectional=True)
    load_weights(m2, tmp_path / "w.safetensors")
    x = torch.randn(3, 2, 4)
    assert torch.equal(m(x)[0], m2(x)[0])


def test_mismatch_is_a_clear_error(tmp_path):
    save_weights(nn.Linear(3, 4), tmp_path / "w.safetensors")
    with pytest.raises(AttnlabError, match="does not fit the model"):
        load_weights(nn.Linear(3, 5), tmp_path / "w.safetensors")
    with pytest.raises(AttnlabError, match="missing"):
        load_weights(nn.Sequential(nn.Linear(3, 4)), tmp_path / "w.safetensors")
    with pytest.raises(AttnlabError, match="no such checkpoint"):
        load_weights(nn.Linear(3, 4), tmp_path / "nope.safetensors")
