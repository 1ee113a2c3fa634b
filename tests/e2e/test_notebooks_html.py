"""The lecture notebooks as the executed HTML copies `make notebooks` hands out (issue 39, item 6), opened in a real
headless Chromium with the network blocked: every notebook is executed through scripts/run_notebooks.py (the
runner of `make notebooks`, here in quick mode) and written with --html's exporter; each page then shows

- its equations typeset by the MathJax inlined in the page: every markdown cell with `$` math holds MathJax's
  output elements, no MathJax error, and no raw `$...$` left in the rendered text;
- the inline explorer: each iframe's page ready with its first view drawn;
- the quick-mode banner as the first output;
- training progress as text at its last state (100%), not a widget frozen at 0%, in every notebook that trains
  (those that load the shipped trained models instead may show no bar);
- and it fetched nothing: no script from a CDN, and every resource the page loaded is a file, data or blob URL.

Skipped (with the reason) only when chromium, chromedriver, selenium, nbconvert or the MathJax package are
missing (`sudo apt-get install chromium chromium-driver`, `pip install -e .[e2e,test]`).
"""

import importlib.util
import os
import re
import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
MISSING = [m for m in ("selenium", "nbconvert", "nbclient", "mathjax") if importlib.util.find_spec(m) is None]
if not (CHROMIUM and CHROMEDRIVER) or MISSING:
    pytest.skip(f"needs chromium ({CHROMIUM or 'missing'}), chromedriver ({CHROMEDRIVER or 'missing'}) and the "
                f"packages selenium, nbconvert, nbclient, mathjax (missing: {', '.join(MISSING) or 'none'}): "
                "`sudo apt-get install chromium chromium-driver` and `pip install -e .[e2e,test]`",
                allow_module_level=True)

import nbformat  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
RAW_MATH = re.compile(r"\$[^$\s][^$]*\$")


def runner():
    spec = importlib.util.spec_from_file_location("run_notebooks", ROOT / "scripts" / "run_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Every notebook executed in quick mode and written as offline HTML, as `make notebooks` does (--html)."""
    tmp = tmp_path_factory.mktemp("notebooks")
    run_notebooks = runner()
    records = {}
    for path in NOTEBOOKS:
        records[path.stem] = run_notebooks.execute(path, quick=True, runs=tmp / "runs" / path.stem, timeout=300,
                                                   html=tmp / "html")
    failed = {k: r["error"] for k, r in records.items() if not r["ok"]}
    assert not failed, failed
    return tmp / "html"


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000",
                "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"):  # no way out
        options.add_argument(arg)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to run its sandbox as root
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                                "downloadThroughput": 0, "uploadThroughput": 0})
    yield driver
    driver.quit()


def typeset(driver) -> None:
    """Waits for MathJax's first typesetting of the page (its startup promise) to finish."""
    driver.set_script_timeout(60)
    error = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const t0 = Date.now();
        (function wait() {
            if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
                MathJax.startup.promise.then(() => done(null), e => done(String(e)));
            } else if (Date.now() - t0 > 30000) { done('MathJax never started'); } else { setTimeout(wait, 50); }
        })();""")
    assert error is None, error


@pytest.mark.parametrize("name", [p.stem for p in NOTEBOOKS])
def test_executed_notebook_html_works_offline(pages, browser, name):
    page = pages / f"{name}.html"
    source = page.read_text(encoding="utf-8")
    assert "unpkg.com" not in source and "cdnjs" not in source and "require.min.js" not in source
    browser.get(page.resolve().as_uri())
    typeset(browser)

    # equations: every markdown cell whose source has $ math shows MathJax output, and no raw $...$ is left
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    markdown = [c.source for c in nb.cells if c.cell_type == "markdown"]
    rendered = browser.find_elements(By.CSS_SELECTOR, ".jp-MarkdownCell")
    assert len(rendered) == len(markdown)
    with_math = 0
    for src, cell in zip(markdown, rendered):
        text = browser.execute_script("""
            const c = arguments[0].cloneNode(true);
            c.querySelectorAll('code, pre, mjx-container').forEach(e => e.remove());
            return c.textContent;""", cell)
        assert not RAW_MATH.search(text), f"{name}: raw math left: {RAW_MATH.search(text).group()[:80]!r}"
        if RAW_MATH.search(re.sub(r"`[^`]*`", "", src)):
            with_math += 1
            assert cell.find_elements(By.CSS_SELECTOR, "mjx-container svg"), f"{name}: math not typeset: {src[:80]!r}"
    assert with_math >= 1
    assert not browser.find_elements(By.CSS_SELECTOR, "mjx-merror, [data-mjx-error]")

    # the quick-mode banner is the first output of the page
    first = browser.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output")[0]
    banner = first.find_elements(By.CSS_SELECTOR, ".attnlab-quick-banner")
    assert banner and banner[0].is_displayed() and banner[0].text.startswith("QUICK MODE (ATTNLAB_QUICK=1): ")

    # progress as text at its end: no widget, no bar left at 0%
    outputs = "\n".join(e.text for e in browser.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output"))
    bars = re.findall(r"(\d+)%\|[^|\n]*\| *(\d+)/(\d+)", outputs)
    if any("attnlab.train(" in c.source for c in nb.cells if c.cell_type == "code"):  # a notebook that trains
        assert bars, f"{name}: no progress bar in the outputs"
    assert all(p == "100" and done == total for p, done, total in bars), bars
    assert not browser.find_elements(By.CSS_SELECTOR, ".jupyter-widgets, script[type*='widget']")

    # the inline explorer: each iframe's page drew its first view
    frames = browser.find_elements(By.CSS_SELECTOR, "iframe.attnlab-explorer")
    assert frames, f"{name}: no inline explorer"
    for frame in frames:
        browser.switch_to.frame(frame)
        WebDriverWait(browser, 30).until(
            lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1"
            and d.find_element(By.ID, "panel-0").get_attribute("data-rendered") == "1")
        assert browser.find_elements(By.CSS_SELECTOR, "#panel-0 table.heatmap td.cell, #panel-0 svg, #panel-0 canvas")
        browser.switch_to.default_content()

    # nothing came from the network
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert all(u.startswith(("file:", "data:", "blob:", "about:")) for u in loaded), loaded
    scripts = browser.execute_script("return [...document.querySelectorAll('script[src]')].map(s => s.src)")
    assert all(s.startswith(("file:", "data:")) for s in scripts), scripts
