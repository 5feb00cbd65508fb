"""Submitting manifests over HTTP: checked first (422 with locations, nothing runs), then run in
the server, recorded in the run store, and steerable (pause, resume, cancel) while live."""

from __future__ import annotations

import time

import pytest

TINY = """\
name: tiny
topology:
  inputs:
    x: {shape: [batch, 2]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: fc, op: projection.linear, in: [x], config: {out_features: 2}}
    - {id: loss, op: loss.cross_entropy, in: [fc, label]}
    - {id: accuracy, op: metric.accuracy, in: [fc, label]}
  outputs: {logits: fc, loss: loss, accuracy: accuracy}
datasets:
  blobs: {source: generated, kind: blobs, n: 200, features: 2, classes: 2, feed: {label: y}}
trainer: {loss: loss, lr: 0.05, batch_size: 16, steps: 20, log_every: 1, eval_every: 10}
metrics: [loss, accuracy]
checkpoints: {at_end: false}
targets:
  - name: cpu
    backend: cpu
    runs: [{id: seed0, seed: 0}, {id: seed1, seed: 1}]
"""

DONE = ("finished", "failed", "cancelled")


def _wait(client, predicate, what, timeout=120.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _runs_of(client, group):
    return client.get(f"/api/v1/runs?group_id={group}").json()["items"]


def test_submit_runs_every_planned_run_and_records_it(client, store):
    r = client.post("/api/v1/experiments", json={"manifest": TINY, "name": "tiny.yml"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["experiment"] == "tiny" and [p["label"] for p in body["planned"]] == ["cpu/seed0", "cpu/seed1"]
    assert body["runs"] and body["runs"][0]["name"] == "seed0" and body["runs"][0]["live"] in (True, False)
    group = body["group_id"]
    runs = _wait(client, lambda: [x for x in _runs_of(client, group) if x["status"] in DONE] if len(
        [x for x in _runs_of(client, group) if x["status"] in DONE]) == 2 else None, "both runs")
    assert {x["status"] for x in runs} == {"finished"}, runs
    for run in runs:
        assert run["step"] == 20 and run["summary"]["steps"] == 20 and run["live"] is False
        pts = client.get(f"/api/v1/runs/{run['id']}/metrics?name=loss&split=train").json()["points"]
        assert [p["step"] for p in pts] == list(range(1, 21))
        assert {a["kind"] for a in client.get(f"/api/v1/runs/{run['id']}/artifacts").json()} >= {"manifest", "ir"}
    graph = client.get(f"/api/v1/runs/{runs[0]['id']}/graph").json()
    assert graph["before"]["svg"].startswith("<svg") and any(s["name"] == "lower" for s in graph["stages"])
    exps = client.get("/api/v1/experiments").json()["items"]
    assert exps[0]["name"] == "tiny" and exps[0]["statuses"] == {"finished": 2}


@pytest.mark.parametrize(
    ("text", "line", "path", "words"),
    [
        ("name: tiny\ntopology: [\n", 3, None, "invalid YAML"),
        (TINY.replace("trainer: {", "trainer: {bogus: 1, "), 13, "trainer.bogus", "unknown key 'bogus'"),
        (TINY.replace("out_features: 2", "out_features: -2"), 7, "topology.nodes[0]", "positive"),
        (TINY.replace("op: projection.linear", "op: projection.lineer"), 7, "topology.nodes[0].op", "projection.linear"),
        (TINY.replace("source: generated", "source: npz, path: ../../../etc/x.npz"), 12, "datasets.blobs", ""),
        (TINY.replace("metrics: [loss, accuracy]", "metrics: [loss, acuracy]"), 14, "metrics[1]", "accuracy"),
    ],
    ids=["yaml", "unknown-key", "bad-config", "unknown-op", "data-outside", "unknown-metric"],
)
def test_malformed_manifests_get_422_with_locations_and_nothing_runs(client, store, text, line, path, words):
    r = client.post("/api/v1/experiments", json={"manifest": text, "name": "tiny.yml"})
    assert r.status_code == 422, r.text
    err = r.json()["errors"][0]
    assert err["file"] == "tiny.yml" and err["line"] == line, err
    if path:
        assert err["path"].startswith(path), err
    assert words in err["message"] + (err.get("hint") or "")
    assert str(store) not in r.text  # the server's folders never show in an error
    assert client.get("/api/v1/runs").json()["total"] == 0
    assert not any((store / "submissions").iterdir())


def test_unknown_target_or_run_selection_is_422(client):
    r = client.post("/api/v1/experiments", json={"manifest": TINY, "targets": ["gpu"]})
    assert r.status_code == 422 and "no target 'gpu'" in r.json()["detail"] and "cpu" in r.json()["detail"]
    r = client.post("/api/v1/experiments", json={"manifest": TINY, "runs": ["seed9"]})
    assert r.status_code == 422 and "seed0" in r.json()["detail"]


def test_pause_resume_and_cancel_a_live_run(client):
    long = TINY.replace("steps: 20", "steps: 1000000")
    r = client.post("/api/v1/experiments", json={"manifest": long, "runs": ["seed0"]})
    assert r.status_code == 202, r.text
    run_id = r.json()["runs"][0]["id"]
    get = lambda: client.get(f"/api/v1/runs/{run_id}").json()
    _wait(client, lambda: get()["step"] >= 3, "training to start")
    paused = client.post(f"/api/v1/runs/{run_id}/pause").json()
    assert paused["status"] in ("running", "paused") and paused["live"] is True
    _wait(client, lambda: get()["status"] == "paused", "the run to stop between two steps")
    held = get()["step"]
    time.sleep(1.0)
    assert get()["step"] == held and get()["status"] == "paused"
    assert client.post(f"/api/v1/runs/{run_id}/resume").json()["status"] == "running"
    _wait(client, lambda: get()["step"] > held, "training to go on after resume")
    assert client.post(f"/api/v1/runs/{run_id}/resume").status_code == 409  # not paused
    client.post(f"/api/v1/runs/{run_id}/cancel")
    run = _wait(client, lambda: (x := get())["status"] in DONE and x, "the cancel")
    assert run["status"] == "cancelled" and run["error"] == "cancelled through the API" and run["live"] is False
    assert client.post(f"/api/v1/runs/{run_id}/pause").status_code == 409


def test_shutting_down_cancels_live_runs(app, client):
    long = TINY.replace("steps: 20", "steps: 1000000")
    run_id = client.post("/api/v1/experiments", json={"manifest": long, "runs": ["seed1"]}).json()["runs"][0]["id"]
    _wait(client, lambda: client.get(f"/api/v1/runs/{run_id}").json()["step"] >= 1, "training to start")
    app.state.caramba.close()
    run = client.get(f"/api/v1/runs/{run_id}").json()
    assert run["status"] == "cancelled" and run["error"] == "the server shut down"
    assert client.post("/api/v1/experiments", json={"manifest": TINY}).status_code == 409
