"""The decoding machinery under `attnlab serve`'s API (`attnlab.app.server`): decoding lanes with bounded queues
that batch concurrent requests (`Lane`, a full queue is `Busy`), and each distinct item decoded alone
(`each_alone`), so that an answer is the one its request gets alone. The HTTP guards around them are the web app's
(`attnlab.app.guards`).
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from concurrent.futures import Future
from typing import Callable, TypeVar


log = logging.getLogger("attnlab")


# ---------------------------------------------------------------------------------------------- lanes
class Busy(Exception):
    """A lane's queue is full or a request waited past its time limit: 503 with Retry-After."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Lane:
    """One decoding worker thread with a bounded FIFO queue.

    `submit(key, item)` returns a Future, or raises `Busy` when max_queue requests are already waiting. The worker
    takes the oldest request, waits up to `window` seconds for more, and hands up to `max_batch` waiting requests
    with the same key (the beam size) to `run_batch(key, items) -> results` in one call (which decides how to
    decode them: the server decodes each distinct item alone); a request cancelled before it starts (its client
    gave up) is skipped. A result that is an exception is raised to its own request only, so one failed item
    never fails its batch mates (an exception raised by run_batch itself fails the whole batch). `batches` and
    `items` count the calls and the requests answered.
    """

    def __init__(self, name: str, max_queue: int, run_batch: Callable[[object, list], list],
                 window: float = 0.005, max_batch: int = 16) -> None:
        self.name, self.max_queue, self.run_batch = name, max_queue, run_batch
        self.window, self.max_batch = window, max_batch
        self._queue: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._seconds = 0.1  # running mean of a batch's time, for Retry-After
        self.batches = self.items = 0
        threading.Thread(target=self._work, name=f"attnlab-{name}", daemon=True).start()

    def submit(self, key: object, item: object) -> Future:
        future: Future = Future()
        with self._cond:
            if len(self._queue) >= self.max_queue:
                raise Busy(f"the {self.name} queue is full ({self.max_queue} requests waiting)", self.retry_after())
            self._queue.append((key, item, future))
            self._cond.notify()
        return future

    def queued(self) -> int:
        return len(self._queue)

    def retry_after(self) -> int:
        """Seconds until the queue has probably drained, at least 1."""
        batches = math.ceil((len(self._queue) + 1) / self.max_batch)
        return max(1, math.ceil(self._seconds * batches))

    def _take(self) -> tuple[object, list]:
        """The oldest request and up to max_batch - 1 more of its key, after a collection window."""
        with self._cond:
            while not self._queue:
                self._cond.wait()
        if self.window > 0:
            time.sleep(self.window)  # let concurrent requests arrive
        with self._cond:
            key = self._queue[0][0]
            same = [job for job in self._queue if job[0] == key][: self.max_batch]
            for job in same:
                self._queue.remove(job)
        return key, [(item, future) for _, item, future in same if future.set_running_or_notify_cancel()]

    def _work(self) -> None:
        while True:
            key, jobs = self._take()
            if not jobs:
                continue
            t0 = time.perf_counter()
            try:
                results = self.run_batch(key, [item for item, _ in jobs])
            except BaseException as e:  # handed to the waiting requests, which answer it
                for _, future in jobs:
                    future.set_exception(e)
            else:
                for (_, future), result in zip(jobs, results):
                    if isinstance(result, BaseException):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
            self.batches, self.items = self.batches + 1, self.items + len(jobs)
            self._seconds = 0.8 * self._seconds + 0.2 * (time.perf_counter() - t0)


T = TypeVar("T")
R = TypeVar("R")


def each_alone(work: Callable[[T], R], items: list[T]) -> list[R | Exception]:
    """work(item) for each distinct item once (equal items share the answer), in order; an item whose work raises
    gets the exception as its result (for `Lane`: it fails that request alone)."""
    done: dict = {}
    for item in dict.fromkeys(items):
        try:
            done[item] = work(item)
        except Exception as e:  # handed to this item's requests only
            done[item] = e
    return [done[item] for item in items]
