"""The server from outside: what a submitted manifest may read, who may address the server,
how much a manifest may cost to check, and bad bodies that must be 4xx (never 500).

Each attack is the one that worked before: a dataset path that read /proc/self/environ or
/etc/passwd into a 422 message, a GET answered for any Host (DNS rebinding), a 2 KB manifest
whose variables square a number 29 times and froze the server, lone surrogates, ``seed: -1``,
a NaN split, an empty CSV delimiter, a huge generated dataset."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

API_TOKEN = "test-token-123"  # conftest's token (the client fixture sends it)
TEST_HOSTS = ("testserver",)  # the Host header of FastAPI's test client
BASE = """\
name: tiny
topology:
  inputs:
    x: {shape: [batch, 2]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: fc, op: projection.linear, in: [x], config: {out_features: 2}}
    - {id: loss, op: loss.cross_entropy, in: [fc, label]}
  outputs: {logits: fc, loss: loss}
datasets:
  d: DATASET
trainer: {loss: loss, lr: 0.05, batch_size: 16, steps: 2, log_every: 1}
checkpoints: {at_end: false}
targets:
  - name: cpu
    backend: cpu
    runs: [{id: r0, seed: 0}]
"""
BLOBS = "{source: generated, kind: blobs, n: 64, features: 2, classes: 2, feed: {label: y}}"
SECRET_VALUE = "hunter2-do-not-echo-7f3a"


def manifest(dataset: str = BLOBS) -> str:
    return BASE.replace("DATASET", dataset)


def square_chain(n: int = 29) -> str:
    """About 1 KB of variables; the last is 3 ** (2 ** n)."""
    lines = ["variables:", "  a0: 3", *(f'  a{i}: "${{a{i - 1} * a{i - 1}}}"' for i in range(1, n + 1))]
    return "\n".join([*lines, "name: sq", f"description: '${{a{n}}}'", ""])


def deep_chain(n: int) -> str:
    """A valid model of ``n`` linear layers in a row (``4 * n`` IR nodes)."""
    node = '{id: "h_${i}", op: projection.linear, in: ["x_${i}"], out: ["x_${next_i}"], config: {out_features: 2}}'
    return (f"name: deep\ntopology:\n  inputs:\n    x_0: {{shape: [4, 2]}}\n  nodes:\n    - repeat: {n}\n"
            f"      template:\n        - {node}\n  outputs: {{y: x_{n}}}\n")


def _post_raw(client, path: str, body: dict):
    """POST JSON as written by json.dumps (escapes lone surrogates, which httpx would not encode)."""
    return client.post(path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


@pytest.fixture
def app_with(store, monkeypatch):
    """``app_with(**create_app kwargs)``: an app like the ``app`` fixture, with more settings."""
    from caramba.api import create_app
    from caramba.config import Settings

    monkeypatch.setenv("CARAMBA_PROBE_SECRET", SECRET_VALUE)  # a secret in the server's environment
    made = []

    def make(settings: dict | None = None, **kwargs):
        settings = {"store": str(store), "api_token": API_TOKEN, **(settings or {})}
        made.append(create_app(Settings(**settings), hosts=kwargs.pop("hosts", TEST_HOSTS), **kwargs))
        return made[-1]

    yield make
    for app in made:
        app.state.caramba.close()


@pytest.fixture
def hardened(app_with, monkeypatch):
    from fastapi.testclient import TestClient

    with TestClient(app_with(), headers={"Authorization": f"Bearer {API_TOKEN}"}) as c:
        yield c


# ---- data roots --------------------------------------------------------------------------------


def _assert_silent(text: str, *secrets_: str) -> None:
    for s in (SECRET_VALUE, API_TOKEN, "root:x:", "daemon", "/bin/", "PATH=", *secrets_):
        assert s not in text, f"{s!r} leaked: {text}"


@pytest.mark.parametrize("path", ["/proc/self/environ", "/etc/passwd", "/etc/hostname", "../../../../../etc/passwd",
                                  "/proc/self/cwd/pyproject.toml", "~/.bashrc", "/dev/zero"])
@pytest.mark.parametrize("source", ["csv", "text"])
def test_a_path_outside_the_data_roots_is_refused_without_echoing_anything(hardened, path, source):
    extra = ", feed: {label: y}" if source == "csv" else ""
    r = hardened.post("/api/v1/manifests/validate", json={"manifest": manifest(f"{{source: {source}, path: '{path}'{extra}}}")})
    assert r.status_code == 422, r.text
    assert "outside the folders this server reads data from" in r.json()["detail"]
    _assert_silent(r.text)


def test_existing_and_missing_outside_paths_get_the_same_answer(hardened):
    answers = []
    for path in ("/etc/passwd", "/etc/no-such-file-zz", "/proc/self/environ", "/nonexistent/dir/x.csv",
                 "../../../../../etc/passwd", "../../../../../etc/no-such-file-zz"):
        r = hardened.post("/api/v1/manifests/validate",
                          json={"manifest": manifest(f"{{source: csv, path: '{path}', feed: {{label: y}}}}")})
        answers.append((r.status_code, r.text))
    assert len(set(answers)) == 1, answers


def test_symlinks_out_of_a_data_root_are_refused_and_files_inside_are_read(app_with, tmp_path):
    from fastapi.testclient import TestClient

    root = tmp_path / "data"
    root.mkdir()
    (root / "ok.csv").write_text("a,b,y\n" + "".join(f"{i},{-i},{i % 2}\n" for i in range(64)))
    (root / "leak.csv").symlink_to("/etc/passwd")
    (root / "gone.csv").symlink_to("/etc/no-such-file-zz")
    (root / "sub").mkdir()
    app = app_with({"serve_data_roots": str(root)})
    with TestClient(app, headers={"Authorization": f"Bearer {API_TOKEN}"}) as c:
        ok = c.post("/api/v1/manifests/validate",
                    json={"manifest": manifest(f"{{source: csv, path: {root}/ok.csv, feed: {{label: y}}}}")})
        assert ok.status_code == 200, ok.text
        answers = set()
        for name in ("leak.csv", "gone.csv", "sub/../../data/../../../etc/passwd"):
            r = c.post("/api/v1/manifests/validate",
                       json={"manifest": manifest(f"{{source: csv, path: '{root}/{name}', feed: {{label: y}}}}")})
            assert r.status_code == 422 and "outside the folders" in r.text, r.text
            _assert_silent(r.text)
            answers.add(r.text)
        assert len(answers) == 1
        missing = c.post("/api/v1/manifests/validate",
                         json={"manifest": manifest(f"{{source: csv, path: {root}/nope.csv, feed: {{label: y}}}}")})
        assert missing.status_code == 422 and "does not exist" in missing.text  # inside the roots: said plainly


def test_data_errors_name_the_place_not_the_content(tmp_path):
    from caramba.data import DataError, load_dataset

    (tmp_path / "t.csv").write_text("a,b,label\n1,2,0\n3,API_KEY=sk-live-123,1\n")
    with pytest.raises(DataError) as exc:
        load_dataset("d", {"source": "csv", "path": "t.csv"}, tmp_path)
    assert "row 3, column 2 is not a number" in str(exc.value) and "sk-live" not in str(exc.value)
    (tmp_path / "h.csv").write_text("secret_column_name,y\n1,0\n2,1\n")
    with pytest.raises(DataError) as exc:
        load_dataset("d", {"source": "csv", "path": "h.csv", "target": "label"}, tmp_path)
    assert "2 columns" in str(exc.value) and "secret_column_name" not in str(exc.value)
    (tmp_path / "b.txt").write_bytes(b"fine text \xff\xfe secret")
    with pytest.raises(DataError, match=r"is not utf-8 text \(byte 10\)") as exc:
        load_dataset("d", {"source": "text", "path": "b.txt"}, tmp_path)
    assert "secret" not in str(exc.value)
    (tmp_path / "n.npz").write_text("not an npz: secret")
    with pytest.raises(DataError, match="not a readable .npz file") as exc:
        load_dataset("d", {"source": "npz", "path": "n.npz"}, tmp_path)
    assert "secret" not in str(exc.value)


def test_a_checkpoint_path_outside_the_data_roots_is_refused_at_submit(hardened, store):
    text = manifest().replace("runs: [{id: r0, seed: 0}]", "runs: [{id: r0, seed: 0, checkpoint: /etc/passwd}]")
    r = hardened.post("/api/v1/experiments", json={"manifest": text})
    assert r.status_code == 422 and "checkpoint of run 'r0' is a path outside" in r.text, r.text
    _assert_silent(r.text)
    assert hardened.get("/api/v1/runs").json()["total"] == 0


def test_the_sandbox_environment_holds_no_secrets(monkeypatch):
    from caramba.api.sandbox import _worker_env

    monkeypatch.setenv("CARAMBA_API_TOKEN", "t0ken")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret")
    monkeypatch.setenv("MY_SERVICE_KEY", "k3y")
    monkeypatch.setenv("CARAMBA_BACKEND", "cpu")
    env = _worker_env()
    assert {"CARAMBA_API_TOKEN", "AWS_SECRET_ACCESS_KEY", "MY_SERVICE_KEY"}.isdisjoint(env)
    assert env["CARAMBA_BACKEND"] == "cpu" and env["OPENBLAS_NUM_THREADS"] == "1"


# ---- Host and Origin ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/health", "/api/v1/runs", "/api/v1/experiments", "/", "/api/v1/openapi.json"])
def test_a_foreign_host_gets_nothing(client, path):
    for host in ("evil.example", "evil.example:8765", "127.0.0.1.evil.example", "[::2]:80", ""):
        r = client.get(path, headers={"Host": host})
        assert r.status_code == 421, (host, r.status_code)
        assert "runs" not in r.json() and "items" not in r.json()
    assert client.get(path).status_code == 200


def test_loopback_names_and_configured_hosts_are_answered(app_with):
    from fastapi.testclient import TestClient

    app = app_with({"serve_allowed_hosts": "caramba.lab.example, other.example"}, hosts=())
    with TestClient(app, base_url="http://localhost:8765") as c:
        for host in ("localhost:8765", "127.0.0.1", "[::1]:8765", "CARAMBA.lab.example", "other.example.", "LOCALHOST"):
            assert c.get("/api/v1/health", headers={"Host": host}).status_code == 200, host
        assert c.get("/api/v1/health", headers={"Host": "testserver"}).status_code == 421


def test_a_foreign_origin_gets_403_and_the_servers_own_pages_pass(client):
    for origin in ("http://evil.example", "null", "http://testserver.evil.example", "http://testserver:9999",
                   "file://", "http://testserver/path"):
        assert client.get("/api/v1/runs", headers={"Origin": origin}).status_code == 403, origin
        r = client.post("/api/v1/manifests/validate", json={"manifest": manifest()}, headers={"Origin": origin})
        assert r.status_code == 403, origin
    assert client.get("/api/v1/runs", headers={"Origin": "http://testserver"}).status_code == 200
    assert client.get("/api/v1/runs", headers={"Origin": "https://testserver"}).status_code == 200


def test_allowed_origins_setting(app_with):
    from fastapi.testclient import TestClient

    app = app_with({"serve_allowed_origins": "https://ui.lab.example"})
    with TestClient(app) as c:
        assert c.get("/api/v1/health", headers={"Origin": "https://ui.lab.example"}).status_code == 200
        assert c.get("/api/v1/health", headers={"Origin": "https://ui.lab.example:444"}).status_code == 403


def test_host_parsing():
    from caramba.api.middleware import split_host

    assert split_host("Example.COM:8765") == ("example.com", 8765)
    assert split_host("[::1]:80") == ("::1", None)
    assert split_host("x.example.") == ("x.example", None)
    assert split_host("[::1") is None and split_host("a:b") is None and split_host("a:123456") is None


# ---- bounded checking -----------------------------------------------------------------------------


@pytest.mark.parametrize("text, limit, said", [
    # refused by the variables' own bounds when the loader has them, else by the time limit
    (square_chain(), 3.0, ("took longer than 3 s to validate", "outside the int64 range", "digits")),
    # a legitimate manifest (16,000 nodes) that takes seconds to lower: stopped at the limit
    (deep_chain(4000), 0.5, ("took longer than 0.5 s to validate",)),
], ids=["square-chain", "deep-repeat"])
def test_a_costly_manifest_is_refused_in_time_while_health_answers(app_with, serve, text, limit, said):
    import httpx

    app = app_with(validate_timeout_s=limit)
    with serve(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        outcome = {}

        def submit():
            t0 = time.monotonic()
            r = http.post("/api/v1/manifests/validate", json={"manifest": text},
                          headers={"Authorization": f"Bearer {API_TOKEN}"})
            outcome.update(response=r, seconds=time.monotonic() - t0)

        worker = threading.Thread(target=submit)
        worker.start()
        latencies = []
        while worker.is_alive() and len(latencies) < 400:
            t0 = time.monotonic()
            assert http.get("/api/v1/health").status_code == 200
            latencies.append(time.monotonic() - t0)
            time.sleep(0.05)
        worker.join(timeout=60)
        r = outcome["response"]
        assert r.status_code == 422, r.text
        assert any(s in r.json()["detail"] for s in said), r.text
        assert outcome["seconds"] < limit + 30  # a cold worker starts first; a loaded 2-core machine
        assert max(latencies, default=0) < 2.0, latencies
        ok = http.post("/api/v1/manifests/validate", json={"manifest": manifest()},
                       headers={"Authorization": f"Bearer {API_TOKEN}"})
        assert ok.status_code == 200, ok.text  # and the server is fine afterwards


def test_a_manifest_over_the_memory_limit_is_refused(app_with):
    from fastapi.testclient import TestClient

    app = app_with(validate_memory_mb=32)
    # 4M numbers (within the dataset limit of 2**22): a few 32 MB arrays while it is generated
    big = "{source: generated, kind: blobs, n: 1000000, features: 4, classes: 2, feed: {label: y}}"
    with TestClient(app, headers={"Authorization": f"Bearer {API_TOKEN}"}) as c:
        r = c.post("/api/v1/manifests/validate", json={"manifest": manifest(big)})
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]  # the sandbox's answer, or the data binding's own report of it
        assert "needed more than 32 MiB to validate" in detail or "MemoryError" in detail, detail
        assert c.post("/api/v1/manifests/validate", json={"manifest": manifest()}).status_code == 200


def test_the_sandbox_answers_every_route_that_checks_a_manifest(hardened):
    for path in ("/api/v1/manifests/validate", "/api/v1/compile", "/api/v1/experiments"):
        r = hardened.post(path, json={"manifest": square_chain(18)})  # 3 ** 262144: too long to print
        assert r.status_code == 422, (path, r.text)
        assert r.json()["errors"] and "Traceback" not in r.text


# ---- bad bodies are 4xx ---------------------------------------------------------------------------

# Each is refused where it is first seen (the manifest schema or the data source); the answer
# is located at the dataset and names what is wrong.
BAD_DATASETS = {
    "seed -1": ("{source: generated, kind: blobs, n: 64, seed: -1, feed: {label: y}}", ("seed",)),
    "NaN split": ("{source: generated, n: 64, split: {train: .nan, val: 0, test: 0}, feed: {label: y}}", ("split",)),
    "inf noise": ("{source: generated, n: 64, noise: .inf, feed: {label: y}}", ("noise",)),
    "empty delimiter": ("{source: csv, path: x.csv, delimiter: '', feed: {label: y}}", ("delimiter",)),
    "huge generated": ("{source: generated, kind: blobs, n: 100000000000, feed: {label: y}}",
                       ("over the limit", "datasets.d.n")),
    "huge classes": ("{source: generated, kind: blobs, n: 64, classes: 10000000000, feed: {label: y}}",
                     ("over the limit", "classes")),
}


@pytest.mark.parametrize("case", sorted(BAD_DATASETS))
@pytest.mark.parametrize("path", ["/api/v1/manifests/validate", "/api/v1/experiments"])
def test_bad_datasets_are_422_with_a_clear_message(hardened, case, path):
    dataset, said = BAD_DATASETS[case]
    r = hardened.post(path, json={"manifest": manifest(dataset)})
    assert r.status_code == 422, r.text
    assert any(s in r.json()["detail"] for s in said), r.text
    assert r.json()["errors"][0]["path"].startswith("datasets.d")
    assert hardened.get("/api/v1/runs").json()["total"] == 0


SURROGATES = [
    ("/api/v1/manifests/validate", {"manifest": manifest(), "overrides": ["trainer.steps=\ud800"]}),
    ("/api/v1/manifests/validate", {"manifest": manifest() + "# \udcff\n"}),
    ("/api/v1/experiments", {"manifest": manifest(), "overrides": ["trainer.steps=\ud800"]}),
    ("/api/v1/experiments", {"manifest": manifest(), "targets": ["cpu\ud800"]}),
    ("/api/v1/experiments", {"manifest": manifest() + "# \udcff\n"}),
    ("/api/v1/compile", {"manifest": manifest() + "# \udcff\n"}),
    ("/api/v1/compile", {"manifest": manifest(), "backend": "cpu\ud800"}),
    ("/api/v1/compile", {"graph": {"name": "g\ud800", "nodes": []}}),
    ("/api/v1/compile", {"graph": {"name": "g", "\ud800": 1}}),
]


@pytest.mark.parametrize("path, body", SURROGATES, ids=[f"{p.rsplit('/', 1)[1]}-{i}" for i, (p, _) in enumerate(SURROGATES)])
def test_lone_surrogates_are_422(hardened, path, body):
    r = _post_raw(hardened, path, body)
    assert r.status_code == 422, r.text
    assert "lone surrogate" in r.text
    assert hardened.get("/api/v1/runs").json()["total"] == 0


def test_a_backend_option_a_library_refuses_is_422(hardened):
    r = hardened.post("/api/v1/compile", json={"manifest": manifest(), "backend": "cpu:threads=99999999999999999999"})
    # refused by caramba's own bound before any library sees it (compute.registry.MAX_THREADS)
    assert r.status_code == 422 and "is above its limit 1024" in r.json()["detail"], r.text


def test_a_stray_value_error_is_422_without_its_text(app_with):
    from fastapi.testclient import TestClient

    app = app_with()

    def boom():
        raise ValueError("could not convert string to float: 'root:x:0:0'")

    app.add_api_route("/boom", boom)
    with TestClient(app) as c:
        r = c.get("/boom")
    assert r.status_code == 422 and "ValueError" in r.text and "root:x" not in r.text


def test_run_ids_are_matched_as_text_not_as_like_patterns(hardened, store):
    from caramba.store.runs import RunStore

    rec = RunStore(store).create_run("ab_cd")
    assert hardened.get(f"/api/v1/runs/{rec.id[:5]}").json()["id"] == rec.id
    for ref in ("ab%", "a_", "_", "%25", "ab%25cd", "a%5F"):
        r = hardened.get(f"/api/v1/runs/{ref}")
        assert r.status_code == 404, (ref, r.text)
        assert str(store) not in r.text  # the server's folders stay its own


def test_an_unusable_store_is_one_clear_error(tmp_path):
    from caramba.api import create_app
    from caramba.config import Settings
    from caramba.store.runs import StoreUnavailable

    (tmp_path / "afile").write_text("")
    with pytest.raises(StoreUnavailable) as exc:
        create_app(Settings(store=str(tmp_path / "afile" / "store"), api_token=API_TOKEN))
    assert str(tmp_path / "afile" / "store") in str(exc.value) and "store setting" in str(exc.value).replace("`", "")
    assert os.listdir(tmp_path) == ["afile"]


# ---- the sandbox itself ---------------------------------------------------------------------------


@pytest.fixture
def sandbox(monkeypatch):
    from caramba.api.sandbox import Sandbox

    monkeypatch.setenv("CARAMBA_SANDBOX_SELFTEST", "1")  # the spin and allocate jobs
    box = Sandbox(timeout_s=2.0, memory_mb=128)
    yield box
    box.close()


def test_a_worker_holding_the_interpreter_lock_is_killed_at_the_deadline(sandbox):
    from caramba.api.errors import ValidationLimit

    assert sandbox.run("spin", {"digits": 3}, roots=[])["bits"] > 1000  # warm, and the job works
    ticks = []

    def tick():
        for _ in range(50):
            time.sleep(0.01)
            ticks.append(time.monotonic())

    t0 = time.monotonic()
    ticker = threading.Thread(target=tick)
    ticker.start()
    with pytest.raises(ValidationLimit, match="took longer than 2 s"):
        sandbox.run("spin", {"digits": 9}, roots=[])  # 3 ** 10**9: minutes in one C call
    took = time.monotonic() - t0
    ticker.join()
    assert 2.0 <= took < 10
    assert len(ticks) == 50 and ticks[-1] - t0 < 1.9  # this process ran on while the worker spun
    assert sandbox.run("spin", {"digits": 2}, roots=[])["bits"] > 100  # a fresh worker took over


def test_a_worker_over_its_memory_limit_is_refused_and_replaced(sandbox):
    from caramba.api.errors import ValidationLimit

    assert sandbox.run("allocate", {"mib": 16}, roots=[])["bytes"] == 16 << 20
    with pytest.raises(ValidationLimit, match="needed more than 128 MiB"):
        sandbox.run("allocate", {"mib": 512}, roots=[])
    assert sandbox.run("allocate", {"mib": 16}, roots=[])["bytes"] == 16 << 20


def test_selftest_jobs_are_unknown_without_the_setting():
    from caramba.api.errors import Answered
    from caramba.api.sandbox import Sandbox

    box = Sandbox(timeout_s=5.0)
    try:
        with pytest.raises(Answered) as exc:
            box.run("spin", {"digits": 2}, roots=[])
        assert exc.value.status == 422 and "KeyError" in exc.value.body["detail"]
    finally:
        box.close()


def test_a_store_removed_under_a_running_server_is_503_not_500(client, store):
    import shutil

    shutil.rmtree(store)
    r = client.get("/api/v1/runs")
    assert r.status_code == 503 and r.json()["type"] == "StoreUnavailable", r.text
    assert "store setting" in r.json()["detail"].replace("`", "")


# ---- pretrained checkpoints ---------------------------------------------------------------------


@pytest.mark.parametrize("key", ["source", "config"])
@pytest.mark.parametrize("path", ["/etc", "/etc/passwd", "/proc/self", "/nonexistent/ckpt", "../../../../../etc",
                                  "~/.cache/huggingface"])
def test_a_checkpoint_outside_the_data_roots_is_refused_alike(hardened, key, path):
    section = f"{{source: '{path}'}}" if key == "source" else f"{{source: ckpt, config: '{path}'}}"
    text = f"name: hf\ntopology:\n  from_safetensors: {section}\n  dims: {{batch: 1, seq: 4}}\n"
    r = hardened.post("/api/v1/manifests/validate", json={"manifest": text})
    assert r.status_code == 422, r.text
    assert "outside the folders this server reads data from" in r.json()["detail"]
    _assert_silent(r.text)
