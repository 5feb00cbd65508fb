"""Experiments and runs: list, show, metrics (JSON and a live stream), artifacts, steering."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import FileResponse, StreamingResponse

from caramba.api.auth import AUTH
from caramba.api.errors import NotFound
from caramba.api.runs import Cursor
from caramba.api.schemas import (
    BUSY,
    ERRORS,
    WRITE_ERRORS,
    ArtifactOut,
    CompileOut,
    ExperimentOut,
    MetricsOut,
    Page,
    RunOut,
    RunStatus,
    SubmitIn,
    SubmitOut,
)

router = APIRouter(tags=["runs"])

CONFLICT = {409: {"model": ERRORS[404]["model"], "description": "the run is not in a state that allows this"}}


def _service(request: Request) -> Any:
    return request.app.state.caramba.runs


def _page(items: list, limit: int, offset: int) -> dict[str, Any]:
    return {"items": items[offset : offset + limit], "total": len(items), "limit": limit, "offset": offset}


@router.get("/experiments", response_model=Page[ExperimentOut])
def list_experiments(
    request: Request,
    q: str | None = Query(None, max_length=200, description="substring of the experiment name"),
    limit: int = Query(50, ge=1, le=1000),
    offset: int = Query(0, ge=0),
) -> dict[str, Any]:
    """Experiments (runs grouped by experiment name), most recently run first."""
    items = _service(request).experiments()
    if q:
        items = [e for e in items if q.lower() in e["name"].lower()]
    return _page(items, limit, offset)


@router.get("/experiments/{name}", response_model=ExperimentOut, responses=ERRORS)
def show_experiment(name: str, request: Request) -> dict[str, Any]:
    for e in _service(request).experiments():
        if e["name"] == name:
            return e
    raise NotFound(f"no experiment '{name}' has runs in this store")


@router.post("/experiments", response_model=SubmitOut, status_code=202,
             responses=ERRORS | WRITE_ERRORS | CONFLICT | BUSY, dependencies=[AUTH])
def submit(body: SubmitIn, request: Request) -> dict[str, Any]:
    """Run a manifest: every target x run (x tuner arm) it plans, one after another, in this
    server. The manifest is checked first; a bad one is answered 422 with its location and
    nothing runs. The answer lists the planned runs and those already recorded (the first
    one, unless the server is busy); ``GET /runs?group_id=...`` follows the rest."""
    return _service(request).submit(body.manifest, body.name, body.overrides, body.targets, body.runs, body.executor)


@router.get("/runs", response_model=Page[RunOut])
def list_runs(
    request: Request,
    experiment: str | None = Query(None, max_length=200),
    group_id: str | None = Query(None, max_length=200, description="the runs of one submission"),
    status: RunStatus | None = None,
    target: str | None = Query(None, max_length=200),
    backend: str | None = Query(None, max_length=200),
    limit: int = Query(50, ge=1, le=1000),
    offset: int = Query(0, ge=0),
) -> dict[str, Any]:
    """Runs, newest first, filtered by experiment, status, target or backend."""
    items = _service(request).runs(experiment=experiment, group_id=group_id, status=status, target=target,
                                   backend=backend)
    return _page(items, limit, offset)


@router.get("/runs/{run_id}", response_model=RunOut, responses=ERRORS)
def show_run(run_id: str, request: Request) -> dict[str, Any]:
    """One run by ID, unique ID prefix, or ``latest``."""
    svc = _service(request)
    return svc.view(svc.record(run_id))


@router.get("/runs/{run_id}/metrics", response_model=MetricsOut, responses=ERRORS)
def run_metrics(
    run_id: str,
    request: Request,
    cursor: str | None = Query(None, max_length=64, pattern=r"^-?\d+(:\d+)?$",
                               description="from a previous answer: only newer points"),
    after: int | None = Query(None, ge=-1, le=1 << 62, description="only points after this step"),
    name: str | None = Query(None, max_length=200),
    split: str | None = Query(None, max_length=200),
) -> dict[str, Any]:
    """A run's metric points in step order."""
    from caramba.api.sse import _finite

    svc = _service(request)
    rec = svc.record(run_id)
    points, nxt = svc.metrics(rec.id, Cursor.parse(cursor, after))
    if name is not None:
        points = [p for p in points if p["name"] == name]
    if split is not None:
        points = [p for p in points if p["split"] == split]
    return {"points": _finite(points), "cursor": str(nxt)}


@router.get(
    "/runs/{run_id}/metrics/stream",
    responses={200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}, **ERRORS},
    response_class=StreamingResponse,
)
async def stream_metrics(
    run_id: str,
    request: Request,
    after: int | None = Query(None, ge=-1, le=1 << 62, description="only points after this step"),
    last_event_id: str | None = Header(None, max_length=64, description="sent by EventSource on reconnect"),
) -> StreamingResponse:
    """Live metrics as server-sent events (``status``, ``metrics``, ``end``). Reconnecting with
    ``Last-Event-ID`` (or ``?after=step``) resumes without losing or repeating a point."""
    from starlette.concurrency import run_in_threadpool

    from caramba.api.sse import metric_events

    svc = _service(request)
    rec = await run_in_threadpool(svc.record, run_id)  # 404 before the stream starts
    events = metric_events(svc, rec.id, Cursor.parse(last_event_id, after), request.is_disconnected)
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _artifact_out(a: Any) -> dict[str, Any]:
    from urllib.parse import quote

    return {"name": a.name, "kind": a.kind, "sha256": a.sha256, "size": a.size,
            "url": f"/api/v1/runs/{quote(a.run_id)}/artifacts/{quote(a.name)}"}


@router.get("/runs/{run_id}/artifacts", response_model=list[ArtifactOut], responses=ERRORS)
def list_artifacts(run_id: str, request: Request) -> list[dict[str, Any]]:
    """Files a run recorded (manifest, IR, checkpoints, plots) with their SHA-256."""
    svc = _service(request)
    rec = svc.record(run_id)
    return [_artifact_out(a) for a in svc.artifacts(rec.id)]


@router.get(
    "/runs/{run_id}/artifacts/{name:path}",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the file"}, **ERRORS},
)
def download_artifact(run_id: str, name: str, request: Request) -> FileResponse:
    """Download one artifact. Only recorded artifacts are served; ``ETag`` is its SHA-256."""
    svc = _service(request)
    rec = svc.record(run_id)
    a = svc.artifact(rec.id, name)
    return FileResponse(a.path, filename=a.path.name, media_type="application/octet-stream",
                        headers={"ETag": f'"{a.sha256}"', "X-Content-SHA256": a.sha256})


@router.get("/runs/{run_id}/evidence", response_model=dict[str, Any], responses=ERRORS)
def run_evidence(run_id: str, request: Request) -> dict[str, Any]:
    """What the Notary holds about a run executed by an Experiment actor: its entries (intent,
    checkpoints, progress, final claim) and the verdict on the newest claim, computed now."""
    from caramba.actors.notary import Query as NotaryQuery
    from caramba.actors.notary import ValidityOf

    svc = _service(request)
    rec = svc.record(run_id)
    subject = rec.config.get("ledger_run") if isinstance(rec.config, dict) else None
    if not subject:
        return {"subject": None, "entries": [], "verdict": None,
                "note": "this run was executed by the experiment runner, not an Experiment actor: no ledger entries"}
    host = svc.actors
    if not host.has_ledger():
        return {"subject": subject, "entries": [], "verdict": None, "note": "the ledger is empty"}
    found = host.notary(NotaryQuery(subject=subject)).entries
    claims = [e for e in found if e.kind == "claim"]
    verdict = None
    if claims:
        v = host.notary(ValidityOf(entry=claims[-1].hash))
        verdict = {**v.model_dump(mode="json"), "valid": v.valid, "explain": v.explain()}
    return {"subject": subject, "entries": [e.model_dump(mode="json") for e in found], "verdict": verdict, "note": None}


@router.get("/runs/{run_id}/graph", response_model=CompileOut, responses=ERRORS)
def run_graph(run_id: str, request: Request) -> dict[str, Any]:
    """The run's model graph before and after the compiler pipeline for the run's backend,
    from the expanded manifest the run recorded."""
    from caramba.api.routes.manifests import explain_recorded

    svc = _service(request)
    rec = svc.record(run_id)
    recorded = [a.path for a in svc.artifacts(rec.id) if a.kind == "manifest" and a.path.is_file()]
    if recorded:  # the expanded manifest the experiment runner saved
        dims = {k: int(v) for k, v in (rec.config.get("dims") or {}).items()}
        return svc.graph_report(rec.id, lambda: explain_recorded(recorded[0], dims, rec.backend or "cpu"))
    source = Path(rec.manifest_path) if rec.manifest_path else None
    if source is not None and source.is_file():  # an actor run cites the manifest file it ran
        overrides = list(((rec.config.get("spec") or {}).get("config") or {}).get("overrides") or [])
        return svc.graph_report(rec.id, lambda: explain_recorded(source, None, rec.backend or "cpu", overrides))
    raise NotFound(f"run {rec.id} recorded no manifest, so its graph cannot be shown")


for _verb, _doc in (
    ("pause", "Pause a live run after its current step."),
    ("resume", "Resume a paused run, or continue an interrupted one (its process died) from its newest checkpoint."),
    ("cancel", "Cancel a live run after its current step (a finished run is left as it is)."),
):

    def _make(verb: str):
        def steer(run_id: str, request: Request) -> dict[str, Any]:
            return _service(request).control(run_id, verb)

        steer.__name__ = f"{verb}_run"
        return steer

    router.add_api_route(
        f"/runs/{{run_id}}/{_verb}", _make(_verb), methods=["POST"], response_model=RunOut, summary=f"{_verb.title()} run",
        description=_doc, responses=ERRORS | WRITE_ERRORS | CONFLICT, dependencies=[AUTH],
    )
