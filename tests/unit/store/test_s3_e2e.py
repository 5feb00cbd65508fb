"""The whole research cycle against an S3 store (moto's server on loopback, never real AWS):
``caramba research run`` writes to ``s3://``; status, inspect, compare, notary verify and the
HTTP API read the same URL from other processes / another replica; a tampered ledger object
makes ``caramba notary verify`` fail naming it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("boto3")
pytest.importorskip("cryptography")

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def kernel_cache() -> str:
    """This machine's cache folder (read before s3_env points the cache elsewhere): the run
    uses its compiled kernels instead of compiling them again (tens of seconds on 2 cores)."""
    from caramba.config import settings

    return settings().cache_dir


def _cli(env: dict[str, str], *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    import time

    t0 = time.monotonic()
    try:
        return subprocess.run([sys.executable, "-c", "from caramba.cli import main; main()", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=timeout)
    finally:
        print(f"caramba {' '.join(args[:2])}: {time.monotonic() - t0:.1f}s")


def _spawn(env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from caramba.cli import main; main()", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_run_status_inspect_compare_verify_against_s3(kernel_cache, s3_env, tmp_path):
    bucket, client = s3_env
    url = f"s3://{bucket}/team"
    os.environ["CARAMBA_CACHE_DIR"] = kernel_cache  # s3_env's monkeypatch restores it afterwards
    from caramba.store.registry import cache_root
    from caramba.store.s3run import S3RunStore

    replica = Path(S3RunStore(url).root)  # <cache>/stores/<hash of this test's URL>: removed at the end
    assert replica.is_relative_to(Path(kernel_cache).expanduser()) and replica.parent == cache_root(url).parent
    try:
        _cycle(url, bucket, client, tmp_path)
    finally:
        shutil.rmtree(replica, ignore_errors=True)


def _cycle(url: str, bucket: str, client, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "200"}
    run = _cli(env, "research", "run", "examples/digits_mlp.yml", "--store", url, "--set", "trainer.steps=10", "--quiet")
    assert run.returncode == 0, run.stdout + run.stderr
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="team/")["Contents"]]
    assert any(k.startswith("team/runs/") and "/events/" in k for k in keys)
    assert any(k.startswith("team/artifacts/") for k in keys) and "team/ledger/entries/000000000000.json" in keys
    assert any(k.startswith("team/blobs/") for k in keys)  # the checkpoint blob the ledger points at

    # four readers at once, sharing this host's replica
    reads = {"status": ("research", "status"), "inspect": ("research", "inspect", "latest"),
             "compare": ("research", "compare", "latest", "--json"), "verify": ("notary", "verify")}
    procs = {k: _spawn(env, *a, "--store", url) for k, a in reads.items()}
    out = {k: (p.returncode, *p.communicate(timeout=240)) for k, p in procs.items()}
    out = {k: (procs[k].returncode, o, e) for k, (_rc, o, e) in out.items()}
    assert all(rc == 0 for rc, _o, _e in out.values()), out
    assert "finished" in out["status"][1]
    assert "verdict verified" in out["inspect"][1].replace("\n", " "), out["inspect"]
    assert json.loads(out["compare"][1])
    assert "ledger OK" in out["verify"][1], out["verify"]

    # another host: an empty replica reads the same runs and artifacts from the bucket
    from caramba.store.s3run import S3RunStore

    other = S3RunStore(url, cache=tmp_path / "other-host")
    [rec] = other.list()
    assert rec.status == "finished" and rec.summary.get("verdict") == "verified"
    ckpt = other.artifacts(rec.id, "checkpoint")
    assert ckpt and ckpt[-1].path.is_file() and ckpt[-1].path.stat().st_size == ckpt[-1].size

    # the HTTP API over the same URL
    from fastapi.testclient import TestClient

    from caramba.api.app import create_app

    with TestClient(create_app(store=url, token="t"), base_url="http://127.0.0.1") as http:
        listed = http.get("/api/v1/runs", headers={"Authorization": "Bearer t"})
        assert listed.status_code == 200, listed.text
        assert rec.id in listed.text

    # deleting the run: the Notary (in the bucket) records it first
    from caramba.run.manage import delete_run

    done = delete_run(S3RunStore(url), rec.id, reason="e2e")  # this host: it holds the Notary key
    assert done.ledger_entry and done.removed  # the checkpoint blob went with it
    with pytest.raises(Exception, match="was deleted"):
        S3RunStore(url, cache=tmp_path / "third-host").get(rec.id)

    # tamper with one ledger object: verify fails and names it
    key = "team/ledger/entries/000000000003.json"
    obj = json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    obj["name"] = obj["name"] + "-forged"
    client.put_object(Bucket=bucket, Key=key, Body=json.dumps(obj).encode())
    bad = _cli(env, "notary", "verify", "--store", url)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "ledger INVALID" in bad.stdout and "#3" in bad.stdout and key in bad.stdout, bad.stdout


@pytest.mark.slow
def test_cluster_runs_record_to_the_bucket_by_url(kernel_cache, s3_env, tmp_path):
    """``research run --cluster local --store s3://``: the workers are handed the store's URL (not
    this host's replica path), so what they record is in the bucket for any other host."""
    bucket, client = s3_env
    url = f"s3://{bucket}/crew"
    os.environ["CARAMBA_CACHE_DIR"] = kernel_cache
    from caramba.store.s3run import S3RunStore

    replica = Path(S3RunStore(url).root)
    try:
        env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               "COLUMNS": "200"}
        run = _cli(env, "research", "run", "examples/digits_mlp.yml", "--store", url, "--cluster", "local",
                   "--workers", "1", "--set", "trainer.steps=6")
        assert run.returncode == 0, run.stdout + run.stderr
        keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="crew/")["Contents"]]
        assert any(k.startswith("crew/runs/") for k in keys) and any(k.startswith("crew/ledger/entries/") for k in keys)
        [rec] = S3RunStore(url, cache=tmp_path / "elsewhere").list()  # another host sees the worker's run
        assert rec.status == "finished", rec
    finally:
        shutil.rmtree(replica, ignore_errors=True)
