"""POST /experiments with a sequential tuner (grid / random / active_inference): the server runs
the tuner's choices (budget runs, each recording its decision), not every planned run; the
decisions come back on GET /compare."""

from __future__ import annotations

import time

import pytest

from tests.unit.run.test_tuner import BLOBS

DONE = ("finished", "failed", "cancelled")


def _wait_done(client, group, n, timeout=180.0):
    deadline = time.monotonic() + timeout
    while True:
        items = client.get(f"/api/v1/runs?group_id={group}").json()["items"]
        done = [x for x in items if x["status"] in DONE]
        if len(done) >= n and len(items) == len(done):
            return done
        assert time.monotonic() < deadline, f"timed out waiting for {n} runs of {group}: {items}"
        time.sleep(0.1)


@pytest.mark.parametrize("strategy", ["active_inference", "grid"])
def test_the_server_runs_the_tuners_choices(client, store, strategy):
    text = (BLOBS % 3).replace("strategy: active_inference", f"strategy: {strategy}")
    r = client.post("/api/v1/experiments", json={"manifest": text, "name": "tuned.yml"})
    assert r.status_code == 202, r.text
    group = r.json()["group_id"]
    runs = _wait_done(client, group, 3)
    time.sleep(0.3)  # no fourth run follows the budget
    items = client.get(f"/api/v1/runs?group_id={group}").json()["items"]
    assert len(items) == 3, items
    from caramba.store import RunStore

    recs = sorted((RunStore(store).get(x["id"]) for x in runs), key=lambda rec: rec.config["tuner"]["step"])
    steps = [rec.config["tuner"] for rec in recs]
    assert [s["step"] for s in steps] == [0, 1, 2] and {s["strategy"] for s in steps} == {strategy}
    # active_inference: each arm once, then the arm that did not overflow; grid: round-robin
    assert [s["arm"] for s in steps] == (["boom", "ok", "ok"] if strategy == "active_inference" else ["boom", "ok", "boom"])
    assert [rec.arm for rec in recs] == [s["arm"] for s in steps]
    assert recs[-1].config["tuner_final"]["best"] == "ok"
    if strategy == "active_inference":
        assert set(steps[2]["beliefs"]) == {"boom", "ok"}
    body = client.get("/api/v1/compare", params={"experiment": "tuned"}).json()
    got = sorted((x["tuner"]["step"], x["tuner"]["arm"], x["tuner"]["strategy"]) for x in body["runs"])
    assert got == [(s["step"], s["arm"], strategy) for s in steps]
