"""The attention explorer in a real headless Chromium (Debian's `chromium` + `chromium-driver`, driven by
Selenium): `attnlab serve` on three tiny runs (RNN, Transformer, language model), type a sentence, explore, and
check each view against the API: the heatmap has one cell per row x column token with the API's weights and
hovering a token highlights its row and most-attended column; the model view has layers x heads thumbnails and a
click opens one; the head view has one line per token pair and head and hovering a token keeps its lines; the
neuron view's products q x k sum (times the scale) to the displayed pre-softmax score; the word toggle merges
pieces; rollout; the n-best list and the top-5 tooltip; PNG and SVG export download non-empty files.

Skipped (with the reason) only when chromium, chromedriver or selenium are missing: `make e2e` installs them
(scripts/system-deps.sh e2e needs root; otherwise it prints the apt-get command).
"""

import importlib.util
import json
import os
import shutil
import urllib.request
from pathlib import Path

import numpy as np
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401
except ImportError:
    selenium = None
if not (CHROMIUM and CHROMEDRIVER and selenium):
    pytest.skip(f"needs chromium ({CHROMIUM or 'missing'}), chromedriver ({CHROMEDRIVER or 'missing'}) and selenium "
                f"({'ok' if selenium else 'missing'}): run `make e2e` as root, or `sudo apt-get install chromium "
                "chromium-driver` and `pip install -e .[e2e]`", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

SENTENCE = "my old cat sees the green door"
_spec = importlib.util.spec_from_file_location("explorer_screenshots", Path(__file__).resolve().parents[2] / "scripts" /
                                               "explorer_screenshots.py")
SHOTS = importlib.util.module_from_spec(_spec)  # serve, chrome, explore: shared with test_layout.py
_spec.loader.exec_module(SHOTS)


def _api(url: str, payload: dict | None = None):
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def server(tiny_runs, tiny_lm_run, tmp_path_factory):
    """`attnlab serve` (the real command) on a free loopback port (scripts/explorer_screenshots.serve: --port 0,
    the port the server logs); yields its base URL."""
    try:
        with SHOTS.serve([tiny_runs["rnn"], tiny_runs["transformer"], tiny_lm_run],
                         tmp_path_factory.mktemp("serve") / "serve.log") as url:
            yield url
    except RuntimeError as e:  # it did not start: its log
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def downloads(tmp_path_factory):
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(downloads):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to run its sandbox as root
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    yield driver
    driver.quit()


def _heatmap(panel):
    src = panel.find_elements(By.CSS_SELECTOR, "table.heatmap th.src")
    tgt = panel.find_elements(By.CSS_SELECTOR, "table.heatmap th.tgt")
    cells = panel.find_elements(By.CSS_SELECTOR, "table.heatmap td.cell")
    return src, tgt, cells


def _weights(panel, rows: int, cols: int) -> np.ndarray:
    """The weights the page shows, read back from its cells (one JS call, not one per cell)."""
    flat = panel.parent.execute_script(
        "return [...arguments[0].querySelectorAll('table.heatmap td.cell')].map("
        "c => [Number(c.dataset.i), Number(c.dataset.j), Number(c.dataset.w)]);", panel)
    w = np.full((rows, cols), np.nan)
    for i, j, x in flat:
        w[int(i), int(j)] = x
    return w


def test_translate_and_hover(server, browser, tmp_path):
    browser.get(server + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    panels = [browser.find_element(By.ID, f"panel-{k}") for k in (0, 1)]
    assert [Select(p.find_element(By.CSS_SELECTOR, "select.model")).first_selected_option.get_attribute("value")
            for p in panels] == ["rnn", "transformer"]  # two models side by side
    box = browser.find_element(By.ID, "sentence")
    box.clear()
    box.send_keys(SENTENCE)
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: all(p.get_attribute("data-state") in ("done", "error") for p in panels))
    browser.save_screenshot(str(tmp_path / "explorer.png"))
    for panel, name in zip(panels, ("rnn", "transformer")):
        assert panel.get_attribute("data-state") == "done", panel.find_element(By.CLASS_NAME, "status").text
        beam = int(panel.find_element(By.CSS_SELECTOR, "input.beam").get_attribute("value"))
        api = _api(server + "/api/translate", {"model": name, "sentence": SENTENCE, "beam": beam})
        assert panel.find_element(By.CLASS_NAME, "translation").get_attribute("textContent") == api["translation"]
        S, T = len(api["src_tokens"]), len(api["tgt_tokens"])
        src, tgt, cells = _heatmap(panel)
        assert (len(src), len(tgt), len(cells)) == (S, T, S * T)  # one cell per source x output token
        att = np.array(api["attention"])[-1]  # (H, T, S) of the last layer, the page's default
        shown = att[0] if att.shape[0] == 1 else att.mean(0)  # RNN: its one map; Transformer: mean of heads
        # the page shows the explorer's weights (a teacher-forced pass for the Transformer): the search's to
        # float rounding, each rounded to 4 decimals, the mean of heads rounded again
        np.testing.assert_allclose(_weights(panel, T, S), shown, atol=2e-4)

        for i in (0, T // 2, T - 1):  # hover an output token: its row and its most-attended source light up
            ActionChains(browser).move_to_element(tgt[i]).perform()
            lit = panel.find_elements(By.CSS_SELECTOR, "table.heatmap td.cell.hl")
            assert len(lit) == S and {c.get_attribute("data-i") for c in lit} == {str(i)}
            assert "hl" in tgt[i].get_attribute("class").split()
            lit_src = panel.find_elements(By.CSS_SELECTOR, "table.heatmap th.src.hl")
            assert len(lit_src) == 1
            j = int(lit_src[0].get_attribute("data-j"))
            # the page picks the largest of its own weights, each within 2e-4 of `shown` (above): a near tie can
            # make it another column whose weight here is up to 2 x 2e-4 below the row's largest
            assert shown[i, j] >= shown[i].max() - 4e-4, (i, j, shown[i])
            column = panel.find_elements(By.CSS_SELECTOR, "table.heatmap td.cell.hl-col")
            assert len(column) == T and {c.get_attribute("data-j") for c in column} == {str(j)}

    # the Transformer's layer/head selector: layer 1, head 2 shows exactly that map
    panel = panels[1]
    Select(panel.find_element(By.CSS_SELECTOR, "select.layer")).select_by_visible_text("1")
    Select(panel.find_element(By.CSS_SELECTOR, "select.head")).select_by_visible_text("2")
    api = _api(server + "/api/translate", {"model": "transformer", "sentence": SENTENCE,
                                           "beam": int(panel.find_element(By.CSS_SELECTOR, "input.beam")
                                                       .get_attribute("value"))})
    T, S = len(api["tgt_tokens"]), len(api["src_tokens"])
    WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-rendered") == "1")
    np.testing.assert_allclose(_weights(panel, T, S), np.array(api["attention"])[0, 1], atol=2e-4)
    assert len(_heatmap(panel)[2]) == S * T


def test_error_shown(server, browser):
    """A too-long sentence: the page shows the server's one-line error, no heatmap."""
    browser.get(server + "/")
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    browser.execute_script("document.getElementById('sentence').value = arguments[0];", "a" * 1001)
    browser.find_element(By.ID, "translate").click()
    panel = browser.find_element(By.ID, "panel-0")
    WebDriverWait(browser, 60).until(lambda d: panel.get_attribute("data-state") in ("done", "error"))
    assert panel.get_attribute("data-state") == "error"
    assert "the limit is 1,000" in panel.find_element(By.CLASS_NAME, "status").text
    assert not _heatmap(panel)[2]


# ---------------------------------------------------------------------------------------------- the views
def _explore(browser, server, model: str, sentence: str = SENTENCE):
    """Loads the page, explores `sentence` with `model` in panel 0 (panel 1 off); returns (panel, the API's
    exploration of the same input)."""
    browser.get(server + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    panel = browser.find_element(By.ID, "panel-0")
    Select(panel.find_element(By.CSS_SELECTOR, "select.model")).select_by_value(model)
    Select(browser.find_element(By.CSS_SELECTOR, "#panel-1 select.model")).select_by_value("")
    browser.execute_script("document.getElementById('sentence').value = arguments[0];", sentence)
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda d: panel.get_attribute("data-state") in ("done", "error"))
    assert panel.get_attribute("data-state") == "done", panel.find_element(By.CLASS_NAME, "status").text
    beam = panel.find_element(By.CSS_SELECTOR, "input.beam").get_attribute("value")
    api = _api(server + "/api/explore", {"model": model, "sentence": sentence, "beam": int(beam) if beam else None,
                                         "max_new": 40})
    return panel, api


def _show(browser, panel, view: str, map_key: str | None = None) -> None:
    if map_key is not None:
        Select(panel.find_element(By.CSS_SELECTOR, "select.map")).select_by_value(map_key)
    panel.find_element(By.CSS_SELECTOR, f'.views button[data-view="{view}"]').click()
    WebDriverWait(browser, 60).until(lambda d: panel.get_attribute("data-view") == view
                                     and panel.get_attribute("data-rendered") == "1")


def _layer(server, api, key: str, layer: int, words: bool = False) -> np.ndarray:
    w = _api(f"{server}/api/explore/{api['id']}/weights?map={key}&layer={layer}&words={str(words).lower()}")
    return np.array(w["weights"])


def test_model_view_grid_and_click(server, browser):
    panel, api = _explore(browser, server, "transformer")
    maps = {m["key"]: m for m in api["maps"]}
    for key in ("cross", "enc_self", "dec_self"):
        _show(browser, panel, "model", key)
        thumbs = panel.find_elements(By.CSS_SELECTOR, ".model-grid figure.thumb")
        assert len(thumbs) == maps[key]["layers"] * maps[key]["heads"]  # layers x heads thumbnails
        sizes = browser.execute_script("return [...arguments[0].querySelectorAll('.thumb canvas')].map("
                                       "c => [c.width, c.height]);", panel)
        assert sizes == [[len(maps[key]["cols"]), len(maps[key]["rows"])]] * len(thumbs)  # a pixel per weight
    thumb = panel.find_element(By.CSS_SELECTOR, '.thumb[data-layer="1"][data-head="0"]')
    thumb.click()  # opens dec_self layer 2, head 1 as a heatmap
    WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-view") == "heatmap"
                                     and panel.get_attribute("data-rendered") == "1")
    T = len(maps["dec_self"]["rows"])
    want = _layer(server, api, "dec_self", 1)[0]
    np.testing.assert_allclose(_weights(panel, T, T), want, atol=1e-4)
    assert np.allclose(np.triu(want, 1), 0)  # masked self-attention: no weight on later tokens


def test_head_view_lines_and_hover(server, browser):
    panel, api = _explore(browser, server, "transformer")
    _show(browser, panel, "head", "cross")
    cross = api["maps"][0]
    R, C, H = len(cross["rows"]), len(cross["cols"]), cross["heads"]
    assert len(panel.find_elements(By.CSS_SELECTOR, "svg.head-view text.row-token")) == R
    assert len(panel.find_elements(By.CSS_SELECTOR, "svg.head-view text.col-token")) == C
    lines = browser.execute_script("return [...arguments[0].querySelectorAll('svg.head-view line')].map("
                                   "l => [+l.dataset.h, +l.dataset.i, +l.dataset.j, +l.getAttribute('stroke-opacity')]"
                                   ");", panel)
    assert len(lines) == R * C * H  # one line per token pair and head
    want = _layer(server, api, "cross", cross["layers"] - 1)
    for h, i, j, opacity in lines:
        assert abs(opacity - want[h, i, j]) < 1e-3  # weight as opacity
    i = R // 2
    ActionChains(browser).move_to_element(panel.find_elements(By.CSS_SELECTOR, "text.row-token")[i]).perform()
    shown = [g for g in panel.find_elements(By.CSS_SELECTOR, "svg.head-view g.lines") if g.is_displayed()]
    assert [g.get_attribute("data-i") for g in shown] == [str(i)]
    assert len(shown[0].find_elements(By.TAG_NAME, "line")) == C * H
    assert "hl" in panel.find_elements(By.CSS_SELECTOR, "text.row-token")[i].get_attribute("class")
    panel.find_element(By.CSS_SELECTOR, ".head-picker input[value='1']").click()  # one head off
    WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-rendered") == "1")
    assert len(panel.find_elements(By.CSS_SELECTOR, "svg.head-view line")) == R * C * (H - 1)


def test_neuron_view_products_sum_to_the_score(server, browser):
    panel, api = _explore(browser, server, "transformer")
    Select(panel.find_element(By.CSS_SELECTOR, "select.map")).select_by_value("dec_self")
    Select(panel.find_element(By.CSS_SELECTOR, "select.head")).select_by_value("1")
    _show(browser, panel, "neuron")
    queries = panel.find_elements(By.CSS_SELECTOR, ".query-token")
    T = len(api["maps"][3]["rows"])
    assert len(queries) == T
    for i in (0, T // 2, T - 1):
        ActionChains(browser).move_to_element(queries[i]).perform()
        rows = browser.execute_script(
            "const t = arguments[0].querySelector('table.neuron-table');"
            "return [+t.dataset.scale, +t.dataset.i, [...t.querySelectorAll('tr.key-row')].map(r => ["
            "[...r.querySelectorAll('.prod .v')].map(v => +v.dataset.v), r.querySelector('.score').dataset.score])];",
            panel)
        scale, shown_i, keys = rows
        assert shown_i == i and len(keys) == T and scale == pytest.approx(1 / np.sqrt(16))
        for j, (products, score) in enumerate(keys):
            if j > i:
                assert score == ""  # a later token: masked, no score
            else:
                assert len(products) == 16 and sum(products) * scale == pytest.approx(float(score), abs=2e-3)
    n = _api(f"{server}/api/explore/{api['id']}/neuron?map=dec_self&layer=1&head=1")
    w = np.array(n["weights"][T - 1])
    s = np.array(n["scores"][T - 1], dtype=float)
    np.testing.assert_allclose(np.exp(s - s.max()) / np.exp(s - s.max()).sum(), w, atol=2e-3)  # softmax of scores


def test_word_toggle_merges_pieces_and_rollout(server, browser):
    panel, api = _explore(browser, server, "transformer")
    _show(browser, panel, "heatmap", "enc_self")
    S = len(api["maps"][1]["cols"])
    assert len(_heatmap(panel)[0]) == S == len(SENTENCE) + 1  # characters + </s>
    panel.find_element(By.CSS_SELECTOR, "input.words").click()
    WebDriverWait(browser, 30).until(lambda d: len(_heatmap(panel)[0]) < S)
    words = [th.get_attribute("textContent") for th in _heatmap(panel)[0]]
    assert words == ["my", "\u2423", "old", "\u2423", "cat", "\u2423", "sees", "\u2423", "the", "\u2423", "green",
                     "\u2423", "door", "</s>"]
    W = len(words)
    merged = _layer(server, api, "enc_self", 0, words=True).mean(0)
    np.testing.assert_allclose(_weights(panel, W, W), merged, atol=2e-4)
    np.testing.assert_allclose(merged.sum(-1), 1.0, atol=2e-3)  # each word's row is still a distribution
    panel.find_element(By.CSS_SELECTOR, "input.words").click()
    _show(browser, panel, "heatmap", "enc_self_rollout")
    assert len(_heatmap(panel)[2]) == S * S
    np.testing.assert_allclose(_weights(panel, S, S), _layer(server, api, "enc_self_rollout", 0)[0], atol=1e-4)


def test_nbest_and_top5_on_hover(server, browser):
    panel, api = _explore(browser, server, "transformer")
    nbest = panel.find_elements(By.CSS_SELECTOR, ".nbest li")
    assert [li.get_attribute("textContent") for li in nbest] == [f"{h['score']:.3f}  {h['text']}" for h in api["nbest"]]
    assert len(nbest) == 2  # the tiny run's beam
    tokens = panel.find_elements(By.CSS_SELECTOR, ".tokens .tok")
    assert [t.get_attribute("textContent") for t in tokens] == [c["label"] for c in api["choices"]]
    for t in (0, len(tokens) - 1):
        ActionChains(browser).move_to_element(tokens[t]).perform()
        tip = panel.find_element(By.CLASS_NAME, "tip")
        assert tip.is_displayed()
        alts = tip.find_elements(By.TAG_NAME, "li")
        assert len(alts) == 5
        assert [float(a.get_attribute("data-p")) for a in alts] == [a["prob"] for a in api["choices"][t]["top"]]
        assert f"p = {api['choices'][t]['prob']:.3f}" in tip.text


def test_language_model_causal_self_attention(server, browser):
    panel, api = _explore(browser, server, "lm", "the cat")
    assert api["kind"] == "generation" and panel.find_element(By.CSS_SELECTOR, "input.max-new").is_displayed()
    T = len(api["maps"][0]["rows"])
    assert len(_heatmap(panel)[2]) == T * T and T > len("the cat") + 1
    shown = _weights(panel, T, T)
    assert np.allclose(np.triu(shown, 1), 0)  # causal
    np.testing.assert_allclose(shown, _layer(server, api, "lm_self", 1).mean(0), atol=2e-4)


EXPORT_NAMES = {"heatmap": "heatmap-layer1-mean", "model": "model", "head": "head-layer1-heads1-2",
                "neuron": "neuron-layer1-head1"}  # the tiny Transformer's one encoder layer, every head shown


@pytest.mark.parametrize("view", ["heatmap", "model", "head", "neuron"])
def test_export_png_and_svg(server, browser, downloads, view):
    panel, api = _explore(browser, server, "transformer")
    _show(browser, panel, view, "enc_self")
    for fmt in ("png", "svg"):
        name = downloads / f"attnlab-transformer-enc_self-{EXPORT_NAMES[view]}.{fmt}"  # layer, head in the name
        name.unlink(missing_ok=True)
        panel.find_element(By.CSS_SELECTOR, f"button.export[data-format='{fmt}']").click()
        WebDriverWait(browser, 30).until(lambda d: name.is_file() and name.stat().st_size > 0)
        data = name.read_bytes()
        if fmt == "png":
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
        else:
            assert data.startswith(b"<svg") and data.rstrip().endswith(b"</svg>") and len(data) > 500
