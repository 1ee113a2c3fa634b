"""The files of `attnlab plot explore` look like the browser explorer: the same colours (static/app.js), the axes
named by the map (encoder self-attention: queries/keys over the source, not output/source), and a causal map's
neuron view on a query that sees its keys."""

import re
from importlib.resources import files

import matplotlib
import numpy as np
import torch

from attnlab.core.plotting import HEAD_COLORS, SIGNED_COLORS, attention_cmap, signed_cmap
from attnlab.runs.views import AttentionMap, Exploration, write_views


def test_palette_is_the_browsers():
    app = "".join(p.read_text(encoding="utf-8") for p in sorted((files("attnlab") / "static").iterdir())
                  if p.name.endswith(".js"))  # the explorer's modules (the palette is in state.js)
    listed = re.search(r"const HEAD_COLORS = \[(.*?)\];", app, re.DOTALL).group(1)
    assert tuple(re.findall(r'"(#[0-9a-f]{6})"', listed)) == HEAD_COLORS
    assert "rgba(13, 71, 161" in app and "rgba(33, 102, 172" in app and "rgba(178, 24, 43" in app
    blue = np.array(attention_cmap()(1.0)[:3]) * 255
    np.testing.assert_allclose(blue, [13, 71, 161], atol=1)
    np.testing.assert_allclose(np.array(attention_cmap()(0.0)[:3]), [1, 1, 1])
    assert matplotlib.colors.to_hex(signed_cmap()(0.0)) == SIGNED_COLORS[0]
    assert matplotlib.colors.to_hex(signed_cmap()(1.0)) == SIGNED_COLORS[2]


def _exploration() -> Exploration:
    torch.manual_seed(0)
    toks = ["a", "b", "c", "</s>"]
    w = torch.rand(1, 2, 4, 4).tril().softmax(-1)  # (L, H, R, C)
    qk = torch.randn(1, 2, 4, 8)
    maps = {"enc_self": AttentionMap("enc_self", "encoder self-attention", w, toks, toks, False, qk, qk, 0.35),
            "dec_self": AttentionMap("dec_self", "decoder masked self-attention", w, toks, toks, True, qk, qk, 0.35)}
    return Exploration("transformer", "x", maps, "char", input="a b c")


def test_axis_names_and_default_query(tmp_path):
    ex = _exploration()
    assert ex.maps["enc_self"].axis_names == ("queries (source)", "keys (source)")
    assert ex.maps["dec_self"].default_query() == 3 and ex.maps["enc_self"].default_query() == 0
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text, to read it back
        paths = write_views(ex, tmp_path, formats=("svg",))
    heatmap = (tmp_path / "enc_self_heatmap_layer1_mean.svg").read_text()
    assert "queries (source)" in heatmap and "keys (source)" in heatmap and "output" not in heatmap
    model = (tmp_path / "enc_self_model.svg").read_text()
    assert "keys (source)" in model and "output" not in model and "shared scale" in model
    assert "'a b c'" in heatmap  # titled with the input
    neuron = (tmp_path / "dec_self_neuron_layer1_head1.svg").read_text()
    assert "query 4" in neuron and ">masked<" not in neuron  # the last query: every key seen
    assert len(paths) == 8
