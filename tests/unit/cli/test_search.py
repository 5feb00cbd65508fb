"""`caramba search`: a real experiment run writes its embeddings, the command finds them."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("qdrant_client")

from caramba.cli import app
from caramba.errors import CarambaError

MANIFEST = """\
name: blobs-emb
topology:
  inputs:
    x: {shape: [batch, 2]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: hidden, op: projection.linear, in: [x], config: {out_features: 6}}
    - {id: act, op: activation.tanh, in: [hidden]}
    - {id: logits, op: projection.linear, in: [act], config: {out_features: 3}}
    - {id: loss, op: loss.cross_entropy, in: [logits, label]}
datasets:
  blobs: {source: generated, kind: blobs, n: 300, classes: 3, split: {train: 0.6, val: 0.2, test: 0.2}, feed: {label: y}}
trainer: {loss: loss, batch_size: 16, steps: 3}
embeddings: {output: act, split: val, collection: blobs, distance: euclid}
targets:
  - name: cpu
    backend: cpu
    runs: [{id: seed0, seed: 0}]
"""


def invoke(*args):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def said(r) -> str:
    if r.exception is not None and not isinstance(r.exception, (CarambaError, SystemExit)):
        raise r.exception  # a traceback: a bug, not an answer
    return r.output + (str(r.exception) if isinstance(r.exception, CarambaError) else "")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """``(store folder, run ID)`` of a 3-step run that wrote its val embeddings."""
    from caramba.run.engine import run_experiment
    from caramba.store.runs import RunStore

    root = tmp_path_factory.mktemp("search")
    (root / "m.yml").write_text(MANIFEST)
    mp = pytest.MonkeyPatch()
    mp.delenv("CARAMBA_VECTORS", raising=False)
    try:
        res = run_experiment(root / "m.yml", store=RunStore(root / "store"))
    finally:
        mp.undo()
    assert res.ok, res.runs[0].error
    return root / "store", res.runs[0].run_id


@pytest.fixture(autouse=True)
def _no_vectors_setting(monkeypatch):
    monkeypatch.delenv("CARAMBA_VECTORS", raising=False)


def _vectors(store):
    """Every point's vector and payload, read with qdrant-client itself."""
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(store / "vectors"))
    try:
        points, _ = client.scroll("blobs", limit=1000, with_vectors=True, with_payload=True)
    finally:
        client.close()
    return points


def test_like_finds_neighbours_with_provenance(run):
    store, run_id = run
    r = invoke("search", "blobs", "--like", f"{run_id}:val:4", "--k", "5", "--store", str(store), "--json")
    assert r.exit_code == 0, said(r)
    out = json.loads(r.output)
    assert out["query"]["like"]["index"] == 4 and out["query"]["like"]["run"] == run_id
    hits = out["neighbours"]
    assert len(hits) == 5 and all(h["payload"]["index"] != 4 for h in hits)  # the query point is left out
    for h in hits:
        p = h["payload"]
        assert p["run"] == run_id and p["experiment"] == "blobs-emb" and p["split"] == "val" and p["output"] == "act"
        assert p["checkpoint_step"] == 3 and len(p["manifest_sha256"]) == 64 and p["label"] in (0, 1, 2)
    points = _vectors(store)  # exact euclidean neighbours with NumPy
    index = {p.payload["index"]: np.asarray(p.vector) for p in points}
    assert len(index) == 60
    d = {i: float(np.linalg.norm(v - index[4])) for i, v in index.items() if i != 4}
    want = sorted(d, key=d.get)[:5]
    assert [h["payload"]["index"] for h in hits] == want
    np.testing.assert_allclose([h["score"] for h in hits], [d[i] for i in want], rtol=1e-5)


def test_text_output_a_run_prefix_and_filters(run):
    store, run_id = run
    r = invoke("search", "blobs", "--like", f"{run_id[:-2]}:val:0", "--store", str(store), "--filter", "label=1",
               "--filter", f"run={run_id}")
    assert r.exit_code == 0, said(r)
    lines = r.output.strip().splitlines()
    assert lines[0].startswith("10 nearest in 'blobs'") and f"like {run_id}:val:0" in lines[0]
    assert lines[1].split() == ["#", "score", "run", "split", "index", "label", "output", "step", "experiment"]
    assert len(lines) == 12 and all(line.split()[5] == "1" and run_id in line for line in lines[2:])


def test_vector_file_query(run, tmp_path):
    store, _ = run
    points = _vectors(store)
    target = next(p for p in points if p.payload["index"] == 11)
    np.save(tmp_path / "q.npy", np.asarray(target.vector))
    r = invoke("search", "blobs", "--vector", str(tmp_path / "q.npy"), "--k", "1", "--store", str(store), "--json")
    assert r.exit_code == 0, said(r)
    hit = json.loads(r.output)["neighbours"][0]
    assert hit["payload"]["index"] == 11 and hit["score"] == pytest.approx(0.0, abs=1e-5)


def test_the_vectors_option_names_the_store(run, tmp_path):
    store, run_id = run
    r = invoke("search", "blobs", "--like", f"{run_id}:val:0", "--vectors", str(store / "vectors"), "--k", "2")
    assert r.exit_code == 0, said(r)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = invoke("search", "blobs", "--like", f"{run_id}:val:0", "--vectors", f"http://127.0.0.1:{port}")
    assert f"cannot reach the Qdrant server at http://127.0.0.1:{port}" in said(r) and r.exit_code != 0


@pytest.mark.parametrize("args, message", [
    (["--k", "0"], "k must be a whole number from 1 to 1000"),
    (["--k", "100000"], "k must be a whole number from 1 to 1000"),
    ([], "give the query"),
    (["--like", "nope"], "is not RUN:SPLIT:INDEX"),
    (["--like", "r:tset:1"], "is not RUN:SPLIT:INDEX"),
    (["--like", "r:val:x"], "is not a whole number"),
    (["--like", "r:val:-1"], "must be >= 0"),
    (["--like", "unknown-run:val:1"], "has no point with run=unknown-run"),
    (["--like", "RUN:val:100000"], "has no point with run="),
    (["--filter", "nokey"], "is not key=value"),
    (["--filter", "colour=red", "--like", "RUN:val:1"], "cannot filter by 'colour'"),
    (["--vector", "WRONGDIM"], "has 3 numbers; collection 'blobs' holds 6-vectors"),
    (["--vector", "NAN"], "not finite"),
    (["--vector", "NOTNPY"], "is not a NumPy .npy array"),
    (["--vector", "PICKLE"], "is not a NumPy .npy array"),
    (["--vector", "MISSING"], "cannot read --vector"),
])
def test_hostile_inputs_get_clear_errors(run, tmp_path, args, message):
    store, run_id = run
    np.save(tmp_path / "wrongdim.npy", np.ones(3))
    np.save(tmp_path / "nan.npy", np.full(6, np.nan))
    (tmp_path / "notnpy.npy").write_bytes(b"not an array")
    np.save(tmp_path / "pickle.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    subst = {"WRONGDIM": str(tmp_path / "wrongdim.npy"), "NAN": str(tmp_path / "nan.npy"),
             "NOTNPY": str(tmp_path / "notnpy.npy"), "PICKLE": str(tmp_path / "pickle.npy"),
             "MISSING": str(tmp_path / "missing.npy")}
    args = [subst.get(a, a).replace("RUN", run_id) for a in args]
    if not any(a in ("--like", "--vector") for a in args) and "give the query" not in message:
        args += ["--vector", str(tmp_path / "wrongdim.npy")]
    r = invoke("search", "blobs", *args, "--store", str(store))
    text = said(r)
    assert r.exit_code != 0 and message in text, text


@pytest.mark.parametrize("name", ["../blobs", "a/b", "x" * 64, "_a", "bl obs", "a\n"])
def test_bad_collection_names(run, name):
    store, run_id = run
    r = invoke("search", name, "--like", f"{run_id}:val:0", "--store", str(store))
    assert r.exit_code != 0 and "not a collection name" in said(r)


def test_a_missing_collection_is_named(run):
    store, run_id = run
    r = invoke("search", "blob", "--like", f"{run_id}:val:0", "--store", str(store))
    assert r.exit_code != 0 and "has no collection 'blob'; did you mean 'blobs'" in said(r)


def test_a_remote_run_store_needs_vectors(tmp_path):
    r = invoke("search", "blobs", "--vector", str(tmp_path / "q.npy"), "--store", "s3://bucket/prefix")
    assert r.exit_code != 0 and "the run store is s3://bucket/prefix; say where vectors are" in said(r)
    assert not (tmp_path / "s3:").exists()


def test_like_and_vector_together_search_by_their_mean(run, tmp_path):
    store, run_id = run
    points = {p.payload["index"]: np.asarray(p.vector) for p in _vectors(store)}
    np.save(tmp_path / "q.npy", points[9])
    r = invoke("search", "blobs", "--like", f"{run_id}:val:4", "--vector", str(tmp_path / "q.npy"), "--k", "3",
               "--store", str(store), "--json")
    assert r.exit_code == 0, said(r)
    q = (points[4] + points[9]) / 2
    d = {i: float(np.linalg.norm(v - q)) for i, v in points.items() if i != 4}
    assert [h["payload"]["index"] for h in json.loads(r.output)["neighbours"]] == sorted(d, key=d.get)[:3]
