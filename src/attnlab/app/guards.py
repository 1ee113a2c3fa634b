"""The HTTP guards of `attnlab serve` (`attnlab.app.server`), which bound what a client controls: body size and
time (`BodyLimit`), requests in progress (`ConcurrencyLimit`), connections per client and in all, request heads'
size and time (`guarded_h11`, uvicorn's h11 protocol), open files, repeated log lines (`RateLimit`), the listening
socket (`listen`), HTTP's method rules (`HttpMethods`: HEAD, OPTIONS, `Allow`) and the Host names it answers
(`HostCheck`). Every refusal is a JSON body {"error": "..."}; a busy server's is a 503 with Retry-After.

`HostCheck` answers 421 (Misdirected Request) to a request whose Host header names another site. A web page on
another site can rebind its DNS name to 127.0.0.1 and then read a server on a student's laptop; such a page sends
its own name as Host, so the check keeps it out (issue 47). The names answered are the loopback names, the address
the server listens on, and each `--allowed-host` (docs/deployment.md, "The Host header").
"""

from __future__ import annotations

import asyncio
import collections
import http
import json
import logging
import re
import socket
import time
from typing import Sequence

from fastapi.responses import JSONResponse, Response
from starlette.routing import Match

from attnlab.core.errors import AttnlabError

log = logging.getLogger("attnlab")
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")  # the names of this machine a browser may send as Host


def host_name(header: str) -> str:
    """The host of a Host header without its port ("[::1]:8000" -> "::1"), lower-cased."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class HostCheck:
    """ASGI middleware: a request whose Host header is not an allowed name gets 421 (Misdirected Request). A page on
    another site that rebinds its DNS name to 127.0.0.1 sends its own name as Host, so it cannot read a server on
    a student's laptop (DNS rebinding). `allowed`: host names without ports; loopback names by default
    (`serve`), a classroom's address added by `--allowed-host`."""

    def __init__(self, app, allowed: Sequence[str]) -> None:
        self.app, self.allowed = app, {h.lower().strip("[]") for h in allowed}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if host_name(host) not in self.allowed:
                await json_error(421, f"Host {host[:80]!r} is not served here; start the server with "
                                      "--allowed-host NAME to serve it")(scope, receive, send)
                return
        await self.app(scope, receive, send)


# ---------------------------------------------------------------------------------------------- limits
CLOSE = {"Connection": "close"}  # a response that closes its connection (the rest of the request is not read)


def json_error(status: int, message: str, headers: dict | None = None, **extra) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status, headers=headers)


def raw_json_response(status: int, message: str, headers: dict | None = None) -> bytes:
    """A whole HTTP/1.1 response with a JSON error body that closes the connection, for the protocol layer (which
    answers before any app runs: a refused connection, a request head over the limit, a malformed request)."""
    body = json.dumps({"error": message}).encode()
    lines = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}", "content-type: application/json",
             f"content-length: {len(body)}", "connection: close",
             *(f"{name}: {value}" for name, value in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class BodyLimit:
    """ASGI middleware: request bodies over max_bytes get 413 before the app parses them (the declared
    Content-Length is checked first, then the bytes actually received, for chunked uploads), and a body that has not
    fully arrived `timeout` seconds after its head gets 408 (a slow or stalled upload holds no connection for long).
    Both close the connection: the rest of the body is not read."""

    def __init__(self, app, max_bytes: int, timeout: float = 10.0) -> None:
        self.app, self.max_bytes, self.timeout = app, max_bytes, timeout

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await json_error(400, "invalid Content-Length header", CLOSE)(scope, receive, send)
                return
            if int(declared) > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        body, more = b"", True
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.0))
            except asyncio.TimeoutError:
                await json_error(408, f"the request body did not arrive within {self.timeout:g} s", CLOSE)(
                    scope, receive, send)
                return
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
        await json_error(413, f"request body over {self.max_bytes} bytes", CLOSE)(scope, receive, send)



class ConcurrencyLimit:
    """ASGI middleware: at most max_requests requests in progress at once; beyond, 503 JSON with Retry-After
    (uvicorn's own limit_concurrency answers plain text without it, and is off)."""

    def __init__(self, app, max_requests: int, retry_after: int = 1) -> None:
        self.app, self.max_requests, self.retry_after = app, max_requests, retry_after
        self.active = 0  # one event loop: no lock

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.active >= self.max_requests:
            await json_error(503, f"the server is busy ({self.max_requests} requests in progress)",
                             {"Retry-After": str(self.retry_after)}, retry_after=self.retry_after)(scope, receive, send)
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


# ---------------------------------------------------------------------------------------------- methods
METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(routes: list, scope: dict) -> list[str]:
    """The methods the routes answer for scope's path (HEAD wherever GET, OPTIONS wherever any); [] when no route
    matches the path. A mount (the static files) serves GET."""
    methods: set[str] = set()
    for route in routes:
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ("GET",))
    if "GET" in methods:
        methods.add("HEAD")
    if methods:
        methods.add("OPTIONS")
    return sorted(methods, key=lambda m: (METHOD_ORDER.index(m) if m in METHOD_ORDER else len(METHOD_ORDER), m))


class HttpMethods:
    """ASGI middleware for a Starlette app: HEAD is answered as GET without the body (FastAPI routes answer only
    the methods they declare), and OPTIONS with 204 and `Allow` (404 for an unknown path; `OPTIONS *`: every
    method). A 405's `Allow` is the app's exception handler's (see `allowed_methods`)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":
            methods = list(METHOD_ORDER[:3]) + ["OPTIONS"] if scope["path"] == "*" else \
                allowed_methods(scope["app"].routes, scope)
            response = Response(status_code=204, headers={"Allow": ", ".join(methods)}) if methods else \
                json_error(404, "Not Found")
            await response(scope, receive, send)
            return

        async def no_body(message) -> None:  # the headers (Content-Length included) of the GET, not its body
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, no_body)


# ---------------------------------------------------------------------------------------------- connections
HEAD_END = re.compile(rb"\n\r?\n")  # the blank line that ends a request head (h11 accepts bare LF too)
LINGER = 1.0  # seconds a refused connection is read (and discarded) after its 503, so the client reads the answer
MAX_LINGERING = 1024  # refused connections lingering at once; beyond, closed at once


def guarded_h11(max_connections: int, header_timeout: float, max_per_client: int | None = None,
                max_head: int = 16 * 1024) -> type:
    """uvicorn's h11 protocol with guards on connections and request heads:

    - a connection that has not sent a complete request head within header_timeout seconds (of opening, or of its
      last response) is closed: an idle or slowloris client holds no file descriptor for long;
    - a request head over max_head bytes gets 431 and the connection is closed (counted as the bytes arrive: h11's
      own limit only sees a head that arrives in pieces);
    - a client (an IP address) may hold max_per_client connections; one more gets 503 with Retry-After;
    - past max_connections, the connection whose request has been incomplete the longest (idle, a slow head or a
      slow body) is closed to make room; when every connection is busy with a complete request, the new one gets
      503 with Retry-After.

    A refused connection is answered at once, then read and discarded for `LINGER` seconds before it closes, so the
    client reads the 503 instead of a reset. uvicorn's plain-text 400 for a malformed request is JSON here."""
    import h11  # uvicorn's HTTP/1.1 parser: loaded only to serve
    from uvicorn.protocols.http.h11_impl import H11Protocol

    per_client: collections.Counter = collections.Counter()
    # connections whose request has not fully arrived, oldest first; an OrderedDict: a dict's first key after many
    # deletions at the front is found by scanning the deleted slots (quadratic under a flood), a linked list's at once
    incomplete: collections.OrderedDict = collections.OrderedDict()
    lingering: set = set()
    max_per_client = max_per_client or max_connections

    class GuardedH11(H11Protocol):
        _head_timer = None
        _ip: str | None = None
        _head_bytes = 0  # bytes of the current request head so far; -1 once its end has arrived
        _tail = b""  # the last bytes of the head so far, to find its end across reads

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            ip = self.client[0] if self.client else ""
            if per_client[ip] >= max_per_client:
                self._refuse(f"too many connections from {ip} ({per_client[ip]}; the limit per client is "
                             f"{max_per_client})")
                return
            self._ip = ip
            per_client[ip] += 1
            if len(self.connections) - len(lingering) > max_connections:
                oldest = next(iter(incomplete), None)
                if oldest is None:  # every connection is busy with a whole request
                    self._refuse(f"the server is full ({max_connections} connections busy)")
                    return
                oldest._close()
            self._await_head()

        def _await_head(self) -> None:
            incomplete.pop(self, None)
            incomplete[self] = None
            self._head_bytes, self._tail = 0, b""
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(header_timeout, self._head_timeout)

        def data_received(self, data: bytes) -> None:
            if self in lingering:
                return  # a refused connection: read and dropped
            if self._head_bytes >= 0 and self.conn.their_state is h11.IDLE:
                seen = self._tail + data
                end = HEAD_END.search(seen)
                size = self._head_bytes + (end.end() - len(self._tail) if end else len(data))
                if size > max_head:
                    log.warning("refused a request head over %d bytes", max_head)
                    self._refuse(f"request head over {max_head} bytes", 431)
                    return
                self._head_bytes, self._tail = (-1, b"") if end else (size, seen[-2:])
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not cycle and self._head_timer is not None:  # a request head arrived
                self._head_timer.cancel()
                self._head_timer = None
            if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
                incomplete.pop(self, None)  # the whole request is here (or the connection is done)

        def on_response_complete(self) -> None:
            super().on_response_complete()  # may start a pipelined request already received
            if not self.transport.is_closing() and self._ip is not None and self.cycle.response_complete:
                self._await_head()  # the next request's head, within header_timeout too

        def send_400_response(self, msg: str) -> None:
            self.transport.write(raw_json_response(400, "malformed HTTP request"))
            self._close()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            incomplete.pop(self, None)
            lingering.discard(self)
            if self._ip is not None:
                per_client[self._ip] -= 1
                if per_client[self._ip] <= 0:
                    del per_client[self._ip]
                self._ip = None
            super().connection_lost(exc)

        def _refuse(self, message: str, status: int = 503) -> None:
            """Answers `status` with a JSON error and closes after LINGER seconds of reading and discarding what
            the client still sends (closing with unread data would reset the connection, and the client might
            never read the answer); at once when MAX_LINGERING connections already linger."""
            self.transport.write(raw_json_response(status, message, {"Retry-After": "1"} if status == 503 else None))
            if len(lingering) >= MAX_LINGERING or not self.transport.can_write_eof():
                self._close()
                return
            lingering.add(self)
            incomplete.pop(self, None)
            self.transport.write_eof()
            self.loop.call_later(LINGER, self._close)

        def _close(self) -> None:
            incomplete.pop(self, None)
            if not self.transport.is_closing():
                self.transport.close()

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self in incomplete and self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
                self._close()

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


WILDCARD_HOSTS = ("0.0.0.0", "::", "")  # --host values that listen on every address of the machine


def served_hosts(host: str) -> list[str]:
    """The Host names `serve` answers besides LOOPBACK_HOSTS and --allowed-host: the --host address, or, listening
    on every address (WILDCARD_HOSTS), this machine's own name and addresses (what a student types: its name, its
    fully qualified name, each address its name resolves to and the address of its route out, found without
    sending a packet). A name a web page could rebind to this machine is none of them."""
    if host not in WILDCARD_HOSTS:
        return [host]
    names = [socket.gethostname(), socket.getfqdn()]
    try:
        names += [info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None)]
    except OSError:
        pass
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):  # documentation ranges
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect((probe, 9))  # a UDP connect only chooses the route: nothing is sent
                names.append(s.getsockname()[0])
        except OSError:
            pass
    ipv6 = host != "0.0.0.0"  # 0.0.0.0 listens on IPv4 only
    return [n for i, n in enumerate(names)
            if n and n not in names[:i] and n not in LOOPBACK_HOSTS and (ipv6 or ":" not in n)]
