"""Health and backends: what this server runs and which backends this machine has."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from caramba.api.errors import NotFound
from caramba.api.schemas import ERRORS, BackendInfo, Health

router = APIRouter(tags=["system"])


@router.get("/health", response_model=Health)
async def health(request: Request) -> Health:
    """Liveness, version, uptime, and whether a token is configured. Answered on the event loop
    (it never blocks), so it answers while every server thread waits on slow work."""
    from caramba import __version__

    state = request.app.state.caramba
    return Health(version=__version__, uptime_s=round(time.time() - state.started, 3), auth=bool(state.token))


def _backend(name: str) -> BackendInfo:
    import importlib

    from caramba.compute import registry

    try:
        module = importlib.import_module(registry.BACKENDS[name])
        info = module.build_info()
    except ImportError as exc:  # a registered backend whose package is broken is reported, not fatal
        return BackendInfo(name=name, available=False, reason=f"cannot import {registry.BACKENDS[name]}: {exc}")
    options = [
        {"name": o.name, "kind": o.kind, "doc": o.doc, "choices": list(o.choices) if o.choices else None}
        for o in getattr(module, "OPTIONS", ())
    ]
    return BackendInfo(
        name=name,
        available=info.available,
        location=info.location,
        reason=info.reason,
        install_hint=info.install_hint,
        versions=dict(info.versions),
        details=dict(info.details),
        options=options,
    )


@router.get("/backends", response_model=list[BackendInfo])
def backends() -> list[BackendInfo]:
    """Every registered backend: available here or not (and why), location, build info, options."""
    from caramba.compute import BACKENDS

    return [_backend(name) for name in BACKENDS]


@router.get("/backends/{name}", response_model=BackendInfo, responses=ERRORS)
def backend(name: str) -> BackendInfo:
    """One backend's build info."""
    from caramba.compute import BACKENDS
    from caramba.errors import did_you_mean

    if name not in BACKENDS:
        raise NotFound(f"no backend '{name}'; {did_you_mean(name, list(BACKENDS))}")
    return _backend(name)
