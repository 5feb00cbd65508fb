"""caramba.api: the HTTP API (FastAPI, under ``/api/v1``) and the web UI it serves.

``caramba serve`` runs it; ``create_app(settings, token=..., store=...)`` builds the app for
tests and embedding. Importing this package is cheap: FastAPI loads in ``create_app``.
"""

from __future__ import annotations

from typing import Any

API_PREFIX = "/api/v1"
DEFAULT_MAX_BODY = 1 << 20  # 1 MiB: manifests are text; nothing uploads bulk data over the API


def create_app(*args: Any, **kwargs: Any) -> Any:
    """Build the FastAPI app; see :func:`caramba.api.app.create_app`."""
    from caramba.api.app import create_app as _create_app

    return _create_app(*args, **kwargs)


__all__ = ["API_PREFIX", "DEFAULT_MAX_BODY", "create_app"]
