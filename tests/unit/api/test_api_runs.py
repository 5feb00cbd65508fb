"""Runs, experiments, metrics, artifacts and steering, read from the run store."""

from __future__ import annotations

import hashlib
import json

import pytest


@pytest.fixture
def runs(store):
    from caramba.store.runs import RunStore

    return RunStore(store)


def _finished_run(runs, experiment="exp-a", steps=10, target="cpu", seed=0):
    rec = runs.create_run(experiment, target=target, run_name=f"seed{seed}", seed=seed, backend="cpu", steps=steps)
    runs.start(rec.id)
    for s in range(1, steps + 1):
        runs.log_metrics(rec.id, s, {"loss": 1.0 / s, "accuracy": s / steps})
        if s % 5 == 0:
            runs.log_metrics(rec.id, s, {"loss": 1.5 / s}, split="val")
    runs.add_artifact(rec.id, "manifest.yml", "name: exp-a\n", kind="manifest")
    runs.finish(rec.id, summary={"loss": 1.0 / steps})
    return runs.get(rec.id)


def parse_sse(text: str) -> list[dict]:
    events = []
    for block in text.split("\n\n"):
        ev = {"event": "message", "data": [], "id": None}
        for line in block.splitlines():
            if line.startswith(":") or not line:
                continue
            key, _, value = line.partition(": ")
            if key == "data":
                ev["data"].append(value)
            elif key in ("event", "id"):
                ev[key] = value
        if ev["data"]:
            ev["data"] = json.loads("\n".join(ev["data"]))
            events.append(ev)
    return events


def test_list_show_filter_and_paginate(client, runs):
    a = _finished_run(runs, "exp-a", seed=0)
    b = _finished_run(runs, "exp-a", seed=1)
    c = runs.create_run("exp-b", target="gpu", backend="xla", steps=5)
    page = client.get("/api/v1/runs").json()
    assert page["total"] == 3 and page["items"][0]["id"] == c.id
    assert {r["id"] for r in client.get("/api/v1/runs?experiment=exp-a").json()["items"]} == {a.id, b.id}
    assert [r["id"] for r in client.get("/api/v1/runs?status=created").json()["items"]] == [c.id]
    assert [r["id"] for r in client.get("/api/v1/runs?backend=xla").json()["items"]] == [c.id]
    p1 = client.get("/api/v1/runs?limit=2").json()
    p2 = client.get("/api/v1/runs?limit=2&offset=2").json()
    assert len(p1["items"]) == 2 and len(p2["items"]) == 1 and p1["total"] == p2["total"] == 3
    assert {r["id"] for r in p1["items"] + p2["items"]} == {a.id, b.id, c.id}
    run = client.get(f"/api/v1/runs/{a.id}").json()
    assert run["status"] == "finished" and run["step"] == 10 and run["steps"] == 10
    assert run["summary"] == {"loss": 0.1} and run["live"] is False and run["error"] is None
    assert client.get("/api/v1/runs/latest").json()["id"] == c.id
    assert client.get(f"/api/v1/runs/{a.id[:-3]}").status_code in (200, 404)  # prefix: unique or ambiguous


def test_unknown_run_is_404(client):
    r = client.get("/api/v1/runs/nosuch-run")
    assert r.status_code == 404 and "nosuch-run" in r.json()["detail"]
    assert client.get("/api/v1/runs/nosuch-run/metrics/stream").status_code == 404


def test_experiments_group_runs(client, runs):
    _finished_run(runs, "exp-a", seed=0)
    _finished_run(runs, "exp-a", seed=1)
    runs.create_run("exp-b")
    exps = client.get("/api/v1/experiments").json()
    assert exps["total"] == 2
    by = {e["name"]: e for e in exps["items"]}
    assert by["exp-a"]["runs"] == 2 and by["exp-a"]["statuses"] == {"finished": 2}
    assert by["exp-b"]["statuses"] == {"created": 1}
    assert client.get("/api/v1/experiments/exp-a").json()["runs"] == 2
    assert client.get("/api/v1/experiments?q=B").json()["total"] == 1
    assert client.get("/api/v1/experiments/nope").status_code == 404


def test_metrics_in_pages_by_cursor(client, runs):
    rec = _finished_run(runs)
    everything = client.get(f"/api/v1/runs/{rec.id}/metrics").json()
    assert len(everything["points"]) == len(runs.metrics(rec.id)) == 22
    first = client.get(f"/api/v1/runs/{rec.id}/metrics?after=4").json()
    assert all(p["step"] > 4 for p in first["points"])
    rest = client.get(f"/api/v1/runs/{rec.id}/metrics?cursor={everything['cursor']}").json()
    assert rest["points"] == [] and rest["cursor"] == everything["cursor"]
    val = client.get(f"/api/v1/runs/{rec.id}/metrics?split=val&name=loss").json()["points"]
    assert [(p["step"], p["value"]) for p in val] == [(5, 0.3), (10, 0.15)]


def test_non_finite_metrics_are_null_with_their_text(client, runs):
    rec = runs.create_run("diverged")
    runs.log_metrics(rec.id, 1, {"loss": float("inf"), "grad": float("-inf"), "ok": 1.0})
    pts = client.get(f"/api/v1/runs/{rec.id}/metrics").json()["points"]
    assert {p["name"]: (p["value"], p.get("repr")) for p in pts} == {
        "loss": (None, "inf"), "grad": (None, "-inf"), "ok": (1.0, None)}
    runs.finish(rec.id, "failed", error="diverged")
    events = parse_sse(client.get(f"/api/v1/runs/{rec.id}/metrics/stream").text)
    sent = [p for e in events if e["event"] == "metrics" for p in e["data"]]
    assert {p["name"]: p["value"] for p in sent} == {"loss": None, "grad": None, "ok": 1.0}
    assert events[-1]["event"] == "end" and events[-1]["data"]["status"] == "failed"


def test_stream_of_a_finished_run_sends_everything_then_end(client, runs):
    rec = _finished_run(runs)
    r = client.get(f"/api/v1/runs/{rec.id}/metrics/stream")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.text)
    assert events[0]["event"] == "status" and events[0]["data"]["status"] == "finished"
    assert events[-1]["event"] == "end"
    points = [p for e in events if e["event"] == "metrics" for p in e["data"]]
    assert [(p["step"], p["split"], p["name"], p["value"]) for p in points] == runs.metrics(rec.id)


def test_stream_resumes_after_last_event_id_without_loss_or_repeat(client, runs):
    from caramba.api import sse

    rec = _finished_run(runs, steps=30)
    old = sse.BATCH
    sse.BATCH = 7  # several batches, with ids between them
    try:
        events = parse_sse(client.get(f"/api/v1/runs/{rec.id}/metrics/stream").text)
        batches = [e for e in events if e["event"] == "metrics"]
        assert len(batches) > 3
        cut = batches[1]["id"]
        tail = parse_sse(client.get(f"/api/v1/runs/{rec.id}/metrics/stream",
                                    headers={"Last-Event-ID": cut}).text)
    finally:
        sse.BATCH = old
    got = [p for e in batches[:2] for p in e["data"]] + [p for e in tail if e["event"] == "metrics" for p in e["data"]]
    assert [(p["step"], p["split"], p["name"], p["value"]) for p in got] == runs.metrics(rec.id)
    after = parse_sse(client.get(f"/api/v1/runs/{rec.id}/metrics/stream?after=25").text)
    assert {p["step"] for e in after if e["event"] == "metrics" for p in e["data"]} == set(range(26, 31))


def test_cursor_survives_rows_added_to_an_already_sent_step():
    from caramba.api.runs import Cursor, rows_after

    rows = [(1, "train", "loss", 1.0), (2, "train", "loss", 0.5)]
    sent, cur = rows_after(rows, Cursor())
    assert sent == rows and cur == Cursor(2, 1)
    rows.append((2, "val", "loss", 0.7))  # an evaluation at step 2, written after step 2 was sent
    rows.append((3, "train", "loss", 0.4))
    rows.sort(key=lambda r: r[0])  # the store orders by step, then by when it was written
    more, cur = rows_after(rows, cur)
    assert more == [(2, "val", "loss", 0.7), (3, "train", "loss", 0.4)] and cur == Cursor(3, 1)
    assert Cursor.parse("2:1") == Cursor(2, 1) and Cursor.parse(None, 4) == Cursor(4, 1 << 62)
    assert Cursor.parse("garbage", None) == Cursor()


def test_artifacts_list_and_download_with_their_hash(client, runs):
    rec = _finished_run(runs)
    runs.add_artifact(rec.id, "checkpoints/final.safetensors", b"\x00\x01weights", kind="checkpoint")
    arts = {a["name"]: a for a in client.get(f"/api/v1/runs/{rec.id}/artifacts").json()}
    assert set(arts) == {"manifest.yml", "checkpoints/final.safetensors"}
    ck = arts["checkpoints/final.safetensors"]
    r = client.get(ck["url"])
    assert r.status_code == 200 and r.content == b"\x00\x01weights"
    assert r.headers["x-content-sha256"] == hashlib.sha256(b"\x00\x01weights").hexdigest() == ck["sha256"]
    assert client.get(f"/api/v1/runs/{rec.id}/artifacts/nope.bin").status_code == 404
    (rec.dir / "secret.txt").write_text("not an artifact")
    assert client.get(f"/api/v1/runs/{rec.id}/artifacts/secret.txt").status_code == 404
    assert client.get(f"/api/v1/runs/{rec.id}/artifacts/..%2F..%2Fruns.sqlite").status_code == 404


def test_steering_a_run_that_is_not_live_is_a_conflict(client, runs):
    rec = _finished_run(runs)
    other = runs.create_run("exp-b")
    r = client.post(f"/api/v1/runs/{other.id}/pause")
    assert r.status_code == 409 and "not executing in this server" in r.json()["detail"]
    assert client.post(f"/api/v1/runs/{other.id}/resume").status_code == 409
    r = client.post(f"/api/v1/runs/{rec.id}/cancel")  # finished: cancelling changes nothing
    assert r.status_code == 200 and r.json()["status"] == "finished"
    assert client.post("/api/v1/runs/nosuch/cancel").status_code == 404


SMALL = """\
name: small
topology:
  inputs:
    x: {shape: [batch, 4]}
  dims: {batch: 2}
  nodes:
    - {id: fc, op: projection.linear, in: [x], config: {out_features: 3}}
    - {id: act, op: activation.gelu, in: [fc]}
"""


def test_run_graph_is_compiled_from_the_recorded_manifest(client, runs):
    rec = runs.create_run("small", backend="cpu", manifest_path="manifest.yml")
    runs.add_artifact(rec.id, "manifest.yml", SMALL, kind="manifest")
    r = client.get(f"/api/v1/runs/{rec.id}/graph")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["backend"] == "cpu" and body["before"]["svg"].startswith("<svg")
    assert "fc" in body["before"]["text"]
    bare = runs.create_run("bare")
    assert client.get(f"/api/v1/runs/{bare.id}/graph").status_code == 404


def test_a_run_whose_process_died_is_interrupted_and_its_stream_ends(client, runs):
    """A run killed with SIGKILL stays "running" in the store; its owner process is gone, so it
    reads as interrupted and the stream ends instead of waiting forever."""
    import socket
    import subprocess
    import sys

    rec = runs.create_run("exp-a", target="cpu", run_name="seed0", backend="cpu", steps=100)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    runs.start(rec.id, owner=f"{socket.gethostname()}:{gone.pid}")
    runs.log_metrics(rec.id, 1, {"loss": 1.0})
    assert client.get(f"/api/v1/runs/{rec.id}").json()["status"] == "interrupted"
    events = parse_sse(client.get(f"/api/v1/runs/{rec.id}/metrics/stream").text)
    assert events[0]["data"]["status"] == "interrupted" and events[-1]["event"] == "end"
    assert [p["step"] for e in events if e["event"] == "metrics" for p in e["data"]] == [1]
    assert client.get("/api/v1/runs?status=interrupted").json()["items"][0]["id"] == rec.id
