"""benchmarks/common.py: the commit a recorded benchmark names. Recorded benchmarks run from a `git archive` of the
commit (so nothing uncommitted is measured); the archive has no .git, and `commit()` reads the hash git wrote into
benchmarks/ARCHIVED_COMMIT (export-subst in .gitattributes)."""

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import benchmark_module

ROOT = Path(__file__).resolve().parents[1]
common = benchmark_module("common")


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def archive(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tar = tmp_path / "head.tar"
    _git("archive", "-o", str(tar), "HEAD", "benchmarks", ".gitattributes")
    with tarfile.open(tar) as t:  # our own HEAD; the "data" filter where this Python has it (3.11.4 on)
        t.extractall(tmp_path / "tree", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return tmp_path / "tree"


def test_a_checkout_names_its_head():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert common.commit().split(" ")[0] == _git("rev-parse", "--short", "HEAD")


def test_a_git_archive_names_the_commit_it_was_made_from(archive):
    if "ARCHIVED_COMMIT" not in _git("ls-tree", "--name-only", "HEAD", "benchmarks/"):
        pytest.skip("HEAD predates benchmarks/ARCHIVED_COMMIT")
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'benchmarks'); "
                          "from common import commit; print(commit())"], cwd=archive, check=True,
                         capture_output=True, text=True).stdout.strip()
    short, mark = out.split(" ")
    assert mark == "(archive)" and _git("rev-parse", "HEAD").startswith(short) and len(short) >= 7


def test_an_unsubstituted_file_names_no_commit(tmp_path, monkeypatch):
    """A copied tree (not made by git archive) keeps the placeholder: no commit is claimed."""
    placeholder = tmp_path / "ARCHIVED_COMMIT"
    placeholder.write_text("$Format:%h$\n")
    monkeypatch.setattr(common, "ARCHIVED", placeholder)
    monkeypatch.setattr(common, "REPO", tmp_path)
    assert common.commit(tmp_path) == ""
