"""Server-sent events: a run's metrics tailed from the run store.

Events:

- ``status``: the run (as ``GET /runs/{id}`` returns it), first and whenever its status changes;
- ``metrics``: a batch of points ``{step, split, name, value}``, with ``id: <step>:<count>`` so a
  client that reconnects (browsers send ``Last-Event-ID`` on their own) resumes exactly after
  the last batch it received: nothing is lost or repeated;
- ``end``: the run has finished (or failed, or was cancelled) and every point was sent;
- comments (``: keep-alive``) every few seconds so proxies keep the connection open.

The stream reads only the store, so it works for runs executed by this server, by
``caramba research run`` in another process, or long finished.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.concurrency import run_in_threadpool

from caramba.api.runs import TERMINAL, Cursor, RunService

POLL_S = 0.25
KEEPALIVE_S = 10.0
BATCH = 500


def event(kind: str, data: Any, id: str | None = None) -> bytes:
    lines = [f"event: {kind}"]
    if id is not None:
        lines.append(f"id: {id}")
    lines.extend(f"data: {line}" for line in json.dumps(data, separators=(",", ":"), allow_nan=False).splitlines())
    return ("\n".join(lines) + "\n\n").encode()


def _finite(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # JSON has no NaN/inf; a diverged loss is sent as null with its text in "repr".
    out = []
    for p in points:
        v = p["value"]
        if v != v or v in (float("inf"), float("-inf")):
            p = {**p, "value": None, "repr": repr(v)}
        out.append(p)
    return out


async def metric_events(service: RunService, run_id: str, cursor: Cursor, is_disconnected: Any) -> AsyncIterator[bytes]:
    yield b"retry: 1000\n\n"
    rec = await run_in_threadpool(service.record, run_id)
    view = service.view(rec)
    yield event("status", view)
    last_status = view["status"]
    last_beat = time.monotonic()
    while True:
        rows, _ = await run_in_threadpool(service.metrics, rec.id, cursor)
        for i in range(0, len(rows), BATCH):
            chunk = rows[i : i + BATCH]
            for p in chunk:  # the id of a batch is the cursor just past its last point
                cursor = Cursor(p["step"], cursor.count + 1) if p["step"] == cursor.step else Cursor(p["step"], 1)
            yield event("metrics", _finite(chunk), id=str(cursor))
        rec = await run_in_threadpool(service.record, rec.id)
        view = service.view(rec)
        if view["status"] != last_status:
            last_status = view["status"]
            yield event("status", view)
        if rec.status in TERMINAL:
            # a last look: rows written between the read above and the status change
            rows, _ = await run_in_threadpool(service.metrics, rec.id, cursor)
            if rows:
                continue
            yield event("end", view, id=str(cursor))
            return
        if service.closing.is_set() or await is_disconnected():
            return
        now = time.monotonic()
        if now - last_beat >= KEEPALIVE_S:
            last_beat = now
            yield b": keep-alive\n\n"
        await _sleep(POLL_S)


async def _sleep(seconds: float) -> None:
    import anyio

    await anyio.sleep(seconds)
