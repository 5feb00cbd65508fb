"""The run store on S3: ``s3://bucket/prefix``, the bucket the source of truth.

Layout under ``prefix``::

    runs/<run id>/events/<ns time>-<host>-<pid>-<rand>.json   one immutable object per change
    artifacts/<sha256[:2]>/<sha256>                           artifact and checkpoint bytes
    blobs/...                                                 the Storage actor's blobs (caramba.store.s3)
    ledger/...                                                the Notary's ledger (caramba.actors.ledger_s3)

Every change to a run (create, start, heartbeat, metric rows, checkpoint, artifact, tags, note,
finish, delete, ...) is one new event object with a unique key (written with
``IfNoneMatch='*'``), never an overwrite: two writers, on one host or many, never lose each
other's metric rows. Queries are answered by a local SQLite replica (the local store's own
schema and SQL, ``RunStore``), kept in ``<cache_dir>/stores/<hash of URL>``: a read first lists
the bucket and replays the events it has not seen, in key order (a run whose events arrive out
of order is rebuilt from its events). Artifact bytes are uploaded (multipart when large) to
their content address *before* the event that lists them is written, so an interrupted upload
is never listed: its event does not exist. ``artifacts()`` downloads listed bytes that are not
in the replica folder yet, checking their SHA-256.

Endpoint, region and credentials come from the usual AWS configuration (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, ...) or ``?endpoint=`` / ``?region=`` in the URL.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import socket
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from caramba.errors import CarambaError, ConfigError
from caramba.store.registry import MARKER, S3Location, cache_root, parse_s3_url, register_scheme
from caramba.store.runs import Artifact, RunNotFound, RunRecord, RunStore, StoreUnavailable, _sha256

EVENT_FORMAT = 1
_INSTALL = "pip install 'caramba[s3]'"


# ---- the client, and what its errors mean ------------------------------------------------------------
def s3_client(loc: S3Location) -> Any:
    """A boto3 S3 client for ``loc`` (short timeouts, few retries: an unreachable endpoint is an
    error in seconds, not minutes)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ConfigError(f"the store {loc.shown} needs boto3, which is not installed", hint=_INSTALL) from None
    cfg = Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 3, "mode": "standard"},
                 request_checksum_calculation="when_required", response_checksum_validation="when_required")
    try:
        return boto3.session.Session().client("s3", endpoint_url=loc.endpoint, region_name=loc.region, config=cfg)
    except Exception as exc:  # botocore's own configuration errors (a bad profile, a bad endpoint)
        raise unavailable(loc, exc) from None


def endpoint_of(client: Any) -> str:
    return str(getattr(getattr(client, "meta", None), "endpoint_url", "") or "")


def unavailable(loc: S3Location, exc: BaseException, doing: str = "") -> StoreUnavailable:
    """One clear error naming the store's URL and endpoint, for whatever botocore raised."""
    from botocore import exceptions as bx

    code = ""
    if isinstance(exc, bx.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
    where = f"the S3 store {loc.shown}"
    if isinstance(exc, bx.NoCredentialsError):
        why, hint = "no AWS credentials were found", "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
    elif isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError, bx.ConnectionError)):
        why = f"its endpoint cannot be reached ({exc})"
        hint = "check AWS_ENDPOINT_URL / ?endpoint= and that the server is up"
    elif code in ("NoSuchBucket", "404", "NotFound") and doing in ("", "open"):
        why, hint = f"bucket '{loc.bucket}' does not exist", "create the bucket first (aws s3 mb s3://" + loc.bucket + ")"
    elif code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"):
        why, hint = f"access was denied ({code}): the credentials are wrong or lack permission", \
            "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) and the bucket policy"
    else:
        why, hint = f"{type(exc).__name__}: {exc}", "check the endpoint, bucket and credentials"
    at = endpoint_of_exc(exc)
    return StoreUnavailable(f"{where} cannot be used" + (f" ({doing})" if doing and doing != "open" else "")
                            + f": {why}" + (f" [endpoint {at}]" if at else ""), hint=hint)


def endpoint_of_exc(exc: BaseException) -> str:
    return str(getattr(exc, "kwargs", {}).get("endpoint_url", "") or "")


def probe(loc: S3Location, client: Any) -> None:
    """Check the bucket is reachable and ours to use (one HEAD request)."""
    try:
        client.head_bucket(Bucket=loc.bucket)
    except Exception as exc:
        raise unavailable(loc, exc) from None


def is_missing(exc: BaseException) -> bool:
    code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound")


def is_precondition(exc: BaseException) -> bool:
    code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
    status = getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ("PreconditionFailed", "412", "ConditionalRequestConflict") or status in (409, 412)


def list_keys(client: Any, bucket: str, prefix: str, start_after: str = "") -> Iterator[str]:
    kw: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    if start_after:
        kw["StartAfter"] = start_after
    for page in client.get_paginator("list_objects_v2").paginate(**kw):
        for item in page.get("Contents", []):
            yield item["Key"]


def _host() -> str:
    return "".join(c if c.isalnum() or c in "-." else "_" for c in socket.gethostname())[:40] or "host"


# ---- the store ------------------------------------------------------------------------------------
class S3RunStore(RunStore):
    """Runs, metrics and artifacts in ``s3://bucket/prefix`` (see the module docstring)."""

    def __init__(self, url: str, *, cache: str | os.PathLike | None = None) -> None:
        loc = parse_s3_url(url)
        client = s3_client(loc)
        self.loc = loc
        self.url = loc.url
        self._s3 = client
        probe(loc, client)
        where = Path(cache) if cache is not None else cache_root(loc.url + "|" + endpoint_of(client))
        self._lock = threading.RLock()
        self._clock: float | None = None
        self._replaying = False
        self._runs_prefix = f"{loc.prefix}runs/"
        super().__init__(where)
        with self._db() as db:
            db.execute("CREATE TABLE IF NOT EXISTS s3_events (key TEXT PRIMARY KEY, run_id TEXT NOT NULL, body TEXT NOT NULL,"
                       " bad TEXT NOT NULL DEFAULT '')")
            db.execute("CREATE INDEX IF NOT EXISTS s3_events_run ON s3_events(run_id, key)")
        for folder in (self.root, self.root / "cluster"):
            folder.mkdir(parents=True, exist_ok=True)
            marker = folder / MARKER
            if not marker.exists() or marker.read_text().strip() != loc.url:
                tmp = marker.with_name(f".{MARKER}.{os.getpid()}")
                tmp.write_text(loc.url + "\n")
                tmp.replace(marker)
        self._recover()

    def __repr__(self) -> str:
        return f"<S3RunStore {self.url} (replica {self.root})>"

    # ---- the replica: locking, clock, sync ----------------------------------------------------------
    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """One connection per thread, kept open, without fsync: the replica is a cache the
        bucket can always rebuild (a connection per call, as the local store opens, would
        checkpoint and sync the database on every change)."""
        tls = self.__dict__.setdefault("_tls", threading.local())
        db = getattr(tls, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(self.db_path, timeout=30, check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=OFF")
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"the replica {self.db_path} of {self.loc.shown} cannot be used: {exc}",
                                       hint="remove the replica folder; it is rebuilt from the bucket") from None
            db.row_factory = sqlite3.Row
            tls.db = db
        try:
            yield db
            db.commit()
        except BaseException:
            db.rollback()
            raise

    def _now(self) -> float:
        return self._clock if self._clock is not None else time.time()

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """This process's lock and the replica folder's file lock (processes sharing a cache)."""
        with self._lock:
            with open(self.root / ".replica.lock", "a+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(f, fcntl.LOCK_UN)

    def _pending_file(self) -> Path:
        return self.root / f".pending-{_host()}-{os.getpid()}"

    def _recover(self) -> None:
        """A process that died between changing the replica and writing the change's event left
        a ``.pending-*`` file: the replica is rebuilt from the events (what the bucket says)."""
        stale = []
        for p in self.root.glob(".pending-*"):
            host, _, pid = p.name[len(".pending-"):].rpartition("-")
            if host == _host() and pid.isdigit() and _pid_alive(int(pid)):
                continue
            stale.append(p)
        if stale:
            with self._exclusive():
                self._rebuild(None)
                for p in stale:
                    p.unlink(missing_ok=True)

    def sync(self) -> int:
        """Replay the events in the bucket this replica has not seen; the number replayed."""
        if self._replaying:
            return 0
        try:
            keys = [k for k in list_keys(self._s3, self.loc.bucket, self._runs_prefix)
                    if k.endswith(".json") and "/events/" in k]
        except Exception as exc:
            raise unavailable(self.loc, exc, "listing runs") from None
        with self._exclusive():
            with self._db() as db:
                known = {r[0] for r in db.execute("SELECT key FROM s3_events")}
                last = dict(db.execute("SELECT run_id, MAX(key) FROM s3_events GROUP BY run_id").fetchall())
            new = sorted(k for k in keys if k not in known)
            if not new:
                return 0
            bodies = self._fetch(new)
            rebuild: set[str] = set()
            rows = []
            for key in new:
                run_id = key[len(self._runs_prefix):].split("/", 1)[0]
                body, bad = bodies[key], ""
                try:
                    ev = _event(body, run_id)
                except ValueError as exc:
                    bad, ev = str(exc), None
                    warnings.warn(f"{self.loc.shown}: event {key} is skipped: {bad}", stacklevel=2)
                rows.append((key, run_id, body, bad, ev))
                if key < last.get(run_id, ""):
                    rebuild.add(run_id)
            with self._db() as db:
                db.executemany("INSERT OR IGNORE INTO s3_events (key, run_id, body, bad) VALUES (?,?,?,?)",
                               [r[:4] for r in rows])
            for key, run_id, _body, _bad, ev in rows:
                if ev is not None and run_id not in rebuild:
                    self._replay(key, ev)
            for run_id in sorted(rebuild):
                self._rebuild(run_id)
            return len(new)

    def _fetch(self, keys: list[str]) -> dict[str, str]:
        from concurrent.futures import ThreadPoolExecutor

        def one(key: str) -> tuple[str, str]:
            try:
                raw = self._s3.get_object(Bucket=self.loc.bucket, Key=key)["Body"].read()
            except Exception as exc:
                if is_missing(exc):  # removed since it was listed
                    return key, ""
                raise unavailable(self.loc, exc, f"reading {key}") from None
            return key, raw.decode("utf-8", errors="replace")

        if len(keys) == 1:
            return dict([one(keys[0])])
        with ThreadPoolExecutor(8) as pool:
            return dict(pool.map(one, keys))

    def _rebuild(self, run_id: str | None) -> None:
        """Forget what the replica says about ``run_id`` (None: every run) and replay its events."""
        with self._db() as db:
            if run_id is None:
                for table in ("metrics", "artifacts", "runs", "deleted_runs"):
                    db.execute(f"DELETE FROM {table}")
                events = db.execute("SELECT key, run_id, body FROM s3_events WHERE bad = '' ORDER BY key").fetchall()
            else:
                db.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
                db.execute("DELETE FROM artifacts WHERE run_id = ?", (run_id,))
                db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
                db.execute("DELETE FROM deleted_runs WHERE id = ?", (run_id,))
                events = db.execute("SELECT key, run_id, body FROM s3_events WHERE run_id = ? AND bad = '' ORDER BY key",
                                    (run_id,)).fetchall()
        for key, rid, body in events:
            self._replay(key, _event(body, rid))

    def _replay(self, key: str, ev: Mapping[str, Any]) -> None:
        """Apply an event read from the bucket; one that cannot be applied (written by hand, or
        by a newer caramba) is skipped with a warning naming its key."""
        try:
            self._apply(ev)
        except StoreUnavailable:
            raise
        except (CarambaError, KeyError, TypeError, ValueError, AttributeError) as exc:
            warnings.warn(f"{self.loc.shown}: event {key} is skipped: {type(exc).__name__}: {exc}", stacklevel=3)

    def _apply(self, ev: Mapping[str, Any]) -> Any:
        """Apply one event to the replica with RunStore's own SQL, at the event's time."""
        op, run_id, args = ev["op"], ev["run"], dict(ev.get("args") or {})
        base = RunStore
        self._clock, self._replaying = float(ev["t"]), True
        try:
            if op == "create_run":
                return self._insert_run(run_id, args)
            if op == "add_artifact":
                with self._db() as db:
                    db.execute("INSERT OR REPLACE INTO artifacts VALUES (?,?,?,?,?,?)",
                               (run_id, args["name"], args["kind"], args["sha256"], int(args["size"]), self._now()))
                return None
            if op == "commit_checkpoint":
                a = args.get("artifact")
                art = None if a is None else Artifact(run_id, a["name"], a["kind"], a["sha256"], int(a["size"]),
                                                      self.run_dir(run_id) / a["name"])
                return base.commit_checkpoint(self, run_id, int(args["step"]), _rows(args["rows"]), art)
            if op == "log_rows":
                return base.log_rows(self, run_id, _rows(args["rows"]))
            method = _SIMPLE.get(op)
            if method is None:
                raise ValueError(f"unknown event '{op}'")
            return getattr(base, method)(self, run_id, **args)
        except RunNotFound:
            return None  # a change to a run deleted before it (concurrent writers): nothing to apply
        finally:
            self._clock, self._replaying = None, False

    def _insert_run(self, run_id: str, a: Mapping[str, Any]) -> None:
        with self._db() as db:
            db.execute(
                "INSERT OR IGNORE INTO runs (id, experiment, group_id, arm, target, run_name, seed, backend, status, created,"
                " steps, manifest_path, manifest_sha256, config) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, a["experiment"], a.get("group_id", ""), a.get("arm", ""), a.get("target", ""), a.get("run_name", ""),
                 int(a.get("seed", 0)), a.get("backend", ""), "created", self._now(), int(a.get("steps", 0)),
                 a.get("manifest_path", ""), a.get("manifest_sha256", ""), json.dumps(a.get("config") or {}, default=str)),
            )

    def _write(self, op: str, run_id: str, **args: Any) -> Any:
        """One change: applied to the replica (which checks it), then written to the bucket as a
        new event object. A failed write undoes the replica change (the run is rebuilt)."""
        with self._exclusive():
            t = time.time()
            ev = {"v": EVENT_FORMAT, "op": op, "run": run_id, "t": t, "args": args}
            body = json.dumps(ev, sort_keys=True, default=str)
            key = f"{self._runs_prefix}{run_id}/events/{time.time_ns():020d}-{_host()}-{os.getpid()}-{secrets.token_hex(4)}.json"
            pending = self._pending_file()
            pending.write_text(key)
            try:
                out = self._apply(ev)
                try:
                    self._s3.put_object(Bucket=self.loc.bucket, Key=key, Body=body.encode(), IfNoneMatch="*",
                                        ContentType="application/json")
                except Exception as exc:
                    self._rebuild(run_id)
                    raise unavailable(self.loc, exc, f"writing {key}") from None
                with self._db() as db:
                    db.execute("INSERT OR IGNORE INTO s3_events (key, run_id, body) VALUES (?,?,?)", (key, run_id, body))
            finally:
                pending.unlink(missing_ok=True)
            return out

    def _upload(self, path: Path, sha256: str, size: int) -> None:
        """The bytes at their content address (multipart above 8 MiB), before anything lists them."""
        key = self._blob_key(sha256)
        try:
            head = self._s3.head_object(Bucket=self.loc.bucket, Key=key)
            if int(head.get("ContentLength", -1)) == size:
                return
        except Exception as exc:
            if not is_missing(exc):
                raise unavailable(self.loc, exc, f"checking {key}") from None
        try:
            self._s3.upload_file(str(path), self.loc.bucket, key)
        except Exception as exc:
            raise unavailable(self.loc, exc, f"uploading {key}") from None

    def _blob_key(self, sha256: str) -> str:
        return f"{self.loc.prefix}artifacts/{sha256[:2]}/{sha256}"

    # ---- reads: sync first ---------------------------------------------------------------------------
    def get(self, ref: str) -> RunRecord:
        self.sync()
        return super().get(ref)

    def list(self, limit: int = 50, experiment: str | None = None, group_id: str | None = None) -> "list[RunRecord]":
        self.sync()
        return super().list(limit, experiment, group_id)

    def deleted(self, run_id: str) -> "dict[str, Any] | None":
        self.sync()
        return super().deleted(run_id)

    def metrics(self, run_id: str, name: str | None = None, split: str | None = None) -> list[tuple[int, str, str, float]]:
        self.sync()
        return super().metrics(run_id, name, split)

    def timed_series(self, run_id: str, name: str, split: str) -> list[tuple[int, float, float]]:
        self.sync()
        return super().timed_series(run_id, name, split)

    def artifacts(self, run_id: str, kind: str | None = None) -> list[Artifact]:
        """The run's artifacts; bytes not yet in the replica folder are downloaded (and checked)."""
        self.sync()
        found = super().artifacts(run_id, kind)
        for a in found:
            self._materialize(a)
        return found

    def _materialize(self, a: Artifact) -> None:
        path = a.path
        if not _safe_name(a.name) or not path.resolve().is_relative_to(self.root.resolve()):
            return  # never written outside the replica (event names are checked when read, too)
        if path.is_file() and path.stat().st_size == a.size:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.dl{os.getpid()}")
        key = self._blob_key(a.sha256)
        try:
            self._s3.download_file(self.loc.bucket, key, str(tmp))
        except Exception as exc:
            tmp.unlink(missing_ok=True)
            if is_missing(exc):
                return  # listed but its bytes were removed from the bucket: the file stays absent
            raise unavailable(self.loc, exc, f"downloading {key}") from None
        digest, _size = _sha256(tmp)
        if digest != a.sha256:
            tmp.unlink(missing_ok=True)
            raise StoreUnavailable(f"artifact {a.name} of run {a.run_id} in {self.loc.shown}: object {key} holds bytes "
                                   f"with SHA-256 {digest[:16]}…, not {a.sha256[:16]}…; it was changed in the bucket",
                                   hint="restore the object from a copy; its listed hash is the truth")
        tmp.replace(path)

    # ---- writes: one event each ------------------------------------------------------------------------
    def create_run(self, experiment: str, *, group_id: str = "", arm: str = "", target: str = "",
                   run_name: str = "", seed: int = 0, backend: str = "", steps: int = 0,
                   manifest_path: str = "", manifest_sha256: str = "", config: Mapping[str, Any] | None = None) -> RunRecord:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime())
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in experiment)[:40] or "run"
        run_id = f"{safe}-{stamp}-{secrets.token_hex(2)}"
        self.run_dir(run_id).mkdir(parents=True, exist_ok=True)
        self._write("create_run", run_id, experiment=experiment, group_id=group_id, arm=arm, target=target,
                    run_name=run_name, seed=int(seed), backend=backend, steps=int(steps), manifest_path=manifest_path,
                    manifest_sha256=manifest_sha256, config=json.loads(json.dumps(dict(config or {}), default=str)))
        return super().get(run_id)

    def start(self, run_id: str, owner: str | None = None) -> None:
        from caramba.store.runs import this_process

        self._write("start", run_id, owner=owner or this_process())

    def heartbeat(self, run_id: str) -> None:
        self._write("heartbeat", run_id)

    def interrupt(self, run_id: str, reason: str) -> None:
        self._write("interrupt", run_id, reason=reason)

    def update_config(self, run_id: str, values: Mapping[str, Any]) -> None:
        self._write("update_config", self.get(run_id).id, values=json.loads(json.dumps(dict(values), default=str)))

    def commit_checkpoint(self, run_id: str, step: int, rows: "list[tuple[int, str, Mapping[str, float]]]",
                          artifact: "Artifact | None" = None) -> None:
        art = None
        if artifact is not None:
            self._upload(artifact.path, artifact.sha256, artifact.size)
            art = {"name": artifact.name, "kind": artifact.kind, "sha256": artifact.sha256, "size": artifact.size}
        self._write("commit_checkpoint", run_id, step=int(step), rows=_plain_rows(rows), artifact=art)

    def tag(self, run_id: str, add: "list[str] | tuple[str, ...]" = (), remove: "list[str] | tuple[str, ...]" = ()) -> RunRecord:
        rid = self.get(run_id).id
        return self._write("tag", rid, add=list(add), remove=list(remove))

    def annotate(self, run_id: str, note: str) -> RunRecord:
        rid = self.get(run_id).id
        return self._write("annotate", rid, note=note)

    def delete(self, run_id: str, *, ledger_entry: str = "", reason: str = "") -> None:
        self._write("delete", self.get(run_id).id, ledger_entry=ledger_entry, reason=reason)

    def rewind(self, run_id: str, step: int) -> None:
        self._write("rewind", run_id, step=int(step))

    def progress(self, run_id: str, step: int) -> None:
        self._write("progress", run_id, step=int(step))

    def finish(self, run_id: str, status: str = "finished", summary: Mapping[str, Any] | None = None,
               error: str = "") -> None:
        self._write("finish", run_id, status=status, summary=json.loads(json.dumps(dict(summary or {}), default=str)),
                    error=error)

    def update_summary(self, run_id: str, values: Mapping[str, Any]) -> None:
        self._write("update_summary", self.get(run_id).id, values=json.loads(json.dumps(dict(values), default=str)))

    def log_metrics(self, run_id: str, step: int, values: Mapping[str, float], split: str = "train") -> None:
        self._write("log_metrics", run_id, step=int(step), values={k: float(v) for k, v in values.items()}, split=split)

    def log_rows(self, run_id: str, rows: "list[tuple[int, str, Mapping[str, float]]]") -> None:
        if any(vals for _i, _s, vals in rows):
            self._write("log_rows", run_id, rows=_plain_rows(rows))

    def add_artifact(self, run_id: str, name: str, data: bytes | str | Path, kind: str = "file") -> Artifact:
        """The bytes go to the run folder and to their content address in the bucket first; the
        event that lists the artifact is written last."""
        path, digest, size = self._place_artifact(run_id, name, data)
        self._upload(path, digest, size)
        self._write("add_artifact", run_id, name=name, kind=kind, sha256=digest, size=size)
        return Artifact(run_id, name, kind, digest, size, path)

    def remove_artifact(self, run_id: str, name: str) -> None:
        """Unlist an artifact (its content-addressed bytes stay: another run may share them)."""
        self._write("remove_artifact", run_id, name=name)


_SIMPLE = {op: op for op in ("start", "heartbeat", "interrupt", "update_config", "tag", "annotate", "delete", "rewind",
                             "progress", "finish", "update_summary", "log_metrics", "remove_artifact")}


def _plain_rows(rows: "list[tuple[int, str, Mapping[str, float]]]") -> list[list[Any]]:
    return [[int(i), str(split), {k: float(v) for k, v in vals.items()}] for i, split, vals in rows]


def _rows(raw: Any) -> "list[tuple[int, str, Mapping[str, float]]]":
    return [(int(i), str(split), {str(k): float(v) for k, v in vals.items()}) for i, split, vals in raw]


def _event(body: str, run_id: str) -> dict[str, Any]:
    """A parsed event, checked enough to apply: ValueError saying what is wrong otherwise."""
    try:
        ev = json.loads(body)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(ev, dict) or ev.get("v") != EVENT_FORMAT:
        raise ValueError(f"not a format-{EVENT_FORMAT} event object")
    if ev.get("run") != run_id:
        raise ValueError(f"it names run {ev.get('run')!r} but lies under run {run_id!r}")
    if not _RUN_ID.match(run_id) or run_id in (".", ".."):
        raise ValueError(f"{run_id[:80]!r} is not a run ID")
    args = ev.get("args") or {}
    art = args.get("artifact") if ev.get("op") == "commit_checkpoint" else args
    if isinstance(art, dict) and "name" in art and not _safe_name(art["name"]):
        raise ValueError(f"artifact name {str(art['name'])[:80]!r} is not a relative path inside the run folder")
    if ev.get("op") not in {"create_run", "add_artifact", "commit_checkpoint", "log_rows", *_SIMPLE}:
        raise ValueError(f"unknown event {ev.get('op')!r}")
    if not isinstance(ev.get("t"), (int, float)) or not isinstance(ev.get("args", {}), dict):
        raise ValueError("its time or arguments are malformed")
    return ev


_RUN_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def _safe_name(name: Any) -> bool:
    """An artifact name that stays inside its run folder (names come from the bucket: untrusted)."""
    if not isinstance(name, str) or not name or "\x00" in name or "\\" in name or len(name) > 512:
        return False
    parts = Path(name).parts
    return not Path(name).is_absolute() and ".." not in parts and bool(parts)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


register_scheme("s3", lambda url: S3RunStore(url))

__all__ = ["S3RunStore", "probe", "s3_client", "unavailable"]
