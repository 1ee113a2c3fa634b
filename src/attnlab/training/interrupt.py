"""Ctrl-C during training (`attnlab.training.trainer.Trainer.fit`). The first Ctrl-C asks the trainer to stop at
the end of the update it is in (or the validation after it): the checkpoint it then writes holds that update's
weights, data position and random state, so `--resume` goes on as if never stopped, dropout included. A second
Ctrl-C interrupts at once (the last completed update is saved when it lands in one). Only in the main thread of
a single process: under torchrun every rank must stop at the same update, and the ranks' own interrupts keep the
behaviour they had (each saves its last completed update)."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

log = logging.getLogger("attnlab")


class StopRequest:
    """Whether a Ctrl-C asked the training to stop at the end of its update."""

    def __init__(self) -> None:
        self.requested = False


@contextlib.contextmanager
def stop_at_step_end(enabled: bool = True) -> Iterator[StopRequest]:
    """A StopRequest set by the first SIGINT while the block runs (the handler before it comes back at once, for a
    second SIGINT, and after the block). Not enabled, outside the main thread, or where SIGINT is ignored (a
    background job): SIGINT is left as it is and the request is never set."""
    stop = StopRequest()
    previous = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if not enabled or previous is None or previous == signal.SIG_IGN:
        yield stop
        return

    def ask(signum, frame) -> None:
        stop.requested = True
        signal.signal(signal.SIGINT, previous)
        log.warning("Ctrl-C: stopping at the end of this update with a checkpoint (Ctrl-C again stops at once)")

    signal.signal(signal.SIGINT, ask)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)
