"""attnlab summary: rows cover every parameter exactly once, with real output shapes."""

import torch

from attnlab.app.cli import main
from attnlab.nn.rnn_seq2seq import RNNModelConfig, RNNSeq2Seq
from attnlab.core.summary import format_table, layer_table


def test_rows_cover_all_parameters_with_shapes():
    model = RNNSeq2Seq(50, 60, RNNModelConfig(emb_dim=8, hidden_dim=12, attention="general"))
    src, lengths, tgt = torch.randint(4, 50, (2, 7)), torch.tensor([7, 5]), torch.randint(4, 60, (2, 6))
    rows = layer_table(model, src, lengths, tgt)
    assert sum(r.params for r in rows) == sum(p.numel() for p in model.parameters())
    shapes = {r.name: r.output_shape for r in rows}
    assert shapes["encoder.embed"] == "(2, 7, 8)"
    assert shapes["generator"] == "(2, 6, 60)"
    assert format_table(rows).splitlines()[-1] == f"Total params: {sum(p.numel() for p in model.parameters()):,}"


def test_cli_summary_of_config(capsys):
    assert main(["summary", "configs/bible-rnn-bahdanau.toml"]) == 0  # in this process: no torch import to pay
    assert "Total params: 3,892,640" in capsys.readouterr().out


def test_tied_weights_count_once():
    from attnlab.nn.transformer import TransformerConfig, TransformerSeq2Seq

    model = TransformerSeq2Seq(30, 30, TransformerConfig(d_model=8, h=2, d_ff=16, enc_layers=1, dec_layers=1,
                                                         tie_embeddings="all"))
    src, lengths, tgt = torch.randint(4, 30, (2, 5)), torch.tensor([5, 3]), torch.randint(4, 30, (2, 4))
    rows = layer_table(model, src, lengths, tgt)
    assert sum(r.params for r in rows) == sum(p.numel() for p in model.parameters())
    assert any("(tied)" in r.kind for r in rows)
