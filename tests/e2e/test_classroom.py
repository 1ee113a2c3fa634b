"""The explorer's classroom controls in headless Chromium (issue 39), on standalone explorer pages
(`Exploration.save_html`, opened from a file: no server, no network): the uniform weight 1/n marked on every legend
and the shared 0-1 scale by default (a near-uniform map stays pale; per-map scaling prints the map's max and the
1/n mark); a degenerate output's warning; the labels (no "layer 1, head 1" on a single map, "(empty)"
hypotheses, no word marks in the token strips, export names that record layer, head and word mode).

Skipped like test_browser.py when chromium, chromedriver or selenium are missing.
"""

# ruff: noqa: F811 (the fixtures of test_browser.py are imported, then named as the tests' arguments)
import sys
from pathlib import Path

import pytest
import torch

from test_browser import browser, downloads  # noqa: F401 (fixtures; skips without chromium)

from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from attnlab.app.views import Exploration, attention_exploration
from attnlab.families.explorer import TokenChoice

N = 20  # keys of the near-uniform map


def near_uniform() -> Exploration:
    """One 6 x N map whose rows are within 0.01 of 1/N, and a degenerate output: "," to the length limit."""
    g = torch.Generator().manual_seed(0)
    w = 1 / N + 0.01 * (torch.rand(6, N, generator=g) - 0.5)
    w = w / w.sum(-1, keepdim=True)  # (R, C)
    src = [f"\u2581w{j}" for j in range(N - 1)] + ["</s>"]
    ex = attention_exploration(w, src, [","] * 6, title="near-uniform cross-attention", scheme="sentencepiece")
    ex.output = ",,,,,,"
    ex.choices = [TokenChoice(",", 0.9, [(",", 0.9), ("\u2581the", 0.05)]) for _ in range(6)]
    ex.nbest = [("", -1.5), (",,,,,,", -2.0)]
    return ex


def _open(browser, ex: Exploration, tmp_path: Path):
    page = ex.save_html(tmp_path / "explorer.html")
    browser.get(page.as_uri())
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    panel = browser.find_element(By.ID, "panel-0")
    WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-rendered") == "1")
    return panel


def _rerendered(browser, panel) -> None:
    WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-rendered") == "1")


def _alphas(browser, panel) -> list:
    return browser.execute_script(
        "return [...arguments[0].querySelectorAll('td.cell')].map(c => [+c.dataset.w, "
        "+(getComputedStyle(c).backgroundColor.split(',')[3] || '1').replace(')', '')]);", panel)


def _mark(browser, panel) -> float:
    """Where the legend's 1/n mark sits on its ramp, 0 (left end) to 1 (right end), as drawn."""
    return browser.execute_script(
        "const r = arguments[0].querySelector('.legend .ramp'), m = r.querySelector('.uniform');"
        "const a = r.getBoundingClientRect(), b = m.getBoundingClientRect();"
        "return (b.left + b.width / 2 - a.left) / a.width;", panel)


def test_uniform_mark_and_shared_scale_by_default(browser, tmp_path):
    panel = _open(browser, near_uniform(), tmp_path)
    assert Select(panel.find_element(By.CSS_SELECTOR, "select.scale")).first_selected_option.get_attribute(
        "value") == "shared"
    legend = panel.find_element(By.CSS_SELECTOR, ".view-box .legend")
    assert legend.get_attribute("data-scale") == "shared"
    assert legend.find_element(By.CSS_SELECTOR, ".ramp .uniform").is_displayed()
    assert _mark(browser, panel) == pytest.approx(1 / N, abs=0.03)  # 1/n on a 0-1 ramp
    assert f"1/n = {1 / N:.3f}" in legend.text and f"n = {N}" in legend.text
    alphas = _alphas(browser, panel)
    assert len(alphas) == 6 * N and max(a for _, a in alphas) < 0.1  # a near-uniform map stays pale

    Select(panel.find_element(By.CSS_SELECTOR, "select.scale")).select_by_value("map")
    WebDriverWait(browser, 30).until(lambda d: panel.find_element(By.CSS_SELECTOR, ".view-box .legend")
                                     .get_attribute("data-scale") == "map")
    _rerendered(browser, panel)
    legend = panel.find_element(By.CSS_SELECTOR, ".view-box .legend")
    top = max(w for w, _ in _alphas(browser, panel))
    assert f"{top:.3f} (this map's max)" in legend.text and f"1/n = {1 / N:.3f}" in legend.text
    assert _mark(browser, panel) == pytest.approx((1 / N) / top, abs=0.03)  # 1/n where the map's max is 1
    # the model view's legend too
    panel.find_element(By.CSS_SELECTOR, '.views button[data-view="model"]').click()
    WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-view") == "model")
    _rerendered(browser, panel)
    assert f"1/n = {1 / N:.3f}" in panel.find_element(By.CSS_SELECTOR, ".view-box .legend").text


def test_degenerate_output_warned_and_empty_hypothesis_named(browser, tmp_path):
    panel = _open(browser, near_uniform(), tmp_path)
    warning = panel.find_element(By.CSS_SELECTOR, ".warning")
    assert warning.is_displayed() and "repeats ','" in warning.text and "length limit" in warning.text
    nbest = [li.get_attribute("textContent") for li in panel.find_elements(By.CSS_SELECTOR, ".nbest li")]
    assert nbest == ["-1.500  (empty)", "-2.000  ,,,,,,"]

    ex = near_uniform()
    ex.choices, ex.output = [TokenChoice("the", 0.9, [("the", 0.9)])], "the"
    panel = _open(browser, ex, tmp_path)
    assert not panel.find_element(By.CSS_SELECTOR, ".warning").is_displayed()


def _export_svg(browser, panel, downloads, pattern: str) -> tuple[str, str]:
    for old in downloads.glob(pattern):
        old.unlink()
    panel.find_element(By.CSS_SELECTOR, "button.export[data-format='svg']").click()
    WebDriverWait(browser, 30).until(lambda d: any(p.stat().st_size > 0 for p in downloads.glob(pattern)))
    (path,) = downloads.glob(pattern)
    svg = path.read_text()
    return path.name, svg[:svg.index("<style>")]


def _view(browser, panel, view: str) -> None:
    panel.find_element(By.CSS_SELECTOR, f'.views button[data-view="{view}"]').click()
    WebDriverWait(browser, 30).until(lambda d: panel.get_attribute("data-view") == view)
    _rerendered(browser, panel)


def test_labels_of_single_maps_rollouts_and_strips(browser, downloads, tmp_path):
    """An RNN-like map (one layer, one head) exports with neither named; a rollout (two layers, one head) names
    its layer, not a head; file names record layer, head and word mode; the head view's help says rows are the
    queries; the token strips show no sentencepiece mark."""
    panel = _open(browser, near_uniform(), tmp_path)
    name, head = _export_svg(browser, panel, downloads, "attnlab-near-uniform*-heatmap*.svg")
    assert name == "attnlab-near-uniform cross-attention-attention-heatmap.svg", name
    assert "layer" not in head and "head 1" not in head
    panel.find_element(By.CSS_SELECTOR, "input.words").click()
    _rerendered(browser, panel)
    assert _export_svg(browser, panel, downloads, "attnlab-near-uniform*-heatmap*.svg")[0].endswith(
        "-heatmap-words.svg")
    strips = browser.execute_script(
        "return [...arguments[0].querySelectorAll('.source-strip span, .tokens .tok')].map(s => s.textContent);", panel)
    assert strips and not any("\u2581" in s or "_" in s for s in strips)
    panel.find_element(By.CSS_SELECTOR, "input.words").click()
    _rerendered(browser, panel)
    strip = [s.text for s in panel.find_elements(By.CSS_SELECTOR, ".source-strip span")]
    assert strip[:2] == [" w0", " w1"] and not any("\u2581" in s or "_" in s for s in strip)  # pieces, marks as spaces

    _view(browser, panel, "head")
    note = panel.find_element(By.CSS_SELECTOR, ".head-note").text
    assert "each queries" not in note and "query on the left" in note and "head 1" not in note

    g = torch.Generator().manual_seed(1)
    roll = attention_exploration(torch.rand(2, 1, 4, 4, generator=g).softmax(-1), ["a", "b", "c", "</s>"],
                                 title="rollout of the encoder self-attention")
    panel = _open(browser, roll, tmp_path)
    name, head = _export_svg(browser, panel, downloads, "attnlab-rollout*-heatmap*.svg")
    assert name.endswith("-attention-heatmap-layer2.svg") and "layer 2" in head and "head" not in head
    _view(browser, panel, "head")
    name, head = _export_svg(browser, panel, downloads, "attnlab-rollout*-head*.svg")
    assert name.endswith("-head-layer2.svg") and "layer 2" in head and "head 1" not in head


# ---------------------------------------------------------------------------------------------- the step player
LONG = "in the beginning god created the heaven and the earth and the earth was without form and void"


@pytest.fixture(scope="module")
def long_translation():
    """An untrained tiny Transformer's beam search over a 95-character verse: it runs to its length limit, a beam
    tree far wider than its box, and more than ten ended hypotheses."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from test_explore import tiny_translator  # the tests' tiny model (tests/ is not a package)

    from attnlab.families.translation import explore_translation

    translator = tiny_translator("pre")
    translator.decode.max_len_ratio = 1.0
    return Exploration.of(explore_translation(translator, LONG, beam=4))


def _player(browser, panel):
    _view(browser, panel, "player")
    return panel.find_element(By.CSS_SELECTOR, ".player")


def _key(browser, key: str) -> None:
    browser.find_element(By.TAG_NAME, "body").send_keys(key)


def test_player_keys(browser, tmp_path, long_translation):
    from selenium.webdriver.common.keys import Keys

    panel = _open(browser, long_translation, tmp_path)
    player = _player(browser, panel)
    T = int(player.get_attribute("data-steps"))
    step = lambda: int(player.get_attribute("data-step"))  # noqa: E731
    assert step() == 0 and T > 5
    _key(browser, Keys.ARROW_RIGHT)
    _key(browser, Keys.ARROW_RIGHT)
    assert step() == 2
    _key(browser, Keys.ARROW_LEFT)
    assert step() == 1
    _key(browser, Keys.END)
    assert step() == T - 1
    _key(browser, Keys.HOME)
    assert step() == 0
    Select(player.find_element(By.CSS_SELECTOR, "select.speed")).select_by_visible_text("slow")
    _key(browser, Keys.SPACE)
    assert player.get_attribute("data-playing") == "1"
    _key(browser, Keys.SPACE)
    assert player.get_attribute("data-playing") == "0"
    assert browser.execute_script("return scrollY;") == 0  # space and End did not scroll the page


def test_beam_tree_follows_the_step_and_the_list_folds(browser, tmp_path, long_translation):
    panel = _open(browser, long_translation, tmp_path)
    player = _player(browser, panel)
    box = player.find_element(By.CSS_SELECTOR, ".tree-box")
    scroll = lambda: browser.execute_script(  # noqa: E731
        "const b = arguments[0]; return [b.scrollLeft, b.clientWidth, b.scrollWidth];", box)
    left, width, total = scroll()
    assert left == 0 and total > 1.5 * width  # a tree wider than its box
    player.find_element(By.CSS_SELECTOR, 'button[data-action="last"]').click()
    T = int(player.get_attribute("data-steps"))
    left, width, _ = scroll()
    column = 44 + (T - 1) * 70  # beamTreeSVG's x of the step's column
    assert left <= column and column + 66 <= left + width, (left, width, column)  # the last step's column in view
    player.find_element(By.CSS_SELECTOR, 'button[data-action="first"]').click()
    assert scroll()[0] == 0

    fold = player.find_element(By.CSS_SELECTOR, "details.ended-box")
    items = player.find_elements(By.CSS_SELECTOR, "ol.ended li")
    assert len(items) > 10 and fold.get_attribute("open") is None and not items[0].is_displayed()  # folded
    fold.find_element(By.TAG_NAME, "summary").click()
    assert items[0].is_displayed()
    fold.find_element(By.TAG_NAME, "summary").click()
    assert not items[0].is_displayed()
