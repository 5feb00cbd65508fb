"""The Notary's ledger in S3: one immutable object per entry, a local replica for queries.

Layout under the store's prefix::

    ledger/entries/<seq, 12 digits>.json    one row of the ledger (the columns of ``ledger._COLS``)

An entry is appended with a conditional put (``IfNoneMatch='*'``): of two writers that chained
an entry to the same head, exactly one gets the sequence number; the other (HTTP 412) reads
the new head and chains its entry again (new position, new receipt), so the chain never forks.
The hashing, chaining, signing and every check are the ``Ledger``'s own (this class only moves
rows between the bucket and a local SQLite replica, ``<replica>/cluster/notary/ledger.sqlite``).

``verify`` re-reads the whole bucket into a fresh database and checks it as the disk ledger is
checked; it also names objects whose key does not match the row inside (reordered), missing
sequence numbers (removed), objects that are not rows (edited), and rows this host replicated
earlier that the bucket no longer holds or holds differently (truncated or rewritten).

The Notary's private key is *not* in the bucket: it stays next to the replica
(``notary.key``), so whoever can write the bucket still cannot re-sign a rewritten history.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from caramba.actors.identity import Identity
from caramba.actors.ledger import (
    _COLS,
    _SCHEMA,
    ArtifactChecker,
    Entry,
    EntryBody,
    Ledger,
    LedgerError,
    LedgerReport,
    TreeHead,
    UnknownEntry,
)
from caramba.store.registry import S3Location, parse_s3_url

COLUMNS = tuple(c.strip() for c in _COLS.split(","))
SEQ_DIGITS = 12
MAX_TRIES = 64
READ_FRESH_S = 0.25  # a query re-lists the bucket when its last look is older than this


def entry_key(loc: S3Location, seq: int) -> str:
    return f"{loc.prefix}ledger/entries/{seq:0{SEQ_DIGITS}d}.json"


def _entries_prefix(loc: S3Location) -> str:
    return f"{loc.prefix}ledger/entries/"


def _row_object(row: tuple) -> bytes:
    return json.dumps(dict(zip(COLUMNS, row)), sort_keys=True, separators=(",", ":")).encode()


def _cell(v: Any) -> Any:
    """A JSON value as an SQLite cell the Ledger's row parser can judge (never a crash)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    if isinstance(v, int) and abs(v) > 2**62:
        return str(v)
    return v


def _placeholder(key: str, seq: int, problem: str) -> tuple:
    """The replica row of an object that is not a ledger row: malformed on purpose."""
    return (seq, f"object {key} {problem}"[:300], "", 0.0, "", "", "", "", "{}", "[]", "{}", "", "", "")


def _parse_object(raw: bytes) -> tuple[tuple | None, str]:
    """The row an entry object holds, or (None, what is wrong with it)."""
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"is not JSON ({exc})"
    if not isinstance(obj, dict):
        return None, "is not a JSON object"
    missing = [c for c in COLUMNS if c not in obj]
    if missing:
        return None, f"lacks the column(s) {', '.join(missing)}"
    extra = sorted(set(obj) - set(COLUMNS))
    if extra:
        return None, f"holds unknown column(s) {', '.join(extra[:5])}"
    return tuple(_cell(obj[c]) for c in COLUMNS), ""


class S3Ledger(Ledger):
    """A ``Ledger`` whose rows live in ``s3://bucket/prefix/ledger/``; ``replica`` is the local
    SQLite file that answers queries (rebuilt from the bucket when missing)."""

    def __init__(self, url: str, identity: Identity, replica: str | os.PathLike, *, client: Any = None) -> None:
        from caramba.store.s3run import probe, s3_client

        self.loc = parse_s3_url(url)
        self.url = self.loc.url
        self._s3 = client if client is not None else s3_client(self.loc)
        if client is None:
            probe(self.loc, self._s3)
        self._pulled_at = 0.0
        self._pulling = False
        super().__init__(replica, identity)

    def __repr__(self) -> str:
        return f"<S3Ledger {self.loc.shown}ledger/ (replica {self.path})>"

    # ---- the replica -------------------------------------------------------------------------------
    def _open(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'entries'").fetchone() \
                    and not db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]:
                for stmt in _SCHEMA:
                    db.execute(stmt)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.pull()
        try:
            super()._open()  # checks the genesis key (or appends the genesis entry, conditionally)
        except LedgerError as exc:
            if "not this Notary's key" not in exc.message:
                raise
            raise LedgerError(
                f"the ledger in {self.loc.shown}ledger/ belongs to another Notary key than this host's "
                f"({Path(self.path).parent / 'notary.key'}): " + exc.message.split(" was created by ", 1)[-1],
                hint="copy notary.key from the host that started this ledger into that folder "
                "(the key is never stored in the bucket: whoever can write the bucket cannot re-sign it)",
            ) from None

    def _rows(self, sql: str, args: Any = ()) -> list[tuple]:
        if not self._pulling and time.monotonic() - self._pulled_at > READ_FRESH_S and not sql.lstrip().upper().startswith(("PRAGMA", "SELECT TYPE")):
            self.pull()
        return super()._rows(sql, args)

    def get(self, ref: str) -> Entry:
        """As the disk ledger's; a miss reads the bucket first (another writer may have added it
        since the last pull, however recent): "no such entry" is never an answer from a stale replica."""
        try:
            return super().get(ref)
        except UnknownEntry:
            if not self.pull():
                raise
            return super().get(ref)

    def _unavailable(self, exc: BaseException, doing: str) -> Exception:
        from caramba.store.s3run import unavailable

        return unavailable(self.loc, exc, doing)

    def pull(self) -> int:
        """Copy the entries the bucket has beyond the replica's head into the replica."""
        with self._lock:
            self._pulling = True
            try:
                head = self._db.execute("SELECT MAX(seq) FROM entries").fetchone()[0]
                start = entry_key(self.loc, head) if head is not None else ""
                from caramba.store.s3run import list_keys

                try:
                    keys = list(list_keys(self._s3, self.loc.bucket, _entries_prefix(self.loc), start))
                except Exception as exc:
                    raise self._unavailable(exc, "listing the ledger") from None
                added = 0
                for key in keys:
                    seq = _seq_of(self.loc, key)
                    if seq is None:
                        continue
                    row, bad = _parse_object(self._get(key))
                    # an object the Notary did not write keeps its place as a row the Ledger's checks
                    # name (MalformedEntry on a query, a problem in verify), as a damaged row on disk does
                    row = _placeholder(key, seq, bad) if row is None else (seq, *row[1:])
                    try:
                        self._db.execute(f"INSERT INTO entries ({_COLS}) VALUES ({', '.join('?' * len(COLUMNS))})", row)
                    except sqlite3.IntegrityError:
                        self._db.execute(f"INSERT INTO entries ({_COLS}) VALUES ({', '.join('?' * len(COLUMNS))})",
                                         _placeholder(key, seq, "duplicates another entry"))
                    added += 1
                self._pulled_at = time.monotonic()
                return added
            finally:
                self._pulling = False

    def _get(self, key: str) -> bytes:
        try:
            return self._s3.get_object(Bucket=self.loc.bucket, Key=key)["Body"].read()
        except Exception as exc:
            raise self._unavailable(exc, f"reading {key}") from None

    # ---- appending: one conditional put per entry ---------------------------------------------------------
    def _insert(self, body: EntryBody, public_key: str, signature: str) -> Entry:
        from caramba.store.s3run import is_precondition

        with self._lock:
            for attempt in range(MAX_TRIES):
                self.pull()
                head = self._db.execute("SELECT seq, hash, time FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
                if head is not None and body.name == "genesis" and body.actor == self.identity.name:
                    genesis = self.get("#0")  # another process started the ledger meanwhile
                    if genesis.public_key == self.identity.public_key:
                        return genesis
                    raise LedgerError(f"the ledger in {self.loc.shown} was started by another Notary meanwhile",
                                      hint="open it again: its genesis names the Notary key it belongs to")
                row = self._next_row(head, body, public_key, signature)
                key = entry_key(self.loc, row[0])
                try:
                    self._s3.put_object(Bucket=self.loc.bucket, Key=key, Body=_row_object(row), IfNoneMatch="*",
                                        ContentType="application/json")
                except Exception as exc:
                    if is_precondition(exc):  # another writer took this position: chain to the new head
                        time.sleep(random.uniform(0, 0.01 * (attempt + 1)))
                        continue
                    raise self._unavailable(exc, f"writing {key}") from None
                self._db.execute(f"INSERT INTO entries ({_COLS}) VALUES ({', '.join('?' * len(COLUMNS))})", row)
                break
            else:
                raise LedgerError(f"the ledger in {self.loc.shown}: no free position after {MAX_TRIES} tries "
                                  "(too many writers at once)", hint="retry")
        return self.get(row[1])

    # ---- verifying the bucket itself --------------------------------------------------------------------
    def verify(self, artifacts: ArtifactChecker | None = None, against: TreeHead | None = None) -> LedgerReport:
        """The bucket re-read end to end (not the replica): the Ledger's own checks on a fresh
        copy, plus what only the objects show (missing, reordered, unreadable, changed since
        this host replicated them)."""
        where = f"{self.loc.shown}ledger/entries/"
        problems: list[str] = []
        from caramba.store.s3run import list_keys

        try:
            keys = list(list_keys(self._s3, self.loc.bucket, _entries_prefix(self.loc)))
        except Exception as exc:
            return LedgerReport(ok=False, entries=0, head="", file=where, against=against,
                                database=[str(self._unavailable(exc, "listing the ledger"))])
        rows: dict[int, tuple] = {}
        for key in keys:
            seq = _seq_of(self.loc, key)
            if seq is None:
                problems.append(f"object {key} is not a ledger entry name (<12 digits>.json)")
                continue
            try:
                raw = self._get(key)
            except Exception as exc:
                problems.append(f"object {key} cannot be read: {exc}")
                continue
            row, bad = _parse_object(raw)
            if row is None:
                problems.append(f"object {key} (entry #{seq}) {bad}: it was edited")
                continue
            if row[0] != seq:
                problems.append(f"object {key} holds entry #{row[0]!r}, not #{seq}: objects were reordered or copied")
            rows[seq] = (seq, *row[1:])
        top = max(rows, default=-1)
        for seq in range(top + 1):
            if seq not in rows and not any(f"(entry #{seq})" in p for p in problems):
                problems.append(f"object {entry_key(self.loc, seq)} is missing: entry #{seq} was removed")
        with self._lock:
            mine = self._db.execute(f"SELECT {_COLS} FROM entries ORDER BY seq").fetchall()
        for r in mine:
            seq = r[0]
            if seq > top:
                problems.append(f"object {entry_key(self.loc, seq)} is gone: this host replicated entry #{seq} "
                                f"earlier; the ledger was truncated")
            elif seq in rows and tuple(rows[seq]) != tuple(r):
                problems.append(f"object {entry_key(self.loc, seq)} changed after this host replicated entry #{seq}")
        if 0 not in rows:
            return LedgerReport(ok=False, entries=len(rows), head="", file=where, against=against,
                                database=[*problems, "without its genesis entry #0 the ledger's key is unknown: "
                                          "nothing else was checked"])
        report = self._verify_rows(rows, artifacts, against)
        database = [*problems, *report.database]
        ok = report.ok and not problems
        return report.model_copy(update={"ok": ok, "database": database, "file": where,
                                         "tree": report.tree if ok else None})

    def _verify_rows(self, rows: dict[int, tuple], artifacts: ArtifactChecker | None,
                     against: TreeHead | None) -> LedgerReport:
        with tempfile.TemporaryDirectory(prefix="caramba-ledger-") as tmp:
            path = Path(tmp) / "ledger.sqlite"
            db = sqlite3.connect(path, isolation_level=None)
            extra: list[str] = []
            try:
                for stmt in _SCHEMA:
                    db.execute(stmt)
                for seq in sorted(rows):
                    try:
                        db.execute(f"INSERT INTO entries ({_COLS}) VALUES ({', '.join('?' * len(COLUMNS))})", rows[seq])
                    except sqlite3.IntegrityError as exc:
                        extra.append(f"object {entry_key(self.loc, seq)} (entry #{seq}) cannot be stored: {exc} "
                                     "(it duplicates another entry)")
            finally:
                db.close()
            try:
                fresh = Ledger(path, self.identity)
            except LedgerError as exc:
                return LedgerReport(ok=False, entries=len(rows), head="", against=against, database=[*extra, exc.message])
            try:
                report = fresh.verify(artifacts=artifacts, against=against)
            finally:
                fresh.close()
        if extra:
            report = report.model_copy(update={"ok": False, "database": [*extra, *report.database], "tree": None})
        return report


def _seq_of(loc: S3Location, key: str) -> int | None:
    name = key[len(_entries_prefix(loc)):]
    stem, _dot, ext = name.partition(".")
    if ext != "json" or len(stem) != SEQ_DIGITS or not stem.isdigit():
        return None
    return int(stem)


def ledger_exists(url: str) -> bool:
    """Whether the store at ``url`` has a ledger (its genesis object)."""
    from caramba.store.s3run import is_missing, probe, s3_client, unavailable

    loc = parse_s3_url(url)
    client = s3_client(loc)
    probe(loc, client)
    try:
        client.head_object(Bucket=loc.bucket, Key=entry_key(loc, 0))
    except Exception as exc:
        if is_missing(exc):
            return any(True for _ in _first(client, loc))
        raise unavailable(loc, exc, "looking for the ledger") from None
    return True


def _first(client: Any, loc: S3Location) -> list[str]:
    page = client.list_objects_v2(Bucket=loc.bucket, Prefix=_entries_prefix(loc), MaxKeys=1)
    return [c["Key"] for c in page.get("Contents", [])]


__all__ = ["S3Ledger", "entry_key", "ledger_exists"]
