#!/usr/bin/env python
"""Two versions of the code on one benchmark command, side by side on one machine (issue 37).

    python benchmarks/ab.py REV_A REV_B --metric KEY [--metric KEY2 ...] [--time] [--rounds 3] [-C REPO]
        [--json OUT.json] -- CMD ARGS...

Each revision (anything `git rev-parse` takes: a hash, HEAD~1, a branch, a tag) is checked out with
`git worktree add --detach` in a temporary folder; `WORKTREE` means the working tree itself, uncommitted changes
included. CMD runs in each tree in turn, A, B, A, B, ... for `--rounds` rounds, so that machine drift hits both,
with the cwd at that tree's root (`benchmarks/x.py` in CMD is that revision's script) and `PYTHONPATH=<tree>/src`
only (the venv's editable install of this checkout comes after it on sys.path, so the tree's own attnlab is the
one imported). The folder of the interpreter that runs ab.py comes first on PATH: write `python` in CMD, not
`.venv/bin/python`, which a fresh worktree does not have. Paths to data outside the repo's tracked files (a run
folder, a cache) must be absolute.

A metric is read from the last JSON object CMD prints on stdout (the whole output as one JSON document, or the
last line that starts with `{`, as JSON lines): KEY is a dotted path into it, e.g.
`variants.attnlab eager.target_tokens_per_s` (a key that itself contains dots is matched too; a number indexes a
list). `--time` takes CMD's wall seconds as the metric `wall_s`. CMD's stderr passes through.

The repository is the one around the cwd, or `-C REPO`. Prints a small table per metric (median of A, median of B,
B/A, every round's values) and with `--json` writes it all: both revisions as full hashes, the command, the
machine (CPU model, cores), the date (UTC). The worktrees are removed at the end, on an error or Ctrl-C too. An
unknown revision, a failing command, or a metric missing from the output is one line on stderr and exit code 2.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, write_json  # noqa: E402  (the machine a figure was taken on, --json)

WORKTREE = "WORKTREE"
WALL = "wall_s"


class ABError(ValueError):
    """A user mistake (a revision, a command, a metric) that ends the run with one line and exit code 2."""


@dataclass
class Side:
    """One of the two versions: what the user named, the full commit hash, and the tree CMD runs in."""
    label: str  # "A" or "B"
    rev: str
    commit: str
    dirty: bool = False  # WORKTREE only: uncommitted changes to tracked files
    tree: Path | None = None
    values: dict[str, list[float]] = field(default_factory=dict)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise ABError(f"git {' '.join(args)} failed in {repo}: {last}")
    return done.stdout.strip()


def resolve(repo: Path, label: str, rev: str) -> Side:
    """The full hash of `rev` (HEAD's for WORKTREE); an unknown revision is an ABError naming it."""
    name = "HEAD" if rev == WORKTREE else rev
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise ABError(f"unknown revision {rev!r} for {label} in {repo}")
    side = Side(label, rev, done.stdout.strip())
    if rev == WORKTREE:
        side.dirty = bool(git(repo, "status", "--porcelain", "--untracked-files=no"))
    return side


def last_json_object(stdout: str) -> dict | None:
    """The whole output if it is one JSON object, else the last line starting with `{` (at column 0, so that a
    nested object of a pretty-printed document is not taken for the document) that parses as an object."""
    try:
        whole = json.loads(stdout)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return whole
    decoder = json.JSONDecoder()
    starts, offset = [], 0
    for line in stdout.splitlines(keepends=True):
        if line.startswith("{"):
            starts.append(offset)
        offset += len(line)
    for start in reversed(starts):
        try:
            obj, _ = decoder.raw_decode(stdout, start)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def lookup(obj: object, parts: list[str], found: str = "") -> object:
    """The value at a dotted path split into `parts`; a key may contain dots ("lr.1e-3"), so longer joins of the
    next parts are tried first. Raises KeyError(the part that matches nothing, the path found before it)."""
    if not parts:
        return obj
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        below = f"{found}.{key}" if found else key
        if isinstance(obj, dict) and key in obj:
            return lookup(obj[key], parts[n:], below)
        if isinstance(obj, list) and key.lstrip("-").isdigit() and -len(obj) <= int(key) < len(obj):
            return lookup(obj[int(key)], parts[n:], below)
    raise KeyError(parts[0], found)


def metric(obj: dict | None, key: str, where: str, stdout: str) -> float:
    if obj is None:
        tail = " | ".join(stdout.strip().splitlines()[-3:])
        raise ABError(f"metric {key!r}: no JSON object in the output of {where} (its last lines: {tail!r})")
    try:
        value = lookup(obj, key.split("."))
    except KeyError as e:
        missing, found = e.args
        at = f"under {found!r}" if found else "at the top level"
        raise ABError(f"metric {key!r} missing from the output of {where} (no {missing!r} {at}); top-level keys: "
                      f"{', '.join(map(str, obj)) or '(none)'}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ABError(f"metric {key!r} in the output of {where} is {value!r}, not a number")
    return float(value)


def run_once(side: Side, cmd: list[str], keys: list[str], wall: bool, round_: int) -> dict:
    """CMD once in `side`'s tree; appends its metric values to `side.values` and returns the run's record."""
    env = {**os.environ, "PYTHONPATH": str(side.tree / "src"),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    where = f"{side.label} ({side.rev}, {side.commit[:9]}) round {round_}"
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=side.tree, env=env, stdout=subprocess.PIPE, text=True)
    except OSError as e:
        raise ABError(f"cannot run {cmd[0]!r} in {side.tree} for {where}: {e.strerror} (write `python`: ab.py "
                      "puts its own interpreter's folder first on PATH)") from None
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        tail = " | ".join(done.stdout.strip().splitlines()[-3:])
        raise ABError(f"the command exited with {done.returncode} for {where} (its last stdout lines: {tail!r})")
    obj = last_json_object(done.stdout) if keys else None
    values = {key: metric(obj, key, where, done.stdout) for key in keys}
    if wall:
        values[WALL] = seconds
    for key, value in values.items():
        side.values.setdefault(key, []).append(value)
    return {"round": round_, "side": side.label, "wall_s": round(seconds, 4), "values": values}


def summary(a: Side, b: Side) -> dict:
    out = {}
    for key in a.values:
        ma, mb = statistics.median(a.values[key]), statistics.median(b.values[key])
        out[key] = {"a_median": ma, "b_median": mb, "b_over_a": round(mb / ma, 4) if ma else None,
                    "a": a.values[key], "b": b.values[key]}
    return out


def table(a: Side, b: Side, metrics: dict) -> str:
    names = {s.label: f"{s.label} {s.rev} ({s.commit[:9]}{', dirty' if s.dirty else ''})" for s in (a, b)}
    width = max(map(len, names.values()))
    lines = []
    for key, m in metrics.items():
        ratio = "n/a (A's median is 0)" if m["b_over_a"] is None else f"{m['b_over_a']:.3f}"
        lines += [key,
                  f"  {names['A']:<{width}}  median {m['a_median']:>12.6g}   rounds " +
                  " ".join(f"{v:.6g}" for v in m["a"]),
                  f"  {names['B']:<{width}}  median {m['b_median']:>12.6g}   rounds " +
                  " ".join(f"{v:.6g}" for v in m["b"]),
                  f"  B/A {ratio}"]
    return "\n".join(lines)


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    split = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(prog="ab.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 usage="%(prog)s REV_A REV_B [--metric KEY ...] [--time] [options] -- CMD ARGS...")
    ap.add_argument("rev_a", help=f"revision A (git rev-parse syntax) or {WORKTREE}")
    ap.add_argument("rev_b", help=f"revision B (git rev-parse syntax) or {WORKTREE}")
    ap.add_argument("--metric", action="append", default=[], metavar="KEY",
                    help="dotted path into the last JSON object on stdout (repeatable)")
    ap.add_argument("--time", action="store_true", help=f"the command's wall seconds as the metric {WALL}")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of A then B (default 3)")
    ap.add_argument("-C", dest="repo", type=Path, default=Path.cwd(), help="the git repository (default: cwd)")
    ap.add_argument("--json", type=Path, help="write the figures and their context to this file")
    args = ap.parse_args(argv[:split])
    cmd = argv[split + 1:]
    if not cmd:
        raise ABError("no command: put it after `--` (ab.py A B --metric KEY -- python benchmarks/x.py ...)")
    if not args.metric and not args.time:
        raise ABError("nothing to compare: give --metric KEY (repeatable) and/or --time")
    if args.rounds < 1:
        raise ABError(f"--rounds must be at least 1, got {args.rounds}")
    return args, cmd


def add_worktree(repo: Path, side: Side, made: list[Path]) -> None:
    if side.rev == WORKTREE:
        side.tree = repo
        return
    path = Path(tempfile.mkdtemp(prefix=f"ab-{side.label}-{side.commit[:9]}-"))
    made.append(path)
    git(repo, "worktree", "add", "--detach", "--quiet", str(path), side.commit)
    side.tree = path


def remove_worktrees(repo: Path, made: list[Path]) -> None:
    for path in made:
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(path)], capture_output=True)
        shutil.rmtree(path, ignore_errors=True)
    if made:
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)


def compare(args: argparse.Namespace, cmd: list[str]) -> tuple[Side, Side, dict]:
    """Both sides' worktrees, the rounds, and the record that --json writes."""
    repo = Path(git(args.repo, "rev-parse", "--show-toplevel"))
    a, b = resolve(repo, "A", args.rev_a), resolve(repo, "B", args.rev_b)
    started = datetime.datetime.now(datetime.timezone.utc)
    made: list[Path] = []
    runs = []
    try:
        add_worktree(repo, a, made)
        add_worktree(repo, b, made)
        for r in range(1, args.rounds + 1):
            for side in (a, b):
                runs.append(run_once(side, cmd, args.metric, args.time, r))
                print(f"round {r}/{args.rounds} {side.label}: " +
                      ", ".join(f"{k} {v:.6g}" for k, v in runs[-1]["values"].items()), file=sys.stderr)
    finally:
        remove_worktrees(repo, made)
    record = {"a": {"rev": a.rev, "commit": a.commit, "dirty": a.dirty},
              "b": {"rev": b.rev, "commit": b.commit, "dirty": b.dirty},
              "command": cmd, "repo": str(repo), "rounds": args.rounds, "order": "A then B in every round",
              "pythonpath": "<tree>/src", "machine": machine(),
              "date_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"), "metrics": summary(a, b), "runs": runs}
    return a, b, record


def main(argv: list[str] | None = None) -> int:
    try:
        args, cmd = parse(sys.argv[1:] if argv is None else argv)
        a, b, result = compare(args, cmd)
    except ABError as e:
        print(f"ab.py: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ab.py: interrupted (worktrees removed)", file=sys.stderr)
        return 130
    print(table(a, b, result["metrics"]))
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
