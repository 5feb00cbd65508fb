"""S3 blob store (boto3): the same content-addressed layout as the local store, in a bucket.

Layout under ``prefix``: ``objects/ab/<sha256>`` holds the bytes, ``keys/<key>`` a small JSON
index record ``{"sha256", "size"}``. Works with AWS and any S3-compatible server
(MinIO, moto, Ceph) through ``endpoint_url``. ``pip install caramba[s3]``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any, BinaryIO
from urllib.parse import parse_qs, urlparse

from caramba.errors import ConfigError
from caramba.store.blobs import CHUNK, BlobExists, BlobNotFound, BlobRef, BlobStore, StoreError, check_key


def _boto3():
    try:
        import boto3
    except ImportError:
        raise ConfigError("the S3 blob store needs boto3", hint="pip install 'caramba[s3]'") from None
    return boto3


class S3BlobStore(BlobStore):
    """Blobs in ``s3://bucket/prefix``. Pass a ready ``client`` or the usual boto3 client options."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        endpoint_url: str | None = None,
        region: str | None = None,
        create_bucket: bool = False,
    ) -> None:
        if not bucket:
            raise ConfigError("S3 blob store needs a bucket name")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.url = f"s3://{bucket}/{self.prefix}"
        if client is None:
            client = _boto3().client("s3", endpoint_url=endpoint_url, region_name=region)
        self._s3 = client
        from botocore.exceptions import ClientError

        self._ClientError = ClientError
        if create_bucket:
            try:
                self._s3.head_bucket(Bucket=bucket)
            except ClientError:
                self._s3.create_bucket(Bucket=bucket)

    @classmethod
    def from_url(cls, url: str) -> "S3BlobStore":
        """``s3://bucket/prefix?endpoint_url=http://127.0.0.1:9000&region=us-east-1``."""
        u = urlparse(url)
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        unknown = set(q) - {"endpoint_url", "region", "create_bucket"}
        if unknown:
            raise ConfigError(f"unknown S3 store option(s) {sorted(unknown)}; valid: create_bucket, endpoint_url, region")
        return cls(
            u.netloc,
            u.path.lstrip("/"),
            endpoint_url=q.get("endpoint_url"),
            region=q.get("region"),
            create_bucket=q.get("create_bucket", "") in ("1", "true", "yes"),
        )

    # ---- layout --------------------------------------------------------------------------
    def _obj(self, sha256: str) -> str:
        return f"{self.prefix}objects/{sha256[:2]}/{sha256}"

    def _idx(self, key: str) -> str:
        return f"{self.prefix}keys/{key}"

    def _missing(self, exc: Exception) -> bool:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        return code in ("404", "NoSuchKey", "NotFound")

    # ---- BlobStore -----------------------------------------------------------------------
    def stat(self, key: str) -> BlobRef:
        check_key(key)
        try:
            body = self._s3.get_object(Bucket=self.bucket, Key=self._idx(key))["Body"].read()
        except self._ClientError as exc:
            if self._missing(exc):
                raise BlobNotFound(f"no blob {key!r} in {self.url}") from None
            raise StoreError(f"S3 error reading index of {key!r} in {self.url}: {exc}") from None
        rec = json.loads(body)
        return BlobRef(key, rec["sha256"], int(rec["size"]))

    def list(self, prefix: str = "") -> list[BlobRef]:
        base = self._idx("")
        out = []
        pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base + prefix)
        for page in pages:
            for item in page.get("Contents", []):
                out.append(self.stat(item["Key"][len(base) :]))
        return sorted(out, key=lambda r: r.key)

    def delete(self, key: str) -> None:
        self.stat(key)
        self._s3.delete_object(Bucket=self.bucket, Key=self._idx(key))

    def _read_chunks(self, ref: BlobRef) -> Iterator[bytes]:
        try:
            body = self._s3.get_object(Bucket=self.bucket, Key=self._obj(ref.sha256))["Body"]
        except self._ClientError as exc:
            if self._missing(exc):
                raise BlobNotFound(f"blob {ref.key!r} is indexed in {self.url} but its bytes are gone") from None
            raise StoreError(f"S3 error reading {ref.key!r} from {self.url}: {exc}") from None
        try:
            while chunk := body.read(CHUNK):
                yield chunk
        finally:
            body.close()

    def _open_spool(self) -> tuple[BinaryIO, str]:
        fd, path = tempfile.mkstemp(prefix="caramba-s3-")
        return os.fdopen(fd, "wb"), path

    def _commit_spool(self, path: str, ref: BlobRef, overwrite: bool) -> None:
        try:
            old = self.stat(ref.key)
        except BlobNotFound:
            old = None
        if old is not None and old.sha256 != ref.sha256 and not overwrite:
            raise BlobExists(f"blob {ref.key!r} in {self.url} already holds sha256 {old.sha256}; refusing to bind {ref.sha256}")
        obj = self._obj(ref.sha256)
        try:
            self._s3.head_object(Bucket=self.bucket, Key=obj)
        except self._ClientError as exc:
            if not self._missing(exc):
                raise StoreError(f"S3 error checking {obj} in {self.url}: {exc}") from None
            with open(path, "rb") as f:  # multipart for large blobs, handled by boto3
                self._s3.upload_fileobj(f, self.bucket, obj)
        record = json.dumps({"sha256": ref.sha256, "size": ref.size}).encode()
        self._s3.put_object(Bucket=self.bucket, Key=self._idx(ref.key), Body=record)

    def __repr__(self) -> str:
        return f"<S3BlobStore {self.url}>"
