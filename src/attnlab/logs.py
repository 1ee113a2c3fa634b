"""Logging set-up and training progress. Library code logs through `logging.getLogger("attnlab")`; only the
CLI (or a user's script) decides where it goes, by calling `setup_logging` once.

The handler writes plain lines to the current sys.stderr through `tqdm.write`, so a message printed while a
progress bar is on the terminal does not tear the bar apart.
"""

from __future__ import annotations

import logging
import sys

from tqdm import tqdm
from tqdm.auto import tqdm as tqdm_auto

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


def in_notebook() -> bool:
    """True inside a Jupyter kernel (Notebook, JupyterLab, VS Code), where outputs are HTML and widgets."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    return shell is not None and hasattr(shell, "kernel")


class Progress:
    """Training progress: a tqdm bar (steps, loss, tokens/s) when stderr is a terminal, a notebook progress bar
    (tqdm.auto) in Jupyter; otherwise (a log file, CI, a pipe) one plain log line per `report`, so a log holds no
    carriage-return fragments.

    total: the step limit, or None (a time budget: elapsed time and rate, no ETA); initial: steps already done.
    """

    def __init__(self, total: int | None, initial: int = 0, enabled: bool = True) -> None:
        self.total, self.enabled, self.bar = total, enabled, None
        if enabled and in_notebook():
            self.bar = tqdm_auto(total=total, initial=initial, unit="step")
        elif enabled and sys.stderr.isatty():
            self.bar = tqdm(total=total, initial=initial, dynamic_ncols=True, unit="step", file=sys.stderr)

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def report(self, rec: dict) -> None:
        """rec: a trainer log record with step, loss, tokens_per_s and lr."""
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_s']:,.0f}")
        elif self.enabled:
            of = f"/{self.total}" if self.total else ""
            logging.getLogger(LOGGER_NAME).info("step %d%s: loss %.3f, %s tokens/s, lr %.3g", rec["step"], of,
                                                rec["loss"], f"{rec['tokens_per_s']:,.0f}", rec["lr"])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
