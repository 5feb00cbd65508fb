"""Run stores named by URL: one scheme table, so ``--store`` and ``store:`` accept any of them.

``open_store_url("~/lab")`` and ``open_store_url("file:///srv/lab")`` are today's local layout
(a folder with ``runs.sqlite`` and ``runs/<id>/``); ``open_store_url("s3://bucket/prefix")`` is
the S3 run store (``caramba.store.s3run``): the bucket is the source of truth, a local replica
in ``<cache_dir>/stores/<hash of the URL>`` answers queries. A later scheme registers the same
way::

    from caramba.store.registry import register_scheme
    register_scheme("gs", lambda url: MyGcsRunStore(url))

A URL is checked before anything is opened: an unknown scheme, a malformed bucket or path and
an unreachable endpoint are one clear error naming the URL, never a fallback to a local folder.

A remote store still has a local folder (its replica): ``store.root``. That folder holds
``store.url`` (and ``cluster/store.url``) naming the remote store, so code that reopens a store
or starts the Notary from the folder (``open_runs(store.root)``, ``ledger_root(store)``) reaches
the remote store again rather than the replica alone.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from caramba.errors import ConfigError

MARKER = "store.url"  # in a remote store's local folder (and its services root): the store's URL
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SEGMENT = re.compile(r"^[A-Za-z0-9!_.*'()=+,@~-]+$")

Opener = Callable[[str], Any]
_OPENERS: dict[str, Opener] = {}


def register_scheme(scheme: str, opener: Opener) -> None:
    """Make ``scheme://...`` URLs open with ``opener(url)`` (which returns a RunStore)."""
    _OPENERS[scheme.lower()] = opener


def schemes() -> list[str]:
    return sorted({"file", *_OPENERS})


def is_url(text: str | os.PathLike) -> bool:
    """Whether ``text`` names a store by URL (``scheme://...``) rather than by a path."""
    return isinstance(text, str) and bool(_SCHEME.match(text))


def scheme_of(text: str) -> str:
    m = _SCHEME.match(text)
    return m.group(1).lower() if m else "file"


def file_path(url: str) -> Path:
    """The folder of a ``file://`` URL (``file:///abs``, ``file://~/x`` and ``file://rel`` too)."""
    rest = url[len("file://"):]
    if not rest:
        raise ConfigError(f"store URL {url!r} names no folder", hint="e.g. file:///home/me/lab or a plain path")
    if "\x00" in rest:
        raise ConfigError("a store URL cannot hold a NUL character")
    return Path(rest).expanduser()


def _unknown(url: str) -> ConfigError:
    shown = url if len(url) <= 120 else url[:117] + "..."
    return ConfigError(f"store {shown!r}: unknown URL scheme '{scheme_of(url)}'; the run store is one of: "
                       + ", ".join(f"{s}://" for s in schemes()) + ", or a folder path",
                       hint="e.g. --store ~/lab, --store file:///srv/lab or --store s3://bucket/prefix")


def open_store_url(url_or_path: str | os.PathLike) -> Any:
    """The run store named by ``url_or_path`` (a folder path, ``file://``, ``s3://`` or a
    registered scheme). A folder that is a remote store's replica reopens the remote store."""
    from caramba.store.runs import RunStore

    text = os.fspath(url_or_path)
    if not is_url(text):
        if "://" in text:
            raise _unknown(text)
        remote = remote_of(Path(text).expanduser())
        return open_store_url(remote) if remote else RunStore(text)
    scheme = scheme_of(text)
    if scheme == "file":
        return open_store_url(file_path(text))
    opener = _OPENERS.get(scheme)
    if opener is None:
        _builtin(scheme)
        opener = _OPENERS.get(scheme)
    if opener is None:
        raise _unknown(text)
    return opener(text)


def _builtin(scheme: str) -> None:
    if scheme == "s3":
        import caramba.store.s3run  # noqa: F401  (registers "s3")


def local_root(url_or_path: str | os.PathLike) -> Path:
    """The local folder of a store: the folder itself, or a remote store's replica (opening
    the remote store, so a bad URL fails here with its reason)."""
    text = os.fspath(url_or_path)
    if is_url(text) or "://" in text:
        return Path(open_store_url(text).root)
    return Path(text).expanduser()


def remote_of(folder: Path) -> str | None:
    """The URL of the remote store whose replica (or services root) ``folder`` is, or None."""
    try:
        text = (Path(folder) / MARKER).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if is_url(text) else None


def storage_url_of(services_root: Path) -> str | None:
    """The blob store URL of a remote store's services (``s3://bucket/prefix/blobs``), or None
    for a local one (its Storage keeps ``<root>/blobs``)."""
    remote = remote_of(services_root)
    if remote is None or scheme_of(remote) != "s3":
        return None
    loc = parse_s3_url(remote)
    opts = [f"endpoint_url={loc.endpoint}"] if loc.endpoint else []
    opts += [f"region={loc.region}"] if loc.region else []
    return f"s3://{loc.bucket}/{loc.prefix}blobs" + ("?" + "&".join(opts) if opts else "")


def cache_root(url: str) -> Path:
    """The local replica folder of a remote store: ``<cache_dir>/stores/<sha256(url)[:16]>``."""
    from caramba.config import settings

    return Path(settings().cache_dir).expanduser() / "stores" / hashlib.sha256(url.encode()).hexdigest()[:16]


# ---- s3:// URLs ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class S3Location:
    """A parsed ``s3://bucket/prefix[?endpoint=URL&region=NAME]``. ``prefix`` is ``""`` or ends
    in ``/``; ``url`` is the canonical text (what the cache is keyed by)."""

    bucket: str
    prefix: str
    endpoint: str | None
    region: str | None
    url: str

    @property
    def shown(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_s3_url(url: str) -> S3Location:
    """Check and split an ``s3://`` URL. Hostile or malformed ones are a ConfigError saying what
    is wrong: no bucket, credentials in the URL, ``.``/``..``/empty path segments, characters
    outside S3's safe set, unknown options."""
    if not isinstance(url, str) or any(ord(c) < 32 or ord(c) == 127 for c in url):
        raise ConfigError(f"store URL {url!r} holds control characters")
    if len(url) > 1024:
        raise ConfigError(f"store URL is {len(url)} characters long; at most 1024")
    if not url.lower().startswith("s3://"):
        raise ConfigError(f"{url!r} is not an s3:// URL")
    hint = "e.g. s3://my-bucket/team/lab (endpoint and credentials come from the AWS configuration)"
    parts = urlsplit(url)
    if parts.fragment:
        raise ConfigError(f"store URL {url!r} has a fragment (#...); an s3:// URL has none", hint=hint)
    if "@" in parts.netloc:
        raise ConfigError(f"store URL {parts.scheme}://…@{parts.netloc.rpartition('@')[2]} holds credentials; "
                          "they never belong in a URL",
                          hint="set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or an AWS profile instead")
    bucket = parts.netloc
    if not bucket:
        raise ConfigError(f"store URL {url!r} names no bucket", hint=hint)
    segments = [s for s in parts.path.split("/")]
    if segments and segments[0] == "":
        segments = segments[1:]
    if segments and segments[-1] == "":
        segments = segments[:-1]
    for s in segments:
        if s in ("", ".", ".."):
            raise ConfigError(f"store URL {url!r}: the path may not hold empty, '.' or '..' segments", hint=hint)
        if not _SEGMENT.match(s):
            raise ConfigError(f"store URL {url!r}: path segment {s!r} holds characters other than letters, digits "
                              "and !_.*'()=+,@~-", hint=hint)
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ConfigError(f"store URL {url!r}: {bucket!r} is not an S3 bucket name (3-63 lowercase letters, digits, "
                          "dots and hyphens, starting and ending with a letter or digit)", hint=hint)
    prefix = "".join(s + "/" for s in segments)
    if len(prefix) > 512:
        raise ConfigError(f"store URL {url!r}: the prefix is longer than 512 characters")
    query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=False) if parts.query else {}
    unknown = sorted(set(query) - {"endpoint", "endpoint_url", "region"})
    if unknown:
        raise ConfigError(f"store URL {url!r}: unknown option(s) {', '.join(unknown)}; valid: endpoint, region", hint=hint)
    endpoint = (query.get("endpoint") or query.get("endpoint_url") or [None])[-1]
    region = (query.get("region") or [None])[-1]
    if endpoint is not None and not re.match(r"^https?://[^\s/?#]+(/[^\s?#]*)?$", endpoint):
        raise ConfigError(f"store URL {url!r}: endpoint {endpoint!r} is not an http(s):// URL", hint=hint)
    if region is not None and not re.match(r"^[a-z0-9-]{1,32}$", region):
        raise ConfigError(f"store URL {url!r}: region {region!r} is not a region name (e.g. us-east-1)", hint=hint)
    canonical = f"s3://{bucket}/{prefix}"
    opts = [f"endpoint={endpoint}"] if endpoint else []
    opts += [f"region={region}"] if region else []
    if opts:
        canonical += "?" + "&".join(opts)
    return S3Location(bucket, prefix, endpoint, region, canonical)


__all__ = ["MARKER", "S3Location", "cache_root", "is_url", "local_root", "open_store_url", "parse_s3_url",
           "register_scheme", "remote_of", "schemes", "storage_url_of"]
