"""The inline explorer in a notebook exported to HTML, in a real headless Chromium: a notebook whose cells compute
attention with torch.nn.MultiheadAttention (fixed seed, given tokens) and display
`attnlab.runs.views.attention_exploration(...)` (the `_repr_html_` route) is executed with nbclient, exported with
nbconvert's HTMLExporter and opened from disk; inside each output's iframe the heatmap has rows x columns cells
equal to the token counts with the tensor's weights (each head, two layers, the word toggle), PNG and SVG export
make files, the model view has layers x heads thumbnails, the head view one line per token pair and head, the
neuron view says it is unavailable, the frame grew to its content, and the page fetched nothing.

Skipped (with the reason) only when chromium, chromedriver, selenium or nbconvert/nbclient are missing.

`python tests/test_notebook_browser.py OUT.png` renders the screenshot in docs/img/notebook_explorer.png with the
same machinery: all-MiniLM-L6-v2's self-attention over an English sentence, shown inline.
"""

import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
try:
    import nbformat
    import selenium
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as e:
    selenium = None
    missing = e.name
if not (CHROMIUM and CHROMEDRIVER and selenium):
    pytest.skip(f"needs chromium ({CHROMIUM or 'missing'}), chromedriver ({CHROMEDRIVER or 'missing'}), selenium, "
                f"nbformat, nbclient and nbconvert ({'ok' if selenium else missing + ' missing'}): "
                "`sudo apt-get install chromium chromium-driver` and `pip install -e .[e2e,docs]`",
                allow_module_level=True)

# the notebook's code; the test runs the same lines to know the weights it must see
SELF_ATTENTION = """\
import torch
torch.manual_seed(0)
tokens = "the old cat sees the green door".split()
layers = [torch.nn.MultiheadAttention(16, 4, batch_first=True) for _ in range(2)]
x = torch.randn(1, len(tokens), 16) * 2
weights = []  # Hugging Face's form: a tuple over layers of (1, H, T, T)
with torch.no_grad():
    for mha in layers:
        x, w = mha(x, x, x, need_weights=True, average_attn_weights=False)
        weights.append(w)
"""
CROSS_ATTENTION = """\
torch.manual_seed(1)
src_tokens, tgt_tokens = "the old cat sees the green door".split(), "le vieux chat voit".split()
cross = torch.nn.MultiheadAttention(16, 2, batch_first=True)
with torch.no_grad():
    _, cross_w = cross(torch.randn(1, 4, 16), torch.randn(1, 7, 16), torch.randn(1, 7, 16),
                       need_weights=True, average_attn_weights=False)
cross_w = cross_w[0]  # (H, R, C)
"""
SHOW = """\
import attnlab
from IPython.display import display
from attnlab.runs.views import attention_exploration
attnlab.show(weights, tokens, title="self-attention")  # the public call, like bertviz's head_view
display(attention_exploration(cross_w, src_tokens, tgt_tokens, title="cross-attention"))  # _repr_html_
"""
MINILM = """\
import attnlab, torch
from attnlab.families.explorer import encoder_self_attention
from attnlab.families.minilm import load_minilm
encoder, tokenizer = load_minilm()
encoded = tokenizer.tok.encode("The cat sat on the mat because it was tired.")
with torch.no_grad():  # (6 layers, 12 heads, T, T)
    weights = encoder_self_attention(encoder.embeddings(torch.tensor([encoded.ids])), encoder.layers)
attnlab.show(weights, encoded.tokens, title="all-MiniLM-L6-v2 self-attention")
"""


def notebook_html(cells: list[str], out: Path) -> Path:
    """Executes the code cells in a fresh kernel of this interpreter (nbclient) and exports the notebook with its
    outputs to out/notebook.html (nbconvert)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# attnlab: the explorer inline")]
                                  + [nbformat.v4.new_code_cell(c) for c in cells])
    # "python" in the kernel spec's argv is replaced by sys.executable: this venv's interpreter; one thread for
    # tiny tensors (see conftest.one_thread)
    client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(out)}})
    client.execute(env={**os.environ, "OMP_NUM_THREADS": "1"})
    body, _ = HTMLExporter().from_notebook_node(nb)
    path = out / "notebook.html"
    path.write_text(body, encoding="utf-8")
    return path


def chromium(width: int = 1400, height: int = 1000):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(arg)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to run its sandbox as root
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    return driver


def explorers(driver, page: Path) -> list:
    """Opens the exported notebook; the explorer iframes once each has drawn its first view."""
    driver.get(page.resolve().as_uri())
    wait = WebDriverWait(driver, 30)
    frames = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "iframe.attnlab-explorer"))
    for frame in frames:
        driver.switch_to.frame(frame)
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1"
                   and d.find_element(By.ID, "panel-0").get_attribute("data-rendered") == "1")
        driver.switch_to.default_content()
    return frames


def show(driver, panel, view: str) -> None:
    panel.find_element(By.CSS_SELECTOR, f'.views button[data-view="{view}"]').click()
    WebDriverWait(driver, 30).until(lambda d: panel.get_attribute("data-view") == view
                                    and panel.get_attribute("data-rendered") == "1")


def heatmap_weights(driver, panel, rows: int, cols: int) -> np.ndarray:
    flat = driver.execute_script("return [...arguments[0].querySelectorAll('table.heatmap td.cell')].map("
                                 "c => [Number(c.dataset.i), Number(c.dataset.j), Number(c.dataset.w)]);", panel)
    w = np.full((rows, cols), np.nan)
    for i, j, x in flat:
        w[int(i), int(j)] = x
    return w


@pytest.fixture(scope="module")
def browser():
    driver = chromium()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return notebook_html([SELF_ATTENTION, CROSS_ATTENTION, SHOW], tmp_path_factory.mktemp("notebook"))


def expected_weights() -> dict:
    """The weights the notebook computed, by running its lines here: {title: (L, H, R, C) array, rows, cols}."""
    ns: dict = {}
    exec(SELF_ATTENTION + CROSS_ATTENTION, ns)
    return {"self-attention": (torch.stack(ns["weights"])[:, 0].numpy(), ns["tokens"], ns["tokens"]),
            "cross-attention": (ns["cross_w"][None].numpy(), ns["tgt_tokens"], ns["src_tokens"])}


def test_inline_explorer_in_exported_notebook(exported, browser):
    t0 = time.monotonic()
    frames = explorers(browser, exported)
    expected = expected_weights()
    assert [f.get_attribute("title") for f in frames] == list(expected)
    for frame, (w, rows, cols) in zip(frames, expected.values()):
        L, H, R, C = w.shape
        browser.switch_to.frame(frame)
        try:
            panel = browser.find_element(By.ID, "panel-0")
            assert panel.get_attribute("data-state") == "done", panel.find_element(By.CLASS_NAME, "status").text
            assert not browser.find_element(By.ID, "form").is_displayed()  # embedded: no form, one panel
            assert not browser.find_element(By.ID, "panel-1").is_displayed()
            src = [e.text for e in panel.find_elements(By.CSS_SELECTOR, "table.heatmap th.src")]
            tgt = [e.text for e in panel.find_elements(By.CSS_SELECTOR, "table.heatmap th.tgt")]
            assert (tgt, src) == (rows, cols)  # rows x columns: the token counts
            assert len(panel.find_elements(By.CSS_SELECTOR, "table.heatmap td.cell")) == R * C
            # the last layer, mean of heads by default; then each head
            np.testing.assert_allclose(heatmap_weights(browser, panel, R, C), w[-1].mean(0), atol=2e-4)
            head = Select(panel.find_element(By.CSS_SELECTOR, "select.head"))
            for h in range(H):
                head.select_by_value(str(h))
                WebDriverWait(browser, 10).until(lambda d: panel.get_attribute("data-rendered") == "1")
                np.testing.assert_allclose(heatmap_weights(browser, panel, R, C), w[-1, h], atol=1e-4)
            Select(panel.find_element(By.CSS_SELECTOR, "select.layer")).select_by_value("0")
            WebDriverWait(browser, 10).until(lambda d: panel.get_attribute("data-rendered") == "1")
            np.testing.assert_allclose(heatmap_weights(browser, panel, R, C), w[0, H - 1], atol=1e-4)
            head.select_by_value("mean")
            panel.find_element(By.CSS_SELECTOR, "input.words").click()  # each token is a word: the same cells
            WebDriverWait(browser, 10).until(lambda d: panel.get_attribute("data-rendered") == "1")
            np.testing.assert_allclose(heatmap_weights(browser, panel, R, C), w[0].mean(0), atol=2e-4)
            for fmt in ("svg", "png"):
                panel.find_element(By.CSS_SELECTOR, f'button.export[data-format="{fmt}"]').click()
                WebDriverWait(browser, 10).until(lambda d: (panel.get_attribute("data-exported") or "")
                                                 .startswith(f"{fmt}:"))
                assert int(panel.get_attribute("data-exported").split(":")[1]) > 500
            show(browser, panel, "model")
            assert len(panel.find_elements(By.CSS_SELECTOR, ".model-grid figure.thumb")) == L * H
            show(browser, panel, "head")
            assert len(panel.find_elements(By.CSS_SELECTOR, "svg.head-view line")) == R * C * H
            assert len(panel.find_elements(By.CSS_SELECTOR, "svg.head-view text.row-token")) == R
            show(browser, panel, "neuron")
            assert "needs queries and keys" in panel.find_element(By.CSS_SELECTOR, ".view-box .note").text
            # offline: the frame loaded nothing but its own blobs (PNG export) (the exported page's template may)
            loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
            assert [u for u in loaded if not u.startswith(("blob:", "data:"))] == []
            content = browser.execute_script("return document.documentElement.offsetHeight")
        finally:
            browser.switch_to.default_content()
        assert frame.size["height"] >= content  # the frame follows its content (a srcdoc frame is same-origin)
    assert time.monotonic() - t0 < 30


def screenshot(out: Path, view: str = "model") -> None:
    """docs/img/notebook_explorer.png: the exported notebook of MINILM, the explorer showing `view`."""
    work = out.parent / ".notebook_screenshot"
    work.mkdir(exist_ok=True)
    page = notebook_html([MINILM], work)
    driver = chromium(1400, 1000)
    try:  # the viewport itself 1400 x 1000 (--window-size counts the window's frame)
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": 1000,
                                                                      "deviceScaleFactor": 1, "mobile": False})
        frame = explorers(driver, page)[0]
        driver.switch_to.frame(frame)
        panel = driver.find_element(By.ID, "panel-0")
        show(driver, panel, view)
        ActionChains(driver).move_to_element(panel.find_element(By.CLASS_NAME, "status")).perform()  # no hover
        driver.switch_to.default_content()
        driver.save_screenshot(str(out))
    finally:
        driver.quit()
        shutil.rmtree(work)


if __name__ == "__main__":
    screenshot(Path(sys.argv[1]), *sys.argv[2:])
