#!/usr/bin/env python
"""Counts the copies issue 48 listed, in two commits side by side (`git grep` on each commit's tree; nothing is
checked out): definitions of SPLITS and of the device names, writers of latest.json, the benchmarks' machine(),
commit() and free_port(), the length statistics, and the command-line options declared more than once.

    python scripts/count_copies.py [OLD [NEW]]    (default: f0f0eb6, the commit before issue 48, and HEAD)

Prints a Markdown table: each pattern, its count in OLD and in NEW.
"""

from __future__ import annotations

import subprocess
import sys

PATTERNS = {  # what: (git grep -E pattern, paths)
    "SPLITS defined": (r"^SPLITS\b.*=", ["src"]),
    "device names listed": (r"\(\"auto\", \"cpu\", \"cuda\", \"mps\"\)", ["src"]),
    "latest.json written": (r"write_json\(.*\"latest\.json\"", ["src"]),
    "length statistics defined": (r"def _?length_stats\(", ["src"]),
    "machine() defined": (r"^def machine\(", ["benchmarks", "scripts"]),
    "commit() defined": (r"^def commit\(", ["benchmarks", "scripts"]),
    "free_port() defined": (r"^def free_port\(", ["benchmarks", "scripts"]),
    "--beam declared": (r"add_argument\(\"--beam\"", ["src"]),
    "--split declared": (r"add_argument\(\"--split\"", ["src"]),
    "--formats declared": (r"add_argument\(\"--formats\"", ["src"]),
    "--engine declared": (r"add_argument\(\"--engine\"", ["src"]),
}


def count(rev: str, pattern: str, paths: list[str]) -> int:
    done = subprocess.run(["git", "grep", "-c", "-E", pattern, rev, "--", *paths], capture_output=True, text=True)
    return sum(int(line.rsplit(":", 1)[1]) for line in done.stdout.splitlines() if line.strip())


def main() -> int:
    old = sys.argv[1] if len(sys.argv) > 1 else "f0f0eb6"
    new = sys.argv[2] if len(sys.argv) > 2 else "HEAD"
    print(f"| copy | {old} | {new} |\n|---|---|---|")
    for what, (pattern, paths) in PATTERNS.items():
        print(f"| {what} | {count(old, pattern, paths)} | {count(new, pattern, paths)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
