"""The Storage actor on a local directory and on S3 (moto on 127.0.0.1): whole blobs, streams,
and the Notary re-checking artifacts through it."""

import socket

import pytest

from caramba.actors import ActorSystem
from caramba.actors.identity import Identity
from caramba.actors.ledger import EntryBody, registration_bytes
from caramba.actors.notary import Append, Notary, RegisterIdentity, ValidityOf
from caramba.actors.storage import (
    Digest,
    Exists,
    Get,
    ListBlobs,
    Put,
    Storage,
    get_stream,
    put_stream,
)
from caramba.store import BlobExists, BlobNotFound


@pytest.fixture(scope="module")
def s3_endpoint():
    pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(params=["local", "s3"])
def url(request, tmp_path, monkeypatch):
    if request.param == "local":
        return str(tmp_path / "blobs")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    endpoint = request.getfixturevalue("s3_endpoint")
    return f"s3://actors-{abs(hash(str(tmp_path))) % 10**8}/run?endpoint_url={endpoint}&region=us-east-1&create_bucket=1"


def test_storage_actor(url):
    with ActorSystem() as system:
        st = system.spawn(Storage, "storage", kwargs={"url": url})
        info = st.ask(Put(key="a/b", data=b"\x00\x01payload"))
        assert st.ask(Get(key="a/b")).data == b"\x00\x01payload" and st.ask(Exists(key="a/b"))
        assert st.ask(Digest(key="a/b")) == info
        with pytest.raises(BlobExists):
            st.ask(Put(key="a/b", data=b"other"))
        with pytest.raises(BlobNotFound, match="no blob 'zz'"):
            st.ask(Get(key="zz"))
        big = bytes(range(256)) * 40_000  # ~10 MB in 4 MB chunks
        ref = put_stream(st, "big", [big[: len(big) // 3], big[len(big) // 3 :]])
        assert ref.size == len(big)
        assert b"".join(get_stream(st, "big", chunk=1 << 20)) == big
        assert [b.key for b in st.ask(ListBlobs()).items] == ["a/b", "big"]


def test_the_notary_rechecks_artifacts_through_storage(url, tmp_path):
    with ActorSystem() as system:
        st = system.spawn(Storage, "storage", kwargs={"url": url})
        notary = system.spawn(Notary, "notary", kwargs={"root": str(tmp_path / "notary")})
        me = Identity.generate("tester")
        notary.ask(RegisterIdentity(actor=me.name, public_key=me.public_key, proof=me.sign(registration_bytes(me.name, me.public_key))))
        info = st.ask(Put(key="ckpt", data=b"weights" * 100))
        body = EntryBody(kind="artifact", actor=me.name, name="checkpoint",
                         payload={"key": info.key, "sha256": info.sha256, "size": info.size})
        art = notary.ask(Append(body=body, public_key=me.public_key, signature=me.sign(body.signed_bytes())))
        assert notary.ask(ValidityOf(entry=art.hash)).valid
        st.ask(Put(key="ckpt", data=b"weightz" * 100, overwrite=True))  # the name now points at other bytes
        v = notary.ask(ValidityOf(entry=art.hash))
        assert v.verdict == "VOIDED" and "artifact 'ckpt' changed" in v.reasons[0].problem
