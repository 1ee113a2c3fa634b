"""What the benchmark scripts share: the machine and the commit a figure was taken on, a free port for a server a
script starts, and the result written to `--json`. Standard library only: `ab.py` and the server benchmarks use it
without importing torch.

benchmarks/ is not a package: a script imports this file as its neighbour, the way the scripts import each other,

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import commit, machine  # noqa: E402
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cpu_name() -> str:
    """The CPU's model name as /proc/cpuinfo gives it ("AMD EPYC 7B13"), else what `platform` knows ("x86_64")."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        name = ""
    return name or platform.processor() or platform.machine()


def machine(*packages: str) -> dict:
    """The machine a figure was taken on: the CPU (`cpu_name`), its cores and those this process may run on (what
    `nproc` says), the load average over 1, 5 and 15 minutes and this process's niceness at the call,
    OMP_NUM_THREADS, the OS, the kernel and Python; where the script has imported torch, its version and the threads
    it computes with; and the version of each of `packages` (None where it is not installed)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    out = {"cpu": cpu_name(), "cores": os.cpu_count(), "usable_cores": usable,
           "load_average": [round(x, 2) for x in os.getloadavg()], "nice": os.nice(0),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "platform": platform.platform(),
           "kernel": platform.release(), "python": platform.python_version()}
    torch = sys.modules.get("torch")  # not imported here: ab.py and the server benchmarks run without it
    if torch is not None:
        out["torch"], out["threads"] = torch.__version__, torch.get_num_threads()
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


ARCHIVED = Path(__file__).resolve().with_name("ARCHIVED_COMMIT")  # `git archive` writes the commit in (export-subst)


def commit(repo: Path = REPO) -> str:
    """The short hash of HEAD of the checkout around `repo` (this one by default; any folder in it), followed by
    " + uncommitted changes under src/" where its src/ differs from HEAD; in a tree made by `git archive` (where
    recorded benchmarks run), the commit it was made from, "(archive)" after it; "" where there is no git and no
    archive (a copied tree on a lent GPU machine)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = bool(head) and bool(git("status", "--porcelain", "--", ":/src"))
    except OSError:
        head, dirty = "", False
    if not head and repo == REPO and ARCHIVED.is_file():
        archived = ARCHIVED.read_text(encoding="utf-8").strip()
        return "" if archived.startswith("$Format") else f"{archived} (archive)"
    return head + (" + uncommitted changes under src/" if dirty else "")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the system's pick), for a server the script starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_json(path: str | Path | None, result, indent: int | None = 1) -> str:
    """`result` as JSON text (non-ASCII characters as they are), written with a final newline to `path` where one
    is given, its folder made first. Returns the text, for the script to print."""
    text = json.dumps(result, indent=indent, ensure_ascii=False)
    if path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
    return text


def append_json_line(path: str | Path | None, row) -> str:
    """`row` as one JSON line, appended to `path` where one is given (a JSONL file that grows by a line a run).
    Returns the line, for the script to print."""
    line = json.dumps(row, ensure_ascii=False)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    return line
