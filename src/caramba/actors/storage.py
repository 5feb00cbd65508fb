"""The Storage actor: a blob store (local directory + SQLite by default, or S3) behind messages.

Small blobs travel whole (``Put``/``Get``); large ones in chunks (``OpenWrite`` / ``WriteChunk``
/ ``CloseWrite`` and ``ReadRange``), so no single message has to hold a whole checkpoint.
``Digest`` re-hashes the stored bytes: the Notary uses it to re-check artifacts.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator

from pydantic import Field

from caramba.actors.base import Actor, handler
from caramba.actors.messages import Message
from caramba.errors import CarambaError
from caramba.store.blobs import BlobRef, BlobStore, BlobWriter, StoreError, open_store

STREAM_CHUNK = 4 << 20


class BlobInfo(Message):
    key: str
    sha256: str
    size: int

    @classmethod
    def of(cls, ref: BlobRef) -> "BlobInfo":
        return cls(key=ref.key, sha256=ref.sha256, size=ref.size)


class BlobData(Message):
    key: str
    sha256: str
    size: int
    data: bytes


class BlobList(Message):
    items: list[BlobInfo] = Field(default_factory=list)


class Put(Message):
    key: str
    data: bytes
    overwrite: bool = False


class Get(Message):
    key: str


class Stat(Message):
    key: str


class Exists(Message):
    key: str


class ListBlobs(Message):
    prefix: str = ""


class Digest(Message):
    """Re-hash the stored bytes of ``key`` (not the index)."""

    key: str


class Delete(Message):
    key: str


class OpenWrite(Message):
    key: str
    overwrite: bool = False


class WriteChunk(Message):
    stream: str
    data: bytes


class CloseWrite(Message):
    stream: str


class AbortWrite(Message):
    stream: str


class ReadRange(Message):
    key: str
    offset: int = Field(ge=0)
    length: int = Field(gt=0)


class Chunk(Message):
    data: bytes
    eof: bool


class StoreInfo(Message):
    url: str


class Describe(Message):
    pass


class Storage(Actor):
    """Blobs for every other actor. ``url``: a directory, ``file://...`` or ``s3://bucket/prefix``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.store: BlobStore | None = None
        self._writers: dict[str, BlobWriter] = {}

    def started(self) -> None:
        self.store = open_store(self.url)

    def stopped(self) -> None:
        for w in self._writers.values():
            w.abort()
        if self.store is not None:
            self.store.close()

    @property
    def blobs(self) -> BlobStore:
        assert self.store is not None
        return self.store

    @handler
    def put(self, msg: Put) -> BlobInfo:
        return BlobInfo.of(self.blobs.put(msg.key, msg.data, overwrite=msg.overwrite))

    @handler
    def get(self, msg: Get) -> BlobData:
        ref = self.blobs.stat(msg.key)
        return BlobData(key=ref.key, sha256=ref.sha256, size=ref.size, data=self.blobs.get(msg.key))

    @handler
    def stat(self, msg: Stat) -> BlobInfo:
        return BlobInfo.of(self.blobs.stat(msg.key))

    @handler
    def exists(self, msg: Exists) -> bool:
        return self.blobs.exists(msg.key)

    @handler
    def list(self, msg: ListBlobs) -> BlobList:
        return BlobList(items=[BlobInfo.of(r) for r in self.blobs.list(msg.prefix)])

    @handler
    def digest(self, msg: Digest) -> BlobInfo:
        return BlobInfo.of(self.blobs.digest(msg.key))

    @handler
    def delete(self, msg: Delete) -> None:
        self.blobs.delete(msg.key)

    @handler
    def open_write(self, msg: OpenWrite) -> str:
        stream = uuid.uuid4().hex
        self._writers[stream] = self.blobs.open_write(msg.key, overwrite=msg.overwrite)
        return stream

    def _writer(self, stream: str) -> BlobWriter:
        try:
            return self._writers[stream]
        except KeyError:
            raise StoreError(f"no open write stream {stream!r} on storage '{self.context.name}'") from None

    @handler
    def write_chunk(self, msg: WriteChunk) -> int:
        return self._writer(msg.stream).write(msg.data)

    @handler
    def close_write(self, msg: CloseWrite) -> BlobInfo:
        w = self._writer(msg.stream)
        del self._writers[msg.stream]
        return BlobInfo.of(w.close())

    @handler
    def abort_write(self, msg: AbortWrite) -> None:
        self._writers.pop(msg.stream, self._writer(msg.stream)).abort()

    @handler
    def read_range(self, msg: ReadRange) -> Chunk:
        data = self.blobs.read_range(msg.key, msg.offset, msg.length)
        size = self.blobs.stat(msg.key).size
        return Chunk(data=data, eof=msg.offset + len(data) >= size)

    @handler
    def describe(self, msg: Describe) -> StoreInfo:
        return StoreInfo(url=self.blobs.url)


# ---- client helpers (work with any ActorRef to a Storage) --------------------------------------
def put_stream(storage, key: str, chunks: Iterable[bytes], *, overwrite: bool = False) -> BlobInfo:
    """Stream ``chunks`` into ``key`` through a Storage actor; aborts the blob on error."""
    stream = storage.ask(OpenWrite(key=key, overwrite=overwrite))
    try:
        for c in chunks:
            for i in range(0, len(c), STREAM_CHUNK):
                storage.ask(WriteChunk(stream=stream, data=c[i : i + STREAM_CHUNK]))
    except BaseException:
        try:
            storage.ask(AbortWrite(stream=stream))
        except CarambaError:
            pass
        raise
    return storage.ask(CloseWrite(stream=stream))


def get_stream(storage, key: str, chunk: int = STREAM_CHUNK) -> Iterator[bytes]:
    """Read ``key`` through a Storage actor in chunks (not re-verified; ``Digest`` checks the whole)."""
    offset = 0
    while True:
        part = storage.ask(ReadRange(key=key, offset=offset, length=chunk))
        if part.data:
            yield part.data
        offset += len(part.data)
        if part.eof or not part.data:
            return
