"""Projector mode, the sentence filter of pair maps and the single-head shortcut (issue 39, items 3 and 4) in
headless Chromium: a long verse's heatmap fitted to the width with every k-th token name, each whole, apart and
beside its cell, and full names on hover (`?projector=1&theme=dark`, and the button); one full-width panel on the
served page; the A->A, A->B, B->A, B->B filter showing exactly the model's own blocks (the decomposable model's
alignments from `forward_with_weights`) in the heatmap, head, model and neuron views; a double-click on a head
(its name, a thumbnail, a line) showing it alone and a second one every head again.

Most pages are standalone explorer pages (`Exploration.save_html`, opened from a file); one test serves the tiny
runs. Skipped like test_browser.py when chromium, chromedriver or selenium are missing.
"""

# ruff: noqa: F811 (the fixtures of test_browser.py are imported, then named as the tests' arguments)
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from test_browser import SHOTS, browser, downloads  # noqa: F401 (fixtures; skips without chromium)

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.actions.action_builder import ActionBuilder
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from attnlab.families.pairs import explore_pair
from attnlab.runs.views import Exploration, attention_exploration, summary

VERSE = ("And Elimelech Naomi's husband died and she was left and her two sons And they took them wives of the women "
         "of Moab the name of the one was Orpah and the name of the other Ruth and they dwelled there about ten "
         "years And Mahlon and Chilion died also both of them and the woman was left of her two sons and her "
         "husband Then she arose with her daughters in law that she might return from the country of Moab for she "
         "had heard").split()  # Ruth 1:3-6, KJV


def long_verse() -> tuple[Exploration, list[str], list[str], np.ndarray]:
    """A cross-attention of 70 target pieces over an 84-piece verse (names of 1 to 12 characters)."""
    cols = [f"\u2581{w}" for w in VERSE][:83] + ["</s>"]
    rows = [f"\u2581{w.lower()}" for w in reversed(VERSE)][:70]
    g = torch.Generator().manual_seed(3)
    w = (3 * torch.randn(len(rows), len(cols), generator=g)).softmax(-1)  # (R, C)
    ex = attention_exploration(w, cols, rows, title="cross-attention", scheme="sentencepiece")
    shown = summary(ex)["maps"][0]  # the names as the page writes them
    return ex, shown["cols"], shown["rows"], w.numpy()


def _open(browser, ex: Exploration, folder: Path, query: str = ""):
    page = ex.save_html(folder / "explorer.html")
    browser.get(page.as_uri() + query)
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    panel = browser.find_element(By.ID, "panel-0")
    _rerendered(browser, panel)
    return panel


def _rerendered(browser, panel) -> None:
    WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-rendered") == "1")


def _view(browser, panel, view: str) -> None:
    panel.find_element(By.CSS_SELECTOR, f'.views button[data-view="{view}"]').click()
    WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-view") == view)
    _rerendered(browser, panel)


def _select(browser, panel, css: str, value: str) -> None:
    Select(panel.find_element(By.CSS_SELECTOR, css)).select_by_value(value)
    _rerendered(browser, panel)


# ---------------------------------------------------------------------------------------------- projector mode
def _fitted(browser, panel) -> dict:
    """The fitted heatmap as drawn: its boxes, the cell size, every shown name's index, text and box."""
    return browser.execute_script("""
        const box = e => { const r = e.getBoundingClientRect();
                           return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
        const p = arguments[0], fit = p.querySelector('.fit-box');
        const names = sel => [...fit.querySelectorAll(sel)].filter(s => !s.hidden).map(s => ({
            i: +(s.dataset.i ?? s.dataset.j), text: s.textContent, box: box(s),
            cut: s.scrollWidth > s.clientWidth + 1 || s.scrollHeight > s.clientHeight + 1}));
        return {view: box(p.querySelector('.view-box')), fit: box(fit), cells: box(fit.querySelector('.fit-cells')),
                rowsBox: box(fit.querySelector('.fit-rows')), colsBox: box(fit.querySelector('.fit-cols')),
                scroll: [fit.scrollWidth, fit.clientWidth], cell: +fit.dataset.cell, every: +fit.dataset.every,
                rows: names('.fit-rows .fit-label:not(.tip-name)'), cols: names('.fit-cols .fit-label:not(.tip-name)')};
        """, panel)


def spoken(piece: str) -> str:
    """A piece without its word-start mark ("_" in the page's names, or U+2581), as classroom.js shows it."""
    return piece[1:] if len(piece) > 1 and piece[0] in "_\u2581" else piece


def _check_fitted(geo: dict, rows: list, cols: list) -> None:
    cells, cell = geo["cells"], geo["cell"]
    assert geo["scroll"][0] <= geo["scroll"][1] + 1  # no horizontal scrolling: the map fits the width
    assert cells["right"] <= geo["view"]["right"] + 1
    assert cells["right"] - cells["left"] == pytest.approx(len(cols) * cell, abs=1)  # square cells, C of them
    assert cells["bottom"] - cells["top"] == pytest.approx(len(rows) * cell, abs=1)
    assert cells["right"] - cells["left"] >= 0.9 * (geo["view"]["right"] - geo["rowsBox"]["right"])  # fills it
    for names, tokens, along, start, across in ((geo["rows"], rows, ("top", "bottom"), cells["top"], "rowsBox"),
                                                (geo["cols"], cols, ("left", "right"), cells["left"], "colsBox")):
        shown = [n["i"] for n in names]
        # whole names, as a reader writes them: the word-start mark dropped on the projector (issue 46)
        assert len(shown) >= 5 and [n["text"] for n in names] == [spoken(tokens[i]) for i in shown]
        assert {k1 - k0 for k0, k1 in zip(shown, shown[1:])} == {geo["every"]}  # every k-th
        assert shown[-1] + geo["every"] >= len(tokens) - 1 and shown[0] <= 1  # from one end to the other
        for n in names:
            b = n["box"]
            assert not n["cut"]
            assert (b[along[0]] + b[along[1]]) / 2 == pytest.approx(start + (n["i"] + 0.5) * cell, abs=1)  # its cell
            assert start - 0.5 <= b[along[0]] and b[along[1]] <= start + len(tokens) * cell + 0.5  # beside the map
            box = geo[across]
            assert box["left"] - 0.5 <= b["left"] and b["right"] <= box["right"] + 0.5  # inside its strip
            assert box["top"] - 0.5 <= b["top"] and b["bottom"] <= box["bottom"] + 0.5
            assert geo["fit"]["left"] - 0.5 <= b["left"]  # not under the box's edge
        for a, c in zip(names, names[1:]):
            assert a["box"][along[1]] <= c["box"][along[0]] + 0.5  # never overlapping


def _hover(browser, cells, i: int, j: int, cell: float) -> None:
    """The pointer over cell (i, j) of a fitted heatmap, the box scrolled to show it (window coordinates)."""
    x, y = browser.execute_script("""
        const [cells, i, j, cell] = arguments, box = cells.closest('.fit-box');
        box.scrollIntoView({block: 'start'});
        box.scrollTop = Math.max(0, (i - 5) * cell);
        const r = cells.getBoundingClientRect();
        return [Math.round(r.left + (j + 0.5) * cell), Math.round(r.top + (i + 0.5) * cell)];""", cells, i, j, cell)
    actions = ActionBuilder(browser)
    actions.pointer_action.move_to_location(x, y)
    actions.perform()


def test_projector_fits_a_long_verse_with_thinned_whole_names(browser, tmp_path):
    ex, cols, rows, w = long_verse()
    panel = _open(browser, ex, tmp_path, "?projector=1&theme=dark")
    assert browser.execute_script("return document.body.classList.contains('projector') && "
                                  "document.documentElement.dataset.theme;") == "dark"  # both, from the URL
    assert panel.find_element(By.CSS_SELECTOR, "button.projector").get_attribute("aria-pressed") == "true"
    bg = browser.execute_script("return getComputedStyle(document.body).backgroundColor;")
    assert sum(int(x) for x in re.findall(r"\d+", bg)[:3]) < 3 * 60  # the dark theme's page
    geo = _fitted(browser, panel)
    assert geo["every"] > 1  # 84 names in ~1,300 px: thinned
    _check_fitted(geo, rows, cols)

    # hover a cell whose row and column names are thinned out: both whole at their places, and the weight
    i, j = next(i for i in range(30, 70) if i not in {n["i"] for n in geo["rows"]}), \
        next(j for j in range(40, 84) if j not in {n["i"] for n in geo["cols"]})
    _hover(browser, panel.find_element(By.CSS_SELECTOR, ".fit-cells"), i, j, geo["cell"])
    readout = panel.find_element(By.CSS_SELECTOR, ".fit-readout").text
    assert readout.startswith(f"{spoken(rows[i])} \u2192 {spoken(cols[j])}: {w[i, j]:.3f} (row {i + 1} of 70, "
                              f"column {j + 1} of 84")
    tips = {t.get_attribute("class").split()[1]: t for t in panel.find_elements(By.CSS_SELECTOR, ".tip-name")}
    assert tips["row-name"].text == spoken(rows[i]) and tips["col-name"].text == spoken(cols[j])
    assert tips["row-name"].get_attribute("data-i") == str(i) and tips["col-name"].get_attribute("data-j") == str(j)

    panel.find_element(By.CSS_SELECTOR, "input.large").click()  # large text: bigger names, still whole and apart
    _rerendered(browser, panel)
    big = _fitted(browser, panel)
    assert big["every"] >= geo["every"]
    _check_fitted(big, rows, cols)
    panel.find_element(By.CSS_SELECTOR, "input.large").click()
    _rerendered(browser, panel)

    panel.find_element(By.CSS_SELECTOR, "button.projector").click()  # off: the usual heatmap, which scrolls
    _rerendered(browser, panel)
    assert not panel.find_elements(By.CSS_SELECTOR, ".fit-box") and panel.find_elements(By.CSS_SELECTOR, ".hm-cells")
    assert browser.execute_script("return document.body.classList.contains('projector');") is False
    assert panel.find_element(By.CSS_SELECTOR, "button.projector").get_attribute("aria-pressed") == "false"
    panel.find_element(By.CSS_SELECTOR, "button.projector").click()
    _rerendered(browser, panel)
    _check_fitted(_fitted(browser, panel), rows, cols)


@pytest.fixture(scope="module")
def server(tiny_runs, tmp_path_factory):
    with SHOTS.serve([tiny_runs["rnn"], tiny_runs["transformer"]], tmp_path_factory.mktemp("serve") / "serve.log") as url:
        yield url


def test_projector_one_full_width_panel_on_the_served_page(server, browser):
    browser.get(server + "/?projector=1")
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    panels = [browser.find_element(By.ID, f"panel-{k}") for k in (0, 1)]
    browser.execute_script("document.getElementById('sentence').value = arguments[0];", "my old cat sees the door")
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 60).until(lambda d: all(p.get_attribute("data-state") == "done" for p in panels))
    _rerendered(browser, panels[0])
    width = lambda e: browser.execute_script("return arguments[0].getBoundingClientRect().width;", e)  # noqa: E731
    whole = width(browser.find_element(By.ID, "panels"))
    assert not panels[1].is_displayed() and width(panels[0]) == pytest.approx(whole, abs=2)  # one, full width
    assert panels[0].find_elements(By.CSS_SELECTOR, ".fit-box")  # the RNN's alignment fitted
    panels[0].find_element(By.CSS_SELECTOR, "button.projector").click()  # off: both models side by side
    _rerendered(browser, panels[0])
    assert panels[1].is_displayed() and width(panels[0]) < 0.6 * whole
    assert "projector" not in browser.current_url
    assert not panels[0].find_elements(By.CSS_SELECTOR, ".fit-box")
    panels[1].find_element(By.CSS_SELECTOR, "button.projector").click()  # any panel's button: the page's mode
    _rerendered(browser, panels[0])
    assert not panels[1].is_displayed() and browser.current_url.endswith("?projector=1")
    assert panels[0].find_element(By.CSS_SELECTOR, "button.projector").get_attribute("aria-pressed") == "true"


# ---------------------------------------------------------------------------------------------- sentence filter
A, B = "jesus wept", "jesus cried out"


@pytest.fixture(scope="module")
def decomposable():
    """A tiny random decomposable model (intra-sentence attention on) explored on one pair, and its own soft
    alignments (`forward_with_weights`): the reference for each block."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from test_explore import tiny_decomposable_run  # the explorer tests' tiny model (tests/ is not a package)

    run = tiny_decomposable_run()
    tok, model = run.tokenizers, run.model
    ex = Exploration.of(explore_pair(run, A, B))
    a, b = torch.tensor([tok.src.encode(A)]), torch.tensor([tok.src.encode(B)])
    with torch.no_grad():
        _, w = model.forward_with_weights(a, a > 0, b, b > 0)
    blocks = {"ab": w.a_to_b[0].numpy(), "ba": w.b_to_a[0].numpy(), "aa": w.intra_a[0].numpy(),
              "bb": w.intra_b[0].numpy()}
    return ex, blocks, list(A), list(B)


def _table(browser, panel) -> tuple[list, list, np.ndarray]:
    rows, cols, cells = browser.execute_script("""
        const p = arguments[0];
        return [[...p.querySelectorAll('table.heatmap th.tgt')].map(t => t.textContent),
                [...p.querySelectorAll('table.heatmap th.src')].map(t => t.textContent),
                [...p.querySelectorAll('table.heatmap td.cell')].map(c => [+c.dataset.i, +c.dataset.j, +c.dataset.w])];
        """, panel)
    w = np.full((len(rows), len(cols)), np.nan)
    for i, j, x in cells:
        w[int(i), int(j)] = x
    return rows, cols, w


def test_sentence_filter_shows_each_block(browser, tmp_path, decomposable):
    ex, blocks, a, b = decomposable
    panel = _open(browser, ex, tmp_path)
    pair_box = panel.find_element(By.CSS_SELECTOR, ".pair-box")
    assert not pair_box.is_displayed()  # a_to_b: one sentence's rows, nothing to filter
    _select(browser, panel, "select.map", "pair")
    assert pair_box.is_displayed()
    side = {"a": [c.replace(" ", "\u2423") for c in a], "b": [c.replace(" ", "\u2423") for c in b]}
    rows, cols, w = _table(browser, panel)
    assert rows == cols == side["a"] + side["b"] and not np.isnan(w).any()  # all: both sentences
    for key, want in blocks.items():
        _select(browser, panel, "select.pair", key)
        rows, cols, w = _table(browser, panel)
        assert rows == side[key[0]] and cols == side[key[1]], key
        np.testing.assert_allclose(w, want, atol=1e-4)  # the model's own block
        assert f"n = {len(side[key[1]])} " in panel.find_element(By.CSS_SELECTOR, ".legend").text  # 1/n of its keys
        strip = [s.text for s in panel.find_elements(By.CSS_SELECTOR, ".source-strip span")]
        assert len(strip) == len(side[key[1]])

    _select(browser, panel, "select.pair", "ab")
    panel.find_element(By.CSS_SELECTOR, "input.words").click()  # words: a's words attending to b's
    _rerendered(browser, panel)
    rows, cols, w = _table(browser, panel)
    assert rows == ["jesus", "\u2423", "wept"] and cols == ["jesus", "\u2423", "cried", "\u2423", "out"]
    assert np.allclose(w.sum(1), 1, atol=1e-3)  # a row of a's softmax over b, merged into words
    panel.find_element(By.CSS_SELECTOR, "input.words").click()
    _rerendered(browser, panel)

    _view(browser, panel, "head")  # the head view: a line per pair of the block
    lines = browser.execute_script("return [...arguments[0].querySelectorAll('svg.head-view line')].map("
                                   "x => [+x.dataset.i, +x.dataset.j, +x.getAttribute('stroke-opacity')]);", panel)
    assert len(lines) == len(a) * len(b)
    for i, j, opacity in lines:  # each line's opacity is its weight in the block
        assert opacity == pytest.approx(blocks["ab"][int(i), int(j)], abs=2e-3)
    assert [t.text for t in panel.find_elements(By.CSS_SELECTOR, "svg.head-view text.row-token")] == side["a"]
    _view(browser, panel, "model")  # the model view: the block's pixels
    assert browser.execute_script("const c = arguments[0].querySelector('.thumb canvas'); return [c.width, c.height];",
                                  panel) == [len(b), len(a)]
    _select(browser, panel, "select.pair", "all")
    assert browser.execute_script("const c = arguments[0].querySelector('.thumb canvas'); return [c.width, c.height];",
                                  panel) == [len(a) + len(b)] * 2


# ---------------------------------------------------------------------------------------------- single head
@pytest.fixture(scope="module")
def heads():
    """Two layers of four heads over a pair of 5 + 6 tokens (split at b's first), with queries and keys."""
    g = torch.Generator().manual_seed(4)
    toks = ["[CLS]", "jesus", "wept", ".", "[SEP]", "and", "jesus", "cried", "out", ".", "[SEP]"]
    q, k = torch.randn(2, 4, 11, 8, generator=g), torch.randn(2, 4, 11, 8, generator=g)
    w = (q @ k.transpose(-1, -2) / 8 ** 0.5).softmax(-1)  # (L, H, T, T)
    ex = attention_exploration(w, toks, title="encoder self-attention of the pair", scheme="wordpiece")
    m = ex.maps["attention"]
    m.q, m.k, m.scale, m.split = q, k, 8 ** -0.5, 5
    return ex, toks


def _shown_heads(browser, panel) -> list:
    return [int(b.get_attribute("value")) for b in panel.find_elements(By.CSS_SELECTOR, ".head-picker input")
            if b.is_selected()]


def test_double_click_shows_one_head_and_again_every_head(browser, tmp_path, heads):
    ex, toks = heads
    panel = _open(browser, ex, tmp_path)
    _view(browser, panel, "head")
    twice = lambda e: ActionChains(browser).double_click(e).perform()  # noqa: E731
    line_heads = lambda: set(browser.execute_script(  # noqa: E731
        "return [...arguments[0].querySelectorAll('svg.head-view line')].map(x => +x.dataset.h);", panel))
    twice(panel.find_element(By.CSS_SELECTOR, '.head-picker label[data-head="2"]'))
    _rerendered(browser, panel)
    assert _shown_heads(browser, panel) == [2] and line_heads() == {2}
    twice(panel.find_element(By.CSS_SELECTOR, '.head-picker label[data-head="2"]'))
    _rerendered(browser, panel)
    assert _shown_heads(browser, panel) == [0, 1, 2, 3] and line_heads() == {0, 1, 2, 3}
    # a line (the heads' lines of one pair lie on each other: the last head's is on top)
    twice(panel.find_element(By.CSS_SELECTOR, 'svg.head-view line[data-h="3"][data-i="3"][data-j="3"]'))
    _rerendered(browser, panel)
    assert _shown_heads(browser, panel) == [3] and line_heads() == {3}

    _view(browser, panel, "model")  # the model view shows the head picked, and a double-click on it restores all
    thumbs = lambda: [tuple(t) for t in browser.execute_script(  # noqa: E731
        "return [...arguments[0].querySelectorAll('figure.thumb')].map(f => [+f.dataset.layer, +f.dataset.head]);",
        panel)]
    assert thumbs() == [(0, 3), (1, 3)]
    twice(panel.find_element(By.CSS_SELECTOR, 'figure.thumb[data-layer="1"][data-head="3"]'))
    _rerendered(browser, panel)
    assert thumbs() == [(la, h) for la in (0, 1) for h in range(4)]
    twice(panel.find_element(By.CSS_SELECTOR, 'figure.thumb[data-layer="0"][data-head="1"]'))
    _rerendered(browser, panel)
    time.sleep(0.6)  # past the delay of a single click's opening
    assert thumbs() == [(0, 1), (1, 1)] and panel.get_attribute("data-view") == "model"  # no heatmap opened
    side = browser.execute_script("return arguments[0].querySelector('.thumb canvas').getBoundingClientRect().width;",
                                  panel)
    assert side > 200  # one column: the thumbnails fill the width
    twice(panel.find_element(By.CSS_SELECTOR, '.model-grid .head-name[data-head="1"]'))  # the head's name
    _rerendered(browser, panel)
    assert len(thumbs()) == 8
    panel.find_element(By.CSS_SELECTOR, 'figure.thumb[data-layer="1"][data-head="2"]').click()  # one click: opens it
    WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-view") == "heatmap")
    _rerendered(browser, panel)
    assert Select(panel.find_element(By.CSS_SELECTOR, "select.head")).first_selected_option.get_attribute(
        "value") == "2"

    # the neuron view of one block: a's queries, b's keys
    _select(browser, panel, "select.pair", "ab")
    _view(browser, panel, "neuron")
    assert [t.text for t in panel.find_elements(By.CSS_SELECTOR, ".query-token")] == toks[:5]
    keys = panel.find_elements(By.CSS_SELECTOR, "table.neuron-table tr.key-row th")
    assert [t.text for t in keys] == toks[5:]
