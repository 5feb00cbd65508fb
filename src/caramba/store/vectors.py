"""Vectors: what models produce, in Qdrant, with the run that produced them.

``open_vectors(location)`` opens the vector store: a folder (Qdrant's local mode,
``QdrantClient(path=...)``; the default is ``<store>/vectors``) or a server URL
(``http://host:6333``), from the argument, else the ``vectors`` setting (caramba.yml,
``CARAMBA_VECTORS``). A missing ``qdrant-client`` is a ConfigError naming the extra; a server
that does not answer is one VectorStoreError naming the URL. Nothing falls back to another store.

A manifest's ``embeddings`` section (``caramba.manifest.schema.Embeddings``) makes every run
that finishes evaluate a named output of its trained model over a split and upsert one point
per example (``write_run_embeddings``). Point IDs are derived from (run, output, split, index),
so writing a run again replaces its points instead of adding more. Each point's payload is the
provenance: run, experiment, target, run name, arm, model version, checkpoint step and sha256,
manifest sha256, output, split, example index and label.

    with open_vectors("/tmp/vectors") as vs:
        for hit in vs.search("digits", query, k=10, where={"run": run_id}):
            print(hit.score, hit.payload["index"])
"""

from __future__ import annotations

import math
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from caramba.errors import ConfigError, did_you_mean
from caramba.store.blobs import StoreError

COLLECTION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")  # as caramba.manifest.schema.COLLECTION
DISTANCES = ("cosine", "dot", "euclid")
MAX_K = 1000  # neighbours one search returns
MAX_DIM = 65536  # the largest vector Qdrant accepts
UPSERT_BATCH = 256
INSTALL = "pip install 'caramba[qdrant]'"
# payload keys a filter may name, and the type of their values
PAYLOAD_KEYS: dict[str, type] = {
    "run": str, "experiment": str, "target": str, "run_name": str, "arm": str, "group": str, "output": str,
    "split": str, "index": int, "label": object, "checkpoint_step": int, "checkpoint_sha256": str,
    "model_version": int, "manifest_sha256": str,
}
_NAMESPACE = uuid.UUID("5b1f4f0e-7d0c-4f57-9a51-6361726d6261")  # caramba's point IDs


class VectorStoreError(StoreError):
    """The vector store cannot do what was asked: it is unreachable, a collection is missing or
    has another dimension or distance, a point is not there. The message names the store."""


@dataclass(frozen=True)
class Neighbour:
    """One search result: the point's ID, its score (cosine/dot: higher is closer; euclid:
    the distance, lower is closer) and its payload (the provenance)."""

    id: str
    score: float
    payload: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "score": self.score, "payload": dict(self.payload)}


def point_id(run: str, output: str, split: str, index: int) -> str:
    """The point ID of example ``index`` of ``split`` in ``output`` of ``run`` (a UUID, stable)."""
    return str(uuid.uuid5(_NAMESPACE, f"{run}\x00{output}\x00{split}\x00{int(index)}"))


def check_collection(name: Any) -> str:
    if not isinstance(name, str) or not COLLECTION.fullmatch(name):
        raise ConfigError(f"{name!r:.80} is not a collection name",
                          hint="1 to 63 letters, digits, _ and -, starting with a letter or digit")
    return name


def check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ConfigError(f"k must be a whole number from 1 to {MAX_K}; got {k!r:.40}")
    return k


def _distance(name: str) -> Any:
    from qdrant_client import models

    if name not in DISTANCES:
        raise ConfigError(f"unknown distance {name!r:.40}; {did_you_mean(str(name), DISTANCES)}")
    return {"cosine": models.Distance.COSINE, "dot": models.Distance.DOT, "euclid": models.Distance.EUCLID}[name]


def _distance_name(d: Any) -> str:
    value = str(getattr(d, "value", d)).lower()
    return {"cosine": "cosine", "dot": "dot", "euclid": "euclid"}.get(value, value)


def _as_vectors(vectors: Any, what: str) -> np.ndarray:
    arr = np.asarray(vectors)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ConfigError(f"{what} must hold numbers; got dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[0] == 0 or not 1 <= arr.shape[1] <= MAX_DIM:
        raise ConfigError(f"{what} must be a matrix of n vectors of 1 to {MAX_DIM} numbers; got shape {list(arr.shape)}")
    arr = arr.astype(np.float64, copy=False)
    bad = ~np.isfinite(arr).all(axis=1)
    if bad.any():
        raise ConfigError(f"{what}: vector {int(np.flatnonzero(bad)[0])} is not finite (NaN or infinity); "
                          f"{int(bad.sum())} of {len(arr)} are not")
    return arr


def query_vector(vector: Any, what: str = "the query vector") -> np.ndarray:
    """``vector`` as one finite float vector (a (d,) or (1, d) array)."""
    arr = np.asarray(vector)
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1:
        raise ConfigError(f"{what} must be one vector (shape [d] or [1, d]); got shape {list(arr.shape)}")
    return _as_vectors(arr[None, :], what)[0]


def _safe_url(url: str) -> str:
    """``url`` without credentials (what error messages show)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "") if "@" in parts.netloc else parts.netloc
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def vectors_location(location: str | None = None, store_root: str | Path | None = None) -> str:
    """Where vectors go: ``location``, else the ``vectors`` setting, else ``<store>/vectors``."""
    if location:
        return str(location)
    from caramba.config import settings

    s = settings()
    if s.vectors:
        return s.vectors
    root = Path(store_root) if store_root is not None else Path(s.store)
    return str(root / "vectors")


class VectorStore:
    """A Qdrant client (local folder or server) with the checks caramba needs. Use it as a
    context manager (a local folder is locked while it is open)."""

    def __init__(self, location: str) -> None:
        try:
            from qdrant_client import QdrantClient
        except ImportError:
            raise ConfigError("the vector store needs the qdrant-client package", hint=INSTALL) from None
        if not isinstance(location, str) or not location.strip():
            raise ConfigError("the vector store location is empty",
                              hint="a folder (Qdrant local mode) or http://host:6333; setting vectors")
        self.location = location
        scheme = location.split("://", 1)[0].lower() if "://" in location else ""
        if scheme in ("http", "https"):
            import os

            self.where = _safe_url(location)
            self.server = True
            try:  # (no version check thread: it warns from the background when the server does not answer)
                self.client = QdrantClient(url=location, timeout=10, api_key=os.environ.get("QDRANT_API_KEY") or None,
                                           check_compatibility=False)
                self.client.get_collections()
            except Exception as exc:  # connection refused, DNS, TLS, HTTP error: one message naming the URL
                raise VectorStoreError(f"cannot reach the Qdrant server at {self.where}: {_reason(exc)}",
                                       hint="start the server, or set `vectors` to a folder for local mode") from None
            return
        if scheme and scheme != "file":
            raise ConfigError(f"vector store {location!r:.200} has an unknown scheme '{scheme}://'",
                              hint="a folder (Qdrant local mode), file:///path, or http(s)://host:6333")
        path = Path(location[len("file://"):] if scheme == "file" else location).expanduser()
        self.where, self.server = str(path), False
        if path.exists() and not path.is_dir():
            raise VectorStoreError(f"vector store {path} is a file, not a folder")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise VectorStoreError(f"cannot create the vector store folder {path}: {exc.strerror}") from None
        try:
            self.client = QdrantClient(path=str(path))
        except RuntimeError as exc:
            if "already accessed" in str(exc):
                raise VectorStoreError(f"the vector store {path} is open in another process (Qdrant's local mode "
                                       "allows one at a time)",
                                       hint="wait for it, or use a Qdrant server (vectors: http://host:6333)") from None
            raise VectorStoreError(f"cannot open the vector store {path}: {exc}") from None
        except Exception as exc:  # a folder that holds something else than a Qdrant store
            raise VectorStoreError(f"cannot open the vector store {path}: {_reason(exc)}") from None

    # ---- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
            self.client = None

    def __enter__(self) -> "VectorStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except (ConfigError, VectorStoreError):
            raise
        except Exception as exc:
            raise VectorStoreError(f"{what} failed in the vector store {self.where}: {_reason(exc)}") from None

    # ---- collections -----------------------------------------------------------------------
    def collections(self) -> list[str]:
        res = self._call("listing collections", self.client.get_collections)
        return sorted(c.name for c in res.collections)

    def info(self, collection: str) -> tuple[int, str]:
        """(dimension, distance) of ``collection``; VectorStoreError when there is none."""
        check_collection(collection)
        if not self._call("looking up a collection", self.client.collection_exists, collection):
            names = self.collections()
            hint = did_you_mean(collection, names) if names else "it has no collections yet"
            raise VectorStoreError(f"the vector store {self.where} has no collection '{collection}'; {hint}")
        params = self._call("reading a collection", self.client.get_collection, collection).config.params.vectors
        return int(params.size), _distance_name(params.distance)

    def ensure(self, collection: str, dim: int, distance: str = "cosine") -> None:
        """Create ``collection`` for ``dim``-vectors, or check that it is one."""
        check_collection(collection)
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_DIM:
            raise ConfigError(f"a vector dimension must be 1 to {MAX_DIM}; got {dim!r:.40}")
        d = _distance(distance)
        if self._call("looking up a collection", self.client.collection_exists, collection):
            have_dim, have_distance = self.info(collection)
            if (have_dim, have_distance) != (dim, distance):
                raise VectorStoreError(
                    f"collection '{collection}' in {self.where} holds {have_dim}-vectors compared by {have_distance}; "
                    f"these are {dim}-vectors compared by {distance}",
                    hint="write them into another collection (embeddings.collection)")
            return
        from qdrant_client import models

        self._call("creating a collection", self.client.create_collection, collection,
                   vectors_config=models.VectorParams(size=dim, distance=d))

    def count(self, collection: str, where: Mapping[str, Any] | None = None) -> int:
        self.info(collection)
        res = self._call("counting points", self.client.count, collection, count_filter=_filter(where), exact=True)
        return int(res.count)

    # ---- points ----------------------------------------------------------------------------
    def upsert(self, collection: str, ids: Sequence[str], vectors: Any, payloads: Sequence[Mapping[str, Any]]) -> int:
        """Write (or replace) points; returns how many. Every vector must be finite and have the
        collection's dimension."""
        arr = _as_vectors(vectors, "the vectors")
        if not len(ids) == len(payloads) == len(arr):
            raise ConfigError(f"{len(ids)} IDs, {len(payloads)} payloads and {len(arr)} vectors do not match")
        dim, distance = self.info(collection)
        if arr.shape[1] != dim:
            raise VectorStoreError(f"collection '{collection}' holds {dim}-vectors; these have {arr.shape[1]} numbers")
        if distance == "cosine":
            zero = np.flatnonzero(~(np.abs(arr) > 0).any(axis=1))
            if len(zero):
                raise ConfigError(f"vector {int(zero[0])} is all zeros: it has no direction to compare by cosine",
                                  hint="use distance dot or euclid for this output")
        from qdrant_client import models

        self._fast_commits(collection)
        for start in range(0, len(arr), UPSERT_BATCH):
            points = [models.PointStruct(id=str(ids[i]), vector=arr[i].tolist(), payload=dict(payloads[i]))
                      for i in range(start, min(start + UPSERT_BATCH, len(arr)))]
            self._call("writing points", self.client.upsert, collection, points=points, wait=True)
        return len(arr)

    def _fast_commits(self, collection: str) -> None:
        """Local mode commits every point on its own (an fsync each: seconds per thousand
        points); its SQLite file in WAL mode with synchronous=NORMAL commits without one. A crash
        of the machine may lose the newest points; writing the run again restores them."""
        if self.server:
            return
        local = getattr(self.client, "_client", None)
        coll = getattr(local, "collections", {}).get(collection)
        db = getattr(getattr(coll, "storage", None), "storage", None)
        if db is None or getattr(coll, "_caramba_wal", False):
            return
        import sqlite3

        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            coll._caramba_wal = True
        except sqlite3.Error:  # (an optimization: the writes stay correct without it)
            pass

    def search(self, collection: str, vector: Any, k: int = 10, where: Mapping[str, Any] | None = None,
               exclude: Sequence[str] = ()) -> list[Neighbour]:
        """The ``k`` nearest points to ``vector`` (closest first), optionally only those whose
        payload matches ``where`` and without the points ``exclude`` names."""
        check_k(k)
        q = query_vector(vector)
        dim, distance = self.info(collection)
        if len(q) != dim:
            raise ConfigError(f"the query vector has {len(q)} numbers; collection '{collection}' holds {dim}-vectors")
        if distance == "cosine" and not (np.abs(q) > 0).any():
            raise ConfigError("the query vector is all zeros: it has no direction to compare by cosine")
        flt = _filter(where, exclude)
        res = self._call("searching", self.client.query_points, collection, query=q.tolist(), limit=k,
                         query_filter=flt, with_payload=True)
        return [Neighbour(str(p.id), float(p.score), dict(p.payload or {})) for p in res.points]

    def find(self, collection: str, where: Mapping[str, Any]) -> tuple[str, np.ndarray, dict[str, Any]]:
        """The one point whose payload matches ``where``: (ID, vector, payload)."""
        self.info(collection)
        points, _ = self._call("looking up a point", self.client.scroll, collection, scroll_filter=_filter(where),
                               limit=2, with_payload=True, with_vectors=True)
        what = ", ".join(f"{k}={v}" for k, v in where.items())
        if not points:
            raise VectorStoreError(f"collection '{collection}' in {self.where} has no point with {what}",
                                   hint="`caramba search COLLECTION --vector FILE.npy` searches by any vector")
        if len(points) > 1:
            outputs = sorted({str((p.payload or {}).get("output")) for p in points})
            raise VectorStoreError(f"collection '{collection}' has several points with {what} (outputs "
                                   f"{', '.join(outputs)}); add --filter output=NAME")
        p = points[0]
        return str(p.id), np.asarray(p.vector, dtype=np.float64), dict(p.payload or {})


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


def parse_filter(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` items (``run=<id>``, ``split=test``, ``label=3``) as a payload filter."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--filter {item!r:.80} is not key=value", hint="e.g. --filter run=<run id>")
        out[key] = value
    return _typed(out)


def _typed(where: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in where.items():
        if key not in PAYLOAD_KEYS:
            raise ConfigError(f"cannot filter by {key!r:.60}; {did_you_mean(str(key), PAYLOAD_KEYS)}")
        kind = PAYLOAD_KEYS[key]
        if isinstance(value, str) and kind is int:
            try:
                value = int(value)
            except ValueError:
                raise ConfigError(f"filter {key} needs a whole number; got {value!r:.40}") from None
        elif isinstance(value, str) and kind is object:
            value = int(value) if re.fullmatch(r"-?\d{1,18}", value) else value
        if isinstance(value, float) or isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"filter {key} needs a string or whole number; got {value!r:.40}")
        if isinstance(value, str) and len(value) > 1000:
            raise ConfigError(f"filter {key} is longer than 1000 characters")
        out[key] = value
    return out


def _filter(where: Mapping[str, Any] | None, exclude: Sequence[str] = ()) -> Any:
    if not where and not exclude:
        return None
    from qdrant_client import models

    must = [models.FieldCondition(key=k, match=models.MatchValue(value=v)) for k, v in _typed(where or {}).items()]
    must_not = [models.HasIdCondition(has_id=[str(i) for i in exclude])] if exclude else None
    return models.Filter(must=must or None, must_not=must_not)


def open_vectors(location: str | None = None, store_root: str | Path | None = None) -> VectorStore:
    """The vector store at ``location`` (default: ``vectors_location(None, store_root)``)."""
    return VectorStore(vectors_location(location, store_root))


# ---- a run's embeddings -------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    """What ``write_run_embeddings`` wrote: ``count`` points of ``dim`` numbers into ``collection``."""

    run_id: str
    collection: str
    location: str
    count: int
    dim: int
    output: str
    split: str

    def to_json(self) -> dict[str, Any]:
        return {"collection": self.collection, "location": self.location, "points": self.count, "dim": self.dim,
                "output": self.output, "split": self.split}


def run_embeddings(ref: str, store: Any, spec: Any = None) -> tuple[np.ndarray, list[dict[str, Any]], Any]:
    """Evaluate the embeddings output of run ``ref``'s trained model over its split:
    ``(vectors [n, d], payloads, spec)``. ``spec`` defaults to the manifest's ``embeddings``."""
    from caramba.export.inference import inference_model
    from caramba.run.feed import Feeder

    inf = None
    rec = store.get(ref)
    if spec is None:
        from caramba.actors.experiment import RunSpec
        from caramba.run.driver import plan_from_spec

        spec = plan_from_spec(RunSpec.model_validate(rec.config["spec"])).prep.manifest.embeddings
        if spec is None:
            raise ConfigError(f"run {rec.id}'s manifest has no embeddings section")
    inf = inference_model(rec.id, store, outputs=[spec.output])
    prep, ds = inf.prep, inf.prep.dataset
    if ds is None:
        raise ConfigError(f"run {rec.id}: embeddings need the trainer's dataset")
    if ds.size(spec.split) == 0:
        raise ConfigError(f"run {rec.id}: dataset '{ds.name}' has no {spec.split} examples to embed")
    label = spec.label
    if label is not None and label not in ds.fields:
        raise ConfigError(f"embeddings.label '{label}' is not a field of dataset '{ds.name}'; "
                          f"{did_you_mean(label, ds.fields)}")
    if label is not None and ds.fields[label].shape != ():
        raise ConfigError(f"embeddings.label '{label}' is {ds.fields[label]} per example; a label is one number")
    if label is None and "y" in ds.fields and ds.fields["y"].shape == ():
        label = "y"
    n_total = min(ds.size(spec.split), spec.limit or ds.size(spec.split))
    batch = min(256, n_total)
    from caramba.compute import new

    runner = new(rec.backend or "cpu")
    chunks: list[np.ndarray] = []
    labels: list[Any] = []
    graphs: dict[int, Any] = {}
    try:
        for name, arr in inf.params.items():
            runner.state[name] = runner.upload(arr)
        done = 0
        for b in ds.eval_batches(spec.split, batch):
            if done >= n_total:
                break
            b = {k: v[: n_total - done] for k, v in b.items()}
            n = len(next(iter(b.values())))
            g = graphs.get(n)
            if g is None:
                g = graphs[n] = inf.graph(n)
            wanted = {node.id for node in g.inputs}
            feeds = {k: v for k, v in Feeder(prep, n)(b).items() if k in wanted}
            out = runner.execute(g, inputs={k: runner.upload(v) for k, v in feeds.items()})
            y = np.asarray(out[spec.output].download())
            if y.ndim == 0 or y.shape[0] != n:
                raise ConfigError(f"embeddings.output '{spec.output}' is not one value per example (shape "
                                  f"{list(y.shape)} for a batch of {n})", hint="name a per-example value")
            chunks.append(y.reshape(n, -1))
            if label is not None:
                labels.extend(_label(v) for v in np.asarray(b[label]).reshape(n))
            done += n
    finally:
        runner.close()
    vectors = np.concatenate(chunks).astype(np.float64)
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        raise ConfigError(f"run {rec.id}: the {spec.output} of {spec.split} example {int(np.flatnonzero(bad)[0])} is "
                          "not finite (NaN or infinity); nothing was written")
    base = {"run": rec.id, "experiment": rec.experiment, "target": rec.target, "run_name": rec.run_name,
            "arm": rec.arm, "group": rec.group_id, "model_version": rec.summary.get("model_version"),
            "checkpoint_step": int(inf.step), "checkpoint_sha256": inf.checkpoint_sha256,
            "manifest_sha256": rec.manifest_sha256, "output": spec.output, "split": spec.split,
            "written": time.time()}
    payloads = [{**base, "index": i, **({"label": labels[i]} if label is not None else {})} for i in range(len(vectors))]
    return vectors, payloads, spec


def _label(v: Any) -> Any:
    if isinstance(v, np.integer | int):
        return int(v)
    f = float(v)
    return int(f) if f.is_integer() and abs(f) < 2**53 else (f if math.isfinite(f) else None)


def write_run_embeddings(ref: str, store: Any, *, location: str | None = None, spec: Any = None) -> Written:
    """Evaluate run ``ref``'s embeddings output and upsert its points (again: the same points
    are replaced, none added). ``location``: the vector store (default: ``vectors_location``)."""
    vectors, payloads, spec = run_embeddings(ref, store, spec)
    run_id = payloads[0]["run"]
    ids = [point_id(run_id, spec.output, spec.split, p["index"]) for p in payloads]
    with open_vectors(location, _local_root(store, location)) as vs:
        vs.ensure(spec.collection, int(vectors.shape[1]), spec.distance)
        count = vs.upsert(spec.collection, ids, vectors, payloads)
        where = vs.where
    return Written(run_id, spec.collection, where, count, int(vectors.shape[1]), spec.output, spec.split)


def _local_root(store: Any, location: str | None) -> Any:
    """The run store folder the default ``<store>/vectors`` lies in; a remote run store (S3)
    has none: its vectors go where the ``vectors`` setting says, never to a local folder unasked."""
    url = getattr(store, "url", None)
    if url and not str(url).startswith("file://") and not location:
        from caramba.config import settings

        if not settings().vectors:
            raise ConfigError(f"the run store is {url}; say where its embeddings go with the `vectors` setting",
                              hint="vectors: http://host:6333 (a Qdrant server) or a folder (local mode)")
    return getattr(store, "root", None)


def embed_after_run(store: Any, rec: Any, result: Any) -> Any:
    """The run engine's hook: a finished run whose manifest has ``embeddings`` writes them. The
    run's config records what was written (``config.embeddings``); a failure to write them
    makes the result failed, with the reason (the run's training and claim stay as recorded)."""
    manifest = rec.config.get("manifest")
    if not isinstance(manifest, dict) or not manifest.get("embeddings"):
        return result
    from dataclasses import replace

    from caramba.errors import CarambaError

    try:
        written = write_run_embeddings(rec.id, store)
    except Exception as exc:  # a CarambaError says what was wrong; anything else is named by its type
        reason = str(exc) if isinstance(exc, CarambaError) else f"{type(exc).__name__}: {exc}"
        error = f"the run finished but its embeddings were not written: {reason}"
        store.update_config(rec.id, {"embeddings": {"error": error}})
        return replace(result, status="failed", error=error)
    store.update_config(rec.id, {"embeddings": written.to_json()})
    return replace(result, summary={**result.summary, "embeddings.points": written.count})


__all__ = [
    "DISTANCES", "MAX_K", "Neighbour", "VectorStore", "VectorStoreError", "Written", "check_collection", "check_k",
    "embed_after_run", "open_vectors", "parse_filter", "point_id", "query_vector", "run_embeddings",
    "vectors_location", "write_run_embeddings",
]
