"""Time to first render of every explorer view in headless Chromium, for a 100-token sentence through an untrained
6+6-layer, 8-head Transformer (issue 15).

Builds the model (d_model 512, d_ff 2048: the paper's base sizes; character tokenizer, so 99 characters + </s> =
100 source tokens; one update at a negligible learning rate, i.e. untrained, which never emits </s>: 160 output
tokens, the longest a 100-token input can get), serves it with `attnlab serve`, explores the sentence in the page
(greedy) and, for every map and view, measures the time from the click to the view's first paint (the page's own
`data-render-ms`: fetch of the layer's weights, drawing, then the next animation frame), the longest main-thread
task while it rendered (PerformanceObserver "longtask": a long task is what freezes a page), and the bytes of JSON
fetched. Writes JSON (default docs/results/issue15_render.json).

    python benchmarks/explorer_render.py [--repeat 3] [--json docs/results/issue15_render.json]
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import commit, cpu_name, free_port, write_json  # noqa: E402

VIEWS = ("heatmap", "model", "head", "neuron")
LONGTASKS = """
window.__longtasks = [];
new PerformanceObserver(list => { for (const e of list.getEntries()) window.__longtasks.push(e.duration); })
  .observe({type: "longtask", buffered: true});
"""


def build_run(root: Path) -> Path:
    """An untrained 6+6-layer, 8-head Transformer run of a synthetic character corpus."""
    from attnlab.families.translation import experiment_from_dict
    from attnlab.runs.workflow import train

    rng = random.Random(0)
    words = "the house is big small red a cat sees and old my door green window opens".split()
    for name, n in (("train", 200), ("dev", 4), ("test", 4)):
        rows = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(n)]
        (root / f"{name}.tsv").write_text("".join(f"{r}\t{r}\n" for r in rows), encoding="utf-8")
    cfg = experiment_from_dict({
        "data": {"corpus": "files", "train": [str(root / "train.tsv")], "dev": [str(root / "dev.tsv")],
                 "test": [str(root / "test.tsv")]},
        "tokenizer": {"kind": "char"},
        "model": {"family": "transformer", "transformer": {"d_model": 512, "h": 8, "d_ff": 2048, "enc_layers": 6,
                                                           "dec_layers": 6}},
        "train": {"max_steps": 1, "lr": 1e-9, "warmup_steps": 1, "max_tokens": 400, "eval_every": 1000,
                  "progress": False, "keep_last": 1, "eval_max_sentences": 1},
        "decode": {"beam_size": 1, "max_src_tokens": 400}})
    train(cfg, root / "untrained-6x6")
    return root / "untrained-6x6"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="page loads (default 3); medians are reported")
    ap.add_argument("--json", type=Path, default=Path("docs/results/issue15_render.json"))
    args = ap.parse_args()
    sentence = ("in the beginning the old cat sees the green door and my small red house is big " * 2)[:99]
    with tempfile.TemporaryDirectory() as tmp:
        run = build_run(Path(tmp))
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "attnlab.app.cli", "serve", str(run), "--checkpoint", "last",
                                   "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(url + "/api/models", timeout=5)
                    break
                except OSError:
                    time.sleep(0.2)
            runs = [measure(url, sentence) for _ in range(args.repeat)]
        finally:
            server.terminate()
            server.wait(timeout=60)
    result = summarise(runs, sentence)
    write_json(args.json, result, indent=2)
    for key, row in result["views"].items():
        print(f"{key:32} first render {row['render_ms_median']:8.1f} ms   "
              f"longest task {row['longest_task_ms_max']:7.1f} ms")
    print(f"explore request {result['explore_ms_median']:.0f} ms (server decoding), wrote {args.json}")


def measure(url: str, sentence: str) -> dict:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=options)
    try:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": LONGTASKS})
        driver.get(url + "/")
        wait = WebDriverWait(driver, 300)
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
        panel = driver.find_element(By.ID, "panel-0")
        driver.execute_script("document.getElementById('sentence').value = arguments[0];", sentence)
        beam = panel.find_element(By.CSS_SELECTOR, "input.beam")
        beam.clear()
        beam.send_keys("1")
        driver.find_element(By.ID, "translate").click()
        wait.until(lambda d: panel.get_attribute("data-state") in ("done", "error"))
        assert panel.get_attribute("data-state") == "done", panel.find_element(By.CLASS_NAME, "status").text
        out = {"explore_ms": float(panel.get_attribute("data-fetch-ms")), "views": {}}
        out["shape"] = driver.execute_script("return arguments[0].result.maps.map(m => [m.key, m.layers, m.heads, "
                                             "m.rows.length, m.cols.length]);", panel)
        out["views"]["cross/heatmap (first view)"] = {"render_ms": float(panel.get_attribute("data-render-ms")),
                                                      "longest_task_ms": max(longtasks(driver) or [0])}
        for key, *_ in out["shape"]:
            Select(panel.find_element(By.CSS_SELECTOR, "select.map")).select_by_value(key)
            for view in VIEWS:
                driver.execute_script("window.__longtasks = [];")
                panel.find_element(By.CSS_SELECTOR, f'.views button[data-view="{view}"]').click()
                wait.until(lambda d: panel.get_attribute("data-view") == view
                           and panel.get_attribute("data-rendered") == "1")
                out["views"][f"{key}/{view}"] = {"render_ms": float(panel.get_attribute("data-render-ms")),
                                                 "longest_task_ms": max(longtasks(driver) or [0])}
        out["json_bytes"] = driver.execute_script(
            "return performance.getEntriesByType('resource').filter(e => e.name.includes('/api/explore'))"
            ".map(e => [e.name.replace(location.origin, ''), e.encodedBodySize]);")
        return out
    finally:
        driver.quit()


def longtasks(driver) -> list[float]:
    return driver.execute_script("return window.__longtasks;")


def summarise(runs: list[dict], sentence: str) -> dict:
    views = {}
    for key in runs[0]["views"]:
        ms = [r["views"][key]["render_ms"] for r in runs]
        views[key] = {"render_ms_median": statistics.median(ms), "render_ms_all": ms,
                      "longest_task_ms_max": max(r["views"][key]["longest_task_ms"] for r in runs)}
    sizes = runs[0]["json_bytes"]
    chromium = subprocess.run([shutil.which("chromium") or "chromium", "--version"], capture_output=True,
                              text=True).stdout.strip()
    return {
        "what": "time from a click to the first paint of each explorer view, 100-token source, untrained "
                "Transformer 6+6 layers, 8 heads, d_model 512 (greedy: 160 output tokens)",
        "command": "python benchmarks/explorer_render.py --repeat %d" % len(runs),
        "date": datetime.date.today().isoformat(), "commit": commit(), "machine": cpu_name(),
        "cpus": os.cpu_count(), "chromium": chromium, "sentence": sentence,
        "maps": runs[0]["shape"], "explore_ms_median": statistics.median(r["explore_ms"] for r in runs),
        "views": views, "largest_json_response_bytes": max(b for _, b in sizes),
        "json_responses": sizes}


if __name__ == "__main__":
    main()
