"""Runs executed by Experiment actors: evidence in the Notary's ledger, verdicts computed on
request (and VOIDED when an artifact is tampered with), model versions, steering via messages."""

from __future__ import annotations

import time

import pytest

TINY = """\
name: tiny-actors
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
trainer: {loss: loss, lr: 0.05, batch_size: 16, steps: 12, log_every: 1}
metrics: [loss, accuracy]
checkpoints: {every: 4}
targets:
  - name: cpu
    backend: cpu
    runs: [{id: seed0, seed: 0}]
"""
DONE = ("finished", "failed", "cancelled")


def _wait(fn, what, timeout=120.0):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_an_empty_ledger_reads_empty_and_starts_nothing(client, store):
    assert client.get("/api/v1/notary/entries").json()["total"] == 0
    assert client.get("/api/v1/notary/verify").json() == {"ok": True, "entries": 0, "head": "", "problems": []}
    assert client.get("/api/v1/notary/head").status_code == 404
    assert client.get("/api/v1/models").json()["total"] == 0
    assert client.get("/api/v1/notary/validity?entry=%2312").status_code == 404
    assert client.get("/api/v1/notary/validity?entry=nothex").status_code == 422
    assert client.get("/api/v1/models/nope").status_code == 404
    assert not (store / "cluster").exists()


def test_actor_run_is_verified_committed_and_its_evidence_is_readable(client, store):
    r = client.post("/api/v1/experiments", json={"manifest": TINY, "executor": "actors"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["runs"] and body["runs"][0]["executor"] == "actors"
    run_id = body["runs"][0]["id"]
    run = _wait(lambda: (x := client.get(f"/api/v1/runs/{run_id}").json())["status"] in DONE and x, "the run")
    assert run["status"] == "finished", run
    assert run["summary"]["verdict"] == "verified" and run["summary"]["model_version"] == 1
    pts = client.get(f"/api/v1/runs/{run_id}/metrics?name=loss&split=train").json()["points"]
    assert [p["step"] for p in pts] == list(range(1, 13))  # the ledger's per-step metrics, in the run store
    evals = [p for p in client.get(f"/api/v1/runs/{run_id}/metrics?name=loss").json()["points"] if p["split"] != "train"]
    assert evals and {p["step"] for p in evals} == {12}  # the final evaluation, as on every run

    ev = client.get(f"/api/v1/runs/{run_id}/evidence").json()
    kinds = [e["kind"] for e in ev["entries"]]
    assert kinds[0] == "intent" and kinds.count("artifact") == 3 and "claim" in kinds
    assert ev["verdict"]["verdict"] == "VERIFIED" and ev["subject"] == run["ledger_run"]

    models = client.get("/api/v1/models").json()["items"]
    assert models == [{"name": "tiny-actors", "versions": 1, "latest": 1, "updated": models[0]["updated"]}]
    v1 = client.get("/api/v1/models/tiny-actors/versions/1").json()
    assert v1["verdict"] == "VERIFIED" and v1["run_id"] == run["ledger_run"]
    assert client.get("/api/v1/models/tiny-actors/versions/2").status_code == 404
    assert client.get("/api/v1/notary/verify").json()["ok"] is True
    head = client.get("/api/v1/notary/head").json()
    assert head["format"] == "caramba-tree-head/1" and head["size"] >= len(ev["entries"]) and len(head["root"]) == 64
    from caramba.actors.ledger import TreeHead

    assert TreeHead.model_validate(head).signature_ok()

    claim = next(e for e in ev["entries"] if e["kind"] == "claim")
    by_seq = client.get(f"/api/v1/notary/entries/%23{claim['seq']}").json()
    assert by_seq["hash"] == claim["hash"]
    audit = client.get("/api/v1/notary/audit", params={"entry": claim["hash"][:10]}).json()
    assert audit["validity"]["verdict"] == "VERIFIED" and len(audit["entries"]) >= 5

    # tamper with the final checkpoint blob: the Notary re-hashes it and voids the claim
    from caramba.store.blobs import LocalBlobStore

    blobs = LocalBlobStore(store / "cluster" / "blobs")
    key = run["summary"]["checkpoint"]
    path = blobs.object_path(blobs.stat(key).sha256)
    path.chmod(0o644)
    path.write_bytes(b"not the checkpoint")
    verdict = client.get("/api/v1/notary/validity", params={"entry": claim["hash"]}).json()
    assert verdict["verdict"] == "VOIDED" and verdict["valid"] is False and verdict["reasons"]
    assert client.get("/api/v1/notary/verify").json()["ok"] is False
    assert client.get("/api/v1/notary/head").status_code == 200  # an artifact is not the ledger's history

    # edit a row of the ledger behind the Notary's back: no head is signed for a damaged history
    import sqlite3

    db = sqlite3.connect(next(store.rglob("notary/ledger.sqlite")))  # wherever the server keeps it
    for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        db.execute(f"DROP TRIGGER {t}")
    db.execute("UPDATE entries SET name = 'edited' WHERE seq = ?", (claim["seq"],))
    db.commit()
    db.close()
    r = client.get("/api/v1/notary/head")
    assert r.status_code == 409 and "does not verify" in r.json()["detail"], r.text
    problems = client.get("/api/v1/notary/verify").json()["problems"]
    assert any(p["seq"] == claim["seq"] for p in problems)


def test_actor_run_pauses_resumes_and_cancels_through_messages(client):
    long = TINY.replace("steps: 12", "steps: 1000000").replace("checkpoints: {every: 4}", "checkpoints: {every: 0}")
    run_id = client.post("/api/v1/experiments", json={"manifest": long, "executor": "actors"}).json()["runs"][0]["id"]
    get = lambda: client.get(f"/api/v1/runs/{run_id}").json()
    _wait(lambda: get()["live"], "the experiment to run")
    assert client.post(f"/api/v1/runs/{run_id}/pause").json()["status"] == "paused"
    assert client.post(f"/api/v1/runs/{run_id}/resume").json()["status"] == "running"
    r = client.post(f"/api/v1/runs/{run_id}/cancel")
    assert r.status_code == 200
    run = _wait(lambda: (x := get())["status"] in DONE and x, "the cancel")
    assert run["status"] == "cancelled" and run["live"] is False
    assert client.post(f"/api/v1/runs/{run_id}/resume").status_code == 409


@pytest.mark.parametrize("ref", ["abc", "#", "#x1", "g" * 12])
def test_bad_entry_references_are_refused(client, ref):
    assert client.get("/api/v1/notary/entries/" + ref.replace("#", "%23")).status_code in (404, 422)
