"""Blob stores: content addressing, immutability of bound keys, streams, tamper detection.

The same contract runs on the local store and on S3 (a moto server on 127.0.0.1)."""

import os

import pytest

from caramba.store import BlobExists, BlobNotFound, IntegrityError, LocalBlobStore, StoreError, open_store


@pytest.fixture
def s3_endpoint(moto_endpoint):
    """The session's loopback moto server (tests/unit/store/conftest.py)."""
    return moto_endpoint


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch):
    # moto accepts any credentials; never read the user's real ones
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        s = LocalBlobStore(tmp_path / "blobs")
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = f"b{os.getpid()}-{request.node.name.split('[')[0][-20:].replace('_', '-')}".lower()
        s = open_store(f"s3://{bucket}/pre/fix?endpoint_url={endpoint}&region=us-east-1&create_bucket=1")
    yield s
    s.close()


def test_put_get_stat_list(store):
    ref = store.put("runs/r1/a.bin", b"hello")
    assert ref.size == 5 and len(ref.sha256) == 64
    assert store.get("runs/r1/a.bin") == b"hello"
    assert store.stat("runs/r1/a.bin") == ref
    assert store.exists("runs/r1/a.bin") and not store.exists("runs/r1/b.bin")
    store.put("runs/r1/b.bin", b"hello")  # same content, second name
    store.put("runs/r2/c.bin", b"other")
    assert [r.key for r in store.list("runs/r1/")] == ["runs/r1/a.bin", "runs/r1/b.bin"]
    assert [r.key for r in store.list()] == ["runs/r1/a.bin", "runs/r1/b.bin", "runs/r2/c.bin"]
    assert store.digest("runs/r1/b.bin") == store.stat("runs/r1/b.bin")


def test_bound_keys_are_immutable(store):
    store.put("k", b"one")
    assert store.put("k", b"one").size == 3  # idempotent
    with pytest.raises(BlobExists, match="already holds sha256"):
        store.put("k", b"two")
    assert store.get("k") == b"one"
    store.put("k", b"two", overwrite=True)
    assert store.get("k") == b"two"


def test_missing_and_bad_keys(store):
    with pytest.raises(BlobNotFound, match="no blob 'nope'"):
        store.get("nope")
    for bad in ("/abs", "a//b", "a/../b", "", "a/"):
        with pytest.raises(StoreError, match="invalid blob key"):
            store.put(bad, b"x")
    store.put("gone", b"x")
    store.delete("gone")
    assert not store.exists("gone")


def test_streams(store):
    payload = os.urandom(3 * 1024 * 1024 + 17)
    with store.open_write("big/blob") as w:
        for i in range(0, len(payload), 1 << 19):
            w.write(payload[i : i + (1 << 19)])
    assert w.ref is not None and w.ref.size == len(payload)
    assert b"".join(store.iter_chunks("big/blob")) == payload
    with pytest.raises(RuntimeError), store.open_write("big/aborted") as w2:
        w2.write(b"partial")
        raise RuntimeError("writer failed")
    assert not store.exists("big/aborted")


def test_local_tamper_is_detected(tmp_path):
    store = LocalBlobStore(tmp_path)
    ref = store.put("ckpt", b"\x00" * 64)
    path = store.object_path(ref.sha256)
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[10] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="'ckpt'.*changed"):
        store.get("ckpt")
    assert store.digest("ckpt").sha256 != ref.sha256
    assert store.get("ckpt", verify=False) == bytes(data)
    path.unlink()
    with pytest.raises(BlobNotFound, match="bytes are gone"):
        store.digest("ckpt")


def test_store_urls(tmp_path):
    assert isinstance(open_store(tmp_path / "a"), LocalBlobStore)
    assert isinstance(open_store(f"file://{tmp_path}/b"), LocalBlobStore)
    with pytest.raises(StoreError, match="unknown blob store URL scheme"):
        open_store("ftp://x/y")


def test_s3_tamper_is_detected(s3_endpoint):
    from caramba.store.s3 import S3BlobStore

    store = S3BlobStore("tamper", "p", endpoint_url=s3_endpoint, region="us-east-1", create_bucket=True)
    ref = store.put("ckpt", b"abc" * 10)
    store._s3.put_object(Bucket="tamper", Key=store._obj(ref.sha256), Body=b"abd" * 10)
    with pytest.raises(IntegrityError, match="'ckpt'.*changed"):
        store.get("ckpt")
    assert store.digest("ckpt").sha256 != ref.sha256


def test_putting_the_true_bytes_again_repairs_a_damaged_object(tmp_path):
    store = LocalBlobStore(tmp_path)
    ref = store.put("a", b"true bytes")
    path = store.object_path(ref.sha256)
    path.chmod(0o644)
    path.write_bytes(b"damaged!!!")
    store.put("b", b"true bytes")
    assert store.get("a") == b"true bytes"
