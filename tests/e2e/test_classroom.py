"""The explorer's classroom controls in headless Chromium (issue 39), on standalone explorer pages
(`Exploration.save_html`, opened from a file: no server, no network): the uniform weight 1/n marked on every legend
and the shared 0-1 scale by default (a near-uniform map stays pale; per-map scaling prints the map's max and the
1/n mark); a degenerate output's warning; the labels (no "layer 1, head 1" on a single map, "(empty)"
hypotheses, no word marks in the token strips, export names that record layer, head and word mode); the projector
pieces: the step player's keys, the beam tree following the step, the folding hypotheses list, the dark theme and
the model view's thumbnails with their token names.

Skipped like test_browser.py when chromium, chromedriver or selenium are missing.
"""

# ruff: noqa: F811 (the fixtures of test_browser.py are imported, then named as the tests' arguments)
import io
import re
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image, ImageStat

from test_browser import browser, downloads  # noqa: F401 (fixtures; skips without chromium)

from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from attnlab.families.explorer import TokenChoice
from attnlab.runs.views import Exploration, attention_exploration

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


# ---------------------------------------------------------------------------------------------- the dark theme
def _system(browser, scheme: str | None) -> None:
    """The system's prefers-color-scheme as Chromium emulates it (None: the machine's own)."""
    features = [] if scheme is None else [{"name": "prefers-color-scheme", "value": scheme}]
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": features})


def _rgb(browser, element, prop: str = "backgroundColor") -> tuple[int, ...]:
    value = browser.execute_script(f"return getComputedStyle(arguments[0]).{prop};", element)
    return tuple(int(float(x)) for x in re.findall(r"[\d.]+", value)[:3])


def _luma(rgb) -> float:
    return (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255


def _drawn(element) -> tuple[float, ...]:
    """The mean colour of an element as Chromium paints it (a screenshot of it)."""
    return tuple(ImageStat.Stat(Image.open(io.BytesIO(element.screenshot_as_png)).convert("RGB")).mean)


def _theme(browser) -> str:
    return browser.execute_script("return document.documentElement.dataset.theme;")


def _choose(browser, panel, choice: str) -> None:
    Select(panel.find_element(By.CSS_SELECTOR, "select.theme")).select_by_value(choice)
    _rerendered(browser, panel)


def test_dark_theme(browser, downloads, tmp_path, long_translation):
    """The theme select: auto follows the system's prefers-color-scheme (live), dark and light are remembered
    across pages (localStorage); in the dark theme the page, its text, the panels, the heatmap's labels and base,
    the model view's thumbnails, the head view and the beam tree are dark or light as they should be, a weight of
    about 0 is still drawn light (not the page's background), and an export has the dark background."""
    body = lambda: browser.find_element(By.TAG_NAME, "body")  # noqa: E731 (a new page each time)
    try:
        _system(browser, "light")
        _open(browser, near_uniform(), tmp_path)
        browser.execute_script("localStorage.clear();")
        panel = _open(browser, near_uniform(), tmp_path)
        select = lambda: Select(panel.find_element(By.CSS_SELECTOR, "select.theme"))  # noqa: E731
        assert select().first_selected_option.get_attribute("value") == "auto" and _theme(browser) == "light"
        assert _luma(_rgb(browser, body())) > 0.9 and _luma(_rgb(browser, body(), "color")) < 0.3
        _system(browser, "dark")  # auto: the page follows the system at once
        WebDriverWait(browser, 10).until(lambda d: _theme(d) == "dark")
        _rerendered(browser, panel)
        assert _luma(_rgb(browser, body())) < 0.15
        _system(browser, "light")
        WebDriverWait(browser, 10).until(lambda d: _theme(d) == "light")
        _rerendered(browser, panel)

        _choose(browser, panel, "dark")  # dark on a light system
        assert _theme(browser) == "dark"
        assert browser.execute_script("return localStorage.getItem('attnlab-theme');") == "dark"
        bg = _rgb(browser, body())
        assert _luma(bg) < 0.15 and _luma(_rgb(browser, body(), "color")) > 0.75
        assert _luma(_rgb(browser, panel, "borderTopColor")) < 0.4  # the panel's frame is no light line
        button = panel.find_element(By.CSS_SELECTOR, '.views button[data-view="model"]')
        assert _luma(_rgb(browser, button)) < 0.3 and _luma(_rgb(browser, button, "color")) > 0.75
        label = panel.find_element(By.CSS_SELECTOR, "table.heatmap th.tgt")
        assert _luma(_rgb(browser, label, "color")) > 0.75 and _luma(_rgb(browser, label)) < 0.15
        cell = panel.find_elements(By.CSS_SELECTOR, "table.heatmap td.cell")[0]
        assert float(cell.get_attribute("data-w")) < 0.1 and _luma(_drawn(cell)) > 0.6  # the 0 end is not the page
        ramp = panel.find_element(By.CSS_SELECTOR, ".legend .ramp")
        assert _luma(_drawn(ramp)) > 0.3  # a light 0 end on the legend too
        name = "attnlab-near-uniform cross-attention-attention-heatmap.svg"
        (downloads / name).unlink(missing_ok=True)
        panel.find_element(By.CSS_SELECTOR, "button.export[data-format='svg']").click()
        WebDriverWait(browser, 30).until(lambda d: (downloads / name).is_file() and (downloads / name).stat().st_size)
        svg = (downloads / name).read_text()
        fills = re.findall(r'<rect x="[^"]*" y="[^"]*" width="[^"]*" height="[^"]*" fill="(#[0-9a-f]+)"/>', svg)
        assert fills[0] == "#15171b" and "#dfe3e8" in fills[1:]  # a dark export, its cells over the light base

        _view(browser, panel, "model")
        thumb = panel.find_element(By.CSS_SELECTOR, "figure.thumb canvas")
        assert _luma(_drawn(thumb)) > 0.6  # a near-uniform map: the ramp's light 0 end, not the background
        _view(browser, panel, "head")
        token = panel.find_element(By.CSS_SELECTOR, "svg.head-view text.row-token")
        assert _luma(_rgb(browser, token, "fill")) > 0.75

        panel = _open(browser, long_translation, tmp_path)  # remembered: another page opens dark
        assert _theme(browser) == "dark" and select().first_selected_option.get_attribute("value") == "dark"
        player = _player(browser, panel)
        node = player.find_element(By.CSS_SELECTOR, "svg.beam-tree g.node.kept")
        assert _luma(_rgb(browser, node.find_element(By.TAG_NAME, "rect"), "fill")) < 0.25
        assert _luma(_rgb(browser, node.find_element(By.TAG_NAME, "text"), "fill")) > 0.75
        assert _luma(_rgb(browser, player.find_element(By.CSS_SELECTOR, "h4"), "color")) > 0.5

        _choose(browser, panel, "light")
        assert _theme(browser) == "light" and _luma(_rgb(browser, body())) > 0.9
        assert browser.execute_script("return localStorage.getItem('attnlab-theme');") == "light"
        _choose(browser, panel, "auto")
        assert browser.execute_script("return localStorage.getItem('attnlab-theme');") is None
    finally:
        browser.execute_script("localStorage.clear();")
        _system(browser, None)


# ---------------------------------------------------------------------------------------------- model view
def _thumbs(browser, panel) -> dict:
    """Every thumbnail's geometry as drawn: its box, its map's, the grid's column widths, its token names'."""
    return browser.execute_script("""
        const box = e => { const r = e.getBoundingClientRect();
                           return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
        const grid = arguments[0].querySelector('.model-grid');
        return {columns: getComputedStyle(grid).gridTemplateColumns.split(' ').map(parseFloat),
                figures: [...grid.querySelectorAll('figure.thumb')].map(f => ({
                  box: box(f), map: box(f.querySelector('canvas')),
                  rows: [...f.querySelectorAll('.thumb-rows .thumb-label')].map(s => ({
                    i: +s.dataset.i, text: s.textContent, box: box(s), wide: s.scrollWidth > s.clientWidth + 1})),
                  cols: [...f.querySelectorAll('.thumb-cols .thumb-label')].map(s => ({
                    i: +s.dataset.j, text: s.textContent, box: box(s), tall: s.scrollHeight > s.clientHeight + 1})),
                }))};""", panel)


def _check_thumbs(geo: dict, rows: list, cols: list, labelled: bool) -> None:
    width = geo["columns"][1]
    for fig in geo["figures"]:
        b, m = fig["box"], fig["map"]
        assert b["right"] - b["left"] == pytest.approx(width, abs=0.5)  # the thumbnail is its cell's width
        assert m["right"] == pytest.approx(b["right"], abs=0.5)  # its map reaches its right edge: no empty strip
        assert m["bottom"] - m["top"] == pytest.approx(m["right"] - m["left"], abs=0.5)  # square
        if not labelled:
            assert not fig["rows"] and not fig["cols"] and m["left"] == pytest.approx(b["left"], abs=0.5)
            continue
        for names, tokens, along, start in ((fig["rows"], rows, ("top", "bottom"), m["top"]),
                                            (fig["cols"], cols, ("left", "right"), m["left"])):
            shown = [n["i"] for n in names]
            assert len(shown) >= 2 and [n["text"] for n in names] == [tokens[i] for i in shown]  # whole names
            assert len({k1 - k0 for k0, k1 in zip(shown, shown[1:])}) == 1  # every k-th
            step = (m[along[1]] - m[along[0]]) / len(tokens)
            for n in names:
                nb = n["box"]
                assert (nb[along[0]] + nb[along[1]]) / 2 == pytest.approx(start + (n["i"] + 0.5) * step, abs=1)
                assert b["left"] - 0.5 <= nb["left"] and nb["right"] <= b["right"] + 0.5  # inside its thumbnail
                assert b["top"] - 0.5 <= nb["top"] and nb["bottom"] <= b["bottom"] + 0.5
                assert not n.get("wide") and not n.get("tall")  # never cut
            for a, c in zip(names, names[1:]):
                assert a["box"][along[1]] <= c["box"][along[0]] + 0.5  # never overlapping
        for n in fig["rows"]:
            assert n["box"]["right"] <= m["left"] + 0.5 and m["top"] - 0.5 <= n["box"]["top"]  # beside the map
            assert n["box"]["bottom"] <= m["bottom"] + 0.5
        for n in fig["cols"]:
            assert n["box"]["bottom"] <= m["top"] + 0.5 and m["left"] - 0.5 <= n["box"]["left"]  # above it
            assert n["box"]["right"] <= m["right"] + 0.5


def test_model_view_thumbnails_fill_their_cells_with_token_names(browser, tmp_path):
    g = torch.Generator().manual_seed(2)
    cols, rows = [f"key{j}" for j in range(30)], [f"query{i}" for i in range(12)]
    ex = attention_exploration(torch.rand(2, 4, 12, 30, generator=g).softmax(-1), cols, rows, title="thumbnails")
    panel = _open(browser, ex, tmp_path)
    _view(browser, panel, "model")
    geo = _thumbs(browser, panel)
    shown = [n["i"] for n in geo["figures"][0]["cols"]]
    assert len(geo["figures"]) == 8 and shown[1] - shown[0] > 1  # 30 names in ~200 px: thinned
    _check_thumbs(geo, rows, cols, labelled=True)
    panel.find_element(By.CSS_SELECTOR, "input.large").click()  # large text: bigger names, still apart
    _rerendered(browser, panel)
    _check_thumbs(_thumbs(browser, panel), rows, cols, labelled=True)
    panel.find_element(By.CSS_SELECTOR, "input.large").click()
    _rerendered(browser, panel)

    # sixteen heads: no room for the names, the maps still fill their cells
    ex = attention_exploration(torch.rand(1, 16, 12, 30, generator=g).softmax(-1), cols, rows, title="thumbnails")
    panel = _open(browser, ex, tmp_path)
    _view(browser, panel, "model")
    geo = _thumbs(browser, panel)
    assert len(geo["figures"]) == 16
    _check_thumbs(geo, rows, cols, labelled=False)
