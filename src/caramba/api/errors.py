"""caramba errors as HTTP answers: a status, a message, and where (file:line:col, dotted path).

Every error body has ``detail`` (a one-line message). Errors about a manifest or graph also
carry ``errors``: a list of ``{message, file, line, col, path, node, op, hint}`` so a client can
point at the offending line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from caramba.errors import (
    BackendUnavailable,
    CarambaError,
    CodecError,
    ConfigError,
    GraphError,
    PrecisionError,
    ResourceError,
    UnsupportedOperation,
    VerificationError,
)

if TYPE_CHECKING:  # FastAPI loads with the app; the sandbox worker renders errors without it
    from fastapi import Request
    from fastapi.responses import JSONResponse


class NotFound(CarambaError):
    """The named experiment, run, asset, model or artifact does not exist; list them to see what does."""


class Conflict(CarambaError):
    """The request is valid but the object is in a state that does not allow it (e.g. resuming a
    run that finished)."""


class Busy(CarambaError):
    """The server cannot take this request now (every validation worker is busy, or none could
    start). Retry in a few seconds."""


class ValidationLimit(CarambaError):
    """Checking a submitted manifest went over the server's time or memory limit, so it was
    stopped. Make what it expands to smaller (variables that grow very large, repeat counts,
    dataset sizes) or ask the operator to raise ``serve_validate_timeout_s`` /
    ``serve_validate_memory_mb``."""


class Answered(CarambaError):
    """An error already rendered in the API's shape (``body``, ``status``), e.g. by the process
    that checked a submitted manifest; it is sent as it is."""

    def __init__(self, body: dict[str, Any], status: int) -> None:
        super().__init__(str(body.get("detail", "error")))
        self.body = body
        self.status = status


def status_of(exc: CarambaError) -> int:
    """The HTTP status of a caramba error: always a 4xx (or 503 for a busy server)."""
    from caramba.manifest.errors import ManifestError

    if isinstance(exc, Answered):
        return exc.status
    from caramba.store.runs import StoreUnavailable

    if isinstance(exc, Busy | StoreUnavailable):  # the server's trouble, not the request's
        return 503
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, Conflict):
        return 409
    if isinstance(exc, BackendUnavailable):
        return 409
    if isinstance(exc, ManifestError | GraphError | VerificationError | UnsupportedOperation | PrecisionError
                  | CodecError | ConfigError | ValidationLimit | ResourceError):
        return 422
    return 400


def _origin_fields(origin: Any) -> dict[str, Any]:
    if origin is None:
        return {}
    out = {}
    for key in ("file", "line", "col", "path"):
        value = getattr(origin, key, None)
        if value is not None:
            out[key] = value
    if not out:
        out["origin"] = str(origin)
    return out


def error_item(exc: CarambaError) -> dict[str, Any]:
    item: dict[str, Any] = {"type": type(exc).__name__, "message": exc.message}
    item.update(_origin_fields(exc.origin))
    path = getattr(exc, "path", None)
    if isinstance(path, str) and path:
        item["path"] = path
    for key in ("node", "op", "backend", "hint"):
        value = getattr(exc, key, None)
        if value is not None:
            item[key] = value
    return item


def error_body(exc: CarambaError) -> dict[str, Any]:
    items = [error_item(e) for e in getattr(exc, "errors", None) or [exc]]
    return {"detail": str(exc), "type": type(exc).__name__, "errors": items}


async def request_error_handler(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's request validation errors in the same shape as every other error."""
    from fastapi.encoders import jsonable_encoder
    from fastapi.responses import JSONResponse

    items = []
    for e in exc.errors():  # type: ignore[attr-defined]
        path = ".".join(str(p) for p in e.get("loc", ()))
        items.append({"type": e.get("type", "invalid"), "message": e.get("msg", ""), "path": path})
    first = items[0] if items else {"message": "invalid request", "path": ""}
    more = f" (and {len(items) - 1} more)" if len(items) > 1 else ""
    detail = f"{first['path']}: {first['message']}{more}" if first["path"] else first["message"] + more
    return JSONResponse(jsonable_encoder({"detail": detail, "type": "RequestValidationError", "errors": items}),
                        status_code=422)


def allowed_methods(app: Any, path: str) -> list[str]:
    """The methods the spec documents for ``path`` (what a 405's ``Allow`` must list). A
    template matches segment by segment; only when none does may its last parameter span
    several segments (artifact names such as ``checkpoints/step10.safetensors``), and then
    only the templates with the most literal segments count (``/runs/{id}`` does not take
    ``/runs/x/artifacts/a/b``: ``/runs/{id}/artifacts/{name}`` does)."""
    import re

    def pattern(template: str, greedy_last: bool) -> str:
        parts = re.split(r"(\{[^}]+\})", template)
        last = max((i for i, p in enumerate(parts) if p.startswith("{")), default=-1)
        return "".join(
            ((".+" if greedy_last and i == last else "[^/]+") if p.startswith("{") else re.escape(p))
            for i, p in enumerate(parts)
        )

    def literals(template: str) -> int:
        return sum(1 for seg in template.split("/") if seg and not seg.startswith("{"))

    paths = app.openapi().get("paths", {})
    for greedy in (False, True):
        found = [(t, item) for t, item in paths.items() if re.fullmatch(pattern(t, greedy), path)]
        if greedy and found:
            most = max(literals(t) for t, _ in found)
            found = [(t, item) for t, item in found if literals(t) == most]
        methods = {m.upper() for _, item in found for m in item}
        if methods:
            return sorted(methods)
    return []


async def http_error_handler(request: Request, exc: Exception) -> JSONResponse:
    """HTTP errors in the common shape; a 405 lists every method the path takes in ``Allow``
    (Starlette would list only those of the first route it matched)."""
    from fastapi.responses import JSONResponse

    status = getattr(exc, "status_code", 500)
    headers = dict(getattr(exc, "headers", None) or {})
    if status == 405:
        allowed = allowed_methods(request.app, request.url.path)
        if allowed:
            headers["Allow"] = ", ".join(allowed)
    detail = getattr(exc, "detail", None) or "error"
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


async def caramba_error_handler(request: Request, exc: Exception) -> JSONResponse:
    from fastapi.responses import JSONResponse

    assert isinstance(exc, CarambaError)
    body = exc.body if isinstance(exc, Answered) else error_body(exc)
    headers = {"Retry-After": "5"} if isinstance(exc, Busy) else None
    return JSONResponse(body, status_code=status_of(exc), headers=headers)


async def unprocessable_handler(request: Request, exc: Exception) -> JSONResponse:
    """A ValueError or UnicodeError that escaped a route: the request held a value the server
    cannot process. 422, naming only the kind (its text may quote data the client should not see)."""
    import logging

    from fastapi.responses import JSONResponse

    logging.getLogger("caramba.api").warning("422 for %s %s", request.method, request.url.path, exc_info=exc)
    kind = type(exc).__name__
    detail = (f"the request holds a value this server cannot process ({kind})"
              + ("; text must be valid Unicode (no lone surrogates)" if isinstance(exc, UnicodeError) else ""))
    return JSONResponse({"detail": detail, "type": kind, "errors": [{"type": kind, "message": detail}]},
                        status_code=422)
