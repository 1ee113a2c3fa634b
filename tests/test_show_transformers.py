"""`attnlab.show` of a Hugging Face model's own `outputs.attentions` (issue 38, item 3): what bertviz's head_view
takes, shown in attnlab's explorer with every weight as the model computed it."""

import pytest
import torch

import attnlab
from attnlab.runs.views import attention_exploration

transformers = pytest.importorskip("transformers")


def tiny_bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=32, max_position_embeddings=32, attn_implementation="eager")
    return transformers.BertModel(config).eval()


def test_show_takes_a_transformers_models_attentions_as_they_are(tmp_path):
    model = tiny_bert()
    ids = torch.tensor([[2, 7, 9, 11, 4, 3]])
    with torch.no_grad():
        attentions = model(input_ids=ids, output_attentions=True).attentions  # a tuple over layers of (1, H, R, C)
    tokens = ["[CLS]", "in", "the", "begin", "##ning", "[SEP]"]
    ex = attention_exploration(attentions, tokens)
    weights = ex.maps["attention"].weights  # (L, H, R, C)
    expected = torch.stack([a[0] for a in attentions])
    assert weights.shape == expected.shape == (2, 4, 6, 6)
    torch.testing.assert_close(weights.float(), expected, rtol=0, atol=1e-6)
    assert ex.scheme == "wordpiece"
    page = attnlab.show(attentions, tokens, out=tmp_path / "bert.html")
    assert page.is_file() and "##ning" in page.read_text(encoding="utf-8")


def test_show_refuses_tokens_that_do_not_fit_the_attentions(tmp_path):
    model = tiny_bert()
    with torch.no_grad():
        attentions = model(input_ids=torch.tensor([[2, 7, 3]]), output_attentions=True).attentions
    with pytest.raises(attnlab.AttnlabError, match="3 columns"):
        attnlab.show(attentions, ["[CLS]", "x"], out=tmp_path / "bad.html")
