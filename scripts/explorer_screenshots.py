"""Screenshots of the attention explorer's views on real runs: serves the given run directories (`attnlab serve`
as a subprocess on a port the system picks), explores one sentence in headless Chromium and saves each view at
1400x1000 and 390x844 as PNG (each under 400 KB) into a folder, for docs/results.md.

    .venv/bin/python scripts/explorer_screenshots.py RUN_DIR [RUN_DIR ...] --sentence "In the beginning ..." \
        --out docs/results/explorer [--views heatmap,model,head,neuron,player] [--map cross]

Panel 1 shows the first run, panel 2 the second (if any). The views are buttons of the page (data-view); "player"
(the step player) is taken only where the page has such a button. Files: OUT/<view>_<width>x<height>.png.
Needs chromium, chromedriver and selenium (`make e2e` installs them). tests/e2e/test_layout.py uses `serve`,
`chrome` and `screenshots` on the tiny runs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Iterator, Sequence

VIEWS = ("heatmap", "model", "head", "neuron")
SIZES = ((1400, 1000), (390, 844))
MAX_BYTES = 400_000


@contextlib.contextmanager
def serve(run_dirs: Sequence[Path], log_path: Path, timeout: float = 120.0) -> Iterator[str]:
    """`attnlab serve RUN_DIR ... --port 0` (the real command) until the block ends; yields its base URL. Port 0:
    the server binds a port the system picks and logs it."""
    with open(log_path, "w+") as log:
        proc = subprocess.Popen([sys.executable, "-m", "attnlab.app.cli", "serve", *map(str, run_dirs), "--port", "0"],
                                stdout=log, stderr=log, env={**os.environ, "OMP_NUM_THREADS": "1"})
        try:
            deadline, url = time.monotonic() + timeout, None
            while True:
                try:
                    if url is None:
                        log.seek(0)
                        found = re.search(r"at (http://127\.0\.0\.1:\d+)/", log.read())
                        url = found and found.group(1)
                    if url is not None:
                        urllib.request.urlopen(url + "/api/models", timeout=30).read()
                        break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"attnlab serve did not start: {log.read()}")
                time.sleep(0.2)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def chrome(width: int, height: int, downloads: Path | None = None):
    """Headless Chromium (Debian's chromium + chromedriver) of this window size, its console log kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to run its sandbox as root
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    if downloads is not None:
        options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                                  "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=options)
    driver.set_window_size(width, height)
    # the window's inner size: --window-size sets the outer one in some versions
    inner = driver.execute_script("return [innerWidth, innerHeight];")
    driver.set_window_size(2 * width - inner[0], 2 * height - inner[1])
    return driver


def explore(driver, url: str, models: Sequence[str], sentence: str, timeout: float = 120.0) -> list:
    """Loads the page, picks `models` for the panels (the others off), explores `sentence`; returns the panels
    used, each explored (data-state done) or an AssertionError with the panel's status."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url + "/")
    wait = WebDriverWait(driver, timeout)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    panels = driver.find_elements(By.CSS_SELECTOR, ".panel")
    for k, panel in enumerate(panels):
        Select(panel.find_element(By.CSS_SELECTOR, "select.model")).select_by_value(models[k] if k < len(models)
                                                                                    else "")
    driver.execute_script("document.getElementById('sentence').value = arguments[0];", sentence)
    driver.find_element(By.ID, "translate").click()
    used = panels[:len(models)]
    wait.until(lambda d: all(p.get_attribute("data-state") in ("done", "error") for p in used))
    for p in used:
        assert p.get_attribute("data-state") == "done", p.find_element(By.CLASS_NAME, "status").text
    return used


def show(driver, panel, view: str, map_key: str | None = None, timeout: float = 60.0) -> bool:
    """Shows `view` (a data-view button) of `map_key` (default: the one selected) in a panel and waits until it is
    drawn; False when the page has no such view or map."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait

    if map_key is not None:
        select = Select(panel.find_element(By.CSS_SELECTOR, "select.map"))
        if map_key not in [o.get_attribute("value") for o in select.options]:
            return False
        select.select_by_value(map_key)
    buttons = panel.find_elements(By.CSS_SELECTOR, f'button[data-view="{view}"]')
    if not buttons or not buttons[0].is_displayed():
        return False
    buttons[0].click()
    WebDriverWait(driver, timeout).until(lambda d: panel.get_attribute("data-view") == view
                                         and panel.get_attribute("data-rendered") in ("1", None))
    time.sleep(0.2)
    return True


def save_png(driver, path: Path, max_bytes: int = MAX_BYTES) -> Path:
    """The window as a PNG under max_bytes: as taken, else fewer colours (Pillow, if installed), else scaled down."""
    data = driver.get_screenshot_as_png()
    if len(data) > max_bytes:
        try:
            from PIL import Image
        except ImportError:
            Image = None
        if Image is not None:
            image = Image.open(io.BytesIO(data)).convert("RGB")
            for colours, scale in ((256, 1.0), (64, 1.0), (64, 0.75), (32, 0.5)):
                small = image if scale == 1.0 else image.resize((int(image.width * scale),
                                                                 int(image.height * scale)))
                buf = io.BytesIO()
                small.quantize(colours).save(buf, "PNG", optimize=True)
                data = buf.getvalue()
                if len(data) <= max_bytes:
                    break
    path.write_bytes(data)
    return path


def screenshots(url: str, models: Sequence[str], sentence: str, out: Path, views: Sequence[str] = VIEWS,
                sizes: Sequence[tuple[int, int]] = SIZES, map_key: str | None = None) -> list[Path]:
    """Each view of `sentence` explored with `models` (one per panel), at each window size, as
    OUT/<view>_<width>x<height>.png; a view the page lacks (e.g. "player" before it exists) is skipped with a
    line on stderr. Returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for width, height in sizes:
        driver = chrome(width, height)
        try:
            panels = explore(driver, url, models, sentence)
            for view in views:
                shown = [show(driver, p, view, map_key) for p in panels]
                if not any(shown):
                    print(f"no {view!r} view on this page: skipped", file=sys.stderr)
                    continue
                # the view, not the page's top: its bar of controls at the window's top
                driver.execute_script("arguments[0].querySelector('.viewbar').scrollIntoView();", panels[0])
                paths.append(save_png(driver, out / f"{view}_{width}x{height}.png"))
        finally:
            driver.quit()
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run directories to serve (one panel each, at most 2)")
    parser.add_argument("--sentence", required=True, help="the sentence to explore")
    parser.add_argument("--out", type=Path, required=True, help="folder for the PNG files")
    parser.add_argument("--views", default=",".join(VIEWS),
                        help=f"comma-separated views (default {','.join(VIEWS)}; also: player)")
    parser.add_argument("--map", help="the attention map to show (default: the page's first)")
    args = parser.parse_args(argv)
    models = [d.name for d in args.run_dirs[:2]]  # the server names each run by its directory
    with tempfile.TemporaryDirectory() as tmp, serve(args.run_dirs, Path(tmp) / "serve.log") as url:
        paths = screenshots(url, models, args.sentence, args.out, [v for v in args.views.split(",") if v],
                            map_key=args.map)
    for p in paths:
        print(f"{p}  {p.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
