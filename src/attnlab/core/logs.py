"""Logging set-up, training progress and the training log a run keeps (`read_metrics`: RUN_DIR/metrics.jsonl, which
the trainer appends to). Library code logs through `logging.getLogger("attnlab")`; only the CLI (or a user's
script) decides where it goes, by calling `setup_logging` once.

The handler writes plain lines to the current sys.stderr through `tqdm.write`, so a message printed while a
progress bar is on the terminal does not tear the bar apart.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from tqdm import tqdm
from tqdm.auto import tqdm as tqdm_auto

from attnlab.core.errors import AttnlabError

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


def text_progress_in_notebooks() -> bool:
    """True when ATTNLAB_PROGRESS=text: a notebook executed unattended (scripts/run_notebooks.py sets it) shows
    progress as a text bar on stderr, whose last state the saved notebook keeps, instead of a widget whose saved
    form is its first state and whose exported HTML would fetch the widget code from the network."""
    return os.environ.get("ATTNLAB_PROGRESS", "").lower() == "text"


class Progress:
    """Training progress: a tqdm bar (steps, loss, tokens/s) when stderr is a terminal, a notebook progress bar
    (tqdm.auto) in Jupyter (a text bar on stderr with ATTNLAB_PROGRESS=text); otherwise (a log file, CI, a pipe)
    one plain log line per `report`, so a log holds no carriage-return fragments.

    total: the step limit, or None (a time budget: elapsed time and rate, no ETA); initial: steps already done.
    """

    def __init__(self, total: int | None, initial: int = 0, enabled: bool = True) -> None:
        self.total, self.enabled, self.bar = total, enabled, None
        if enabled and in_notebook() and text_progress_in_notebooks():
            self.bar = tqdm(total=total, initial=initial, unit="step", file=sys.stderr)
        elif enabled and in_notebook():
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


def read_metrics(run_dir: Path | str) -> list[dict]:
    """The records of a run's metrics.jsonl (what `Trainer.log` appends): each a JSON object with an integer step
    and numbers (or booleans); [] without the file. A line cut short by a kill at the end is skipped; any other
    line that is no such record is an AttnlabError naming the file and line."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    lines = path.read_bytes().split(b"\n")
    records = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # JSON syntax, UTF-8, a 4,300-digit integer, deep nesting
            if i == len(lines):  # the last line, without its newline: a write cut short
                continue
            raise AttnlabError(f"{path}:{i}: not a JSON record") from None
        if not (isinstance(record, dict) and type(record.get("step")) is int and record["step"] >= 0
                and all(isinstance(v, (int, float)) for v in record.values())):
            raise AttnlabError(f"{path}:{i}: expected an object with an integer step >= 0 and numbers")
        records.append(record)
    return records
