"""The Notary's ledger and the model versions it vouches for.

Read through the Notary and Model actors (the only judges of validity): entries as recorded,
the verdict on one entry (VERIFIED / VOIDED with its reason chain / UNKNOWN), the audit behind
a verdict, the integrity of the whole ledger, its signed tree head (keep it, and check later
with ``caramba notary verify --against``), and models with their versions.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from caramba.api.errors import Conflict, NotFound
from caramba.api.schemas import ERRORS, Page

router = APIRouter(tags=["notary"])

REF = r"^(#\d{1,15}|[0-9a-fA-F]{8,64})$"
REF_DOC = "an entry hash, a unique hash prefix (8+ hex digits) or #seq"


def _host(request: Request) -> Any:
    return request.app.state.caramba.runs.actors


def _entry(e: Any) -> dict[str, Any]:
    return e.model_dump(mode="json")


def _get(host: Any, ref: str) -> Any:
    from caramba.actors.ledger import UnknownEntry
    from caramba.actors.notary import GetEntry

    if not host.has_ledger():
        raise NotFound(f"no entry {ref!r}: the ledger is empty")
    try:
        return host.notary(GetEntry(ref=ref))
    except UnknownEntry as exc:
        raise NotFound(exc.message) from None


@router.get("/notary/entries", response_model=Page[dict[str, Any]])
def entries(
    request: Request,
    subject: str | None = Query(None, max_length=300, description="e.g. a run's ledger_run"),
    kind: str | None = Query(None, max_length=40, description="intent, event, claim, artifact, key"),
    name: str | None = Query(None, max_length=200),
    since: int = Query(0, ge=0, le=1 << 62, description="from this sequence number"),
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0),
) -> dict[str, Any]:
    """Ledger entries as recorded (not judged), oldest first. Rows that cannot be read are
    skipped here (``caramba notary verify`` and ``/notary/verify`` name them)."""
    from caramba.actors.notary import Query as NotaryQuery

    host = _host(request)
    if not host.has_ledger():
        return {"items": [], "total": 0, "limit": limit, "offset": offset}
    found = host.notary(NotaryQuery(subject=subject, kind=kind, name=name, since=since)).entries
    return {"items": [_entry(e) for e in found[offset : offset + limit]], "total": len(found), "limit": limit,
            "offset": offset}


@router.get("/notary/entries/{ref}", response_model=dict[str, Any], responses=ERRORS)
def entry(ref: str, request: Request) -> dict[str, Any]:
    """One entry, by hash, unique prefix or ``#seq``."""
    import re

    if not re.match(REF, ref):
        raise NotFound(f"{ref!r} is not {REF_DOC}")
    return _entry(_get(_host(request), ref))


@router.get("/notary/validity", response_model=dict[str, Any], responses=ERRORS)
def validity(
    request: Request,
    entry: str = Query(..., pattern=REF, description=REF_DOC),
    as_of: float | None = Query(None, ge=0, le=1e12, description="judge as the ledger stood at this time (unix s)"),
) -> dict[str, Any]:
    """The Notary's verdict on an entry, computed now by walking its dependencies and
    re-hashing the artifacts they cite: VERIFIED, or VOIDED with the reason chain."""
    from caramba.actors.notary import ValidityOf

    host = _host(request)
    e = _get(host, entry)
    v = host.notary(ValidityOf(entry=e.hash, as_of=as_of))
    return {**v.model_dump(mode="json"), "valid": v.valid, "explain": v.explain(), "entry_label": e.label()}


@router.get("/notary/audit", response_model=dict[str, Any], responses=ERRORS)
def audit(
    request: Request,
    entry: str = Query(..., pattern=REF, description=REF_DOC),
    as_of: float | None = Query(None, ge=0, le=1e12),
) -> dict[str, Any]:
    """Everything behind a verdict: the dependency DAG with the checks made on each entry."""
    from caramba.actors.notary import AuditOf

    host = _host(request)
    e = _get(host, entry)
    a = host.notary(AuditOf(entry=e.hash, as_of=as_of))
    return {**a.model_dump(mode="json"), "text": a.as_text()}


@router.get("/notary/verify", response_model=dict[str, Any])
def verify(request: Request) -> dict[str, Any]:
    """The whole ledger end to end: hash chain, signatures, keys, dependencies, artifacts."""
    from caramba.actors.notary import VerifyLedger

    host = _host(request)
    if not host.has_ledger():
        return {"ok": True, "entries": 0, "head": "", "problems": []}
    return host.notary(VerifyLedger()).model_dump(mode="json")


@router.get("/notary/head", response_model=dict[str, Any], responses=ERRORS)
def head(request: Request) -> dict[str, Any]:
    """The ledger's signed tree head: the RFC 6962 Merkle root over its entries, their number
    and the Notary's signature. A client that keeps it can later prove the ledger was neither
    truncated nor rewritten (``caramba notary verify --against HEAD``). 409 when the ledger
    does not verify: the Notary signs no head for a damaged history."""
    from caramba.actors.ledger import LedgerError
    from caramba.actors.notary import TreeHeadOf

    host = _host(request)
    if not host.has_ledger():
        raise NotFound("no tree head: the ledger is empty (nothing has been recorded yet)")
    try:
        return host.notary(TreeHeadOf()).model_dump(mode="json")
    except LedgerError as exc:
        raise Conflict(exc.message, hint=exc.hint) from None


# ---- models ---------------------------------------------------------------------------------------


def _model_names(host: Any) -> list[str]:
    from caramba.actors.notary import Query as NotaryQuery

    if not host.has_ledger():
        return []
    committed = host.notary(NotaryQuery(kind="event", name="committed")).entries
    return list(dict.fromkeys(e.payload.get("model") for e in committed if e.payload.get("model")))


def _versions(host: Any, model: str) -> list[dict[str, Any]]:
    from caramba.actors.model import Versions

    return [v.model_dump(mode="json") for v in host.models(Versions(model=model)).versions]


@router.get("/models", response_model=Page[dict[str, Any]])
def models(
    request: Request,
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0),
) -> dict[str, Any]:
    """Models with committed versions (each version backed by a VERIFIED claim)."""
    host = _host(request)
    items = []
    for name in _model_names(host):
        vs = _versions(host, name)
        items.append({"name": name, "versions": len(vs), "latest": vs[-1]["version"] if vs else None,
                      "updated": vs[-1]["time"] if vs else None})
    return {"items": items[offset : offset + limit], "total": len(items), "limit": limit, "offset": offset}


@router.get("/models/{name}", response_model=dict[str, Any], responses=ERRORS)
def model(name: str, request: Request) -> dict[str, Any]:
    """A model's versions, oldest first: parent, checkpoint, the claim and run behind it, metrics."""
    from caramba.errors import did_you_mean

    host = _host(request)
    names = _model_names(host)
    if name not in names:
        raise NotFound(f"no model '{name}'; " + (did_you_mean(name, names) if names else "no model has a version yet"))
    return {"name": name, "versions": _versions(host, name)}


@router.get("/models/{name}/versions/{version}", response_model=dict[str, Any], responses=ERRORS)
def model_version(name: str, version: int, request: Request) -> dict[str, Any]:
    """One version, with the Notary's verdict on its claim now."""
    from caramba.actors.model import GetVersion, UnknownVersion
    from caramba.actors.notary import ValidityOf

    host = _host(request)
    if name not in _model_names(host):
        raise NotFound(f"no model '{name}'")
    try:
        v = host.models(GetVersion(model=name, version=version))
    except UnknownVersion as exc:
        raise NotFound(exc.message) from None
    verdict = host.notary(ValidityOf(entry=v.claim))
    return {**v.model_dump(mode="json"), "verdict": verdict.verdict, "explain": verdict.explain()}
