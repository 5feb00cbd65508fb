"""An S3 endpoint for the S3 store tests: moto's server on loopback (never real AWS)."""

from __future__ import annotations

import secrets
import socket

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def moto_endpoint():
    """``http://127.0.0.1:<port>`` of a moto S3 server running for the session."""
    pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    port = _free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_env(moto_endpoint, tmp_path, monkeypatch):
    """AWS settings pointing at the loopback server, a fresh cache folder, and a new bucket;
    yields ``(bucket, boto3 client)``."""
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("CARAMBA_CACHE_DIR", str(tmp_path / "cache"))
    bucket = f"lab-{secrets.token_hex(4)}"
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    yield bucket, client
