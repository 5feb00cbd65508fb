"""Comparing runs (parameters, final and best metrics, tuner arms ranked over seeds, overlaid
curves) and what a researcher says about a run: tags, a note, deletion.

The comparison is ``caramba.run.compare`` (what ``caramba research compare`` prints); deletion
is ``caramba.run.manage.delete_run`` through this server's Notary and Storage actors, so the
ledger records it and ``caramba notary verify`` still passes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from caramba.api.auth import AUTH
from caramba.api.errors import Conflict, NotFound
from caramba.api.schemas import ERRORS, WRITE_ERRORS, RunOut, TextBody
from caramba.errors import ConfigError

router = APIRouter(tags=["compare"])

MAX_COMPARE = 200
MAX_REF_CHARS = 200
TAG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/+=\-]*$"
Tag = Annotated[str, Field(min_length=1, max_length=64, pattern=TAG_PATTERN)]
Metric = Annotated[str, Field(min_length=3, max_length=200, pattern=r"^[A-Za-z0-9_\-]+\.[A-Za-z0-9_.\-]+$")]
CONFLICT = {409: {"model": ERRORS[404]["model"], "description": "the run is live: cancel it first"}}


class ArmOut(BaseModel):
    arm: str
    metric: str
    mean: float | None
    std: float | None = Field(description="sample standard deviation (n - 1); null for a single run")
    n: int
    spread: str = Field(description="mean ± std (n=...)")
    rank: int
    values: list[float]
    seeds: list[int]
    runs: list[str]
    excluded: list[str] = Field(description="runs of the arm that did not finish or lack the metric")


class TunerArmOut(BaseModel):
    id: str
    set: dict[str, Any] = {}
    description: str = ""


class TunerBeliefOut(BaseModel):
    n: int | None = None
    mean: float | None = None
    std: float | None = None
    G: float | None = None
    q: float | None = None


class TunerDecisionOut(BaseModel):
    strategy: str = Field(description="grid, random or active_inference")
    step: int | None = Field(None, description="the tuner step that chose this run (0-based)")
    arm: str = Field("", description="the arm chosen")
    reason: str = ""
    belief: TunerBeliefOut | None = Field(None, description="active_inference: the chosen arm's belief when chosen")


class CompareRunOut(BaseModel):
    id: str
    label: str
    experiment: str
    status: str
    arm: str = ""
    target: str = ""
    run: str = ""
    seed: int = 0
    backend: str = ""
    group_id: str = ""
    created: float
    started: float | None = None
    finished: float | None = None
    step: int = 0
    steps: int = 0
    tags: list[str] = []
    note: str = ""
    params: dict[str, Any] = Field(description="tuner arm values and --set overrides, by dotted path")
    overrides: list[str] = []
    final: dict[str, float | None] = Field(description="split.name -> value at the last step (null: not finite)")
    best: dict[str, float | None] = Field(description="split.name -> min (max where higher is better)")
    best_step: dict[str, int] = {}
    tuner: TunerDecisionOut | dict[str, Any] = Field(
        default_factory=dict, description="the tuner's decision that started the run ({} for a run no tuner chose)")


class ComparisonOut(BaseModel):
    metric: str | None = Field(description="the metric the arms are ranked by")
    mode: Literal["min", "max"]
    params: list[str]
    metrics: list[str]
    runs: list[CompareRunOut] = Field(description="in ranking order")
    ranking: list[ArmOut]
    arms: list[TunerArmOut] = Field(description="the tuner's arms as the runs' manifest declares them")


class CurveOut(BaseModel):
    run: str
    label: str
    steps: list[int]
    values: list[float | None]
    seconds: list[float] = Field(description="wall time since the run started")


class CurvesOut(BaseModel):
    metric: str
    curves: list[CurveOut]


class TagsIn(TextBody):
    """Tags to add and to remove (a tag: letters, digits and - _ . : / + =)."""

    model_config = ConfigDict(extra="forbid")

    add: list[Tag] = Field(default_factory=list, max_length=32)
    remove: list[Tag] = Field(default_factory=list, max_length=32)


class NoteIn(TextBody):
    model_config = ConfigDict(extra="forbid")

    note: str = Field(max_length=20_000, description="the run's note; empty clears it")


class DeletionOut(BaseModel):
    run_id: str
    ledger_entry: str = Field(description="the Notary's entry recording the deletion ('' when the store has no ledger)")
    removed: list[str] = Field(description="checkpoint blobs removed")
    kept: list[str] = Field(description="blobs kept because a committed model version is made of them")
    reason: str = ""


def _service(request: Request) -> Any:
    return request.app.state.caramba.runs


def _refs(refs: list[str]) -> list[str]:
    for r in refs:
        if len(r) > MAX_REF_CHARS or not r.strip():
            raise ConfigError(f"a run reference is 1 to {MAX_REF_CHARS} characters; got {len(r)}")
    return refs


def _store_call(svc: Any, fn: Any) -> Any:
    """A store lookup with RunNotFound as this server's 404 (its message without the folder)."""
    from caramba.store.runs import RunNotFound

    try:
        return fn()
    except RunNotFound as exc:
        raise NotFound(exc.message.replace(f" in {svc.store.root}", ""), hint=exc.hint) from None


@router.get("/compare", response_model=ComparisonOut, responses=ERRORS)
def compare(
    request: Request,
    run: list[str] = Query([], max_length=MAX_COMPARE, description="run IDs (or unique prefixes); repeatable"),
    experiment: str | None = Query(None, max_length=200, description="every run of this experiment"),
    metric: Metric | None = Query(None, description="rank the arms by this metric (split.name)"),
    mode: Literal["min", "max"] | None = Query(None, description="default: the tuner's, else from the metric's name"),
    tag: list[Tag] = Query([], max_length=32, description="only runs with every one of these tags"),
) -> dict[str, Any]:
    """Runs side by side: parameters (tuner arm values, overrides, seed), final and best
    metrics, and the tuner arms ranked by the mean of ``metric`` over seeds (mean ± std, n)."""
    from caramba.run.compare import compare_runs

    svc = _service(request)
    result = _store_call(svc, lambda: compare_runs(svc.store, _refs(run), experiment=experiment, metric=metric,
                                                   mode=mode, tags=tag))
    return result.as_dict()


@router.get("/compare/curves", response_model=CurvesOut, responses=ERRORS)
def compare_curves(
    request: Request,
    metric: Metric = Query(..., description="split.name, e.g. train.loss"),
    run: list[str] = Query(..., min_length=1, max_length=24, description="run IDs; repeatable"),
) -> dict[str, Any]:
    """The series of one metric for several runs (steps, values, seconds since each run
    started), to overlay them."""
    import math

    from caramba.run.compare import curves

    svc = _service(request)
    found = _store_call(svc, lambda: curves(svc.store, _refs(run), metric))
    for c in found:
        c["values"] = [v if math.isfinite(v) else None for v in c["values"]]
    return {"metric": metric, "curves": found}


@router.post("/runs/{run_id}/tags", response_model=RunOut, responses=ERRORS | WRITE_ERRORS, dependencies=[AUTH])
def tag_run(run_id: str, body: TagsIn, request: Request) -> dict[str, Any]:
    """Add and remove tags of a run; answers the run."""
    svc = _service(request)
    rec = svc.record(run_id)
    return svc.view(svc.store.tag(rec.id, body.add, body.remove))


@router.put("/runs/{run_id}/note", response_model=RunOut, responses=ERRORS | WRITE_ERRORS, dependencies=[AUTH])
def annotate_run(run_id: str, body: NoteIn, request: Request) -> dict[str, Any]:
    """Set a run's note (free text; empty clears it); answers the run."""
    svc = _service(request)
    rec = svc.record(run_id)
    return svc.view(svc.store.annotate(rec.id, body.note))


@router.delete("/runs/{run_id}", response_model=DeletionOut, responses=ERRORS | WRITE_ERRORS | CONFLICT,
               dependencies=[AUTH])
def delete_run(
    run_id: str,
    request: Request,
    reason: str = Query("", max_length=2000, description="why (recorded in the Notary's ledger)"),
) -> dict[str, Any]:
    """Delete a run: its record, metrics, files and checkpoint blobs. The Notary records the
    deletion first, so the ledger still verifies and lists the run as deleted. A live run is
    refused (409): cancel it first. Only a full run ID is accepted (no prefix, no ``latest``)."""
    from caramba.run.manage import delete_run as delete

    svc = _service(request)
    rec = svc.record(run_id)
    if rec.id != run_id:
        raise NotFound(f"no run '{run_id}'", hint=f"deleting needs the full run ID (did you mean {rec.id}?)")
    if rec.status in ("created", "running") or rec.id in svc.live:
        raise Conflict(f"run {rec.id} is {svc.status_of(rec)}: a live run cannot be deleted",
                       hint=f"POST /api/v1/runs/{rec.id}/cancel first")
    host = svc.actors
    ask = None
    if host.has_ledger():
        def ask(role: str, msg: Any) -> Any:
            if role == "notary":
                return host.notary(msg)
            host.ensure()
            return host.ask(host.services.storage, msg)
    done = delete(svc.store, rec.id, reason=reason, ask=ask)
    svc._graphs.pop(rec.id, None)
    return {"run_id": done.run_id, "ledger_entry": done.ledger_entry, "removed": done.removed, "kept": done.kept,
            "reason": done.reason}
