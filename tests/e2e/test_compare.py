"""The compare view (issue 46, item 2) in headless Chromium: `attnlab serve --pretrained` (the real command) opens on
it; one sentence goes through every shipped model, each row shows the model's translation and its attention map on
one shared 0-1 scale, the weights as the API computes them (the last layer's cross-attention, mean of heads: read
back from the page and compared with /api/translate here), the 1/n mark and the four models' BLEU-by-length chart.
At 1920x1080 in projector mode every label is at least 24 px, the cells grow to use the width, no label carries a
word-start mark, and the explorer's own projector labels (fitted heatmap, legend, step player) are >= 24 px too.
The 1920x1080 screenshot is written to runs/screenshots/compare_projector.png (looked at for docs/results.md).
"""

# ruff: noqa: F811
import json
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from test_browser import SHOTS, browser, downloads  # noqa: F401 (skips without chromium)

from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from attnlab.runs.shipped import shipped_names

SENTENCE = "In the beginning God created the heaven and the earth."
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pretrained_server(tmp_path_factory):
    if len(shipped_names()) < 2:
        pytest.skip("this attnlab has fewer than two shipped models")
    try:
        with SHOTS.serve(["--pretrained"], tmp_path_factory.mktemp("serve") / "serve.log", timeout=300) as url:
            yield url
    except RuntimeError as e:
        pytest.fail(str(e))


def api(url: str, payload: dict | None = None):
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


def open_compare(driver, url: str, query: str = "") -> list:
    driver.get(url + "/" + query)
    wait = WebDriverWait(driver, 180)
    wait.until(lambda d: d.find_element(By.ID, "compare").get_attribute("data-ready") == "1")
    wait.until(lambda d: d.find_element(By.ID, "cmp-rows").get_attribute("data-state") == "done")
    return driver.find_elements(By.CSS_SELECTOR, ".cmp-model")


def shown_maps(driver) -> dict:
    """Each row as the page drew it: model, translation, the weights of its cells, its labels and cell size."""
    return driver.execute_script("""
        return [...document.querySelectorAll('.cmp-model')].map(row => {
          const svg = row.querySelector('svg.cmp-map');
          const cells = svg ? [...svg.querySelectorAll('rect.cmp-cell')].map(c => +c.dataset.w) : null;
          return {model: row.dataset.model, state: row.dataset.state,
                  translation: row.querySelector('.cmp-translation').textContent,
                  none: !!row.querySelector('.cmp-none'), cells,
                  rows: svg ? +svg.dataset.rows : 0, cols: svg ? +svg.dataset.cols : 0, cell: svg ? +svg.dataset.cell : 0,
                  labels: svg ? [...svg.querySelectorAll('text')].map(t => t.textContent) : [],
                  width: svg ? svg.getBoundingClientRect().width : 0};
        });""")


def test_serve_pretrained_opens_on_the_compare_view_with_every_model(pretrained_server, browser):
    models = {m["name"]: m for m in api(pretrained_server + "/api/models") if m["kind"] == "translation"}
    open_compare(browser, pretrained_server)
    assert browser.execute_script("return location.hash") == "#compare"
    assert browser.find_element(By.ID, "panels").is_displayed() is False
    rows = shown_maps(browser)
    assert sorted(r["model"] for r in rows) == sorted(models)
    for r in rows:
        assert r["state"] == "done" and r["translation"].strip(), r
        ref = api(pretrained_server + "/api/translate", {"model": r["model"], "sentence": SENTENCE})
        assert r["translation"] == (ref["translation"] or "(empty)")
        if ref["attention"] is None:  # no attention: said, no map
            assert r["none"] and r["cells"] is None, r
            continue
        heads = np.array(ref["attention"][-1])  # the last layer (H, T, S)
        expected = heads.mean(0)[: r["rows"]]
        assert (r["rows"], r["cols"]) == expected.shape
        np.testing.assert_allclose(np.array(r["cells"]).reshape(expected.shape), expected, atol=6e-5)
        assert not any(len(t) > 1 and t.startswith(("_", "\u2581")) for t in r["labels"]), r["labels"]
    assert sum(not r["none"] for r in rows) >= 1
    # one legend for every map: 0 to 1, the uniform weight of this sentence's source pieces marked
    legend = browser.find_element(By.CSS_SELECTOR, ".cmp-legend")
    n = next(r["cols"] for r in rows if not r["none"])
    assert abs(float(legend.get_attribute("data-uniform")) - 1 / n) < 1e-4
    # the chart: one line per model with an evaluation, its points the evaluation's BLEU by length
    lines = browser.find_elements(By.CSS_SELECTOR, ".cmp-chart polyline.cmp-line")
    scored = [m for m in models.values() if m["bleu_by_length"]]
    assert sorted(line.get_attribute("data-model") for line in lines) == sorted(m["name"] for m in scored)


def test_projector_compare_at_1920x1080_reads_from_the_back(pretrained_server):
    driver = SHOTS.chrome(1920, 1080)
    try:
        open_compare(driver, pretrained_server, "?projector=1&theme=dark")
        sizes = driver.execute_script("""
            const px = e => parseFloat(getComputedStyle(e).fontSize);
            const all = sel => [...document.querySelectorAll(sel)];
            return {maps: all('svg.cmp-map text').map(px), chart: all('.cmp-chart-svg text').map(px),
                    chartScale: (() => { const s = document.querySelector('.cmp-chart-svg');
                                         return s ? s.getBoundingClientRect().width / s.viewBox.baseVal.width : 1; })(),
                    legend: all('.cmp-legend span').map(px), translation: all('.cmp-translation').map(px),
                    uniform: (() => { const u = document.querySelector('.cmp-uniform');
                                      const r = u.getBoundingClientRect(); return [r.width, r.height]; })(),
                    page: document.documentElement.clientWidth};""")
        assert sizes["maps"] and min(sizes["maps"]) >= 24, sizes["maps"]
        assert min(sizes["legend"]) >= 24 and min(sizes["translation"]) >= 24
        assert min(sizes["chart"]) * sizes["chartScale"] >= 24, sizes  # the chart's SVG text, as rendered
        assert sizes["uniform"][0] >= 6 and sizes["uniform"][1] >= 30  # the 1/n mark: a bar, not a hairline
        rows = [r for r in shown_maps(driver) if not r["none"]]
        for r in rows:  # cells grow: the map uses most of the page's width (a 15-piece verse no longer 650 px)
            assert r["width"] >= 0.6 * sizes["page"] or r["cell"] >= 96, (r["model"], r["width"], r["cell"])
        shots = ROOT / "runs" / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(shots / "compare_projector.png"))
    finally:
        driver.quit()


def test_explorer_projector_labels_and_step_player_read_from_the_back(pretrained_server):
    """The explorer's projector mode: the fitted heatmap's labels, the legend and the step player at >= 24 px, the
    1/n mark a bar on the ramp and a tick in the player, no word-start marks in the labels."""
    driver = SHOTS.chrome(1920, 1080)
    try:
        driver.get(pretrained_server + "/?projector=1#explorer")  # the explorer, not the compare view
        wait = WebDriverWait(driver, 120)
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
        panels = driver.find_elements(By.CSS_SELECTOR, ".panel")
        Select(panels[0].find_element(By.CSS_SELECTOR, "select.model")).select_by_value("pretrained:bahdanau")
        for p in panels[1:]:  # hidden in projector mode (one full-width panel): switched off by script
            driver.execute_script("const s = arguments[0].querySelector('select.model'); s.value = ''; "
                                  "s.dispatchEvent(new Event('change'));", p)
        driver.execute_script("document.getElementById('sentence').value = arguments[0];", SENTENCE)
        driver.find_element(By.ID, "translate").click()
        panel = panels[0]
        wait.until(lambda d: panel.get_attribute("data-state") == "done" and panel.get_attribute("data-rendered") == "1")
        got = driver.execute_script("""
            const p = arguments[0], px = e => parseFloat(getComputedStyle(e).fontSize);
            const labels = [...p.querySelectorAll('.fit-box .fit-label')].filter(e => !e.hidden);
            const u = p.querySelector('.legend .ramp .uniform');
            return {labels: labels.map(px), texts: labels.map(e => e.textContent),
                    legend: [...p.querySelectorAll('.legend span')].map(px),
                    tick: u ? getComputedStyle(u).borderLeftWidth : null};""", panel)
        assert got["labels"] and min(got["labels"]) >= 24, got["labels"]
        assert not any(len(t) > 1 and t.startswith(("_", "\u2581")) for t in got["texts"]), got["texts"]
        assert min(got["legend"]) >= 24 and float(got["tick"].rstrip("px")) >= 6, got
        panel.find_element(By.CSS_SELECTOR, '.views button[data-view="player"]').click()
        WebDriverWait(driver, 60).until(lambda d: panel.get_attribute("data-view") == "player"
                                        and panel.get_attribute("data-rendered") == "1")
        player = driver.execute_script("""
            const p = arguments[0], px = e => parseFloat(getComputedStyle(e).fontSize);
            const tree = p.querySelector('svg.beam-tree');
            return {tokens: [...p.querySelectorAll('.player .src-tok')].map(px),
                    ticks: p.querySelectorAll('.player .src-tok .u').length,
                    note: p.querySelector('.player .uniform-note').textContent,
                    tree: tree ? 11 * tree.getBoundingClientRect().width / tree.viewBox.baseVal.width : null};""",
                                       panel)
        assert min(player["tokens"]) >= 24 and player["ticks"] == len(player["tokens"]), player
        assert "1/n" in player["note"]
        assert player["tree"] is None or player["tree"] >= 24, player  # the beam tree's 11 px labels, as drawn
    finally:
        driver.quit()
