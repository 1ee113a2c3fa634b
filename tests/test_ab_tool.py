"""benchmarks/ab.py (issue 37): two commits of a tiny git repository whose `bench.py` prints a different figure
(read from the tree's own `src/`, so the test also checks that each run imports its own revision's code)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import benchmark_module

ab = benchmark_module("ab")

BENCH = """import json, sys
import figure
print("warming up")
print(json.dumps({"variants": {"eager": {"tokens_per_s": figure.VALUE}, "n": 1}, "lr.1e-3": [5, figure.VALUE]}))
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def commit_figure(repo: Path, value: int) -> str:
    (repo / "src" / "figure.py").write_text(f"VALUE = {value}\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", f"figure {value}")
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path):
    """A repository with two commits: VALUE 2 (HEAD~1), then VALUE 3 (HEAD)."""
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    git(root, "init", "-q")
    (root / "bench.py").write_text(BENCH)
    commit_figure(root, 2)
    commit_figure(root, 3)
    return root


def worktrees(repo: Path) -> int:
    return git(repo, "worktree", "list", "--porcelain").count("worktree ")


def test_two_commits_their_ratio_and_the_json(repo, tmp_path, capsys):
    out = tmp_path / "ab.json"
    code = ab.main(["-C", str(repo), "HEAD~1", "HEAD", "--metric", "variants.eager.tokens_per_s",
                    "--metric", "lr.1e-3.1", "--rounds", "2", "--json", str(out), "--", "python", "bench.py"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "variants.eager.tokens_per_s" in printed and "B/A 1.500" in printed
    result = json.loads(out.read_text())
    assert result["a"]["commit"] == git(repo, "rev-parse", "HEAD~1")
    assert result["b"]["commit"] == git(repo, "rev-parse", "HEAD")
    assert result["command"] == ["python", "bench.py"]
    for key in ("variants.eager.tokens_per_s", "lr.1e-3.1"):
        m = result["metrics"][key]
        assert (m["a"], m["b"], m["a_median"], m["b_median"], m["b_over_a"]) == ([2, 2], [3, 3], 2, 3, 1.5)
    assert [(r["round"], r["side"]) for r in result["runs"]] == [(1, "A"), (1, "B"), (2, "A"), (2, "B")]
    assert result["machine"]["cores"] >= 1 and result["machine"]["cpu"]
    assert result["date_utc"].endswith("Z")
    assert worktrees(repo) == 1  # the temporary worktrees are gone


def test_the_working_tree_with_its_uncommitted_change(repo, tmp_path):
    (repo / "src" / "figure.py").write_text("VALUE = 6\n")
    out = tmp_path / "ab.json"
    assert ab.main(["-C", str(repo), "HEAD", "WORKTREE", "--metric", "variants.eager.tokens_per_s", "--time",
                    "--rounds", "1", "--json", str(out), "--", "python", "bench.py"]) == 0
    result = json.loads(out.read_text())
    assert result["metrics"]["variants.eager.tokens_per_s"]["b_over_a"] == 2.0
    assert result["b"] == {"rev": "WORKTREE", "commit": git(repo, "rev-parse", "HEAD"), "dirty": True}
    assert all(v > 0 for side in "ab" for v in result["metrics"]["wall_s"][side])


def test_a_missing_metric_exits_2_naming_the_key(repo, capsys):
    code = ab.main(["-C", str(repo), "HEAD~1", "HEAD", "--metric", "variants.compiled.tokens_per_s", "--",
                    "python", "bench.py"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("ab.py: error: metric 'variants.compiled.tokens_per_s' missing")
    assert "(no 'compiled' under 'variants'); top-level keys: variants, lr.1e-3" in err
    assert worktrees(repo) == 1  # removed on the error too


def test_an_unknown_revision_exits_2(repo):
    done = subprocess.run([sys.executable, str(Path(ab.__file__)), "-C", str(repo), "HEAD", "no-such-branch",
                           "--time", "--", "python", "bench.py"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == f"ab.py: error: unknown revision 'no-such-branch' for B in {repo.resolve()}"


@pytest.mark.parametrize("stdout,expected", [
    ('{\n "a": {\n  "b": 1\n },\n "c": [\n{"d": 2}\n ]\n}\n', {"a": {"b": 1}, "c": [{"d": 2}]}),  # one document
    ('{"x": 1}\nnot json\n{"x": 2}\nwrote out.json\n', {"x": 2}),  # JSON lines among other output
    ("no json here\n", None),
])
def test_the_last_json_object(stdout, expected):
    assert ab.last_json_object(stdout) == expected
