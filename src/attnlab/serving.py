"""The machinery under `attnlab serve`'s API (`attnlab.server`): decoding lanes with bounded queues that batch
concurrent requests, and the guards that bound what a client controls: body size (`BodyLimit`), connections and
request heads (`guarded_h11`), open files, repeated log lines (`RateLimit`), and the listening socket.
"""

from __future__ import annotations

import collections
import logging
import math
import socket
import threading
import time
from concurrent.futures import Future
from typing import Callable

from fastapi.responses import JSONResponse

from attnlab.errors import AttnlabError


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
    gave up) is skipped. `batches` and `items` count the calls and the requests answered.
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
                    future.set_result(result)
            self.batches, self.items = self.batches + 1, self.items + len(jobs)
            self._seconds = 0.8 * self._seconds + 0.2 * (time.perf_counter() - t0)


# ---------------------------------------------------------------------------------------------- limits
def json_error(status: int, message: str, headers: dict | None = None, **extra) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status, headers=headers)


class BodyLimit:
    """ASGI middleware: request bodies over max_bytes get 413 before the app parses them (the declared
    Content-Length is checked first, then the bytes actually received, for chunked uploads)."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await json_error(400, "invalid Content-Length header")(scope, receive, send)
                return
            if int(declared) > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope, receive, send) -> None:
        await json_error(413, f"request body over {self.max_bytes} bytes")(scope, receive, send)


def guarded_h11(max_connections: int, header_timeout: float) -> type:
    """uvicorn's h11 protocol with two guards: a connection that has not sent a complete request head within
    header_timeout seconds is closed (an idle or slowloris client holds no file descriptor for long), and a
    connection beyond max_connections is closed at once. Idle keep-alive connections are uvicorn's own
    (timeout_keep_alive)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol  # uvicorn's internals: loaded only to serve

    class GuardedH11(H11Protocol):
        _head_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.close()
                return
            self._head_timer = self.loop.call_later(header_timeout, self._head_timeout)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is not None and self._head_timer is not None:  # a request head arrived
                self._head_timer.cancel()
                self._head_timer = None

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11


def raise_fd_limit(wanted: int) -> None:
    """Raises the soft limit of open files towards `wanted` (within the hard limit), for many connections."""
    try:
        import resource  # POSIX only

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ImportError, ValueError, OSError):  # not POSIX, or not allowed: keep the limit
        pass


class RateLimit(logging.Filter):
    """Lets at most `per_minute` records of one message template through per minute, then one line saying how many
    were dropped: a flood of bad clients cannot flood the log."""

    def __init__(self, per_minute: int = 10) -> None:
        super().__init__()
        self.per_minute = per_minute
        self._seen: dict[str, list] = {}  # template -> [window start, count]

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        window = self._seen.setdefault(str(record.msg), [now, 0])
        if now - window[0] >= 60:
            dropped = window[1] - self.per_minute
            window[:] = [now, 0]
            if dropped > 0:
                record.msg = f"{record.msg} (and {dropped} more like it in the last minute)"
        window[1] += 1
        return window[1] <= self.per_minute


def listen(host: str, port: int) -> socket.socket:
    """A bound socket for uvicorn; a port in use or a bad address is a user mistake, not a traceback."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        raise AttnlabError(f"cannot listen on {host}:{port}: {e.strerror or e} "
                           "(choose another --host/--port)") from None
    return sock
