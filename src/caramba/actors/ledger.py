"""The Notary's ledger: append-only, hash-chained, signed evidence, judged at query time.

Entries are Intent / Event / Claim / ArtifactRef records with dependency edges. Each is signed
by the Ed25519 key of the actor that emitted it, and chained: ``hash = sha256(seq, prev hash,
time, signed body, key, signature)``. Nothing is ever "marked valid"; ``validity`` recomputes
the truth of an entry by walking its dependency DAG, re-hashing every row on the way,
re-checking signatures and key registrations, re-hashing artifact bytes in storage, applying
invariants (metrics are finite) and looking for voids. An invalid entry comes with its reason
chain: the path from it to the evidence that failed, and why.

Layers of protection: SQLite triggers refuse UPDATE/DELETE; a row edited anyway no longer
hashes to its stored hash, and its signature no longer verifies; a row re-hashed by hand
breaks the next row's ``prev`` link; a rewritten chain fails the genesis key, which must be
this Notary's pinned key.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from caramba.actors.identity import Identity, canonical, verify_signature
from caramba.actors.messages import Message
from caramba.errors import CarambaError

KINDS = ("intent", "event", "claim", "artifact")
Kind = Literal["intent", "event", "claim", "artifact"]
Verdict = Literal["VERIFIED", "VOIDED", "UNKNOWN"]
GENESIS_PREV = "0" * 64

# ArtifactChecker: key -> (sha256, size) of the bytes stored now; raises CarambaError if missing.
ArtifactChecker = Callable[[str], tuple[str, int]]


class LedgerError(CarambaError):
    """The ledger refused an entry (bad signature, unregistered key, unknown dependency, bad
    kind or payload) or cannot be opened with this Notary's key. The message says which."""


class UnknownEntry(LedgerError):
    """No entry with that hash (or ``#seq``) exists in the ledger."""


# ---- records ---------------------------------------------------------------------------------
class EntryBody(Message):
    """What an actor signs: the evidence itself. ``procedure`` says how it was produced (hash
    algorithm, manifest hash, code revision)."""

    kind: Kind
    actor: str
    subject: str = ""
    name: str
    payload: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    procedure: dict[str, Any] = Field(default_factory=dict)

    def signed_bytes(self) -> bytes:
        return canonical(
            {
                "kind": self.kind,
                "actor": self.actor,
                "subject": self.subject,
                "name": self.name,
                "payload": self.payload,
                "depends_on": list(self.depends_on),
                "procedure": self.procedure,
            }
        )


class Entry(Message):
    """A recorded entry (a row of the ledger)."""

    seq: int
    hash: str
    prev: str
    time: float
    kind: str
    actor: str
    subject: str
    name: str
    payload: dict[str, Any]
    depends_on: list[str]
    procedure: dict[str, Any]
    public_key: str
    signature: str

    def body(self) -> EntryBody:
        return EntryBody(
            kind=self.kind,  # type: ignore[arg-type]
            actor=self.actor,
            subject=self.subject,
            name=self.name,
            payload=self.payload,
            depends_on=self.depends_on,
            procedure=self.procedure,
        )

    def label(self) -> str:
        return f"#{self.seq} {self.kind} '{self.name}'" + (f" of {self.subject}" if self.subject else "")


def row_hash(seq: int, prev: str, t: float, body: bytes, public_key: str, signature: str) -> str:
    h = hashlib.sha256()
    h.update(canonical({"seq": seq, "prev": prev, "time": repr(float(t)), "key": public_key, "sig": signature}))
    h.update(b"\n")
    h.update(body)
    return h.hexdigest()


class Reason(Message):
    """One link of a reason chain: which entry, and what is wrong with it (or which dependency)."""

    seq: int
    entry: str
    kind: str
    name: str
    problem: str

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} '{self.name}': {self.problem}"


class Validity(Message):
    """The Notary's answer about one entry: VERIFIED, VOIDED (with the reason chain) or UNKNOWN."""

    entry: str
    verdict: Verdict
    reasons: list[Reason] = Field(default_factory=list)
    as_of: float | None = None

    @property
    def valid(self) -> bool:
        return self.verdict == "VERIFIED"

    def explain(self) -> str:
        if self.valid:
            return f"{self.entry[:12]}: VERIFIED"
        lines = [f"{self.entry[:12]}: {self.verdict}"]
        lines += [f"  {'  ' * i}<- {r}" if i else f"  {r}" for i, r in enumerate(self.reasons)]
        return "\n".join(lines)


class Check(Message):
    name: str
    ok: bool
    detail: str = ""


class AuditEntry(Message):
    seq: int
    hash: str
    kind: str
    actor: str
    subject: str
    name: str
    time: float
    payload: dict[str, Any]
    depends_on: list[str]
    checks: list[Check]


class Audit(Message):
    """Everything behind a verdict: the entries of the dependency DAG (oldest first), the checks
    made on each, and the reason chain when the verdict is not VERIFIED."""

    validity: Validity
    entries: list[AuditEntry]

    def as_text(self) -> str:
        lines = [self.validity.explain(), "evidence:"]
        for e in self.entries:
            bad = [c for c in e.checks if not c.ok]
            mark = "ok " if not bad else "BAD"
            lines.append(f"  [{mark}] #{e.seq} {e.kind:<8} {e.name:<16} by {e.actor}")
            lines += [f"          {c.name}: {c.detail}" for c in bad]
        return "\n".join(lines)


class LedgerReport(Message):
    """End-to-end integrity of the whole ledger (chain, signatures, keys, dependencies, artifacts)."""

    ok: bool
    entries: int
    head: str
    problems: list[Reason] = Field(default_factory=list)


# ---- invariants: facts every entry must satisfy, checked at query time ---------------------------
def _finite_metrics(e: Entry) -> str | None:
    """Metrics must be finite: a NaN or infinite loss makes the evidence (and what depends on it) void."""
    metrics = e.payload.get("metrics")
    if not isinstance(metrics, dict):
        return None
    first = e.payload.get("first_step")
    for key in sorted(metrics):
        values = metrics[key]
        seq = values if isinstance(values, list) else [values]
        for i, v in enumerate(seq):
            if isinstance(v, (int, float)) and not math.isfinite(v):
                at = f" at step {first + i}" if isinstance(first, int) and isinstance(values, list) else ""
                return f"invariant finite_metrics: metric '{key}' is {v}{at}"
    return None


def _artifact_payload(e: Entry) -> str | None:
    return artifact_payload_problem(e.kind, e.payload)


def artifact_payload_problem(kind: str, p: dict[str, Any]) -> str | None:
    if kind != "artifact":
        return None
    if not (isinstance(p.get("key"), str) and isinstance(p.get("sha256"), str) and isinstance(p.get("size"), int)):
        return "artifact entries need payload {key, sha256, size}"
    return None


INVARIANTS: dict[str, Callable[[Entry], str | None]] = {
    "finite_metrics": _finite_metrics,
    "artifact_payload": _artifact_payload,
}


# ---- the ledger ----------------------------------------------------------------------------------
_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    seq INTEGER PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    prev TEXT NOT NULL,
    time REAL NOT NULL,
    kind TEXT NOT NULL,
    actor TEXT NOT NULL,
    subject TEXT NOT NULL,
    name TEXT NOT NULL,
    payload TEXT NOT NULL,
    depends_on TEXT NOT NULL,
    procedure TEXT NOT NULL,
    public_key TEXT NOT NULL,
    signature TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_subject ON entries (subject, name);
CREATE TRIGGER IF NOT EXISTS entries_append_only_update BEFORE UPDATE ON entries
BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS entries_append_only_delete BEFORE DELETE ON entries
BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
"""
_COLS = "seq, hash, prev, time, kind, actor, subject, name, payload, depends_on, procedure, public_key, signature"


def _row_to_entry(row: tuple) -> Entry:
    seq, h, prev, t, kind, actor, subject, name, payload, deps, proc, pk, sig = row
    return Entry(
        seq=seq, hash=h, prev=prev, time=t, kind=kind, actor=actor, subject=subject, name=name,
        payload=json.loads(payload), depends_on=json.loads(deps), procedure=json.loads(proc),
        public_key=pk, signature=sig,
    )


@dataclass
class _Snapshot:
    """The whole ledger as read for one query, with row-level integrity already checked."""

    entries: list[Entry]
    by_hash: dict[str, Entry]
    row_problems: dict[int, list[str]]  # index in entries -> problems with the row itself
    keys: dict[tuple[str, str], Entry]  # (actor, public key) -> registering entry
    voids: dict[str, list[Entry]] = field(default_factory=dict)
    first_bad: int | None = None  # index of the first row with integrity problems


class Ledger:
    """The ledger in an SQLite file, owned by one Notary ``identity`` (its key is pinned in the
    genesis entry). ``clock`` gives entry times (default ``time.time``)."""

    def __init__(self, path: str | os.PathLike, identity: Identity, clock: Callable[[], float] = time.time) -> None:
        self.path = os.fspath(path)
        self.identity = identity
        self.clock = clock
        self._lock = threading.RLock()
        self._sig_cache: dict[tuple[str, str, str], bool] = {}
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        genesis = self._db.execute(f"SELECT {_COLS} FROM entries WHERE seq = 0").fetchone()
        if genesis is None:
            body = EntryBody(
                kind="event", actor=identity.name, name="genesis",
                payload={"public_key": identity.public_key}, procedure=_procedure(),
            )
            self._insert(body, identity.public_key, identity.sign(body.signed_bytes()))
        else:
            g = _row_to_entry(genesis)
            if g.public_key != identity.public_key or g.payload.get("public_key") != identity.public_key:
                raise LedgerError(
                    f"ledger {self.path} was created by Notary key {g.public_key[:16]}…, "
                    f"not this Notary's key {identity.public_key[:16]}…",
                    hint="open it with the Notary's own key file (notary.key next to the ledger)",
                )

    # ---- writing ---------------------------------------------------------------------------------
    def _insert(self, body: EntryBody, public_key: str, signature: str) -> Entry:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                head = self._db.execute("SELECT seq, hash, time FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
                seq, prev, last = (head[0] + 1, head[1], head[2]) if head else (0, GENESIS_PREV, 0.0)
                t = max(float(self.clock()), last)
                signed = body.signed_bytes()
                h = row_hash(seq, prev, t, signed, public_key, signature)
                self._db.execute(
                    f"INSERT INTO entries ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        seq, h, prev, t, body.kind, body.actor, body.subject, body.name,
                        canonical(body.payload).decode(), canonical(list(body.depends_on)).decode(),
                        canonical(body.procedure).decode(), public_key, signature,
                    ),
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return self.get(h)

    def register(self, actor: str, public_key: str, proof: str) -> Entry:
        """Record that ``public_key`` speaks for ``actor``. ``proof`` is the key's signature over
        ``registration_bytes(actor, public_key)`` (possession of the private key)."""
        if not verify_signature(public_key, proof, registration_bytes(actor, public_key)):
            raise LedgerError(f"identity registration of '{actor}': proof does not verify against its key")
        with self._lock:
            known = self._key_entry(actor, public_key)
            if known is not None:
                return known
            return self.append_own("event", "identity", {"actor": actor, "public_key": public_key}, subject=actor)

    def append(self, body: EntryBody, public_key: str, signature: str) -> Entry:
        """Record ``body`` signed by ``public_key``. Refuses bad signatures, unregistered keys and
        unknown dependencies (the entry would be invalid from birth)."""
        if body.kind not in KINDS:
            raise LedgerError(f"unknown entry kind '{body.kind}'; valid: {', '.join(KINDS)}")
        if not verify_signature(public_key, signature, body.signed_bytes()):
            raise LedgerError(f"{body.kind} '{body.name}' from '{body.actor}': signature does not verify")
        with self._lock:
            if self._key_entry(body.actor, public_key) is None:
                raise LedgerError(
                    f"{body.kind} '{body.name}': key {public_key[:16]}… is not registered for actor '{body.actor}'",
                    hint="register the actor's identity with the Notary first",
                )
            for dep in body.depends_on:
                if self._db.execute("SELECT 1 FROM entries WHERE hash = ?", (dep,)).fetchone() is None:
                    raise UnknownEntry(f"{body.kind} '{body.name}' depends on unknown entry {dep[:16]}…")
            problem = artifact_payload_problem(body.kind, body.payload)
            if problem:
                raise LedgerError(f"{body.kind} '{body.name}': {problem}")
            return self._insert(body, public_key, signature)

    def append_own(
        self, kind: Kind, name: str, payload: dict[str, Any], *, subject: str = "", depends_on: Iterable[str] = ()
    ) -> Entry:
        """An entry the Notary itself signs (genesis, identity registrations, its own voids)."""
        body = EntryBody(
            kind=kind, actor=self.identity.name, subject=subject, name=name, payload=payload,
            depends_on=list(depends_on), procedure=_procedure(),
        )
        return self._insert(body, self.identity.public_key, self.identity.sign(body.signed_bytes()))

    def _key_entry(self, actor: str, public_key: str) -> Entry | None:
        if actor == self.identity.name and public_key == self.identity.public_key:
            return self.get("#0")
        row = self._db.execute(
            f"SELECT {_COLS} FROM entries WHERE subject = ? AND name = 'identity' AND kind = 'event' "
            "AND actor = ? AND public_key = ? AND json_extract(payload, '$.public_key') = ? ORDER BY seq LIMIT 1",
            (actor, self.identity.name, self.identity.public_key, public_key),
        ).fetchone()
        return _row_to_entry(row) if row else None

    # ---- reading ---------------------------------------------------------------------------------
    def get(self, ref: str) -> Entry:
        """An entry by hash, unique hash prefix (>= 8 hex digits) or ``#seq``."""
        with self._lock:
            if ref.startswith("#"):
                row = self._db.execute(f"SELECT {_COLS} FROM entries WHERE seq = ?", (int(ref[1:]),)).fetchone()
                rows = [row] if row else []
            elif len(ref) == 64:
                rows = self._db.execute(f"SELECT {_COLS} FROM entries WHERE hash = ?", (ref,)).fetchall()
            elif len(ref) >= 8:
                rows = self._db.execute(f"SELECT {_COLS} FROM entries WHERE hash LIKE ?", (ref + "%",)).fetchall()
            else:
                rows = []
        if len(rows) != 1:
            raise UnknownEntry(f"no entry {ref!r} in the ledger" if not rows else f"entry prefix {ref!r} is ambiguous")
        return _row_to_entry(rows[0])

    def entries(
        self, *, subject: str | None = None, kind: str | None = None, name: str | None = None, since: int = 0
    ) -> list[Entry]:
        """Recorded entries (as stored, not judged), oldest first, filtered."""
        sql, args = f"SELECT {_COLS} FROM entries WHERE seq >= ?", [since]
        for col, val in (("subject", subject), ("kind", kind), ("name", name)):
            if val is not None:
                sql += f" AND {col} = ?"
                args.append(val)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY seq", args).fetchall()
        return [_row_to_entry(r) for r in rows]

    def head(self) -> Entry:
        with self._lock:
            row = self._db.execute(f"SELECT {_COLS} FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
        return _row_to_entry(row)

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- judging ---------------------------------------------------------------------------------
    def _snapshot(self, as_of: float | None) -> _Snapshot:
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLS} FROM entries ORDER BY seq").fetchall()
        entries: list[Entry] = []
        problems: dict[int, list[str]] = {}
        prev_hash, prev_seq = GENESIS_PREV, -1
        for i, row in enumerate(rows):
            try:
                e = _row_to_entry(row)
            except (ValueError, TypeError) as exc:  # a row edited into something that does not parse
                e = Entry(
                    seq=row[0], hash=str(row[1]), prev=str(row[2]), time=float(row[3] or 0), kind=str(row[4]),
                    actor=str(row[5]), subject=str(row[6]), name=str(row[7]), payload={}, depends_on=[],
                    procedure={}, public_key=str(row[11]), signature=str(row[12]),
                )
                problems.setdefault(i, []).append(f"row does not parse: {exc}")
            p = problems.setdefault(i, [])
            if e.seq != prev_seq + 1:
                p.append(f"sequence broken: expected #{prev_seq + 1}, found #{e.seq} (a row was removed or inserted)")
            if e.prev != prev_hash:
                p.append("chain broken: its prev link is not the hash of the entry before it")
            recomputed = row_hash(e.seq, e.prev, e.time, e.body().signed_bytes(), e.public_key, e.signature)
            if recomputed != e.hash:
                p.append(f"row changed after it was recorded: stored hash {e.hash[:12]}…, content hashes to {recomputed[:12]}…")
            if i == 0 and (e.public_key != self.identity.public_key or e.name != "genesis"):
                p.append("genesis is not signed by this Notary's pinned key")
            prev_hash, prev_seq = e.hash, e.seq
            entries.append(e)
        if as_of is not None:
            entries = [e for e in entries if e.time <= as_of]
        snap = _Snapshot(entries, {e.hash: e for e in entries}, problems, {})
        snap.first_bad = next((i for i in range(len(entries)) if problems.get(i)), None)
        for i, e in enumerate(entries):
            if e.kind == "event" and e.name == "identity" and e.actor == self.identity.name and not problems.get(i):
                snap.keys.setdefault((e.payload.get("actor", ""), e.payload.get("public_key", "")), e)
            if e.kind == "event" and e.name == "void":
                for target in e.depends_on:
                    snap.voids.setdefault(target, []).append(e)
        if entries:
            snap.keys.setdefault((self.identity.name, self.identity.public_key), entries[0])
        return snap

    def _signature_ok(self, e: Entry) -> bool:
        body = e.body().signed_bytes()
        key = (e.public_key, e.signature, hashlib.sha256(body).hexdigest())
        ok = self._sig_cache.get(key)
        if ok is None:
            ok = verify_signature(e.public_key, e.signature, body)
            self._sig_cache[key] = ok
        return ok

    def _own_checks(self, snap: _Snapshot, e: Entry, artifacts: ArtifactChecker | None) -> list[Check]:
        """Checks about the entry itself (not its dependencies), in the order they are reported."""
        checks = []
        row = snap.row_problems.get(_index_of(snap, e), [])
        checks.append(Check(name="row", ok=not row, detail="; ".join(row) or "hash and chain link match"))
        sig = self._signature_ok(e)
        checks.append(
            Check(name="signature", ok=sig, detail="ed25519 ok" if sig else f"signature does not verify against key {e.public_key[:12]}…")
        )
        reg = snap.keys.get((e.actor, e.public_key))
        if reg is None or reg.seq > e.seq:
            checks.append(Check(name="identity", ok=False, detail=f"key {e.public_key[:12]}… was not registered for '{e.actor}' before this entry"))
        else:
            checks.append(Check(name="identity", ok=True, detail=f"key registered in #{reg.seq}"))
        for dep in e.depends_on:
            d = snap.by_hash.get(dep)
            if d is None:
                checks.append(Check(name="dependency", ok=False, detail=f"depends on entry {dep[:12]}…, which is not in the ledger"))
            elif d.seq >= e.seq:
                checks.append(Check(name="dependency", ok=False, detail=f"depends on later entry #{d.seq}"))
        for name, rule in INVARIANTS.items():
            problem = rule(e)
            if problem:
                checks.append(Check(name=name, ok=False, detail=problem))
        if e.kind == "artifact" and not _artifact_payload(e):
            checks.append(self._artifact_check(e, artifacts))
        return checks

    def _artifact_check(self, e: Entry, artifacts: ArtifactChecker | None) -> Check:
        key, want, size = e.payload["key"], e.payload["sha256"], e.payload["size"]
        if artifacts is None:
            return Check(name="artifact", ok=False, detail=f"cannot re-check artifact '{key}': no storage to read it from")
        try:
            got, got_size = artifacts(key)
        except CarambaError as exc:
            return Check(name="artifact", ok=False, detail=f"artifact '{key}' cannot be read: {exc.message}")
        if got != want or got_size != size:
            return Check(
                name="artifact", ok=False,
                detail=f"artifact '{key}' changed: recorded sha256 {want[:12]}… ({size} bytes), stored bytes hash to {got[:12]}… ({got_size} bytes)",
            )
        return Check(name="artifact", ok=True, detail=f"sha256 {want[:12]}… re-checked")

    def _judge(self, snap: _Snapshot, e: Entry, artifacts: ArtifactChecker | None, memo: dict, as_of: float | None) -> list[Reason]:
        """[] if ``e`` is valid, else the reason chain from ``e`` to the failing evidence."""
        if e.hash in memo:
            return memo[e.hash]
        memo[e.hash] = [Reason(seq=e.seq, entry=e.hash, kind=e.kind, name=e.name, problem="depends on itself")]

        def here(problem: str) -> Reason:
            return Reason(seq=e.seq, entry=e.hash, kind=e.kind, name=e.name, problem=problem)

        out: list[Reason] = []
        bad = [c for c in self._own_checks(snap, e, artifacts) if not c.ok]
        if bad:
            out = [here("; ".join(c.detail for c in bad))]
        if not out:
            reg = snap.keys.get((e.actor, e.public_key))
            if reg is not None and reg is not e:
                sub = self._judge(snap, reg, artifacts, memo, as_of)
                if sub:
                    out = [here(f"signed with a key registered in #{reg.seq}, which is invalid"), *sub]
        if not out:
            for dep in e.depends_on:
                d = snap.by_hash[dep]
                sub = self._judge(snap, d, artifacts, memo, as_of)
                if sub:
                    out = [here(f"depends on {d.label()}, which is invalid"), *sub]
                    break
        if not out:
            for v in snap.voids.get(e.hash, []):
                if v.seq > e.seq and not [c for c in self._own_checks(snap, v, artifacts) if not c.ok]:
                    why = v.payload.get("reason", "no reason given")
                    step = v.payload.get("step")
                    out = [here(f"voided by #{v.seq} ({v.actor})" + (f" at step {step}" if step is not None else "") + f": {why}")]
                    break
        memo[e.hash] = out
        return out

    def _resolve(self, snap: _Snapshot, ref: str) -> Entry | None:
        if ref in snap.by_hash:
            return snap.by_hash[ref]
        try:
            target = self.get(ref)
        except UnknownEntry:
            return None
        return snap.by_hash.get(target.hash)

    def validity(self, ref: str, as_of: float | None = None, artifacts: ArtifactChecker | None = None) -> Validity:
        """Is entry ``ref`` valid (now, or as of time ``as_of``)? Walks its dependency DAG."""
        snap = self._snapshot(as_of)
        e = self._resolve(snap, ref)
        if e is None:
            try:
                recorded = self.get(ref)
            except UnknownEntry:
                return Validity(entry=ref, verdict="UNKNOWN", as_of=as_of, reasons=[
                    Reason(seq=-1, entry=ref, kind="?", name="?", problem="no such entry in the ledger")])
            return Validity(entry=recorded.hash, verdict="UNKNOWN", as_of=as_of, reasons=[
                Reason(seq=recorded.seq, entry=recorded.hash, kind=recorded.kind, name=recorded.name,
                       problem=f"recorded at {recorded.time:.3f}, after as_of {as_of:.3f}")])
        reasons = self._judge(snap, e, artifacts, {}, as_of)
        if not reasons and snap.first_bad is not None and snap.first_bad < _index_of(snap, e):
            # no damaged evidence in its own DAG, but the chain it sits on is broken before it
            b = snap.entries[snap.first_bad]
            reasons = [Reason(seq=e.seq, entry=e.hash, kind=e.kind, name=e.name,
                              problem=f"the chain is broken before it, at {b.label()}: {'; '.join(snap.row_problems[snap.first_bad])}")]
        return Validity(entry=e.hash, verdict="VOIDED" if reasons else "VERIFIED", reasons=reasons, as_of=as_of)

    def audit(self, ref: str, as_of: float | None = None, artifacts: ArtifactChecker | None = None) -> Audit:
        """The verdict on ``ref`` with every entry of its DAG and the checks made on each."""
        validity = self.validity(ref, as_of, artifacts)
        snap = self._snapshot(as_of)
        e = snap.by_hash.get(validity.entry)
        seen: dict[str, Entry] = {}
        stack = [e] if e is not None else []
        while stack:
            cur = stack.pop()
            if cur.hash in seen:
                continue
            seen[cur.hash] = cur
            stack += [snap.by_hash[d] for d in cur.depends_on if d in snap.by_hash]
            reg = snap.keys.get((cur.actor, cur.public_key))
            if reg is not None:
                stack.append(reg)
            stack += [v for v in snap.voids.get(cur.hash, []) if v.seq > cur.seq]
        rows = []
        for cur in sorted(seen.values(), key=lambda x: x.seq):
            rows.append(AuditEntry(
                seq=cur.seq, hash=cur.hash, kind=cur.kind, actor=cur.actor, subject=cur.subject, name=cur.name,
                time=cur.time, payload=cur.payload, depends_on=cur.depends_on,
                checks=self._own_checks(snap, cur, artifacts),
            ))
        return Audit(validity=validity, entries=rows)

    def verify(self, artifacts: ArtifactChecker | None = None) -> LedgerReport:
        """Integrity end to end: every row, link, signature, key registration, dependency and
        artifact. (Invariants and voids are judgements, not integrity: see ``validity``.)"""
        snap = self._snapshot(None)
        problems = []
        for e in snap.entries:
            bad = [c for c in self._own_checks(snap, e, artifacts) if not c.ok and c.name not in INVARIANTS]
            if bad:
                problems.append(Reason(seq=e.seq, entry=e.hash, kind=e.kind, name=e.name, problem="; ".join(c.detail for c in bad)))
        head = snap.entries[-1].hash if snap.entries else ""
        return LedgerReport(ok=not problems, entries=len(snap.entries), head=head, problems=problems)

    def latest_valid(
        self, subject: str, name: str, *, kind: str | None = None, artifacts: ArtifactChecker | None = None
    ) -> tuple[Entry | None, list[Validity]]:
        """The newest entry ``(subject, name)`` that is VERIFIED, and the verdicts on newer ones
        that were not (so callers can say why they skipped them)."""
        skipped = []
        for e in reversed(self.entries(subject=subject, name=name, kind=kind)):
            v = self.validity(e.hash, artifacts=artifacts)
            if v.valid:
                return e, skipped
            skipped.append(v)
        return None, skipped


def _index_of(snap: _Snapshot, e: Entry) -> int:
    if 0 <= e.seq < len(snap.entries) and snap.entries[e.seq] is e:
        return e.seq
    for i, x in enumerate(snap.entries):
        if x is e:
            return i
    return -1


def registration_bytes(actor: str, public_key: str) -> bytes:
    return canonical({"register": actor, "public_key": public_key})


def _procedure() -> dict[str, Any]:
    from caramba import __version__

    return {"hash": "sha256", "signature": "ed25519", "caramba": __version__}


def procedure(**extra: Any) -> dict[str, Any]:
    """The procedure record actors put in their evidence (hash algorithm, code revision, and
    e.g. ``manifest_hash``)."""
    return {**_procedure(), **{k: v for k, v in extra.items() if v is not None}}
