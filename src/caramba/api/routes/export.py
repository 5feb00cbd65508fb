"""Download a run's trained model as ONNX or safetensors (``caramba export`` over HTTP).

``GET /runs/{run_id}/export?format=onnx|safetensors&dtype=float64|float32`` writes the export
once per (run, newest checkpoint, format, dtype) into ``<store>/exports/`` and serves that file
after; a new checkpoint gives a new file. One export is computed at a time per server (others
get 503 with Retry-After); a checkpoint over ``serve_generate_memory_mb`` is refused before it
is read. A run without a checkpoint, or whose model cannot be exported (it mixes samples across
the batch, uses an op ONNX has no rule for), is a 422 that says why.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse

from caramba.api.errors import Busy, ValidationLimit
from caramba.api.schemas import BUSY, ERRORS
from caramba.errors import CarambaError, ConfigError, GraphError

router = APIRouter(tags=["runs"])
_LOCK = threading.Lock()
MEDIA = {"onnx": "application/octet-stream", "safetensors": "application/octet-stream"}


@router.get(
    "/runs/{run_id}/export",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}},
                     "description": "the model file (ONNX model or safetensors)"}, **ERRORS, **BUSY},
)
def export_model(
    run_id: str,
    request: Request,
    format: Literal["onnx", "safetensors"] = Query("onnx", description="onnx or safetensors"),
    dtype: Literal["float64", "float32"] | None = Query(None, description="default: the model's dtype"),
) -> FileResponse:
    """The run's trained model: ONNX (inference graph, weights as initializers, dynamic batch;
    no labels, losses or metrics) or safetensors (parameters in ``torch.nn`` layouts, no
    optimizer state, name map in the metadata)."""
    state = request.app.state.caramba
    svc = state.runs
    rec = svc.record(run_id)
    ckpts = svc.store.artifacts(rec.id, "checkpoint")
    if not ckpts:
        raise ConfigError(f"run {rec.id} saved no checkpoint, so there is no trained model to export")
    newest = ckpts[-1]
    limit_mb = float(getattr(state.settings, "serve_generate_memory_mb", 0) or 0)
    if limit_mb > 0 and newest.size > limit_mb * 2**20:
        raise ValidationLimit(f"run {rec.id}'s checkpoint is {newest.size / 2**20:.0f} MiB, over this server's "
                              f"{limit_mb:.0f} MiB (serve_generate_memory_mb); use `caramba export` instead")
    safe_id = re.sub(r"[^A-Za-z0-9_.-]", "_", rec.id)
    name = f"{safe_id}-{(newest.sha256 or 'nosha')[:16]}-{dtype or 'model'}.{format}"
    path = svc.store.root / "exports" / safe_id / name
    if not path.is_file():
        if not _LOCK.acquire(blocking=False):
            raise Busy("another model export is running on this server; retry in a few seconds")
        try:
            if not path.is_file():
                _write(rec.id, path, format, dtype, svc.store)
        finally:
            _LOCK.release()
    return FileResponse(path, filename=f"{safe_id}.{format}", media_type=MEDIA[format],
                        headers={"X-Caramba-Run": rec.id, "X-Caramba-Checkpoint-SHA256": newest.sha256 or ""})


def _write(run_id: str, path: Any, fmt: str, dtype: str | None, store: Any) -> None:
    try:
        if fmt == "onnx":
            from caramba.export.to_onnx import export_onnx

            export_onnx(run_id, path, store=store, dtype=dtype)
        else:
            from caramba.export.to_safetensors import export_safetensors

            export_safetensors(run_id, path, store=store, dtype=dtype)
    except CarambaError:
        raise
    except ImportError as exc:
        raise ConfigError(f"this server cannot write {fmt}: {exc.name or exc} is not installed",
                          hint="pip install 'caramba[onnx]'") from None
    except Exception as exc:  # an exporter bug: logged with its traceback, answered as a 4xx
        import logging

        logging.getLogger("caramba.api").exception("exporting run %s as %s failed", run_id, fmt)
        raise GraphError(f"exporting run {run_id} as {fmt} failed ({type(exc).__name__}); the server log has "
                         "the details") from None
