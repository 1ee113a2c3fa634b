"""Screenshots of the explorer as a class sees it on a projector (issue 39): the dark projector theme
(`?projector=1&theme=dark`) at 1400x1000 and at 1920x1080, of three things:

- a Transformer run's cross-attention (the last layer, mean of heads) on a verse: the map a near-uniform,
  untrained or undertrained model draws, fitted to the width with its shared 0-1 scale and the 1/n mark;
- an RNN or Transformer translation run's step player at step 26 (one-based) of a long verse, the beam tree
  scrolled to that step's column;
- a sentence-pair run's "pair" map with the sentence filter on A->B, as a fitted heatmap and as the head view of
  one head (the single-head shortcut: every head's faint lines together are hard to read on a projector), the
  head whose A->B block is the least uniform (its mean row maximum, printed).

    .venv/bin/python scripts/classroom_screenshots.py RUN_DIR [RUN_DIR ...] [--out runs/screenshots]

Each run's family (the server's /api/models) says which of the three it gives: a Transformer the first (and the
second, unless an RNN with attention is given), an RNN with attention the second, a pair run the third. Files:
OUT/<what>_<run>_<width>x<height>.png; OUT is under runs/ (never committed). Serves the runs with `attnlab serve`
and drives headless Chromium through scripts/explorer_screenshots.py's `serve`, `chrome` and `save_png`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import explorer_screenshots as shots  # noqa: E402 (this folder's sibling script)

SIZES = ((1400, 1000), (1920, 1080))
VERSE = "And Elimelech Naomi's husband died; and she was left, and her two sons."  # Ruth 1:3, KJV (the test verse)
LONG = ("And Naomi said unto her two daughters in law, Go, return each to her mother's house: the LORD deal kindly "
        "with you, as ye have dealt with the dead, and with me.")  # Ruth 1:8, KJV
PAIR = (VERSE, "Elimelech, Naomi's husband, died; and she was left with her two sons.")  # Ruth 1:3, KJV and WEB
STEP = 26
MAX_BYTES = 900_000


def page(driver, url: str, timeout: float = 120.0) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url + "/?projector=1&theme=dark")
    WebDriverWait(driver, timeout).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready")
                                         == "1")


def explore(driver, model: str, sentence: str, sentence_b: str | None = None, timeout: float = 300.0):
    """Panel 1 on `model` (panel 2 off), the input explored; the panel, drawn."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait

    panels = driver.find_elements(By.CSS_SELECTOR, ".panel")
    Select(panels[0].find_element(By.CSS_SELECTOR, "select.model")).select_by_value(model)
    driver.execute_script("const s = arguments[0].querySelector('select.model'); s.value = '';"  # hidden: projector
                          "s.dispatchEvent(new Event('change'));", panels[1])
    driver.execute_script("document.getElementById('sentence').value = arguments[0];"
                          "document.getElementById('sentence-b').value = arguments[1];", sentence, sentence_b or "")
    driver.find_element(By.ID, "translate").click()
    panel = panels[0]
    WebDriverWait(driver, timeout).until(lambda d: panel.get_attribute("data-state") in ("done", "error"))
    if panel.get_attribute("data-state") != "done":
        raise RuntimeError(f"{model}: {panel.find_element(By.CLASS_NAME, 'status').text}")
    drawn(driver, panel)
    return panel


def drawn(driver, panel, timeout: float = 120.0) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(lambda d: panel.get_attribute("data-rendered") == "1")
    time.sleep(0.3)


def choose(driver, panel, css: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    Select(panel.find_element(By.CSS_SELECTOR, css)).select_by_value(value)
    drawn(driver, panel)


def view(driver, panel, name: str) -> None:
    from selenium.webdriver.common.by import By

    panel.find_element(By.CSS_SELECTOR, f'.views button[data-view="{name}"]').click()
    drawn(driver, panel)


def top(driver, panel, css: str = ".viewbar", block: str = "start") -> None:
    """Scrolls `css` of the panel to the window's top (block "start") or bottom ("end")."""
    driver.execute_script(f"arguments[0].querySelector(arguments[1]).scrollIntoView({{block: '{block}'}});",
                          panel, css)
    time.sleep(0.2)


def cross_attention(driver, url: str, model: str, out: Path, size: str) -> list[Path]:
    panel = explore(driver, model, VERSE)
    choose(driver, panel, "select.map", "cross")
    top(driver, panel)
    return [shots.save_png(driver, out / f"cross_{model}_{size}.png", MAX_BYTES)]


def beam_tree(driver, url: str, model: str, out: Path, size: str) -> list[Path]:
    from selenium.webdriver.common.by import By

    panel = explore(driver, model, LONG)
    view(driver, panel, "player")
    player = panel.find_element(By.CSS_SELECTOR, ".player")
    T = int(player.get_attribute("data-steps"))
    if T < STEP:
        print(f"{model}: its translation of the long verse has {T} steps, fewer than {STEP}: the last one shown",
              file=sys.stderr)
    driver.execute_script("const s = arguments[0].querySelector('input.scrub'); s.value = arguments[1];"
                          "s.dispatchEvent(new Event('input'));", player, min(STEP, T) - 1)
    time.sleep(0.3)
    boxes = player.find_elements(By.CSS_SELECTOR, ".tree-box")
    top(driver, panel, ".tree-box" if boxes else ".player", "end" if boxes else "start")
    return [shots.save_png(driver, out / f"beam-tree-step{min(STEP, T)}_{model}_{size}.png", MAX_BYTES)]


def api(url: str, payload: dict | None = None):
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


def sharpest_cross_head(url: str, model: str) -> tuple[int, int, float]:
    """(layer, head, mean row max) of the pair map's head whose A->B block is the least uniform: the mean over a's
    rows of the largest weight on b's tokens (the head that links the two sentences most plainly)."""
    ex = api(url + "/api/explore", {"model": model, "sentence": PAIR[0], "sentence_b": PAIR[1]})
    pair = next(m for m in ex["maps"] if m["key"] == "pair")
    s, best = pair["split"], (0, 0, -1.0)
    for layer in range(pair["layers"]):
        heads = api(f"{url}/api/explore/{ex['id']}/weights?map=pair&layer={layer}&words=false")["weights"]
        for h, w in enumerate(heads):
            sharp = sum(max(row[s:]) for row in w[:s]) / s
            best = max(best, (layer, h, sharp), key=lambda x: x[2])
    return best


def pair_filter(driver, url: str, model: str, out: Path, size: str) -> list[Path]:
    layer, head, sharp = sharpest_cross_head(url, model)
    print(f"{model}: layer {layer + 1}, head {head + 1} links a to b most plainly (mean row max of A->B {sharp:.3f})",
          file=sys.stderr)
    panel = explore(driver, model, *PAIR)
    choose(driver, panel, "select.map", "pair")
    choose(driver, panel, "select.pair", "ab")
    choose(driver, panel, "select.layer", str(layer))
    choose(driver, panel, "select.head", str(head))
    top(driver, panel)
    name = f"layer{layer + 1}-head{head + 1}_{model}_{size}.png"
    paths = [shots.save_png(driver, out / f"pair-filter-AB-heatmap-{name}", MAX_BYTES)]
    view(driver, panel, "head")
    driver.execute_script("soloHead(arguments[0], arguments[1]);", panel, head)  # the single-head shortcut
    drawn(driver, panel)
    top(driver, panel)
    paths.append(shots.save_png(driver, out / f"pair-filter-AB-head-{name}", MAX_BYTES))
    return paths


def plan(models: list[dict]) -> list[tuple]:
    """(what, model name) to take, from the served models' families."""
    transformers = [m["name"] for m in models if m["family"] == "transformer" and m["kind"] == "translation"]
    rnns = [m["name"] for m in models if m["family"] == "rnn" and m["attention"] != "none"]
    pairs = [m["name"] for m in models if m["kind"] == "pair"]
    todo = [(cross_attention, name) for name in transformers]
    todo += [(beam_tree, name) for name in (rnns or transformers[:1])]
    todo += [(pair_filter, name) for name in pairs]
    return todo


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, help="translation and sentence-pair run directories")
    parser.add_argument("--out", type=Path, default=Path("runs/screenshots"), help="folder of the PNG files")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    paths = []
    with tempfile.TemporaryDirectory() as tmp, shots.serve(args.run_dirs, Path(tmp) / "serve.log") as url:
        with urllib.request.urlopen(url + "/api/models", timeout=60) as resp:
            todo = plan(json.loads(resp.read()))
        if not todo:
            print("none of these runs is a Transformer, an RNN with attention or a sentence-pair run", file=sys.stderr)
            return 2
        for width, height in SIZES:
            driver = shots.chrome(width, height)
            try:
                for take, model in todo:
                    page(driver, url)
                    paths += take(driver, url, model, args.out, f"{width}x{height}")
            finally:
                driver.quit()
    for p in paths:
        print(f"{p}  {p.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
