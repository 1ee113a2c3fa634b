"""`make docs` builds the API reference (pdoc) with a page for every package and every module of attnlab."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attnlab"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_docs_builds_a_page_per_package_and_module(tmp_path):
    pytest.importorskip("pdoc")
    out = tmp_path / "api"
    # -o: the venv's install stamp is taken as up to date (the suite runs inside the installed venv)
    result = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", "docs", f"PY={sys.executable}",
                             f"API_OUT={out}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    modules = sorted(p.relative_to(PACKAGE.parent).with_suffix(".html") for p in PACKAGE.rglob("*.py")
                     if p.name != "__main__.py" and "static" not in p.parts and "configs" not in p.parts)
    pages = [str(m).replace("/__init__.html", ".html") for m in modules]
    missing = [p for p in pages if not (out / p).is_file()]
    assert len(pages) > 60 and missing == [], f"no API page for {missing}"
    assert 'href="runs/workflow.html"' in (out / "attnlab" / "runs.html").read_text(encoding="utf-8")  # a package
    # page links its modules
