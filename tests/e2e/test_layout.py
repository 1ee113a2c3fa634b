"""The explorer's layout, head view and legends in headless Chromium (issue 22, items 1-3), on the tiny runs with
a 60-word sentence (their decode.max_src_tokens raised to 400 in copies of the runs): no horizontal page overflow
at 390x844 in any view; labels that stay beside their cells while the heatmap scrolls (table and canvas maps);
the head view's hover on both sides; a legend on every heatmap and model view and the per-map/shared scale; the
neuron view's default query on decoder self-attention; no console error (the favicon); titled exports; and
scripts/explorer_screenshots.py writing its PNG files.

Skipped like test_browser.py when chromium, chromedriver or selenium are missing.
"""

import json
import random
import shutil

import numpy as np
import pytest

from test_browser import SHOTS as shots  # skips this module too without chromium, chromedriver or selenium
from test_browser import EXPORT_NAMES, _api

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

VOCAB = ["the", "house", "is", "big", "small", "red", "a", "cat", "sees", "and", "old", "my", "door", "green",
         "window", "opens"]  # the synthetic corpus's source words (conftest.WORDS)
LONG = " ".join(random.Random(7).choice(VOCAB) for _ in range(60))  # about 300 characters: 300 tokens
MEDIUM = " ".join(random.Random(8).choice(VOCAB) for _ in range(11))  # a table heatmap that still scrolls


@pytest.fixture(scope="module")
def long_runs(tiny_runs, tmp_path_factory):
    """Copies of the tiny runs that accept 400 source tokens (a character model of a 60-word sentence)."""
    root = tmp_path_factory.mktemp("long_runs")
    runs = {}
    for name, run in tiny_runs.items():
        runs[name] = shutil.copytree(run, root / name)
        cfg = json.loads((runs[name] / "config.json").read_text())
        cfg["decode"]["max_src_tokens"] = 400
        (runs[name] / "config.json").write_text(json.dumps(cfg))
    return runs


@pytest.fixture(scope="module")
def server(long_runs, tmp_path_factory):
    with shots.serve([long_runs["rnn"], long_runs["transformer"]],
                     tmp_path_factory.mktemp("serve") / "serve.log") as url:
        yield url


@pytest.fixture(scope="module")
def downloads(tmp_path_factory):
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def phone(downloads):
    driver = shots.chrome(390, 844, downloads)
    driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    yield driver
    driver.quit()


def _overflow(driver) -> tuple[int, int]:
    return tuple(driver.execute_script("return [document.scrollingElement.scrollWidth, innerWidth];"))


def _severe(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_no_horizontal_overflow_on_a_phone_in_any_view(server, phone):
    assert _overflow(phone)[1] == 390
    panels = shots.explore(phone, server, ["rnn", "transformer"], LONG)
    assert not _severe(phone)  # no console error: the favicon is the page's own (a data URI), no 404
    for panel in panels:
        maps = [o.get_attribute("value") for o in Select(panel.find_element(By.CSS_SELECTOR, "select.map")).options]
        for key in maps:
            for view in ("heatmap", "model", "head", "neuron"):
                assert shots.show(phone, panel, view, key)
                width, inner = _overflow(phone)
                assert width <= inner, (key, view, width)
    phone.find_element(By.CSS_SELECTOR, "#panel-1 input.large").click()  # large text: still no overflow
    for view in ("heatmap", "head", "neuron"):
        assert shots.show(phone, panels[1], view, "enc_self")
        assert "large" in phone.find_element(By.TAG_NAME, "body").get_attribute("class")
        width, inner = _overflow(phone)
        assert width <= inner, ("large", view, width)
    assert not _severe(phone)


def _rects(driver, script: str, *args):
    return driver.execute_script(script, *args)


@pytest.mark.parametrize("sentence", [MEDIUM, LONG], ids=["table", "canvas"])
def test_sticky_labels_stay_beside_their_cells(server, phone, sentence):
    (panel,) = shots.explore(phone, server, ["transformer"], sentence)
    assert shots.show(phone, panel, "heatmap", "enc_self")
    box = panel.find_element(By.CSS_SELECTOR, ".heatmap-box")
    table = sentence == MEDIUM
    assert ("canvas-box" in box.get_attribute("class")) != table
    sizes = phone.execute_script("const b = arguments[0]; return [b.scrollWidth, b.clientWidth, b.scrollHeight, "
                                 "b.clientHeight];", box)
    assert sizes[0] > sizes[1] and sizes[2] > sizes[3]  # the grid scrolls inside its box, both ways
    phone.execute_script("arguments[0].scrollLeft = 150; arguments[0].scrollTop = 120;", box)
    i, j = 12, 14  # a row and a column in view after the scroll
    if table:
        got = _rects(phone, """
            const [box, i, j] = arguments, r = e => e.getBoundingClientRect();
            const row = box.querySelector(`th.tgt[data-i="${i}"]`), col = box.querySelector(`th.src[data-j="${j}"]`);
            const cell = box.querySelector(`td.cell[data-i="${i}"][data-j="${j}"]`);
            return {box: [r(box).left, r(box).top], row: [r(row).left, r(row).top, r(row).height],
                    col: [r(col).left, r(col).top, r(col).width], cell: [r(cell).left, r(cell).top, r(cell).width,
                    r(cell).height]};""", box, i, j)
        cell_left, cell_top, cell_w, cell_h = got["cell"]
    else:
        got = _rects(phone, """
            const [box, i, j] = arguments, r = e => e.getBoundingClientRect();
            const row = box.querySelector(`.row-label[data-i="${i}"]`);
            const col = box.querySelector(`.col-label[data-j="${j}"]`);
            const canvas = box.querySelector("canvas.heatmap-canvas"), R = +box.dataset.rows, C = +box.dataset.cols;
            const cw = r(canvas).width / C, ch = r(canvas).height / R;
            return {box: [r(box).left, r(box).top], row: [r(row).left, r(row).top, r(row).height],
                    col: [r(col).left, r(col).top, r(col).width],
                    cell: [r(canvas).left + j * cw, r(canvas).top + i * ch, cw, ch]};""", box, i, j)
        cell_left, cell_top, cell_w, cell_h = got["cell"]
    assert got["row"][0] == pytest.approx(got["box"][0], abs=1.5)  # the row label stuck to the box's left
    assert got["col"][1] == pytest.approx(got["box"][1], abs=1.5)  # the column label stuck to its top
    assert got["row"][1] + got["row"][2] / 2 == pytest.approx(cell_top + cell_h / 2, abs=2)  # beside its row
    assert got["col"][0] + got["col"][2] / 2 == pytest.approx(cell_left + cell_w / 2, abs=2)  # above its column
    assert cell_left > got["row"][0] + got["row"][2] * 0 and cell_top > got["col"][1]  # the cells scrolled under


def _visible_lines(driver, panel) -> list:
    return driver.execute_script(
        "return [...arguments[0].querySelectorAll('svg.head-view line')].filter(l => getComputedStyle(l).display "
        "!== 'none' && getComputedStyle(l.parentNode).display !== 'none').map(l => [+l.dataset.i, +l.dataset.j]);",
        panel)


def _bars(driver, panel) -> dict:
    return dict(driver.execute_script("return [...arguments[0].querySelectorAll('svg.head-view g.bar')].map("
                                      "b => [+b.dataset.k, +b.dataset.w]);", panel))


def test_head_view_hover_and_tap_on_both_sides(server, phone):
    (panel,) = shots.explore(phone, server, ["transformer"], MEDIUM)
    api = _api(server + "/api/explore", {"model": "transformer", "sentence": MEDIUM, "beam": 2})
    assert shots.show(phone, panel, "head", "cross")
    cross = api["maps"][0]
    R, C = len(cross["rows"]), len(cross["cols"])
    want = np.array(_api(f"{server}/api/explore/{api['id']}/weights?map=cross&layer={cross['layers'] - 1}")
                    ["weights"]).mean(0)  # (R, C): the bars show the mean of the heads shown (all)
    names = [t.text for t in panel.find_elements(By.CSS_SELECTOR, "svg.head-view text.side-name")]
    assert names == ["target", "source"]  # labelled sides
    assert not panel.find_element(By.CSS_SELECTOR, "select.head").is_displayed()  # no "mean of 2" in this view
    note = panel.find_element(By.CSS_SELECTOR, ".head-note").text
    assert "heads 1, 2 of 2: a line from each query on the left (rows: target)" in note  # rows are queries
    rows = panel.find_elements(By.CSS_SELECTOR, "text.row-token")
    cols = panel.find_elements(By.CSS_SELECTOR, "text.col-token")
    i, j = R // 2, C // 3
    ActionChains(phone).move_to_element(rows[i]).perform()  # a row token: its lines, bars beside the columns
    lines = _visible_lines(phone, panel)
    assert lines and {a for a, _ in lines} == {i} and len(lines) == C * 2
    bars = _bars(phone, panel)
    assert sorted(bars) == list(range(C)) and all(abs(bars[k] - want[i, k]) < 2e-3 for k in bars)
    ActionChains(phone).move_to_element(cols[j]).perform()  # a column token: lines into it, bars beside the rows
    lines = _visible_lines(phone, panel)
    assert lines and {b for _, b in lines} == {j} and len(lines) == R * 2
    assert "hl" in cols[j].get_attribute("class")
    bars = _bars(phone, panel)
    assert sorted(bars) == list(range(R)) and all(abs(bars[k] - want[k, j]) < 2e-3 for k in bars)
    cols[j].click()  # a tap pins the focus: it stays when the pointer leaves
    ActionChains(phone).move_to_element(panel.find_element(By.CSS_SELECTOR, ".translation")).perform()
    assert {b for _, b in _visible_lines(phone, panel)} == {j}
    cols[j].click()  # tapping it again frees it: every line again
    ActionChains(phone).move_to_element(panel.find_element(By.CSS_SELECTOR, ".translation")).perform()
    assert len(_visible_lines(phone, panel)) == R * C * 2


def test_legend_on_every_heatmap_and_model_view_and_the_scale(server, phone):
    panels = shots.explore(phone, server, ["rnn", "transformer"], MEDIUM)
    for panel in panels:
        assert panel.find_element(By.CSS_SELECTOR, ".prob-legend").is_displayed()  # the probability shading
        maps = [o.get_attribute("value") for o in Select(panel.find_element(By.CSS_SELECTOR, "select.map")).options]
        for key in maps:
            for view in ("heatmap", "model"):
                assert shots.show(phone, panel, view, key)
                legend = panel.find_element(By.CSS_SELECTOR, ".view-box .legend")
                assert legend.is_displayed() and legend.find_element(By.CLASS_NAME, "ramp").is_displayed()
    panel = panels[1]
    assert shots.show(phone, panel, "heatmap", "cross")
    alpha = lambda: phone.execute_script(  # noqa: E731 (read twice)
        "return [...arguments[0].querySelectorAll('td.cell')].map(c => [+c.dataset.w, "
        "+(getComputedStyle(c).backgroundColor.split(',')[3] || '1').replace(')', '')]);", panel)
    assert panel.find_element(By.CSS_SELECTOR, ".legend").get_attribute("data-scale") == "shared"  # the default
    shared = np.array(alpha())
    np.testing.assert_allclose(shared[:, 1], shared[:, 0], atol=1.5 / 255)  # shared: colour = weight (8-bit alpha)
    Select(panel.find_element(By.CSS_SELECTOR, "select.scale")).select_by_value("map")
    WebDriverWait(phone, 30).until(lambda d: panel.get_attribute("data-rendered") == "1"
                                   and panel.find_element(By.CSS_SELECTOR, ".legend").get_attribute("data-scale")
                                   == "map")
    per_map = np.array(alpha())
    assert per_map[:, 1].max() == pytest.approx(1.0, abs=1e-3)  # per map: its largest weight is darkest


def test_neuron_view_defaults(server, phone):
    panels = shots.explore(phone, server, ["rnn", "transformer"], MEDIUM)
    assert shots.show(phone, panels[1], "neuron", "dec_self")
    table = panels[1].find_element(By.CSS_SELECTOR, "table.neuron-table")
    T = len(panels[1].find_elements(By.CSS_SELECTOR, ".query-token"))
    assert int(table.get_attribute("data-i")) == T - 1  # causal: the last query, which sees every key
    scores = [s.get_attribute("data-score") for s in table.find_elements(By.CSS_SELECTOR, "td.score")]
    assert len(scores) == T and all(s != "" for s in scores)  # nothing masked
    keys = table.find_element(By.CSS_SELECTOR, "tr.key-row")  # score and weight beside the key, before k
    assert [td.get_attribute("class") for td in keys.find_elements(By.TAG_NAME, "td")][:2] == ["score", "weight"]
    assert shots.show(phone, panels[0], "neuron", "align")  # the RNN: no map to advise that it does not have
    note = panels[0].find_element(By.CSS_SELECTOR, ".neuron-none").text
    assert "No map of this input has them" in note and "encoder" not in note


@pytest.mark.parametrize("view", ["heatmap", "model", "head", "neuron"])
def test_exports_are_titled(server, phone, downloads, view):
    (panel,) = shots.explore(phone, server, ["transformer"], MEDIUM)
    assert shots.show(phone, panel, view, "enc_self")
    name = downloads / f"attnlab-transformer-enc_self-{EXPORT_NAMES[view]}.svg"
    name.unlink(missing_ok=True)
    panel.find_element(By.CSS_SELECTOR, "button.export[data-format='svg']").click()
    WebDriverWait(phone, 30).until(lambda d: name.is_file() and name.stat().st_size > 0)
    svg = name.read_text()
    head = svg[:svg.index("<style>")]
    assert "transformer: encoder self-attention" in head and MEDIUM in head
    assert {"heatmap": "layer 1, mean of heads", "model": "every layer and head", "head": "layer 1, heads 1, 2",
            "neuron": "layer 1, head 1, query 1"}[view] in head


def test_screenshot_script(server, tmp_path):
    paths = shots.screenshots(server, ["rnn", "transformer"], LONG, tmp_path, sizes=((700, 500), (390, 844)))
    assert [p.name for p in paths] == [f"{v}_{s}.png" for s in ("700x500", "390x844") for v in shots.VIEWS]
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and 1000 < len(data) < shots.MAX_BYTES
