"""The FastAPI application: ``/api/v1`` (OpenAPI at ``/api/v1/openapi.json``) and the web UI.

``create_app`` builds one app around a run store directory and a token. The UI is static
HTML/CSS/JS from ``caramba/api/static`` served by the same process; the page policy forbids
loading anything from another origin, so nothing comes from a CDN.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from caramba.api import API_PREFIX, DEFAULT_MAX_BODY
from caramba.api.errors import caramba_error_handler, http_error_handler, request_error_handler, unprocessable_handler
from caramba.api.middleware import BodyLimit, HostGuard, SecurityHeaders, allowed_hosts, allowed_origins
from caramba.config import Settings, load_settings
from caramba.errors import CarambaError

STATIC = Path(__file__).resolve().parent / "static"

# The UI loads only what this server serves: no CDN, no inline script.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)


@dataclass
class ServerState:
    """What the routes share: settings, the token, the run service, the store root and the
    sandbox that checks submitted manifests."""

    settings: Settings
    token: str
    store_root: Path
    max_body: int
    runs: Any = None  # caramba.api.runs.RunService
    sandbox: Any = None  # caramba.api.sandbox.Sandbox
    started: float = field(default_factory=time.time)

    def close(self) -> None:
        """Stop accepting runs and let the running ones finish their current step."""
        if self.runs is not None:
            self.runs.close()
        if self.sandbox is not None:
            self.sandbox.close()


def _one_error_shape(app: FastAPI) -> None:
    """Every 422 in the spec is an ``ErrorBody`` (request errors are reshaped to it, see
    ``errors.request_error_handler``), not FastAPI's default list-of-errors body."""
    from fastapi.openapi.utils import get_openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        spec = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        ref = {"$ref": "#/components/schemas/ErrorBody"}
        for item in spec.get("paths", {}).values():
            for op in item.values():
                resp = op.get("responses", {}).get("422")
                if resp is not None:
                    resp["content"] = {"application/json": {"schema": ref}}
        schemas = spec.get("components", {}).get("schemas", {})
        if "ErrorBody" not in schemas:
            from caramba.api.schemas import ErrorBody, ErrorItem

            schemas["ErrorItem"] = ErrorItem.model_json_schema()
            body = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
            body.pop("$defs", None)
            schemas["ErrorBody"] = body
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(
    settings: Settings | None = None,
    *,
    token: str | None = None,
    store: str | Path | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    workers: int = 1,
    hosts: Iterable[str] = (),
    origins: Iterable[str] = (),
    validate_timeout_s: float | None = None,
    validate_memory_mb: int | None = None,
) -> FastAPI:
    """Build the app. ``token`` defaults to ``settings.api_token`` and ``store`` to
    ``settings.store``; an empty token means state-changing calls are refused.

    Requests must name this server: a ``Host`` other than ``settings.serve_host``, loopback
    names, ``settings.serve_allowed_hosts`` and ``hosts`` is answered 421, an ``Origin`` other
    than the server's own (or ``serve_allowed_origins`` and ``origins``) 403. Submitted
    manifests are checked in a sandbox worker within ``validate_timeout_s`` seconds and
    ``validate_memory_mb`` MiB (default: ``serve_validate_timeout_s`` / ``_memory_mb``)."""
    from caramba import __version__
    from caramba.api.routes import ROUTERS
    from caramba.api.runs import RunService
    from caramba.api.sandbox import Sandbox
    from caramba.store.registry import local_root

    settings = settings or load_settings()
    state = ServerState(
        settings=settings,
        token=settings.api_token if token is None else token,
        store_root=local_root(store if store is not None else settings.store),  # s3://: the replica folder
        max_body=max_body,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        state.close()

    app = FastAPI(
        title="caramba",
        version=__version__,
        summary="Submit manifests, watch runs, compile graphs, read the Notary.",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=None,  # the Swagger page loads its script from a CDN; the spec is enough
        redoc_url=None,
        lifespan=lifespan,
    )
    state.sandbox = Sandbox(
        settings.serve_validate_timeout_s if validate_timeout_s is None else validate_timeout_s,
        settings.serve_validate_memory_mb if validate_memory_mb is None else validate_memory_mb,
    )
    state.runs = RunService(state.store_root, settings, workers=workers, sandbox=state.sandbox)
    app.state.caramba = state
    app.add_exception_handler(CarambaError, caramba_error_handler)
    app.add_exception_handler(ValueError, unprocessable_handler)
    app.add_exception_handler(UnicodeError, unprocessable_handler)
    app.add_exception_handler(RequestValidationError, request_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_error_handler)
    for router in ROUTERS:
        app.include_router(router, prefix=API_PREFIX)

    _one_error_shape(app)
    index = STATIC / "index.html"

    @app.get("/", include_in_schema=False)
    def ui_index() -> FileResponse:
        return FileResponse(index, media_type="text/html")

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> HTMLResponse:
        return HTMLResponse(status_code=204)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(SecurityHeaders, csp=CSP)
    app.add_middleware(BodyLimit, max_bytes=max_body)
    # outermost: a request for another name (DNS rebinding) or from another page gets nothing
    app.add_middleware(HostGuard, hosts=allowed_hosts(settings, hosts), origins=allowed_origins(settings, origins))
    return app
