"""The `attnlab` command line: its entry point (`main`). Every user mistake ends as one line on stderr and exit
code 2; an unexpected exception as one line naming the file that holds its traceback, exit code 1.

The CLI prints results to stdout; library code logs progress and messages to stderr (`attnlab.core.logs`). The
grammar is `attnlab.app.parser` (one `add_<command>` function per command); the commands (`attnlab.app.commands`)
call the Python API (`attnlab.app.api`) and nothing else of attnlab (import-linter's contract "the command line goes
through the API", pyproject.toml).
"""

from __future__ import annotations

import faulthandler
import os
import platform
import signal
import sys
import tempfile
import traceback
from datetime import datetime
from pathlib import Path

import torch

from attnlab.app.api import cache_dir
from attnlab.app.parser import build_parser, parse_args
from attnlab.core.errors import AttnlabError
from attnlab.core.fileio import atomic_write_text, make_dirs
from attnlab.core.logs import setup_logging

# Set (to anything but "" or "0") to let an unexpected exception propagate with its traceback instead of the
# one-line internal error: the test suite sets it so that every internal error fails the test that caused it.
RAISE_INTERNAL = "ATTNLAB_RAISE_INTERNAL"


def _crash_file(exc: BaseException, argv: list[str]) -> Path | None:
    """Writes the traceback of an unexpected exception (with the versions and the command line) to a new file
    under the cache folder, or the temporary folder if that is not writable; returns its path (None if neither
    is)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    text = (f"attnlab {__import__('attnlab').__version__}, Python {platform.python_version()}, torch "
            f"{torch.__version__}, {platform.platform()}\ncommand: attnlab {' '.join(argv)}\ntime: {stamp}\n\n"
            + "".join(traceback.format_exception(exc)))
    for folder in (cache_dir() / "crashes", Path(tempfile.gettempdir())):
        path = folder / f"attnlab-crash-{stamp}-{os.getpid()}.txt"
        try:
            make_dirs(folder)
            atomic_write_text(path, text)
            return path
        except (AttnlabError, OSError):
            continue
    return None


def _internal_error(exc: Exception, argv: list[str]) -> int:
    """The last resort for an exception that is not a user mistake: one line naming it and the file that holds
    its traceback, exit code 1. Running out of memory is a user's size choice meeting the machine, not a bug:
    one line, exit code 2."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or "can't allocate memory" in message:
        print(f"attnlab: error: out of memory ({type(exc).__name__}: {message[:200]}); choose smaller sizes, "
              "batches or beams", file=sys.stderr)
        return 2
    path = _crash_file(exc, argv)
    where = f"the full traceback is in {path}" if path else "the traceback could not be saved"
    print(f"attnlab: internal error: {type(exc).__name__}: {message[:300]}; {where}; please report it",
          file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    """Runs one command; returns the exit code: 0 done, 2 a user mistake (one line on stderr), 1 an internal error
    (one line naming the file with its traceback; with $ATTNLAB_RAISE_INTERNAL set the exception propagates),
    130 interrupted."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if hasattr(signal, "SIGUSR1") and sys.__stderr__ is not None:
        # `kill -USR1 PID`: every thread's Python stack on stderr, and the process goes on (where is a run stuck?)
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    try:
        args = parse_args(build_parser(), argv)
        setup_logging()
        args.func(args)
    except AttnlabError as e:
        print(f"attnlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnlab: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # SystemExit (argparse, --help) is no Exception and passes through
        if os.environ.get(RAISE_INTERNAL, "") not in ("", "0"):
            raise
        return _internal_error(e, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
