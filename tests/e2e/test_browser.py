"""The attention explorer in a real headless Chromium (Debian's `chromium` + `chromium-driver`, driven by
Selenium): `attnlab serve` on two tiny runs, type a sentence, translate, and check that each heatmap has one cell
per source x output token with the API's weights, that hovering an output token highlights its row and its
most-attended source column, and that the layer/head selector switches the Transformer's map.

Skipped (with the reason) only when chromium, chromedriver or selenium are missing: `make e2e` installs them
(scripts/system-deps.sh e2e needs root; otherwise it prints the apt-get command).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(url: str, payload: dict | None = None):
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def server(tiny_runs, tmp_path_factory):
    """`attnlab serve` (the real command) on a free loopback port; yields its base URL."""
    port = _free_port()
    log = open(tmp_path_factory.mktemp("serve") / "serve.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "attnlab.cli", "serve", str(tiny_runs["rnn"]),
                             str(tiny_runs["transformer"]), "--port", str(port)], stdout=log, stderr=log,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})  # tiny models: see conftest.one_thread
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _api(url + "/api/models")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    pytest.fail(f"attnlab serve did not start: {log.read()}")
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to run its sandbox as root
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
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
        np.testing.assert_allclose(_weights(panel, T, S), shown, atol=1e-4)

        for i in (0, T // 2, T - 1):  # hover an output token: its row and its most-attended source light up
            ActionChains(browser).move_to_element(tgt[i]).perform()
            lit = panel.find_elements(By.CSS_SELECTOR, "table.heatmap td.cell.hl")
            assert len(lit) == S and {c.get_attribute("data-i") for c in lit} == {str(i)}
            assert "hl" in tgt[i].get_attribute("class").split()
            lit_src = panel.find_elements(By.CSS_SELECTOR, "table.heatmap th.src.hl")
            assert len(lit_src) == 1
            j = int(lit_src[0].get_attribute("data-j"))
            assert shown[i, j] >= shown[i].max() - 1e-4, (i, j, shown[i])
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
    np.testing.assert_allclose(_weights(panel, T, S), np.array(api["attention"])[0, 1], atol=1e-4)
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
