"""GET /compare, GET /compare/curves, POST /runs/{id}/tags, PUT /runs/{id}/note, DELETE /runs/{id}:
numbers from the stored rows, round trips, the ledger after a delete, and hostile requests."""

from __future__ import annotations

import numpy as np
import pytest

from caramba.store.runs import RunStore

from ..run_ids import unique_prefix

TUNER = {"metric": "val.loss", "mode": "min",
         "arms": [{"id": "a", "set": {"trainer.lr": 0.01}, "description": "small steps"}, {"id": "b", "set": {"trainer.lr": 0.1}}]}


@pytest.fixture
def sweep(store):
    runs = RunStore(store)
    rng = np.random.default_rng(3)
    ids = {}
    for arm, base in (("a", 1.0), ("b", 0.2)):
        for seed in (0, 1):
            rec = runs.create_run("sw", arm=arm, target="cpu", run_name=f"s{seed}", seed=seed,
                                  config={"manifest": {"tuner": TUNER}, "spec": {"config": {"overrides": ["trainer.steps=3"]}}})
            runs.start(rec.id)
            runs.log_rows(rec.id, [(i, "val", {"loss": base + float(rng.random())}) for i in (1, 2, 3)])
            runs.finish(rec.id)
            ids[(arm, seed)] = rec.id
    return runs, ids


def test_compare_matches_the_stored_rows(client, sweep):
    runs, ids = sweep
    r = client.get("/api/v1/compare", params={"experiment": "sw"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["metric"] == "val.loss" and body["mode"] == "min" and body["params"] == ["trainer.lr", "trainer.steps"]
    assert [a["id"] for a in body["arms"]] == ["a", "b"] and body["arms"][0]["description"] == "small steps"
    assert [a["arm"] for a in body["ranking"]] == ["b", "a"]
    for a in body["ranking"]:
        finals = [runs.series(ids[(a["arm"], s)], "loss", "val")[1][-1] for s in (0, 1)]
        assert a["mean"] == pytest.approx(np.mean(finals), rel=1e-12)
        assert a["std"] == pytest.approx(np.std(finals, ddof=1), rel=1e-12) and a["n"] == 2
    for row in body["runs"]:
        vals = runs.series(row["id"], "loss", "val")[1]
        assert row["final"]["val.loss"] == vals[-1] and row["best"]["val.loss"] == min(vals)
    r = client.get("/api/v1/compare", params=[("run", ids[("a", 0)]), ("run", unique_prefix(ids[("b", 1)], ids.values(), drop=1))])
    assert r.status_code == 200 and {x["id"] for x in r.json()["runs"]} == {ids[("a", 0)], ids[("b", 1)]}


def test_curves_for_the_overlay(client, sweep):
    runs, ids = sweep
    pick = [ids[("a", 0)], ids[("b", 0)]]
    r = client.get("/api/v1/compare/curves", params=[("metric", "val.loss"), *(("run", i) for i in pick)])
    assert r.status_code == 200, r.text
    got = r.json()["curves"]
    assert [c["run"] for c in got] == pick
    for c in got:
        assert c["steps"] == [1, 2, 3] and c["values"] == runs.series(c["run"], "loss", "val")[1]
        assert len(c["seconds"]) == 3 and min(c["seconds"]) >= 0


def test_tags_and_note_round_trip(client, sweep, anon):
    _, ids = sweep
    rid = ids[("a", 1)]
    r = client.post(f"/api/v1/runs/{rid}/tags", json={"add": ["keep", "fig:2"]})
    assert r.status_code == 200 and r.json()["tags"] == ["keep", "fig:2"]
    r = client.post(f"/api/v1/runs/{rid}/tags", json={"remove": ["keep"]})
    assert r.json()["tags"] == ["fig:2"]
    r = client.put(f"/api/v1/runs/{rid}/note", json={"note": "seed 1 is odd"})
    assert r.status_code == 200 and r.json()["note"] == "seed 1 is odd"
    assert client.get(f"/api/v1/runs/{rid}").json()["tags"] == ["fig:2"]
    r = client.get("/api/v1/compare", params={"experiment": "sw", "tag": "fig:2"})
    assert [x["id"] for x in r.json()["runs"]] == [rid] and r.json()["runs"][0]["note"] == "seed 1 is odd"
    assert anon.post(f"/api/v1/runs/{rid}/tags", json={"add": ["x"]}).status_code == 401
    assert anon.put(f"/api/v1/runs/{rid}/note", json={"note": "x"}).status_code == 401
    assert anon.delete(f"/api/v1/runs/{rid}").status_code == 401


@pytest.mark.parametrize("method,path,kwargs", [
    ("post", "tags", {"json": {"add": ["../../etc/passwd"]}}),
    ("post", "tags", {"json": {"add": ["a b"]}}),
    ("post", "tags", {"json": {"add": ["x" * 65]}}),
    ("post", "tags", {"json": {"add": [f"t{i}" for i in range(33)]}}),
    ("post", "tags", {"json": {"add": "keep"}}),
    ("post", "tags", {"json": {"add": [1]}}),
    ("post", "tags", {"json": {"add": ["ok"], "evil": 1}}),
    ("post", "tags", {"content": b"{not json", "headers": {"Content-Type": "application/json"}}),
    ("put", "note", {"json": {"note": "x" * 20_001}}),
    ("put", "note", {"json": {"note": "a\u0000b"}}),
    ("put", "note", {"content": b'{"note": "\\ud800"}', "headers": {"Content-Type": "application/json"}}),
    ("put", "note", {"json": {"note": None}}),
    ("put", "note", {"json": {}}),
    ("put", "note", {"json": [1, 2]}),
])
def test_bad_bodies_are_4xx_with_a_message(client, sweep, method, path, kwargs):
    _, ids = sweep
    rid = ids[("a", 0)]
    r = getattr(client, method if method != "put" else "request")(
        *(("PUT",) if method == "put" else ()), f"/api/v1/runs/{rid}/{path}", **kwargs)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.json()["detail"]
    assert client.get(f"/api/v1/runs/{rid}").json()["tags"] == []


@pytest.mark.parametrize("ref", ["..", "..%2F..%2Fetc", "%2e%2e", "no-such-run", "sw", "latest", "%00", "a%5C..%5Cb"])
def test_delete_of_unknown_or_partial_ids_is_404(client, sweep, ref):
    r = client.delete(f"/api/v1/runs/{ref}")
    assert r.status_code == 404, (ref, r.status_code, r.text)
    assert len(client.get("/api/v1/runs").json()["items"]) == 4


def test_hostile_compare_queries(client, sweep):
    for params in ({"experiment": "nope"}, {"metric": "val.nope", "experiment": "sw"}, {"metric": "x"},
                   {"run": "x" * 300}, {"tag": "a b", "experiment": "sw"}, {"mode": "up", "experiment": "sw"}, {}):
        r = client.get("/api/v1/compare", params=params)
        assert 400 <= r.status_code < 500 and r.json()["detail"], (params, r.status_code, r.text)
    r = client.get("/api/v1/compare/curves", params={"metric": "val.loss", "run": "nope"})
    assert r.status_code == 404
    r = client.get("/api/v1/compare/curves", params={"metric": "val.loss"})
    assert r.status_code == 422


def test_a_live_run_is_not_deleted(client, store):
    runs = RunStore(store)
    rec = runs.create_run("live")
    runs.start(rec.id)
    r = client.delete(f"/api/v1/runs/{rec.id}")
    assert r.status_code == 409 and "cancel" in r.json()["errors"][0]["hint"]


MANIFEST = """\
name: one
topology:
  inputs:
    x: {shape: [batch, 2]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: mlp, op: model.mlp_classifier, in: [x], config: {classes: 2, hidden: 4}}
    - {id: loss, op: loss.cross_entropy, in: [mlp, label]}
datasets:
  xor: {source: generated, kind: xor, n: 32, feed: {label: y}}
trainer: {loss: loss, lr: 0.05, batch_size: 16, steps: 2}
targets: [{name: cpu, backend: cpu, runs: [{id: s0, seed: 0}, {id: s1, seed: 1}]}]
"""


@pytest.mark.slow  # two real runs through the engine and the Notary (~5-9 s on a loaded machine)
def test_delete_through_the_api_keeps_the_ledger_verifying(client, store, tmp_path):
    from caramba.run import run_experiment

    m = tmp_path / "one.yml"
    m.write_text(MANIFEST)
    result = run_experiment(m, store=RunStore(store))
    assert result.ok
    victim, other = (r.run_id for r in result.runs)
    assert client.get("/api/v1/notary/verify").json()["ok"]
    r = client.delete(f"/api/v1/runs/{victim}", params={"reason": "mislabelled"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["run_id"] == victim and body["ledger_entry"] and body["removed"] and body["reason"] == "mislabelled"
    report = client.get("/api/v1/notary/verify").json()
    assert report["ok"], report
    assert any(victim in d and "mislabelled" in d for d in report["deleted"])
    entries = client.get("/api/v1/notary/entries", params={"subject": victim}).json()
    items = entries["items"] if isinstance(entries, dict) and "items" in entries else entries
    assert any(e["name"] == "deleted" for e in (items if isinstance(items, list) else []))
    gone = client.get(f"/api/v1/runs/{victim}")
    assert gone.status_code == 404 and "was deleted" in gone.json()["detail"]
    assert client.delete(f"/api/v1/runs/{victim}").status_code == 404
    assert client.get(f"/api/v1/runs/{other}").status_code == 200
