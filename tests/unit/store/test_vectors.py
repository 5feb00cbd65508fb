"""The vector store (caramba.store.vectors): Qdrant local mode by default, a server when
CARAMBA_TEST_QDRANT_URL is set.

Embeddings written by a real (tiny) experiment run carry their provenance and equal an
independent NumPy forward of the checkpoint; search recall@10 against exact NumPy search is
1.0 for each distance; writing a run again adds no points; hostile inputs get clear errors."""

from __future__ import annotations

import os
import re
import secrets
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qdrant_client")

from caramba.errors import CarambaError, ConfigError
from caramba.store.vectors import (
    MAX_K,
    VectorStore,
    VectorStoreError,
    open_vectors,
    point_id,
    write_run_embeddings,
)

MANIFEST = """\
name: digits-emb
topology:
  inputs:
    x: {shape: [batch, 64]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: fc1, op: projection.linear, in: [x], config: {out_features: 12}}
    - {id: act1, op: activation.gelu, in: [fc1]}
    - {id: fc2, op: projection.linear, in: [act1], config: {out_features: 10}}
    - {id: loss, op: loss.cross_entropy, in: [fc2, label]}
  outputs: {logits: fc2, loss: loss}
datasets:
  digits: {source: sklearn, name: digits, split: {train: 0.8, val: 0.0, test: 0.2}, feed: {label: y}}
trainer: {loss: loss, batch_size: 32, steps: 4, lr: 0.01}
embeddings: {output: fc1, split: test, collection: digits}
targets:
  - name: cpu
    backend: cpu
    runs: [{id: seed0, seed: 0}]
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 4-step run of MANIFEST in a fresh store: ``(store, run result)``."""
    from caramba.run.engine import run_experiment
    from caramba.store.runs import RunStore

    root = tmp_path_factory.mktemp("vecstore")
    (root / "m.yml").write_text(MANIFEST)
    store = RunStore(root / "store")
    mp = pytest.MonkeyPatch()
    mp.delenv("CARAMBA_VECTORS", raising=False)
    try:
        res = run_experiment(root / "m.yml", store=store)
    finally:
        mp.undo()
    return store, res.runs[0]


@pytest.fixture(autouse=True)
def _no_vectors_setting(monkeypatch):
    monkeypatch.delenv("CARAMBA_VECTORS", raising=False)


# ---- a run's embeddings --------------------------------------------------------------------


def test_run_writes_embeddings_with_provenance(trained):
    from caramba.run.trained import load_trained

    store, run = trained
    assert run.status == "finished", run.error
    rec = store.get(run.run_id)
    n_test = round(1797 * 0.2)
    assert rec.config["embeddings"] == {"collection": "digits", "location": str(store.root / "vectors"),
                                        "points": n_test, "dim": 12, "output": "fc1", "split": "test"}
    assert run.summary["embeddings.points"] == n_test
    t = load_trained(run.run_id, store)
    ys = t.prep.dataset.arrays("test")["y"]
    with open_vectors(None, store.root) as vs:
        assert vs.info("digits") == (12, "cosine")
        assert vs.count("digits") == n_test
        assert vs.count("digits", {"run": run.run_id, "split": "test"}) == n_test
        for index in (0, 17, n_test - 1):
            pid, _, payload = vs.find("digits", {"run": run.run_id, "split": "test", "index": index})
            assert pid == point_id(run.run_id, "fc1", "test", index)
            assert payload["label"] == int(ys[index])
            assert payload["run"] == rec.id and payload["experiment"] == "digits-emb"
            assert payload["target"] == "cpu" and payload["run_name"] == "seed0" and payload["group"] == rec.group_id
            assert payload["checkpoint_step"] == 4 and payload["checkpoint_sha256"] == t.checkpoint_sha256
            assert payload["manifest_sha256"] == rec.manifest_sha256 and len(rec.manifest_sha256) == 64
            assert payload["output"] == "fc1" and payload["split"] == "test" and payload["index"] == index
            assert "model_version" in payload


def test_embeddings_equal_an_independent_forward(trained):
    """fc1 = x @ W + b from the checkpoint file read by the safetensors library."""
    from safetensors.numpy import load_file

    from caramba.run.trained import load_trained

    store, run = trained
    ckpt = store.artifacts(run.run_id, "checkpoint")[-1]
    tensors = load_file(str(ckpt.path))
    x = load_trained(run.run_id, store).prep.dataset.arrays("test")["x"].astype(np.float64)
    want = x @ tensors["fc1.weight"].astype(np.float64) + tensors["fc1.bias"].astype(np.float64)
    with open_vectors(None, store.root) as vs:
        for index in (0, 5, 200):
            _, vec, _ = vs.find("digits", {"run": run.run_id, "index": index})
            np.testing.assert_allclose(vec, want[index], rtol=1e-5, atol=1e-6)


def test_rewriting_a_run_adds_no_points(trained):
    store, run = trained
    with open_vectors(None, store.root) as vs:
        before = vs.count("digits")
        _, v0, _ = vs.find("digits", {"run": run.run_id, "index": 9})
    w = write_run_embeddings(run.run_id, store)
    w2 = write_run_embeddings(run.run_id, store)
    assert w.count == w2.count == before
    with open_vectors(None, store.root) as vs:
        assert vs.count("digits") == before
        _, v1, _ = vs.find("digits", {"run": run.run_id, "index": 9})
    np.testing.assert_allclose(v0, v1, rtol=1e-6)


def test_search_finds_a_runs_neighbours_like_numpy(trained):
    store, run = trained
    from safetensors.numpy import load_file

    from caramba.run.trained import load_trained

    tensors = load_file(str(store.artifacts(run.run_id, "checkpoint")[-1].path))
    x = load_trained(run.run_id, store).prep.dataset.arrays("test")["x"].astype(np.float64)
    emb = x @ tensors["fc1.weight"].astype(np.float64) + tensors["fc1.bias"].astype(np.float64)
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    with open_vectors(None, store.root) as vs:
        pid, vec, _ = vs.find("digits", {"run": run.run_id, "index": 7})
        hits = vs.search("digits", vec, k=10, where={"run": run.run_id}, exclude=[pid])
    sims = unit @ unit[7]
    sims[7] = -np.inf
    want = np.argsort(-sims)[:10]
    assert [h.payload["index"] for h in hits] == [int(i) for i in want]
    np.testing.assert_allclose([h.score for h in hits], sims[want], atol=1e-5)


@pytest.mark.parametrize("fields, message", [
    ({"label": "x"}, "embeddings.label 'x' is float64[64] per example; a label is one number"),
    ({"label": "why"}, "embeddings.label 'why' is not a field of dataset 'digits'"),
    ({"output": "loss"}, "training-only"),
])
def test_bad_embeddings_specs_at_run_time(trained, fields, message):
    from caramba.manifest.schema import Embeddings
    from caramba.store.vectors import run_embeddings

    store, run = trained
    spec = Embeddings(**{"output": "fc1", "collection": "other", **fields})
    with pytest.raises(ConfigError, match=re.escape(message)):
        run_embeddings(run.run_id, store, spec)


def test_limit_and_split_of_a_spec(trained):
    from caramba.manifest.schema import Embeddings
    from caramba.store.vectors import run_embeddings

    store, run = trained
    vectors, payloads, _ = run_embeddings(run.run_id, store, Embeddings(output="logits", split="train", collection="o",
                                                                        limit=40))
    assert vectors.shape == (40, 10) and [p["index"] for p in payloads] == list(range(40))
    assert {p["split"] for p in payloads} == {"train"} and all(isinstance(p["label"], int) for p in payloads)


def test_a_vector_store_that_cannot_be_reached_fails_the_run(tmp_path, monkeypatch):
    from caramba.run.engine import run_experiment
    from caramba.store.runs import RunStore

    url = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv("CARAMBA_VECTORS", url)
    (tmp_path / "m.yml").write_text(MANIFEST.replace("steps: 4", "steps: 1"))
    store = RunStore(tmp_path / "store")
    res = run_experiment(tmp_path / "m.yml", store=store)
    run = res.runs[0]
    assert run.status == "failed" and not res.ok
    assert f"cannot reach the Qdrant server at {url}" in run.error
    assert "not written" in store.get(run.run_id).config["embeddings"]["error"]
    assert not (tmp_path / "store" / "vectors").exists()  # no silent fallback to local mode


# ---- recall against exact NumPy search -----------------------------------------------------


def _numpy_top(data: np.ndarray, q: np.ndarray, k: int, distance: str) -> np.ndarray:
    if distance == "cosine":
        s = (data / np.linalg.norm(data, axis=1, keepdims=True)) @ (q / np.linalg.norm(q))
        return np.argsort(-s, kind="stable")[:k]
    if distance == "dot":
        return np.argsort(-(data @ q), kind="stable")[:k]
    return np.argsort(np.linalg.norm(data - q, axis=1), kind="stable")[:k]


def _recall(vs: VectorStore, name: str, distance: str, n: int = 300, dim: int = 24, queries: int = 25) -> float:
    rng = np.random.default_rng(7)
    data = rng.normal(size=(n, dim))
    vs.ensure(name, dim, distance)
    ids = [point_id("recall", "out", "test", i) for i in range(n)]
    vs.upsert(name, ids, data, [{"run": "recall", "index": i} for i in range(n)])
    found = total = 0
    for q in rng.normal(size=(queries, dim)):
        want = set(_numpy_top(data, q, 10, distance).tolist())
        got = {h.payload["index"] for h in vs.search(name, q, k=10)}
        found += len(want & got)
        total += 10
    return found / total


@pytest.mark.parametrize("distance", ["cosine", "dot", "euclid"])
def test_recall_at_10_is_one_in_local_mode(tmp_path, distance):
    with open_vectors(str(tmp_path / "v")) as vs:
        assert _recall(vs, f"r-{distance}", distance) == 1.0
        assert vs.count(f"r-{distance}") == 300


def test_the_default_location_is_under_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("CARAMBA_STORE", str(tmp_path / "st"))
    with open_vectors() as vs:
        assert vs.where == str(tmp_path / "st" / "vectors") and not vs.server
    monkeypatch.setenv("CARAMBA_VECTORS", str(tmp_path / "elsewhere"))
    with open_vectors() as vs:
        assert vs.where == str(tmp_path / "elsewhere")
    with open_vectors(f"file://{tmp_path / 'third'}") as vs:
        assert vs.where == str(tmp_path / "third")


def test_a_remote_run_store_needs_the_vectors_setting(tmp_path, monkeypatch):
    """An S3 run store has no folder the default <store>/vectors could mean: no local fallback."""
    from types import SimpleNamespace

    from caramba.store.vectors import _local_root

    s3 = SimpleNamespace(url="s3://bucket/prefix", root=tmp_path / "replica")
    with pytest.raises(ConfigError, match="the run store is s3://bucket/prefix; say where its embeddings go"):
        _local_root(s3, None)
    assert _local_root(s3, "http://qdrant:6333") == tmp_path / "replica"
    monkeypatch.setenv("CARAMBA_VECTORS", str(tmp_path / "v"))
    assert _local_root(s3, None) == tmp_path / "replica"
    assert _local_root(SimpleNamespace(root=tmp_path), None) == tmp_path


# ---- hostile inputs --------------------------------------------------------------------------


@pytest.fixture
def small(tmp_path):
    vs = open_vectors(str(tmp_path / "v"))
    vs.ensure("c", 4, "cosine")
    vs.upsert("c", [point_id("r", "o", "test", i) for i in range(3)], np.eye(3, 4) + 0.1,
              [{"run": "r", "index": i} for i in range(3)])
    yield vs
    vs.close()


@pytest.mark.parametrize("name", ["", "../x", "a/b", "a b", ".hidden", "-x", "x" * 64, "x\n", "é", None, 3])
def test_bad_collection_names(small, name):
    with pytest.raises(ConfigError, match="not a collection name"):
        small.ensure(name, 4)
    with pytest.raises(ConfigError, match="not a collection name"):
        small.search(name, np.ones(4))


@pytest.mark.parametrize("k", [0, -1, MAX_K + 1, 10**12, True, 2.5, "3"])
def test_bad_k(small, k):
    with pytest.raises(ConfigError, match="k must be a whole number"):
        small.search("c", np.ones(4), k=k)


def test_a_large_k_returns_every_point(small):
    assert len(small.search("c", np.ones(4), k=MAX_K)) == 3


@pytest.mark.parametrize("vec, match", [
    (np.ones(5), "has 5 numbers; collection 'c' holds 4-vectors"),
    (np.ones(3), "has 3 numbers"),
    (np.array([1.0, np.nan, 0, 0]), "not finite"),
    (np.array([1.0, np.inf, 0, 0]), "not finite"),
    (np.zeros(4), "all zeros"),
    (np.ones((2, 4)), "must be one vector"),
    (np.array(["a", "b", "c", "d"]), "must hold numbers"),
    (np.array([], dtype=np.float64), "must be a matrix"),
])
def test_bad_query_vectors(small, vec, match):
    with pytest.raises(ConfigError, match=match):
        small.search("c", vec)


def test_bad_points(small):
    ids = [point_id("r", "o", "test", 9)]
    with pytest.raises(VectorStoreError, match="holds 4-vectors; these have 5"):
        small.upsert("c", ids, np.ones((1, 5)), [{}])
    with pytest.raises(ConfigError, match="vector 1 is not finite"):
        small.upsert("c", ids * 2, np.array([[1.0, 0, 0, 0], [np.nan, 0, 0, 0]]), [{}, {}])
    with pytest.raises(ConfigError, match="do not match"):
        small.upsert("c", ids, np.ones((2, 4)), [{}])
    with pytest.raises(ConfigError, match="all zeros"):
        small.upsert("c", ids, np.zeros((1, 4)), [{}])
    with pytest.raises(VectorStoreError, match="holds 4-vectors compared by cosine; these are 8-vectors"):
        small.ensure("c", 8, "cosine")
    with pytest.raises(VectorStoreError, match="compared by cosine; these are 4-vectors compared by dot"):
        small.ensure("c", 4, "dot")
    with pytest.raises(ConfigError, match="unknown distance"):
        small.ensure("d", 4, "manhattan")
    with pytest.raises(ConfigError, match="dimension"):
        small.ensure("d", 0)
    assert small.count("c") == 3


def test_missing_things_are_named(small):
    with pytest.raises(VectorStoreError, match="has no collection 'cc'; did you mean 'c'"):
        small.search("cc", np.ones(4))
    with pytest.raises(VectorStoreError, match="no point with run=r, index=7"):
        small.find("c", {"run": "r", "index": 7})
    with pytest.raises(ConfigError, match="cannot filter by 'rnu'; did you mean 'run'"):
        small.search("c", np.ones(4), where={"rnu": "r"})
    with pytest.raises(ConfigError, match="index needs a whole number"):
        small.search("c", np.ones(4), where={"index": "x"})
    assert [h.payload["index"] for h in small.search("c", np.ones(4), where={"index": "2"})] == [2]


def test_bad_locations(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(VectorStoreError, match="is a file, not a folder"):
        open_vectors(str(f))
    with pytest.raises(ConfigError, match="unknown scheme 'ftp://'"):
        open_vectors("ftp://example.com/x")
    with pytest.raises(ConfigError, match="empty"):
        VectorStore("  ")


def test_an_open_local_store_is_not_opened_twice(tmp_path):
    with open_vectors(str(tmp_path / "v")):
        with pytest.raises(VectorStoreError, match="open in another process"):
            open_vectors(str(tmp_path / "v"))
    with open_vectors(str(tmp_path / "v")) as vs:  # closed: it opens again
        assert vs.collections() == []


def test_an_unreachable_server_is_one_error_naming_the_url():
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(VectorStoreError, match=f"cannot reach the Qdrant server at {url}") as err:
        open_vectors(url)
    assert "Traceback" not in str(err.value)
    with pytest.raises(VectorStoreError) as err:  # credentials in the URL are not repeated
        open_vectors(f"http://user:secret@127.0.0.1:{_free_port()}")
    assert "secret" not in str(err.value)


def test_without_qdrant_client_the_error_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "qdrant_client", None)
    with pytest.raises(ConfigError, match=r"pip install 'caramba\[qdrant\]'"):
        open_vectors(str(tmp_path / "v"))


def test_errors_are_caramba_errors():
    assert issubclass(VectorStoreError, CarambaError)


# ---- server mode -------------------------------------------------------------------------------

SERVER = os.environ.get("CARAMBA_TEST_QDRANT_URL")


@pytest.mark.skipif(not SERVER, reason="set CARAMBA_TEST_QDRANT_URL=http://host:6333 to test a Qdrant server")
@pytest.mark.parametrize("distance", ["cosine", "dot", "euclid"])
def test_server_mode_recall_and_idempotent_upsert(distance):
    name = f"caramba-test-{secrets.token_hex(4)}"
    with open_vectors(SERVER) as vs:
        assert vs.server
        try:
            assert _recall(vs, name, distance) == 1.0
            assert vs.count(name) == 300
            vs.upsert(name, [point_id("recall", "out", "test", 0)], np.ones((1, 24)), [{"run": "recall", "index": 0}])
            assert vs.count(name) == 300
        finally:
            vs.client.delete_collection(name)


def test_path_of_the_module_is_light():
    """The module itself does not import qdrant_client (caramba stays light to import)."""
    import subprocess

    code = "import caramba.store.vectors, sys; print('qdrant_client' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).parent, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
