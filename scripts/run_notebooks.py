#!/usr/bin/env python
"""Runs the lecture notebooks (notebooks/*.ipynb) top to bottom, and keeps the committed ones free of outputs.

    python scripts/run_notebooks.py --quick                      # every notebook, small budgets (what make test runs)
    python scripts/run_notebooks.py --full --out runs/notebooks --html runs/notebooks/html   # what make notebooks runs
    python scripts/run_notebooks.py --quick notebooks/03_transformer.ipynb --json times.jsonl
    python scripts/run_notebooks.py --strip                      # remove outputs and execution counts in place
    python scripts/run_notebooks.py --check-stripped             # exit 1 if a notebook holds outputs

Each notebook runs in a fresh kernel of this interpreter (not whatever "python3" kernel Jupyter would pick), with
its working directory at notebooks/ and ATTNLAB_QUICK=1 (--quick) or unset (--full) in its environment. The runs a
notebook trains go to ATTNLAB_NOTEBOOK_RUNS: OUT/<notebook name>/ with --out (where the notebook, opened in Jupyter
from notebooks/, puts them too when OUT is runs/notebooks), else a temporary folder removed afterwards.
Progress bars are text (ATTNLAB_PROGRESS=text, `attnlab.core.logs.Progress`) and each cell's stream outputs are
merged with their carriage returns applied, so a saved notebook keeps a bar's last state, not a widget's first.
--html DIR writes each executed notebook as one HTML file that needs no network: MathJax 3 (es5/tex-svg.js of the
package django-static-mathjax, the extra `notebook`) inlined, no require.js, widget or mermaid code from a CDN.
One JSON line per notebook (name, mode, seconds, cells, ok, error, and the machine's load averages over 1, 5 and 15
minutes before and after it: the machine may be shared) is printed and, with --json, written to FILE.
The exit status is 1 if any notebook fails; the failing cell's source and error are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.resources
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
KERNEL_NAME = "attnlab-notebooks"
# the executed notebook as HTML for a browser with no network: nbconvert's lab template with MathJax 3 inlined (its
# SVG output draws the glyphs from the script itself, no font files) and the blocks that load code from a CDN empty
MATHJAX_CONFIG = """window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']],
  displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']], processEscapes: true, processEnvironments: true},
  svg: {fontCache: 'global'}};"""
OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_mathjax -%}
<script>{{ resources.attnlab_mathjax_config }}</script>
<script>{{ resources.attnlab_mathjax }}</script>
{%- endblock html_head_js_mathjax -%}
"""


def notebook_paths(names: list[str]) -> list[Path]:
    """The notebooks named on the command line (paths or bare names), or every notebooks/*.ipynb in order."""
    if not names:
        return sorted(NOTEBOOKS.glob("*.ipynb"))
    paths = []
    for name in names:
        p = Path(name)
        if not p.suffix:
            p = p.with_suffix(".ipynb")
        if not p.exists() and (NOTEBOOKS / p.name).exists():
            p = NOTEBOOKS / p.name
        if not p.is_file():
            raise SystemExit(f"run_notebooks: no notebook {name}")
        paths.append(p)
    return paths


def has_outputs(nb: nbformat.NotebookNode) -> list[int]:
    """Indices of the code cells that carry outputs or an execution count."""
    return [i for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)]


def strip(nb: nbformat.NotebookNode) -> bool:
    """Removes outputs, execution counts and per-cell execution metadata in place; True if anything changed."""
    changed = False
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if cell.get("outputs") or cell.get("execution_count") is not None:
            cell.outputs, cell.execution_count, changed = [], None, True
        for key in ("execution", "collapsed", "scrolled"):
            if key in cell.metadata:
                del cell.metadata[key]
                changed = True
    return changed


@contextlib.contextmanager
def kernel_of_this_interpreter():
    """A kernel spec that starts `sys.executable -m ipykernel_launcher`, in a temporary folder: the notebooks run
    with the interpreter (and the attnlab) that runs this script."""
    from jupyter_client.kernelspec import KernelSpecManager

    with tempfile.TemporaryDirectory(prefix="attnlab-kernel-") as d:
        spec = Path(d) / KERNEL_NAME
        spec.mkdir()
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "attnlab (this interpreter)", "language": "python"}))
        yield KernelSpecManager(kernel_dirs=[d])


@contextlib.contextmanager
def environment(quick: bool, runs: Path):
    """The kernel inherits this process's environment: ATTNLAB_QUICK and ATTNLAB_NOTEBOOK_RUNS for the run, put
    back afterwards. MPLBACKEND: figures inline, never a window; ATTNLAB_PROGRESS=text: progress bars as text."""
    saved = {k: os.environ.get(k) for k in ("ATTNLAB_QUICK", "ATTNLAB_NOTEBOOK_RUNS", "MPLBACKEND", "ATTNLAB_PROGRESS")}
    os.environ["ATTNLAB_NOTEBOOK_RUNS"] = str(runs)
    os.environ["ATTNLAB_PROGRESS"] = "text"
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    if quick:
        os.environ["ATTNLAB_QUICK"] = "1"
    else:
        os.environ.pop("ATTNLAB_QUICK", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def failing_cell(nb: nbformat.NotebookNode, exc: BaseException) -> str:
    """The source and error of the cell that failed, as text."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                src = "\n".join("    " + line for line in cell.source.splitlines()[:15])
                return f"cell failed:\n{src}\n{out.get('ename')}: {out.get('evalue')}"
    return f"{type(exc).__name__}: {str(exc)[-2000:]}"


def load_averages() -> list[float] | None:
    """The machine's load averages over 1, 5 and 15 minutes (None where the system has none): how busy the
    machine was while a notebook's seconds were measured."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def offline_html(nb: nbformat.NotebookNode) -> str:
    """The notebook (with its outputs) as one HTML page that loads nothing from the network."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    mathjax = (importlib.resources.files("mathjax") / "static" / "mathjax" / "es5" / "tex-svg.js").read_text("utf-8")
    if "</script" in mathjax.lower():  # it could not be inlined in a <script> element as it is
        raise SystemExit("run_notebooks: the MathJax script holds '</script'; it cannot be inlined")
    nb = nbformat.from_dict(nb)  # a copy: the widget state (none with text progress) would ask for the CDN's code
    nb.metadata.pop("widgets", None)
    exporter = HTMLExporter(extra_loaders=[DictLoader({"attnlab_offline.html.j2": OFFLINE_TEMPLATE})],
                            template_file="attnlab_offline.html.j2")
    body, _ = exporter.from_notebook_node(nb, resources={"attnlab_mathjax": mathjax,
                                                         "attnlab_mathjax_config": MATHJAX_CONFIG})
    return body


def execute(path: Path, quick: bool, runs: Path, out: Path | None = None, timeout: int = 600,
            html: Path | None = None) -> dict:
    """Runs one notebook in a fresh kernel; returns its JSON record (and writes the executed copy to out/, and as
    an offline HTML page to html/)."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    runs.mkdir(parents=True, exist_ok=True)
    record = {"name": path.name, "mode": "quick" if quick else "full", "seconds": None,
              "cells": sum(c.cell_type == "code" for c in nb.cells), "ok": False, "error": None,
              "load_before": load_averages()}
    t0 = time.perf_counter()
    with kernel_of_this_interpreter() as ksm, environment(quick, runs):
        from jupyter_client.manager import KernelManager

        km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=ksm)
        client = NotebookClient(nb, km=km, timeout=timeout, kernel_name=KERNEL_NAME, coalesce_streams=True,
                                resources={"metadata": {"path": str(path.parent.resolve())}})
        try:
            client.execute(cleanup_kc=True)  # the kernel is shut down after the notebook (nbclient would keep a
            record["ok"] = True              # kernel it did not start alive until this process exits)
        except Exception as exc:  # noqa: BLE001 - any failure of the notebook is reported, not raised
            record["error"] = failing_cell(nb, exc)
    record["seconds"] = round(time.perf_counter() - t0, 2)
    record["load_after"] = load_averages()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out / path.name)
    if html is not None:
        html.mkdir(parents=True, exist_ok=True)
        (html / path.with_suffix(".html").name).write_text(offline_html(nb), encoding="utf-8")
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("notebooks", nargs="*", help="notebooks to run (default: notebooks/*.ipynb)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small budgets (ATTNLAB_QUICK=1): what make test runs")
    mode.add_argument("--full", action="store_true", help="the lecture budgets (the default)")
    mode.add_argument("--strip", action="store_true", help="remove outputs and execution counts in place, run nothing")
    mode.add_argument("--check-stripped", action="store_true", help="exit 1 if a notebook holds outputs")
    p.add_argument("--out", type=Path, help="write the executed notebooks here, and the runs they train to OUT/NAME/")
    p.add_argument("--html", type=Path, help="write each executed notebook here as an HTML page that works offline")
    p.add_argument("--json", type=Path, help="write one JSON line per notebook to this file")
    p.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    args = p.parse_args(argv)
    paths = notebook_paths(args.notebooks)
    if not paths:
        print("run_notebooks: no notebooks found", file=sys.stderr)
        return 1
    if args.strip or args.check_stripped:
        dirty = []
        for path in paths:
            nb = nbformat.read(path, as_version=4)
            if args.check_stripped:
                if has_outputs(nb):
                    dirty.append(path)
            elif strip(nb):
                nbformat.write(nb, path)
                print(f"stripped {path}")
        for path in dirty:
            print(f"{path}: holds outputs; run scripts/run_notebooks.py --strip", file=sys.stderr)
        return 1 if dirty else 0
    failed = 0
    tmp = None
    if args.out is not None:
        runs = args.out
    else:
        tmp = tempfile.mkdtemp(prefix="attnlab-notebook-runs-")
        runs = Path(tmp)
    if args.json is not None:  # its folder may not exist yet (runs/notebooks/ on a fresh clone)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text("", encoding="utf-8")
    try:
        for path in paths:
            record = execute(path, args.quick, runs / path.stem, args.out, args.timeout, args.html)
            line = json.dumps(record)
            print(line, flush=True)
            if args.json is not None:
                with args.json.open("a", encoding="utf-8") as f:
                    f.write(line + "\n")
            if not record["ok"]:
                failed += 1
                print(f"{path.name}: {record['error']}", file=sys.stderr)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
