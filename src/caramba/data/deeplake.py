"""Deep Lake datasets (``source: deeplake``): columns of a Deep Lake 4 dataset, read in batches.

A dataset is a local folder or ``s3://bucket/prefix`` (credentials, region and endpoint from the
usual AWS configuration: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``,
``AWS_REGION``, ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``). Its rows are split by a text
column (default ``split``) whose values are ``train``, ``val`` or ``test``; rows keep their stored
order within a split. ``caramba data import`` writes such datasets (``write_arrays``).

Nothing is read whole: opening reads the schema and the split column (in chunks of
``SPLIT_CHUNK`` rows) into one int64 row index per split; a training batch reads exactly its
``batch_size`` rows of each column (a seeded permutation of the train rows per epoch, as
``ArrayDataset`` does, so a dataset written in a built-in source's split order gives the same
batches); an evaluation batch reads a contiguous slice where the rows are contiguous.

``deeplake`` is imported only here, inside functions (``pip install 'caramba[deeplake]'``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from caramba.data.core import SPLITS, DataError, Dataset, Field
from caramba.errors import ConfigError, did_you_mean

INSTALL = "pip install 'caramba[deeplake]'"
DIGESTS = "caramba_digests.json"  # sizes and SHA-256 of a local dataset's files, written by caramba data import
SPLIT_CHUNK = 1 << 16  # rows of the split column read at a time when a dataset is opened
# What ``dtype:`` may cast a field to (on read, batch by batch).
DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "bool")
# Column kinds that read as numeric numpy arrays of a fixed shape.
_NUMERIC_KINDS = ("Generic", "Embedding", "ClassLabel", "Image")
_VARIABLE = 2**64 - 1  # what Deep Lake reports for a dimension of no fixed size


def deeplake_module() -> Any:
    """The ``deeplake`` package, or a ConfigError that says how to install it."""
    try:
        import deeplake
    except ImportError:
        raise ConfigError("Deep Lake datasets need the deeplake package, which is not installed",
                          hint=INSTALL) from None
    return deeplake


def is_s3(path: str) -> bool:
    return path.startswith("s3://")


def s3_creds() -> dict[str, str]:
    """Credentials, region and endpoint for an ``s3://`` dataset from the AWS environment
    variables (Deep Lake reads ``~/.aws/credentials`` itself when none are set)."""
    env = os.environ
    creds = {k: env[v] for k, v in (("aws_access_key_id", "AWS_ACCESS_KEY_ID"),
                                     ("aws_secret_access_key", "AWS_SECRET_ACCESS_KEY"),
                                     ("aws_session_token", "AWS_SESSION_TOKEN")) if env.get(v)}
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        creds["aws_region"] = region
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        creds["endpoint_url"] = endpoint
    return creds


def check_endpoint(creds: Mapping[str, str], what: str, timeout: float = 5.0) -> None:
    """A DataError naming the S3 endpoint when it does not accept a connection within ``timeout``
    seconds (Deep Lake itself retries for about a minute before it gives up)."""
    import socket
    from urllib.parse import urlsplit

    url = creds.get("endpoint_url") or "https://s3.amazonaws.com"
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        host, port = None, 0
    if not host or parts.scheme not in ("http", "https"):
        raise DataError(f"{what}: the S3 endpoint {url!r} is not an http(s) URL",
                        hint="set AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3) to http(s)://host:port", key=("path",))
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise DataError(f"{what}: cannot reach the S3 endpoint {url} ({exc.strerror or type(exc).__name__})",
                        hint="start the server or fix AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3 (unset: AWS itself)",
                        key=("path",)) from None


def check_location(path: str, name: str, key: tuple[str, ...] = ("path",)) -> None:
    """Refuse a path that is neither a local folder path nor ``s3://bucket/prefix``."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise DataError(f"dataset '{name}': path must be a folder or s3://bucket/prefix", key=key)
    if "://" in path and not path.startswith(("s3://", "file://")):
        scheme = path.split("://", 1)[0]
        raise DataError(f"dataset '{name}': path scheme '{scheme}://' is not supported; use a local folder "
                        "or s3://bucket/prefix", key=key)
    if is_s3(path) and not path[len("s3://"):].split("/", 1)[0]:
        raise DataError(f"dataset '{name}': s3 path {path!r} names no bucket; use s3://bucket/prefix", key=key)


def _kind(kind: Any) -> str:
    return str(kind).split(" (")[0]  # "text", not "text (compression=lz4)"


def _describe(exc: BaseException) -> str:
    # Deep Lake's messages can be long (and quote paths): keep the kind and a short first line.
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _files(folder: Path) -> Iterator[Path]:
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.is_symlink() and p.name != DIGESTS and not p.name.endswith(".lock"):
            yield p


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def write_digests(folder: Path) -> int:
    """Record the size and SHA-256 of every file of the local dataset at ``folder`` in
    ``DIGESTS`` inside it (what ``verify_digests`` checks); returns the number of files."""
    files = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)} for p in _files(folder)}
    (folder / DIGESTS).write_text(json.dumps({"version": 1, "files": files}, indent=1, sort_keys=True))
    return len(files)


def verify_digests(folder: Path, name: str) -> bool:
    """Check the files of the local dataset at ``folder`` against its ``DIGESTS`` (a missing,
    resized or changed file is a DataError naming it); False when it has no digests. Deep Lake
    itself reads a truncated chunk as zeros and can crash on a garbled one, so a dataset
    caramba wrote is checked before Deep Lake opens it (one streaming read of its files)."""
    record = folder / DIGESTS
    if not record.is_file():
        return False
    bad = DataError(f"dataset '{name}': {record} is not a digest list caramba wrote", key=("path",),
                    hint="write the dataset again with `caramba data import --overwrite`, or set verify: false")
    try:
        files = json.loads(record.read_text(encoding="utf-8"))["files"]
        items = [(str(k), int(v["size"]), str(v["sha256"])) for k, v in files.items()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise bad from None
    hint = ("the dataset is damaged or was changed after `caramba data import` wrote it; write it again "
            "(--overwrite), or set verify: false to read it as it is")
    for rel, size, _ in items:
        p = folder / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise bad
        if not p.is_file():
            raise DataError(f"dataset '{name}': its file {rel} is missing", hint=hint, key=("path",))
        if p.is_symlink():  # never written by the import: a link may lead anywhere
            raise DataError(f"dataset '{name}': its file {rel} is now a symbolic link", hint=hint, key=("path",))
        if p.stat().st_size != size:
            raise DataError(f"dataset '{name}': its file {rel} is {p.stat().st_size} bytes, not the {size} written "
                            "(truncated or changed)", hint=hint, key=("path",))
    for rel, _, digest in items:  # the contents only once every size matched
        if _sha256(folder / rel) != digest:
            raise DataError(f"dataset '{name}': the contents of its file {rel} changed since it was written",
                            hint=hint, key=("path",))
    return True


def open_dataset(location: str, name: str, creds: Mapping[str, str] | None = None, verify: bool = False) -> Any:
    """Open ``location`` (a resolved local folder or an s3:// URL) read-only, or a DataError."""
    deeplake = deeplake_module()
    if not is_s3(location):
        folder = location[len("file://"):] if location.startswith("file://") else location
        if not os.path.isdir(folder):
            what = "is a file, not a Deep Lake dataset folder" if os.path.exists(folder) else "does not exist"
            raise DataError(f"dataset '{name}': {folder} {what}",
                            hint="write one with `caramba data import SOURCE DEST`", key=("path",))
        if verify:
            verify_digests(Path(folder), name)
    try:
        return deeplake.open_read_only(location, creds=dict(creds) if creds else None)
    except Exception as exc:
        raise DataError(f"dataset '{name}': {location} is not a readable Deep Lake dataset ({_describe(exc)})",
                        hint="check the path (and for s3:// the AWS credentials and endpoint); write a dataset "
                        "with `caramba data import`", key=("path",)) from None


class DeeplakeDataset(Dataset):
    """Fields read from the columns of a Deep Lake dataset, batch by batch (never whole).

    ``columns`` maps field -> column (default: every numeric column but the split column, under
    its own name); ``dtypes`` maps field -> numpy dtype to cast to on read; ``limit`` keeps only
    the first N rows of the dataset. The handle is reopened after unpickling."""

    def __init__(self, name: str, location: str, *, columns: Mapping[str, str] | None = None,
                 split_column: str = "split", dtypes: Mapping[str, str] | None = None, limit: int | None = None,
                 creds: Mapping[str, str] | None = None, verify: bool = True) -> None:
        self.location, self.creds = location, dict(creds or {})
        self._ds: Any = open_dataset(location, name, self.creds, verify=verify)  # verified once, here
        ds = self._ds
        schema = {c.name: c.dtype for c in ds.schema.columns}
        rows = len(ds) if limit is None else min(len(ds), limit)
        if rows == 0:
            raise DataError(f"dataset '{name}': {location} has no rows")
        if split_column not in schema:
            raise DataError(f"dataset '{name}': {location} has no split column '{split_column}'; "
                            f"{did_you_mean(split_column, schema)}",
                            hint="name the text column of train/val/test with `split_column:`, or write the "
                            "dataset with `caramba data import` (it adds one)", key=("split_column",))
        self.index = self._split_index(name, ds, split_column, schema[split_column], rows)
        if columns:
            mapping = dict(columns)
            for fld, col in mapping.items():
                if col not in schema or col == split_column:
                    others = [c for c in schema if c != split_column]
                    raise DataError(f"dataset '{name}': {location} has no column '{col}' (field '{fld}'); "
                                    f"{did_you_mean(col, others)}", key=("columns", fld))
        else:
            mapping = {c: c for c in schema if c != split_column and str(schema[c].kind).split(".")[-1]
                       in _NUMERIC_KINDS}
            if not mapping:
                raise DataError(f"dataset '{name}': {location} has no numeric columns besides '{split_column}'",
                                key=("path",))
        self.columns = mapping
        fields: dict[str, Field] = {}
        self.casts: dict[str, np.dtype | None] = {}
        for fld, col in mapping.items():
            fields[fld] = self._field(name, ds, fld, col, schema[col])
        for fld, want in (dtypes or {}).items():
            if fld not in fields:
                raise DataError(f"dataset '{name}': dtype names field '{fld}', which the dataset does not have; "
                                f"{did_you_mean(fld, fields)}", key=("dtype", fld))
            if want not in DTYPES:
                raise DataError(f"dataset '{name}': dtype {want!r} of field '{fld}' is not one of {', '.join(DTYPES)}",
                                key=("dtype", fld))
            have, to = fields[fld].dtype, np.dtype(want)
            if not (have == np.bool_ or np.can_cast(have, to, "same_kind")):
                raise DataError(f"dataset '{name}': field '{fld}' (column '{mapping[fld]}') holds {have.name}; "
                                f"reading it as {want} would lose what it holds (a float as an integer, a signed "
                                f"value as unsigned)", hint="pick a dtype of the same kind, or drop `dtype:` for it",
                                key=("dtype", fld))
            fields[fld] = Field(fields[fld].shape, to)
            self.casts[fld] = to if to != have else None
        info: dict[str, Any] = {"description": f"Deep Lake dataset {location}", "source": location}
        meta = self._metadata(ds)
        for k in ("description", "source", "classes", "class_names"):
            if k in meta:
                info[k] = meta[k]
        if not isinstance(info.get("classes"), int) or isinstance(info.get("classes"), bool):
            info.pop("classes", None)
        super().__init__(name, fields, info)

    # ---- opening ----

    def _handle(self) -> Any:
        if self._ds is None:
            self._ds = open_dataset(self.location, self.name, self.creds)
        return self._ds

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_ds"] = None  # a Deep Lake handle does not pickle; reopened on first read
        return state

    @staticmethod
    def _metadata(ds: Any) -> dict[str, Any]:
        try:
            return {k: ds.metadata[k] for k in ds.metadata.keys()}
        except Exception:
            return {}

    @staticmethod
    def _split_index(name: str, ds: Any, column: str, kind: Any, rows: int) -> dict[str, np.ndarray]:
        if str(kind.kind).split(".")[-1] != "Text":
            raise DataError(f"dataset '{name}': split column '{column}' holds {_kind(kind)}, not text; it must hold "
                            "train, val or test per row", key=("split_column",))
        codes = np.empty(rows, dtype=np.int8)
        lookup = {s: i for i, s in enumerate(SPLITS)}
        col = ds[column]
        for start in range(0, rows, SPLIT_CHUNK):
            stop = min(start + SPLIT_CHUNK, rows)
            try:
                values = col[start:stop]
            except Exception as exc:
                raise DataError(f"dataset '{name}': rows {start}..{stop - 1} of column '{column}' cannot be read "
                                f"({_describe(exc)})", key=("path",)) from None
            for i, v in enumerate(values):
                code = lookup.get(v)
                if code is None:
                    raise DataError(f"dataset '{name}': row {start + i} of split column '{column}' is "
                                    f"{str(v)[:40]!r}; each row must be train, val or test",
                                    key=("split_column",))
                codes[start + i] = code
        return {s: np.flatnonzero(codes == i) for i, s in enumerate(SPLITS)}

    def _field(self, name: str, ds: Any, fld: str, col: str, kind: Any) -> Field:
        k = str(kind.kind).split(".")[-1]
        where = ("columns", fld)
        if k not in _NUMERIC_KINDS:
            raise DataError(f"dataset '{name}': column '{col}' (field '{fld}') holds {_kind(kind)}, not numbers",
                            hint="feed numeric columns (arrays, scalars, embeddings, class labels)", key=where)
        shape = tuple(int(d) for d in (kind.shape or ()))
        if any(d >= _VARIABLE for d in shape) or (k == "Image" and not shape):
            raise DataError(f"dataset '{name}': column '{col}' (field '{fld}') has no fixed shape ({_kind(kind)}); "
                            "batches need the same shape for every example", key=where)
        try:
            first = ds[col][0:1]
        except Exception as exc:
            raise DataError(f"dataset '{name}': column '{col}' cannot be read ({_describe(exc)})", key=where) from None
        if not isinstance(first, np.ndarray) or first.dtype.kind not in "biuf":
            raise DataError(f"dataset '{name}': column '{col}' (field '{fld}') does not read as numbers "
                            f"({type(first).__name__})", key=where)
        self.casts[fld] = None
        return Field(tuple(first.shape[1:]), first.dtype)

    # ---- reading ----

    def size(self, split: str) -> int:
        idx = self.index.get(split)
        return 0 if idx is None else len(idx)

    def _read(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The fields of ``rows`` (dataset row numbers): a slice when they are contiguous."""
        ds = self._handle()
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        sel: slice | list[int] = slice(lo, hi) if hi - lo == len(rows) and np.all(np.diff(rows) == 1) else rows.tolist()
        out: dict[str, np.ndarray] = {}
        for fld, col in self.columns.items():
            try:
                a = np.asarray(ds[col][sel])
            except Exception as exc:
                raise DataError(f"dataset '{self.name}': rows {lo}..{hi - 1} of column '{col}' cannot be read "
                                f"({_describe(exc)})") from None
            want = self.fields[fld]
            if a.shape[1:] != want.shape:
                raise DataError(f"dataset '{self.name}': column '{col}' gives examples of shape {list(a.shape[1:])} "
                                f"at rows {lo}..{hi - 1}, not {list(want.shape)} like its first row")
            cast = self.casts.get(fld)
            out[fld] = a.astype(cast) if cast is not None else a
        return out

    def train_batches(self, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, np.ndarray]]:
        self._check_split("train")
        rows = self.index["train"]
        n = len(rows)
        if batch_size > n:
            raise DataError(f"batch_size {batch_size} is larger than the {n} training examples of '{self.name}'")
        while True:  # like ArrayDataset: a fresh permutation per epoch, the incomplete tail dropped
            perm = rng.permutation(n)
            for start in range(0, n - batch_size + 1, batch_size):
                yield self._read(rows[perm[start : start + batch_size]])

    def eval_batches(self, split: str, batch_size: int, limit: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        self._check_split(split)
        rows = self.index[split]
        for i, start in enumerate(range(0, len(rows), batch_size)):
            if limit is not None and i >= limit:
                return
            yield self._read(rows[start : start + batch_size])


def load(name: str, s: Mapping[str, Any], base: Path) -> DeeplakeDataset:
    """The ``source: deeplake`` loader (``caramba.data.sources.load_dataset``)."""
    from caramba.data.sources import _ROOTS, _outside, outside_roots

    path = s.get("path")
    check_location(path, name)
    deeplake_module()  # the missing package first, before anything about the path
    if is_s3(path):
        if _ROOTS.get() is not None:  # a server reads data only from its folders
            raise _outside(name, ("path",))
        location, creds = path.rstrip("/"), s3_creds()
        check_endpoint(creds, f"dataset '{name}'")
    else:
        local = path[len("file://"):] if path.startswith("file://") else path
        if outside_roots(base, local):
            raise _outside(name, ("path",))
        p = Path(local) if _ROOTS.get() is not None else Path(local).expanduser()
        location, creds = os.path.realpath(p if p.is_absolute() else base / p), {}
    return DeeplakeDataset(name, location, columns=s.get("columns") or None,
                           split_column=s.get("split_column") or "split", dtypes=s.get("dtype") or None,
                           limit=s.get("limit"), creds=creds, verify=s.get("verify", True) is not False)


# ---- writing (caramba data import) --------------------------------------------------------


def _column_type(types: Any, a: np.ndarray) -> Any:
    scalar = {"float16": types.Float16, "float32": types.Float32, "float64": types.Float64, "int8": types.Int8,
              "int16": types.Int16, "int32": types.Int32, "int64": types.Int64, "uint8": types.UInt8,
              "uint16": types.UInt16, "uint32": types.UInt32, "uint64": types.UInt64, "bool": types.Bool}
    base = scalar.get(a.dtype.name)
    if base is None:
        raise DataError(f"arrays of {a.dtype.name} cannot be written to Deep Lake; use numbers or booleans")
    if a.ndim == 1:
        return base()
    return types.Array(base(), shape=list(a.shape[1:]))


def write_arrays(dest: str, parts: Mapping[str, Mapping[str, np.ndarray]], metadata: Mapping[str, Any], *,
                 overwrite: bool = False, creds: Mapping[str, str] | None = None, chunk: int = 4096) -> int:
    """Write ``parts`` (split -> field -> array, the same fields in each split) to a new Deep Lake
    dataset at ``dest`` with a text column ``split``; rows are the train, then val, then test
    rows in their given order. Refuses an existing dataset unless ``overwrite``. Returns the
    number of rows written.

    A local dataset is written into a temporary folder beside ``dest`` with its ``DIGESTS`` and
    renamed into place when complete, so ``dest`` never holds half a dataset (an overwritten one
    is replaced only then); an s3:// dataset is written in place."""
    import shutil
    import tempfile

    deeplake = deeplake_module()
    kw = {"creds": dict(creds)} if creds else {}
    local = None if is_s3(dest) else Path(dest[len("file://"):] if dest.startswith("file://") else dest).expanduser()
    present = [s for s in SPLITS if s in parts and len(next(iter(parts[s].values()), ()))]
    if not present:
        raise DataError("nothing to write: every split is empty")
    if local is not None and local.exists() and not local.is_dir():
        raise DataError(f"{local} is a file; give a folder for the Deep Lake dataset")
    if local is None:
        check_endpoint(creds or {}, dest)
    try:
        exists = bool(deeplake.exists(str(local) if local is not None else dest, **kw))
    except Exception as exc:
        raise DataError(f"cannot reach {dest} ({_describe(exc)})",
                        hint="for s3:// check the AWS credentials and endpoint (AWS_ENDPOINT_URL)") from None
    if local is not None and not exists and local.is_dir() and any(local.iterdir()):
        raise DataError(f"{local} is a folder that holds other files, not a Deep Lake dataset; give a new or empty folder")
    if exists and not overwrite:
        raise DataError(f"a Deep Lake dataset already exists at {dest}", hint="pass --overwrite to replace it")
    if local is None:
        if exists:
            deeplake.delete(dest, **kw)
        return _fill(deeplake.create(dest, **kw), parts, present, metadata, chunk)
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{local.name}.", suffix=".partial", dir=local.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # mkdtemp's folder is private; the dataset gets the usual permissions
    try:
        total = _fill(deeplake.create(str(tmp)), parts, present, metadata, chunk)
        write_digests(tmp)
        if local.exists():
            old = local.with_name(f".{local.name}.{tmp.name}.old")
            local.rename(old)
            tmp.rename(local)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(local)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return total


def _fill(ds: Any, parts: Mapping[str, Mapping[str, np.ndarray]], present: list[str], metadata: Mapping[str, Any],
          chunk: int) -> int:
    from deeplake import types

    names = list(parts[present[0]])
    for fld in names:
        ds.add_column(fld, _column_type(types, parts[present[0]][fld]))
    ds.add_column("split", types.Text())
    total = 0
    for s in present:
        part = parts[s]
        n = len(part[names[0]])
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            row: dict[str, Any] = {f: np.ascontiguousarray(part[f][start:stop]) for f in names}
            row["split"] = [s] * (stop - start)
            ds.append(row)
        total += n
    for k, v in metadata.items():
        ds.metadata[k] = v
    ds.commit(f"caramba data import: {metadata.get('source', '')}")
    return total
