"""Every view of `attnlab serve` on an imported MarianMT model (issue 38), in headless Chromium: a model made here
in OPUS-MT's conventions (tests/test_huggingface.py's `opus_like_folder`: swish, separate SentencePiece models, a
shared vocab.json, final_logits_bias, pad as the decoder start; random weights), `attnlab import`ed, served by the
real command, explored from the page. Each view is checked against the Hugging Face model's own numbers for the
same input (`output_attentions`, its logits, `generate`, the input of each cross-attention's out_proj) and labelled
with its tokenizer's pieces:

- heatmap: every layer and head of the cross-, encoder and decoder self-attention, the mean of heads, the row
  highlight and the source strip's shading on hover, the source strip spelling the sentence, the per-map scale;
- rollout (Abnar & Zuidema 2020, computed here from HF's encoder attentions);
- word toggle: SentencePiece pieces merged into the sentence's words (sum over a word's keys, mean over its rows);
- model view: layers x heads thumbnails whose pixels are HF's weights; a click opens that head as a heatmap;
- head view: a line per pair and head with HF's weight as opacity, the hover's lines and bars, the head picker;
- neuron view: q x k products that sum (times 1/sqrt(Dh)) to the shown score, scores whose softmax is HF's weight;
- decoding: the tokens, the n-best list, the top-5 tooltip (HF's probabilities), the degenerate-output warning;
  beam 1: the page's translation is HF greedy `generate`'s;
- step player: each step's top 5 and attention row (HF's), the context strip (the input of HF's out_proj);
- beam tree: every candidate's log P is HF's log-probability of its prefix, the n-best scores HF's with GNMT's
  length penalty, the ended hypotheses begin with the n-best list;
- exports: PNG and SVG of each view; in the SVGs the heatmap's cells and the head view's lines are HF's weights,
  the neuron view's scores softmax to them, the model view has every thumbnail and the beam tree every node.

Skipped like test_browser.py without chromium, chromedriver or selenium; without transformers too.
"""

# ruff: noqa: F811 (the fixtures of test_browser.py are imported, then named as the tests' arguments)
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from test_browser import SHOTS, _explore, _show, _weights, browser, downloads  # noqa: F401 (fixtures)
from test_player import _click, _player, _step_state

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

transformers = pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/ (not a package): the Marian the import tests make
from conftest import one_thread  # noqa: E402
from test_huggingface import imported_opus, quiet  # noqa: E402


NAME = "marian"  # the run directory's name: the served model's
SENTENCE = "my old cat sees the green windows"  # "windows": two pieces (_window, s), one word
MAPS = {"cross": "cross_attentions", "enc_self": "encoder_attentions", "dec_self": "decoder_attentions"}
SPECIAL = {"</s>", "<s>", "<unk>", "<pad>"}


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """(the local MarianMT folder, the run directory `attnlab import` made of it)."""
    return imported_opus(tmp_path_factory.mktemp("imported"), NAME)


@pytest.fixture(scope="module")
def server(marian, tmp_path_factory):
    """`attnlab serve` (the real command) on the imported run; yields its base URL."""
    try:
        with SHOTS.serve([marian[1]], tmp_path_factory.mktemp("serve") / "serve.log") as url:
            yield url
    except RuntimeError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def hf(marian):
    """The Hugging Face model (eager attention: it returns its weights) and tokenizer of the imported folder."""
    model = transformers.MarianMTModel.from_pretrained(str(marian[0]), attn_implementation="eager").eval()
    return model, quiet(transformers.AutoTokenizer.from_pretrained, str(marian[0]))


def hf_pass(hf, pieces: list[str]) -> dict:
    """HF's teacher-forced pass over SENTENCE with the output `pieces` (the page's tokens): every attention
    (L, H, R, C) by the page's map keys, log-probabilities (T, V) and the cross-attention context before out_proj
    (L, T, D), with the source and decoder-input pieces."""
    model, tok = hf
    x = tok(SENTENCE, return_tensors="pt")
    ids = tok.convert_tokens_to_ids(pieces)
    dec_in = torch.tensor([[model.config.decoder_start_token_id] + ids[:-1]])  # (1, T)
    context = {}
    hooks = [layer.encoder_attn.out_proj.register_forward_pre_hook(
        lambda module, args, i=i: context.__setitem__(i, args[0][0]))
        for i, layer in enumerate(model.model.decoder.layers)]
    try:
        with torch.no_grad(), one_thread():
            out = model(**x, decoder_input_ids=dec_in, output_attentions=True)
    finally:
        for h in hooks:
            h.remove()
    ref = {key: torch.stack(getattr(out, name))[:, 0].double().numpy() for key, name in MAPS.items()}  # (L, H, R, C)
    ref["log_probs"] = out.logits[0].double().log_softmax(-1)  # (T, V)
    ref["context"] = torch.stack([context[i] for i in range(len(context))]).double().numpy()  # (L, T, D)
    ref["src"] = tok.convert_ids_to_tokens(x.input_ids[0].tolist())
    ref["tgt_in"] = ["<s>"] + pieces[:-1]  # the decoder's start token is attnlab's BOS, shown as <s>
    return ref


def label(piece: str) -> str:
    return piece.replace("\u2581", "_")  # the page's piece labels: the word mark as "_"


def rollout(w: np.ndarray) -> np.ndarray:
    """Abnar & Zuidema 2020, sec. 3: heads averaged, A~ = (A + I) / 2 rows renormalised, R_l = A~_l R_{l-1}."""
    out, r = [], np.eye(w.shape[-1])
    for a in w.mean(1):  # (T, T) per layer
        a = 0.5 * a + 0.5 * np.eye(len(a))
        r = (a / a.sum(-1, keepdims=True)) @ r
        out.append(r)
    return np.stack(out)


def words_of(pieces: list[str]) -> list[int]:
    """Word index of each SentencePiece piece: a piece with the word mark starts a word, a special is one."""
    groups = []
    for i, p in enumerate(pieces):
        new = i == 0 or p.startswith("\u2581") or p in SPECIAL or pieces[i - 1] in SPECIAL
        groups.append(groups[-1] + new if groups else 0)
    return groups


def merge(w: np.ndarray, rows: list[int], cols: list[int]) -> np.ndarray:
    """(R, C) -> (R', C'): a word's keys summed, its queries averaged."""
    to_c = np.zeros((len(cols), max(cols) + 1))
    to_c[np.arange(len(cols)), cols] = 1
    to_r = np.zeros((max(rows) + 1, len(rows)))
    to_r[rows, np.arange(len(rows))] = 1
    return (to_r / to_r.sum(1, keepdims=True)) @ w @ to_c


def explored(browser, server, hf):
    """The page explores SENTENCE with the run's beam; (panel, the API's exploration, HF's pass over its output)."""
    panel, api = _explore(browser, server, NAME, SENTENCE)
    assert api["family"] == "transformer" and api["beam"] == 5 and api["scheme"] == "sentencepiece"
    return panel, api, hf_pass(hf, [c["piece"] for c in api["choices"]])


def _select(browser, panel, cls: str, value: str) -> None:
    Select(panel.find_element(By.CSS_SELECTOR, f"select.{cls}")).select_by_value(value)
    WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-rendered") == "1")


def _labels(panel, cls: str) -> list[str]:
    return [th.get_attribute("textContent") for th in panel.find_elements(By.CSS_SELECTOR, f"table.heatmap th.{cls}")]


# ---------------------------------------------------------------------------------------------- heatmap
def test_heatmap_every_layer_and_head_is_hfs(server, browser, hf):
    panel, api, ref = explored(browser, server, hf)
    pieces = [c["piece"] for c in api["choices"]]
    assert [m["key"] for m in api["maps"]] == ["cross", "enc_self", "enc_self_rollout", "dec_self"]
    labels = {"cross": (pieces, ref["src"]), "enc_self": (ref["src"], ref["src"]),
              "dec_self": (ref["tgt_in"], ref["tgt_in"])}
    for key in MAPS:
        _show(browser, panel, "heatmap", key)
        rows, cols = labels[key]
        assert _labels(panel, "tgt") == [label(p) for p in rows] and _labels(panel, "src") == [label(p) for p in cols]
        L, H, R, C = ref[key].shape
        assert (L, H) == (2, 4)
        for layer in range(L):
            _select(browser, panel, "layer", str(layer))
            for head in ["mean", *map(str, range(H))]:
                _select(browser, panel, "head", head)
                want = ref[key][layer].mean(0) if head == "mean" else ref[key][layer, int(head)]
                np.testing.assert_allclose(_weights(panel, R, C), want, atol=2e-4, err_msg=f"{key} {layer} {head}")
    # the causal decoder: nothing on later tokens
    assert np.allclose(np.triu(_weights(panel, len(pieces), len(pieces)), 1), 0)


def test_heatmap_hover_strip_and_scale(server, browser, hf):
    panel, api, ref = explored(browser, server, hf)
    strip = [s.get_attribute("textContent") for s in panel.find_elements(By.CSS_SELECTOR, ".source-strip span")]
    assert "".join(strip[:-1]).strip() == SENTENCE and strip[-1] == "</s>"  # the pieces, word marks as spaces
    shown = ref["cross"][-1].mean(0)  # (T, S): the page opens on the cross-attention's last layer, mean of heads
    T, S = shown.shape
    tgt = panel.find_elements(By.CSS_SELECTOR, "table.heatmap th.tgt")
    for i in (0, T // 2, T - 1):
        ActionChains(browser).move_to_element(tgt[i]).perform()
        lit = panel.find_elements(By.CSS_SELECTOR, "table.heatmap td.cell.hl")
        assert {c.get_attribute("data-i") for c in lit} == {str(i)} and len(lit) == S
        (col,) = panel.find_elements(By.CSS_SELECTOR, "table.heatmap th.src.hl")
        assert shown[i, int(col.get_attribute("data-j"))] >= shown[i].max() - 4e-4  # the most attended source
        alphas = browser.execute_script(
            "return [...arguments[0].querySelectorAll('.source-strip span')].map(s => s.style.background);", panel)
        alphas = [float(re.fullmatch(r"rgba?\(255, 193, 7(?:, ([\d.]+))?\)", a).group(1) or 1) for a in alphas]
        # shaded by the row's weights (an alpha the browser keeps in 8 bits)
        np.testing.assert_allclose(alphas, shown[i] / shown[i].max(), atol=5e-3)
    _select(browser, panel, "scale", "map")
    top = panel.find_element(By.CSS_SELECTOR, ".view-box .legend .top").text
    assert top == f"{shown.max():.3f} (this map's max)"


def test_rollout_is_hfs_encoder_attention_rolled_out(server, browser, hf):
    panel, api, ref = explored(browser, server, hf)
    want = rollout(ref["enc_self"])  # (L, S, S)
    _show(browser, panel, "heatmap", "enc_self_rollout")
    S = want.shape[-1]
    assert _labels(panel, "src") == [label(p) for p in ref["src"]]
    for layer in range(len(want)):
        _select(browser, panel, "layer", str(layer))
        np.testing.assert_allclose(_weights(panel, S, S), want[layer], atol=2e-4)


def test_word_toggle_merges_sentencepiece_pieces_into_words(server, browser, hf):
    panel, api, ref = explored(browser, server, hf)
    assert "\u2581window" in ref["src"] and ref["src"][ref["src"].index("\u2581window") + 1] == "s"
    src_words, out_words = words_of(ref["src"]), words_of([c["piece"] for c in api["choices"]])
    for key, rows, want in (("enc_self", src_words, ref["enc_self"][-1].mean(0)),
                            ("cross", out_words, ref["cross"][-1].mean(0))):
        _show(browser, panel, "heatmap", key)
        if not panel.find_element(By.CSS_SELECTOR, "input.words").is_selected():
            panel.find_element(By.CSS_SELECTOR, "input.words").click()
            WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-rendered") == "1")
        assert _labels(panel, "src") == SENTENCE.split() + ["</s>"]  # _window + s: "windows"
        merged = merge(want, rows, src_words)
        np.testing.assert_allclose(_weights(panel, *merged.shape), merged, atol=3e-4)
        np.testing.assert_allclose(merged.sum(-1), 1.0, atol=1e-6)


# ---------------------------------------------------------------------------------------------- model, head, neuron
def test_model_view_thumbnails_are_hfs_weights(server, browser, hf):
    panel, api, ref = explored(browser, server, hf)
    ref["enc_self_rollout"] = rollout(ref["enc_self"])[:, None]
    for key in ("cross", "enc_self", "enc_self_rollout", "dec_self"):
        _show(browser, panel, "model", key)
        L, H, R, C = ref[key].shape
        thumbs = panel.find_elements(By.CSS_SELECTOR, ".model-grid figure.thumb")
        assert [(int(t.get_attribute("data-layer")), int(t.get_attribute("data-head"))) for t in thumbs] == [
            (layer, h) for layer in range(L) for h in range(H)]
        # each thumbnail's pixels, read back: the theme's 0 colour (lo) to blue (13, 71, 161) at weight 1
        pixels = browser.execute_script("""
            const lo = themeColors().lo;
            return [lo, [...arguments[0].querySelectorAll('.thumb canvas')].map(c => [c.width, c.height,
                [...c.getContext('2d').getImageData(0, 0, c.width, c.height).data]])];""", panel)
        lo = np.array([int(pixels[0][k:k + 2], 16) for k in (1, 3, 5)])
        ch = int(np.argmax(np.abs(lo - [13, 71, 161])))  # the channel with the widest range
        for (width, height, data), (layer, h) in zip(pixels[1], [(a, b) for a in range(L) for b in range(H)]):
            assert (width, height) == (C, R)  # a pixel per weight
            img = np.array(data, dtype=float).reshape(R, C, 4)[..., ch]
            shown = (lo[ch] - img) / (lo[ch] - [13, 71, 161][ch])
            np.testing.assert_allclose(shown, np.minimum(1, ref[key][layer, h]), atol=6e-3,
                                       err_msg=f"{key} {layer} {h}")
    panel.find_element(By.CSS_SELECTOR, '.thumb[data-layer="0"][data-head="2"]').click()  # dec_self layer 1 head 3
    WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-view") == "heatmap"
                                     and panel.get_attribute("data-rendered") == "1")
    T = ref["dec_self"].shape[-1]
    np.testing.assert_allclose(_weights(panel, T, T), ref["dec_self"][0, 2], atol=2e-4)


def test_head_view_lines_are_hfs_weights(server, browser, hf):
    panel, api, ref = explored(browser, server, hf)
    for key, layer in (("cross", 1), ("dec_self", 0)):
        _show(browser, panel, "head", key)
        _select(browser, panel, "layer", str(layer))
        want = ref[key][layer]  # (H, R, C)
        H, R, C = want.shape
        lines = browser.execute_script(
            "return [...arguments[0].querySelectorAll('svg.head-view line')].map("
            "l => [+l.dataset.h, +l.dataset.i, +l.dataset.j, +l.getAttribute('stroke-opacity')]);", panel)
        assert len(lines) == H * R * C  # a line per pair and head
        got = np.full((H, R, C), np.nan)
        for h, i, j, opacity in lines:
            got[int(h), int(i), int(j)] = opacity
        np.testing.assert_allclose(got, want, atol=1e-3)  # weight as opacity
        rows = panel.find_elements(By.CSS_SELECTOR, "svg.head-view text.row-token")
        queries = [c["piece"] for c in api["choices"]] if key == "cross" else ref["tgt_in"]
        assert [t.get_attribute("textContent") for t in rows] == [label(p) for p in queries]
        i = R // 2
        ActionChains(browser).move_to_element(rows[i]).perform()
        shown = [g for g in panel.find_elements(By.CSS_SELECTOR, "svg.head-view g.lines") if g.is_displayed()]
        assert [g.get_attribute("data-i") for g in shown] == [str(i)]
        bars = browser.execute_script("return [...arguments[0].querySelectorAll('svg.head-view g.bar')].map("
                                      "b => +b.dataset.w);", panel)
        np.testing.assert_allclose(bars, want[:, i].mean(0), atol=2e-4)  # the row's weights, mean of heads
    panel.find_element(By.CSS_SELECTOR, ".head-picker input[value='1']").click()  # head 2 off
    WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-rendered") == "1")
    heads = {h for h, *_ in browser.execute_script(
        "return [...arguments[0].querySelectorAll('svg.head-view line')].map(l => [+l.dataset.h]);", panel)}
    assert heads == {0, 2, 3}


def test_neuron_view_scores_are_hfs(server, browser, hf):
    panel, api, ref = explored(browser, server, hf)
    for key, layer, head in (("cross", 1, 3), ("enc_self", 0, 1), ("dec_self", 1, 2)):
        Select(panel.find_element(By.CSS_SELECTOR, "select.map")).select_by_value(key)
        Select(panel.find_element(By.CSS_SELECTOR, "select.layer")).select_by_value(str(layer))
        Select(panel.find_element(By.CSS_SELECTOR, "select.head")).select_by_value(str(head))
        _show(browser, panel, "neuron")
        want = ref[key][layer, head]  # (R, C)
        R, C = want.shape
        queries = panel.find_elements(By.CSS_SELECTOR, ".query-token")
        assert len(queries) == R
        for i in (0, R // 2, R - 1):
            ActionChains(browser).move_to_element(queries[i]).perform()
            scale, shown_i, keys = browser.execute_script(
                "const t = arguments[0].querySelector('table.neuron-table');"
                "return [+t.dataset.scale, +t.dataset.i, [...t.querySelectorAll('tr.key-row')].map(r => ["
                "[...r.querySelectorAll('.prod .v')].map(v => +v.dataset.v), r.querySelector('.score').dataset.score,"
                "r.querySelector('.weight').textContent])];", panel)
            assert shown_i == i and len(keys) == C and scale == pytest.approx(4 ** -0.5)  # d_model 16, 4 heads
            seen = [j for j, (_, score, _) in enumerate(keys) if score != ""]
            assert seen == list(range(i + 1) if key == "dec_self" else range(C))  # causal: later keys masked
            scores = np.array([float(keys[j][1]) for j in seen])
            for j in seen:
                products, score, weight = keys[j]
                assert len(products) == 4 and sum(products) * scale == pytest.approx(float(score), abs=2e-3)
                assert float(weight) == pytest.approx(want[i, j], abs=1e-3)
            soft = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
            np.testing.assert_allclose(soft, want[i, seen], atol=2e-4)  # the softmax of the scores: HF's weights


# ---------------------------------------------------------------------------------------------- decoding
def test_tokens_nbest_top5_and_warning(server, browser, hf):
    panel, api, ref = explored(browser, server, hf)
    _, tok = hf
    pieces = [c["piece"] for c in api["choices"]]
    tokens = panel.find_elements(By.CSS_SELECTOR, ".tokens .tok")
    assert [t.get_attribute("textContent") for t in tokens] == [p.replace("\u2581", " ") for p in pieces]
    assert panel.find_element(By.CLASS_NAME, "translation").get_attribute("textContent") == api["output"]
    assert api["output"] == tok.decode(tok.convert_tokens_to_ids(pieces), skip_special_tokens=True)
    nbest = [li.get_attribute("textContent") for li in panel.find_elements(By.CSS_SELECTOR, ".nbest li")]
    assert nbest == [f"{h['score']:.3f}  {h['text'] or '(empty)'}" for h in api["nbest"]] and len(nbest) == 5
    lp = ref["log_probs"].clone()
    lp[:, tok.pad_token_id] = -np.inf  # HF's pad is the decoder start (attnlab's BOS): never generated
    top = lp.topk(5)
    for t in (0, len(tokens) // 2, len(tokens) - 1):
        ActionChains(browser).move_to_element(tokens[t]).perform()
        tip = panel.find_element(By.CLASS_NAME, "tip")
        assert tip.is_displayed()
        chosen = float(lp[t, tok.convert_tokens_to_ids(pieces[t])].exp())
        head, p = tip.find_element(By.TAG_NAME, "b").text.split(": p = ")
        assert head == label(pieces[t]) and float(p) == pytest.approx(chosen, abs=6e-4)
        alts = tip.find_elements(By.TAG_NAME, "li")
        assert [a.get_attribute("textContent").split("  ")[0] for a in alts] == [
            label(p) for p in tok.convert_ids_to_tokens(top.indices[t].tolist())]
        np.testing.assert_allclose([float(a.get_attribute("data-p")) for a in alts], top.values[t].exp(), atol=6e-5)
    warning = panel.find_element(By.CSS_SELECTOR, ".warning")
    assert warning.is_displayed() == bool(api["warning"])  # random weights: an output that repeats to the limit
    if api["warning"]:
        assert api["warning"] in warning.text


def test_greedy_is_hf_generate(server, browser, hf):
    model, tok = hf
    panel, _ = _explore(browser, server, NAME, SENTENCE)
    browser.execute_script("arguments[0].value = 1;", panel.find_element(By.CSS_SELECTOR, "input.beam"))
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 60).until(lambda d: panel.get_attribute("data-state") == "done"
                                     and panel.get_attribute("data-rendered") == "1")
    tokens = [t.get_attribute("textContent") for t in panel.find_elements(By.CSS_SELECTOR, ".tokens .tok")]
    with torch.no_grad(), one_thread():  # HF's generation_config bans <pad> (attnlab's BOS); no forced EOS
        gen = model.generate(**tok(SENTENCE, return_tensors="pt"), num_beams=1, do_sample=False,
                             max_new_tokens=len(tokens), forced_eos_token_id=None)[0, 1:].tolist()
    assert tokens == [p.replace("\u2581", " ") for p in tok.convert_ids_to_tokens(gen)]
    assert panel.find_element(By.CLASS_NAME, "translation").text == tok.decode(gen, skip_special_tokens=True)
    assert len(panel.find_elements(By.CSS_SELECTOR, ".nbest li")) == 1
    player = _player(browser, panel)
    assert not player.find_elements(By.CSS_SELECTOR, "svg.beam-tree") and "greedy search" in player.text


# ---------------------------------------------------------------------------------------------- step player, beam tree
def test_step_player_steps_are_hfs(server, browser, hf):
    panel, api, ref = explored(browser, server, hf)
    _, tok = hf
    lp = ref["log_probs"].clone()
    lp[:, tok.pad_token_id] = -np.inf
    top = lp.topk(5)
    player = _player(browser, panel)
    T = len(api["choices"])
    assert int(player.get_attribute("data-steps")) == T == ref["cross"].shape[2]
    _click(player, "first")
    for t in range(T):
        state = _step_state(browser, player)
        assert state["step"] == t and state["chosen"] == api["choices"][t]["piece"]
        assert [p for p, _ in state["top"][:5]] == tok.convert_ids_to_tokens(top.indices[t].tolist())
        np.testing.assert_allclose([p for _, p in state["top"][:5]], top.values[t].exp(), atol=6e-5)
        np.testing.assert_allclose(state["w"], ref["cross"][-1, :, t].mean(0), atol=2e-4)  # last layer, mean
        np.testing.assert_allclose(state["strip"], ref["context"][-1, t], atol=1e-4)  # the input of out_proj
        if t < T - 1:
            _click(player, "forward")
    assert state["shown"] == [p.replace("\u2581", " ") for p in (c["piece"] for c in api["choices"])]
    # layer 1, head 3: that head's row and layer 1's context
    _select(browser, panel, "layer", "0")
    _select(browser, panel, "head", "2")
    player = panel.find_element(By.CSS_SELECTOR, ".player")
    _click(player, "first")
    state = _step_state(browser, player)
    np.testing.assert_allclose(state["w"], ref["cross"][0, 2, 0], atol=2e-4)
    np.testing.assert_allclose(state["strip"], ref["context"][0, 0], atol=1e-4)


def _paths(tree: list[dict]) -> list[tuple[int, int, list[str]]]:
    """(step, index, the pieces from the start) of every candidate of a beam tree (the API's record)."""
    out = []
    for s in tree:
        for j, c in enumerate(s["candidates"]):
            path, step, k = [], s["step"], j
            while True:
                cand = tree[step]["candidates"][k]
                path.append(cand["piece"])
                if step == 0:
                    break
                step -= 1
                k = next(n for n, p in enumerate(tree[step]["candidates"])
                         if p["slot"] == cand["parent"] and p["status"] == "kept")
            out.append((s["step"], j, path[::-1]))
    return out


def test_beam_tree_log_probs_are_hfs(server, browser, hf):
    model, tok = hf
    panel, api, _ = explored(browser, server, hf)
    tree = api["steps"]["tree"]
    paths = _paths(tree)
    # HF's log P of every candidate's prefix, one teacher-forced batch (right-padded; the decoder is causal)
    ids = [tok.convert_tokens_to_ids(p) for _, _, p in paths]
    x = tok([SENTENCE] * len(ids), return_tensors="pt")
    start, pad = model.config.decoder_start_token_id, model.config.pad_token_id
    L = max(map(len, ids))
    dec_in = torch.tensor([[start] + y[:-1] + [pad] * (L - len(y)) for y in ids])
    with torch.no_grad(), one_thread():
        lp = model(**x, decoder_input_ids=dec_in).logits.double().log_softmax(-1)  # (N, L, V)
    hf_logp = [float(sum(lp[n, t, y[t]] for t in range(len(y)))) for n, y in enumerate(ids)]

    player = _player(browser, panel)
    nodes = browser.execute_script(
        "return [...arguments[0].querySelectorAll('svg.beam-tree g.node')].map(g => [+g.dataset.step, +g.dataset.j, "
        "g.dataset.status, g.querySelector('title').textContent]);", player)
    assert [(s, j) for s, j, *_ in nodes] == [(s, j) for s, j, _ in paths]
    for (step, j, status, title), (_, _, pieces), want in zip(nodes, paths, hf_logp):
        shown = float(re.search(r"log P = (-?[\d.]+)", title).group(1))
        assert shown == pytest.approx(want, abs=1e-3), (step, j, pieces)
        assert title.startswith(f"step {step + 1}: {label(pieces[-1])} ({status})")
    # the n-best list: the ended hypotheses' first ones, scored as HF's log P / GNMT's lp = ((5 + |Y|) / 6)^0.6
    ended = [li.get_attribute("textContent") for li in player.find_elements(By.CSS_SELECTOR, "ol.ended li")]
    nbest = [li.get_attribute("textContent") for li in panel.find_elements(By.CSS_SELECTOR, ".nbest li")]
    assert ended[:len(nbest)] == nbest
    ends = sorted(((n, c) for n, (s, j, _) in enumerate(paths) for c in [tree[s]["candidates"][j]]
                   if c["status"] in ("finished", "unfinished")),
                  key=lambda nc: (nc[1]["status"] != "finished", -nc[1]["score"]))
    for (n, c), line in zip(ends, nbest):
        score = hf_logp[n] / ((5 + len(ids[n])) / 6) ** 0.6
        text = tok.decode([i for i in ids[n] if i != tok.eos_token_id], skip_special_tokens=True)
        shown, shown_text = line.split("  ", 1)
        assert float(shown) == pytest.approx(score, abs=1.5e-3) and shown_text == (text or "(empty)")
    best = browser.execute_script(
        "return [...arguments[0].querySelectorAll('svg.beam-tree g.node.best text')].map(t => t.textContent);", player)
    assert best == [c["label"][:6] + "\u2026" if len(c["label"]) > 7 else c["label"] for c in api["choices"]]


# ---------------------------------------------------------------------------------------------- exports
def test_exports_of_every_view(server, browser, downloads, hf):
    panel, api, ref = explored(browser, server, hf)
    L, H, T, S = ref["cross"].shape
    for view in ("heatmap", "model", "head", "neuron", "player"):
        _show(browser, panel, view, "cross")
        pattern = f"attnlab-{NAME}-cross-{view}*"
        files = {}
        for fmt in ("png", "svg"):
            for old in downloads.glob(f"{pattern}.{fmt}"):
                old.unlink()
            panel.find_element(By.CSS_SELECTOR, f"button.export[data-format='{fmt}']").click()
            name = f"{pattern}.{fmt}"
            WebDriverWait(browser, 30).until(lambda d: any(p.stat().st_size > 0 for p in downloads.glob(name)))
            (path,) = downloads.glob(name)
            files[fmt] = path.read_bytes()
        assert files["png"][:8] == b"\x89PNG\r\n\x1a\n" and len(files["png"]) > 1000, view
        svg = files["svg"].decode()
        assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>"), view
        if view == "heatmap":  # the cells (then the legend's ramp): the last layer's mean of heads, shared scale
            cells = [float(x) for x in re.findall(r'fill="rgb\(13,71,161\)" fill-opacity="([\d.]+)"', svg)]
            np.testing.assert_allclose(np.array(cells[:T * S]).reshape(T, S), ref["cross"][-1].mean(0), atol=1.5e-3)
        elif view == "model":
            assert svg.count("<image ") == L * H
        elif view == "head":
            lines = re.findall(r'<line [^>]*stroke-opacity="([\d.]+)"[^>]*data-i="(\d+)" data-j="(\d+)" data-h="(\d+)"',
                               svg)
            assert len(lines) == H * T * S
            got = np.full((H, T, S), np.nan)
            for opacity, i, j, h in lines:
                got[int(h), int(i), int(j)] = float(opacity)
            np.testing.assert_allclose(got, ref["cross"][-1], atol=1e-3)
        elif view == "neuron":  # the first query's scores (head 1 of the last layer): their softmax is HF's weights
            scores = np.array([float(x) for x in re.findall(r">(-?\d+\.\d{3})</text>", svg)])
            assert len(scores) == S
            np.testing.assert_allclose(np.exp(scores) / np.exp(scores).sum(), ref["cross"][-1, 0, 0], atol=2e-3)
        else:  # the beam tree
            assert svg.count('class="node ') == sum(len(s["candidates"]) for s in api["steps"]["tree"])
