"""The asset registry: operation, block, optimizer, model and manifest schemas."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query

from caramba.api.errors import NotFound
from caramba.api.schemas import ERRORS, Page

router = APIRouter(tags=["assets"])

Kind = Literal["operation", "optimizer", "block", "model", "manifest"]


def _item(asset: Any) -> dict[str, Any]:
    s = asset.summary()
    return {"id": asset.op, "kind": s["kind"], "label": s["label"], "category": s["category"],
            "description": s["description"]}


@router.get("/assets", response_model=Page[dict[str, Any]])
def list_assets(
    kind: Kind | None = None,
    q: str | None = Query(None, max_length=200, description="substring of the ID, label or description"),
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0),
) -> dict[str, Any]:
    """Assets by ID, optionally of one kind and matching ``q``."""
    from caramba.manifest.registry import registry

    items = [_item(a) for a in registry().list(kind)]
    if q:
        needle = q.lower()
        items = [i for i in items if any(needle in str(i[k]).lower() for k in ("id", "label", "description"))]
    return {"items": items[offset : offset + limit], "total": len(items), "limit": limit, "offset": offset}


@router.get("/assets/{asset_id}", response_model=dict[str, Any], responses=ERRORS)
def show_asset(asset_id: str) -> dict[str, Any]:
    """One asset's schema: ports, config fields with types and defaults, and its YAML source."""
    from caramba.errors import did_you_mean
    from caramba.manifest.registry import registry

    reg = registry()
    if asset_id not in reg:
        raise NotFound(f"no asset '{asset_id}'; {did_you_mean(asset_id, list(reg))}")
    asset = reg.get(asset_id)
    out = asset.summary()
    out.update(id=asset.op, path=out.pop("file"), source=asset.text)
    return out
