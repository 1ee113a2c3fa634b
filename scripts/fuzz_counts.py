"""Runs every fuzz target of tests/test_fuzz.py with more examples and counts, instead of failing at the first, the
examples that break the property: one JSON line per target on stdout,
{"target", "examples", "tracebacks", "internal_errors"}.

tracebacks: examples where an exception other than a one-line AttnlabError escaped (or the property's check
failed); internal_errors: examples the command line's last-resort handler caught (exit code 1; the API: a 5xx).
The test suite itself fails on both: there $ATTNLAB_RAISE_INTERNAL makes an internal error a traceback.

    python scripts/fuzz_counts.py --examples 300 --out docs/results/issue19_fuzz.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="max_examples of every target (default 300)")
    parser.add_argument("--out", type=Path, help="also write the JSON lines to this file")
    parser.add_argument("-k", default="", help="only the targets whose test name matches (pytest -k)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        counts = Path(tmp) / "counts.jsonl"
        env = {**os.environ, "ATTNLAB_FUZZ_EXAMPLES": str(args.examples), "ATTNLAB_FUZZ_COUNTS": str(counts),
               "ATTNLAB_RAISE_INTERNAL": "0"}  # internal errors become exit code 1 and are counted
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider",
                               str(ROOT / "tests" / "test_fuzz.py"), *(["-k", args.k] if args.k else [])],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        lines = counts.read_text(encoding="utf-8").splitlines() if counts.is_file() else []
    if not lines:
        print(done.stdout[-3000:] + done.stderr[-3000:], file=sys.stderr)
        return 1
    text = "".join(json.dumps({**json.loads(line), "max_examples": args.examples or "as in the tests"}) + "\n"
                   for line in lines)
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    result = [line for line in done.stdout.splitlines() if " passed" in line or " failed" in line]
    print(f"pytest exit code {done.returncode} in {seconds:.0f} s{': ' + result[-1] if result else ''}",
          file=sys.stderr)
    broken = sum(json.loads(line)["tracebacks"] + json.loads(line)["internal_errors"] for line in lines)
    return 0 if done.returncode == 0 and broken == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
