"""Logging set-up. Library code logs through `logging.getLogger("attnlab")`; only the CLI (or a user's script)
decides where it goes, by calling `setup_logging` once.

The handler writes plain lines to the current sys.stderr through `tqdm.write`, so a message printed while a
progress bar is on the terminal does not tear the bar apart.
"""

from __future__ import annotations

import logging
import sys

from tqdm import tqdm

LOGGER_NAME = "attnlab"


class TqdmHandler(logging.Handler):
    """One line per record on sys.stderr (looked up at each record, so redirections and test captures apply)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # a logging handler must not raise into the code that logs
            self.handleError(record)


def setup_logging(level: int = logging.INFO) -> logging.Logger:
    """Sends attnlab's log records of `level` and above to stderr, message only; idempotent."""
    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(h, TqdmHandler) for h in logger.handlers):
        handler = TqdmHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return logger
