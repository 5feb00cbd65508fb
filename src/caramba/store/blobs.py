"""Content-addressed blob stores: a local directory + SQLite index (the default), S3 in ``store.s3``.

Bytes are stored once per SHA-256 under ``objects/ab/abcdef...``; names such as
``runs/r1/checkpoints/00000040.safetensors`` map to content hashes in an index. A name is
bound to one content: putting other bytes under a bound name is an error unless the caller
asks to ``overwrite``, so evidence that cites ``(name, sha256)`` keeps meaning what it said.

``get`` re-hashes what it reads and raises :class:`IntegrityError` when the bytes on disk no
longer match; ``digest`` recomputes the hash of the stored bytes without trusting the index
(the Notary uses it to re-check artifacts).
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from caramba.errors import CarambaError

CHUNK = 1 << 20
_KEY = re.compile(r"^[A-Za-z0-9._\-=+@:,][A-Za-z0-9._\-=+@:,/]*$")


class StoreError(CarambaError):
    """A blob store operation failed (bad key, unreachable store). The message names the store and key."""


class BlobNotFound(StoreError):
    """No blob is stored under that key. ``store.list(prefix)`` shows what is there."""


class BlobExists(StoreError):
    """The key is already bound to different bytes. Blobs are immutable evidence: pick a new key,
    or pass ``overwrite=True`` if rebinding the name is really meant."""


class IntegrityError(StoreError):
    """The stored bytes no longer hash to what was recorded: the blob was changed or damaged
    after it was written. Restore it from a copy; never re-bind it silently."""


@dataclass(frozen=True)
class BlobRef:
    """A named blob: its key, the SHA-256 of its bytes and its size."""

    key: str
    sha256: str
    size: int


def check_key(key: str) -> str:
    """Keys are relative, slash-separated names without ``.``/``..`` parts or empty parts."""
    if not isinstance(key, str) or not _KEY.match(key) or key.endswith("/"):
        raise StoreError(
            f"invalid blob key {key!r}",
            hint="use letters, digits and . _ - = + @ : , separated by single '/' (no leading '/')",
        )
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise StoreError(f"invalid blob key {key!r}: empty, '.' or '..' path part")
    return key


class BlobWriter:
    """A streaming write: ``write`` chunks, then ``close`` binds the key (``ref`` is set).

    Use as a context manager; an exception inside the block discards the partial blob."""

    def __init__(self, store: "BlobStore", key: str, overwrite: bool) -> None:
        self._store = store
        self.key = check_key(key)
        self._overwrite = overwrite
        self._hash = hashlib.sha256()
        self._size = 0
        self._spool, self._spool_path = store._open_spool()
        self.ref: BlobRef | None = None

    def write(self, data: bytes) -> int:
        if self.ref is not None or self._spool is None:
            raise StoreError(f"write to closed blob writer for {self.key!r}")
        self._hash.update(data)
        self._size += len(data)
        return self._spool.write(data)

    def close(self) -> BlobRef:
        if self.ref is not None:
            return self.ref
        assert self._spool is not None
        self._spool.close()
        self._spool = None
        ref = BlobRef(self.key, self._hash.hexdigest(), self._size)
        try:
            self._store._commit_spool(self._spool_path, ref, self._overwrite)
        finally:
            if os.path.exists(self._spool_path):
                os.unlink(self._spool_path)
        self.ref = ref
        return ref

    def abort(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None
        if os.path.exists(self._spool_path):
            os.unlink(self._spool_path)

    def __enter__(self) -> "BlobWriter":
        return self

    def __exit__(self, exc_type, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class BlobStore(ABC):
    """What every blob store offers: put/get/exists/stat/list/delete, streams, and ``digest``."""

    url: str

    # ---- to implement --------------------------------------------------------------------
    @abstractmethod
    def stat(self, key: str) -> BlobRef:
        """The index entry for ``key`` (raises BlobNotFound)."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[BlobRef]:
        """Index entries whose key starts with ``prefix``, sorted by key."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Unbind ``key`` (raises BlobNotFound). Content shared with other keys stays."""

    @abstractmethod
    def _read_chunks(self, ref: BlobRef) -> Iterator[bytes]:
        """Yield the stored bytes of ``ref``'s content (raises BlobNotFound if the object is gone)."""

    @abstractmethod
    def _open_spool(self) -> tuple[BinaryIO, str]:
        """A temporary file for a streaming write, and its path."""

    @abstractmethod
    def _commit_spool(self, path: str, ref: BlobRef, overwrite: bool) -> None:
        """Store the spooled bytes (already hashed into ``ref``) and bind the key."""

    # ---- derived -------------------------------------------------------------------------
    def put(self, key: str, data: bytes, *, overwrite: bool = False) -> BlobRef:
        """Store ``data`` under ``key``. Idempotent for the same bytes."""
        with self.open_write(key, overwrite=overwrite) as w:
            w.write(bytes(data))
        assert w.ref is not None
        return w.ref

    def open_write(self, key: str, *, overwrite: bool = False) -> BlobWriter:
        return BlobWriter(self, key, overwrite)

    def exists(self, key: str) -> bool:
        try:
            self.stat(key)
        except BlobNotFound:
            return False
        return True

    def iter_chunks(self, key: str, *, verify: bool = True) -> Iterator[bytes]:
        """Stream the blob. With ``verify`` the hash is checked when the stream ends: the last
        ``next()`` raises IntegrityError instead of finishing if the bytes changed."""
        ref = self.stat(key)
        h = hashlib.sha256()
        size = 0
        for chunk in self._read_chunks(ref):
            h.update(chunk)
            size += len(chunk)
            yield chunk
        if verify and (h.hexdigest() != ref.sha256 or size != ref.size):
            raise IntegrityError(
                f"blob {key!r} in {self.url} changed: recorded sha256 {ref.sha256} ({ref.size} bytes), "
                f"stored bytes hash to {h.hexdigest()} ({size} bytes)"
            )

    def get(self, key: str, *, verify: bool = True) -> bytes:
        """All bytes of ``key``; raises IntegrityError if they no longer match the index."""
        return b"".join(self.iter_chunks(key, verify=verify))

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of ``key`` from ``offset`` (unverified: a window of a stream)."""
        ref = self.stat(key)
        out, pos = [], 0
        for chunk in self._read_chunks(ref):
            end = pos + len(chunk)
            if end > offset:
                out.append(chunk[max(0, offset - pos) : offset + length - pos])
            pos = end
            if pos >= offset + length:
                break
        return b"".join(out)

    def digest(self, key: str) -> BlobRef:
        """Recompute SHA-256 and size of the stored bytes (does not trust the index)."""
        ref = self.stat(key)
        h = hashlib.sha256()
        size = 0
        for chunk in self._read_chunks(ref):
            h.update(chunk)
            size += len(chunk)
        return BlobRef(key, h.hexdigest(), size)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections (idempotent)."""

    def __enter__(self) -> "BlobStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalBlobStore(BlobStore):
    """Blobs in a directory (``objects/``, content-addressed) with an SQLite index (``index.sqlite``)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root).absolute()
        self.url = f"file://{self.root}"
        (self.root / "objects").mkdir(parents=True, exist_ok=True)
        (self.root / "tmp").mkdir(exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(
            self.root / "index.sqlite", timeout=30, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS blobs (key TEXT PRIMARY KEY, sha256 TEXT NOT NULL, "
            "size INTEGER NOT NULL, created REAL NOT NULL)"
        )

    def object_path(self, sha256: str) -> Path:
        return self.root / "objects" / sha256[:2] / sha256

    def stat(self, key: str) -> BlobRef:
        check_key(key)
        with self._lock:
            row = self._db.execute("SELECT sha256, size FROM blobs WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise BlobNotFound(f"no blob {key!r} in {self.url}")
        return BlobRef(key, row[0], row[1])

    def list(self, prefix: str = "") -> list[BlobRef]:
        like = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        with self._lock:
            rows = self._db.execute(
                "SELECT key, sha256, size FROM blobs WHERE key LIKE ? ESCAPE '\\' ORDER BY key", (like,)
            ).fetchall()
        return [BlobRef(*r) for r in rows]

    def delete(self, key: str) -> None:
        self.stat(key)
        with self._lock:
            self._db.execute("DELETE FROM blobs WHERE key = ?", (key,))

    def _read_chunks(self, ref: BlobRef) -> Iterator[bytes]:
        path = self.object_path(ref.sha256)
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            raise BlobNotFound(f"blob {ref.key!r} is indexed in {self.url} but its bytes are gone") from None
        with f:
            while chunk := f.read(CHUNK):
                yield chunk

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        ref = self.stat(key)
        try:
            with open(self.object_path(ref.sha256), "rb") as f:
                f.seek(offset)
                return f.read(length)
        except FileNotFoundError:
            raise BlobNotFound(f"blob {key!r} is indexed in {self.url} but its bytes are gone") from None

    def _open_spool(self) -> tuple[BinaryIO, str]:
        path = str(self.root / "tmp" / uuid.uuid4().hex)
        return open(path, "wb"), path

    def _commit_spool(self, path: str, ref: BlobRef, overwrite: bool) -> None:
        with self._lock:
            row = self._db.execute("SELECT sha256 FROM blobs WHERE key = ?", (ref.key,)).fetchone()
            if row is not None and row[0] != ref.sha256 and not overwrite:
                raise BlobExists(
                    f"blob {ref.key!r} in {self.url} already holds sha256 {row[0]}; refusing to bind {ref.sha256}"
                )
            dest = self.object_path(ref.sha256)
            if not dest.exists() or _file_sha256(dest) != ref.sha256:  # new, or damaged: (re)write it
                dest.parent.mkdir(exist_ok=True)
                os.chmod(path, 0o444)  # content-addressed objects are never edited in place
                os.replace(path, dest)
            self._db.execute(
                "INSERT INTO blobs (key, sha256, size, created) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(key) DO UPDATE SET sha256 = excluded.sha256, size = excluded.size, "
                "created = excluded.created",
                (ref.key, ref.sha256, ref.size, time.time()),
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __repr__(self) -> str:
        return f"<LocalBlobStore {self.root}>"


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def open_store(url: str | os.PathLike) -> BlobStore:
    """A blob store from a URL: a path or ``file://path`` (local), or ``s3://bucket/prefix``
    (query options ``endpoint_url=...&region=...``; needs ``pip install caramba[s3]``)."""
    text = os.fspath(url)
    if text.startswith("s3://"):
        from caramba.store.s3 import S3BlobStore

        return S3BlobStore.from_url(text)
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif "://" in text:
        raise StoreError(f"unknown blob store URL scheme in {text!r}; valid: a path, file://, s3://")
    return LocalBlobStore(text)
