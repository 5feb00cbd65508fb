"""ASGI middleware: request size limit and security headers (plain ASGI, so streamed
responses such as server-sent events pass through untouched).

The size limit runs before any body is buffered. A body must declare its size: a ``Content-Length`` above the limit is refused at once (413),
and a chunked body without one is refused (411), so the server never reads an unbounded body.
"""

from __future__ import annotations

import json
from typing import Any


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
