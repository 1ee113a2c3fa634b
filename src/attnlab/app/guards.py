"""HTTP guards of `attnlab serve` that belong to the web app (`attnlab.app.server`): which Host names it answers.

`HostCheck` answers 421 (Misdirected Request) to a request whose Host header names another site. A web page on
another site can rebind its DNS name to 127.0.0.1 and then read a server on a student's laptop; such a page sends
its own name as Host, so the check keeps it out (issue 47). The names answered are the loopback names, the address
the server listens on, and each `--allowed-host` (docs/deployment.md, "The Host header").
"""

from __future__ import annotations

from typing import Sequence

from attnlab.decode.serving import json_error

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
