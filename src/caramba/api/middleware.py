"""ASGI middleware: who may address the server, request size limit and security headers
(plain ASGI, so streamed responses such as server-sent events pass through untouched).

Host and Origin: a page on another site can make a browser send requests here (a DNS name
that rebinds to 127.0.0.1 makes them look same-origin to the browser). The server answers
only requests whose ``Host`` names it (the bound address, loopback names, the names an
operator allows) and, when a browser says where a request comes from (``Origin``), only its
own pages: another ``Host`` is 421, another ``Origin`` 403, before any route runs.

The size limit runs before any body is buffered. A body must declare its size: a ``Content-Length`` above the limit is refused at once (413),
and a chunked body without one is refused (411), so the server never reads an unbounded body.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

LOOPBACK = ("localhost", "127.0.0.1", "::1")
WILDCARD = ("", "0.0.0.0", "::")  # bound to every address: no name of its own
DEFAULT_PORTS = (80, 443)


async def _reply(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` (413) or of undeclared size (411)."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers", ()))
            length = headers.get(b"content-length")
            if length is not None:
                try:
                    declared = int(length)
                except ValueError:
                    await _reply(send, 400, "Content-Length is not a number")
                    return
                if declared > self.max_bytes:
                    await _reply(send, 413, f"request body is larger than the limit of {self.max_bytes} bytes")
                    return
            elif b"chunked" in headers.get(b"transfer-encoding", b"").lower():
                await _reply(send, 411, "a request body must declare its Content-Length")
                return
        await self.app(scope, receive, send)


class SecurityHeaders:
    """``nosniff`` on everything; on HTML pages a policy that allows only this origin."""

    def __init__(self, app: Any, csp: str) -> None:
        self.app = app
        self.csp = csp.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                names = {k.lower() for k, _ in headers}
                if b"x-content-type-options" not in names:
                    headers.append((b"x-content-type-options", b"nosniff"))
                ctype = next((v for k, v in headers if k.lower() == b"content-type"), b"")
                if ctype.startswith(b"text/html"):
                    headers.append((b"content-security-policy", self.csp))
                    headers.append((b"x-frame-options", b"DENY"))
                    headers.append((b"referrer-policy", b"no-referrer"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _names(text: str) -> list[str]:
    return [n.strip().lower().strip("[]").rstrip(".") for n in (text or "").split(",") if n.strip()]


def allowed_hosts(settings: Any, extra: Iterable[str] = ()) -> frozenset[str]:
    """Host names this server answers to: loopback, the bound address (unless it is a wildcard),
    ``settings.serve_allowed_hosts`` and ``extra``; ``*`` among them allows any."""
    names = set(LOOPBACK) | set(_names(settings.serve_allowed_hosts)) | set(_names(",".join(extra)))
    bound = settings.serve_host.strip().lower().strip("[]")
    if bound not in WILDCARD:
        names.add(bound)
    return frozenset(names)


def allowed_origins(settings: Any, extra: Iterable[str] = ()) -> frozenset[str]:
    """Browser origins allowed besides the server's own (``scheme://host[:port]``, lower case)."""
    return frozenset(o.strip().lower().rstrip("/") for o in (*settings.serve_allowed_origins.split(","), *extra)
                     if o.strip())


def split_host(value: str) -> tuple[str, int | None] | None:
    """``host[:port]`` or ``[v6]:port`` as (lower-case host, port or None); None if malformed.
    Ports 80 and 443 count as none, so ``Host: x`` and ``Origin: https://x`` are the same site."""
    value = value.strip().lower()
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        port = rest[1:]
    else:
        host, _, port = value.partition(":")
    if port and not (port.isdigit() and len(port) <= 5):
        return None
    number = int(port) if port else None
    return host.rstrip("."), None if number in DEFAULT_PORTS else number


class HostGuard:
    """Refuse requests whose ``Host`` is not one of ``hosts`` (421) or whose ``Origin`` is
    neither the site named by that ``Host`` nor one of ``origins`` (403)."""

    def __init__(self, app: Any, hosts: frozenset[str], origins: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.hosts = hosts
        self.origins = origins

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = dict(scope.get("headers", ()))
            raw = headers.get(b"host", b"").decode("latin-1")
            site = split_host(raw) if raw else None
            if site is None or not site[0] or ("*" not in self.hosts and site[0] not in self.hosts):
                shown = ", ".join(sorted(self.hosts))
                await _reply(send, 421, f"this server answers to the host names {shown}, not {raw[:100]!r}; "
                             "an operator adds names with the serve_allowed_hosts setting")
                return
            origin = headers.get(b"origin")
            if origin is not None and not self._same_site(origin.decode("latin-1"), site):
                await _reply(send, 403, "requests from another site's pages are refused (Origin "
                             f"{origin.decode('latin-1')[:100]!r}); an operator allows origins with serve_allowed_origins")
                return
        await self.app(scope, receive, send)

    def _same_site(self, origin: str, site: tuple[str, int | None]) -> bool:
        origin = origin.strip().lower().rstrip("/")
        if origin in self.origins:
            return True
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or parts.path or parts.query or parts.fragment:
            return False  # includes "null": a sandboxed frame or a file: page
        return split_host(parts.netloc) == site
