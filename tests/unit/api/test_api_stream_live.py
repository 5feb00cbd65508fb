"""A real server and a real client: metrics stream while a run writes them, and a client that
disconnects mid-stream and reconnects with Last-Event-ID gets every point exactly once."""

from __future__ import annotations

import json
import threading
import time

import pytest

httpx = pytest.importorskip("httpx")


def _events(lines):
    """Yield (event, id, data) from an iterator of SSE lines."""
    ev, eid, data = "message", None, []
    for line in lines:
        if line == "":
            if data:
                yield ev, eid, json.loads("\n".join(data))
            ev, eid, data = "message", None, []
        elif line.startswith("event: "):
            ev = line[7:]
        elif line.startswith("id: "):
            eid = line[4:]
        elif line.startswith("data: "):
            data.append(line[6:])


def test_disconnect_mid_stream_loses_nothing(live_url, store):
    from caramba.store.runs import RunStore

    runs = RunStore(store)
    rec = runs.create_run("live", steps=40)
    runs.start(rec.id)
    written = threading.Event()

    def write():
        for s in range(1, 41):
            runs.log_metrics(rec.id, s, {"loss": 1.0 / s})
            if s % 10 == 0:
                runs.log_metrics(rec.id, s, {"loss": 2.0 / s}, split="val")
            time.sleep(0.02)
        runs.finish(rec.id)
        written.set()

    writer = threading.Thread(target=write)
    writer.start()
    got: list[dict] = []
    last_id = None
    url = f"{live_url}/api/v1/runs/{rec.id}/metrics/stream"
    try:
        with httpx.Client(timeout=30) as http:
            with http.stream("GET", url) as r:  # first connection: take two batches, then hang up
                assert r.status_code == 200
                batches = 0
                for ev, eid, data in _events(r.iter_lines()):
                    if ev == "metrics":
                        got.extend(data)
                        last_id = eid
                        batches += 1
                        if batches == 2:
                            break
            assert last_id is not None and not written.is_set(), "the run ended before the client hung up"
            time.sleep(0.3)  # the run keeps writing while nobody listens
            ended = None
            with http.stream("GET", url, headers={"Last-Event-ID": last_id}) as r:
                for ev, _eid, data in _events(r.iter_lines()):
                    if ev == "metrics":
                        got.extend(data)
                    elif ev == "end":
                        ended = data
                        break
    finally:
        writer.join()
    assert ended is not None and ended["status"] == "finished"
    assert [(p["step"], p["split"], p["name"], p["value"]) for p in got] == runs.metrics(rec.id)
