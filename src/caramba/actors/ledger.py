"""The Notary's ledger: an append-only transparency log of signed evidence, judged at query time.

Entries are Intent / Event / Claim / ArtifactRef records with dependency edges. Each is signed
by the Ed25519 key of the actor that emitted it, and chained: ``hash = sha256(seq, prev hash,
time, signed body, key, signature)``. The Notary countersigns every row: its **receipt** is
its signature over ``(seq, prev, hash)``, so a row's position is inside a signed payload and a
row moved, replayed or re-chained by hand no longer verifies. Nothing is ever "marked valid";
``validity`` recomputes the truth of an entry by walking its dependency DAG, re-checking every
row on the way (shape, hash, chain link, receipt, signature, the key bound to its actor at that
point), re-hashing artifact bytes in storage, applying invariants (metrics are finite) and
looking for voids. An invalid entry comes with its reason chain.

As in Certificate Transparency (RFC 6962), the whole ledger is summed up by a **signed tree
head**: the Merkle root over the entry hashes, the tree size, signed by the Notary (the
operator key). A client that keeps a head can later check that the ledger still extends it
(``verify(against=head)``): truncation and rollback, which no per-row check can see, fail.

Identities are bound at first registration: a later registration of the same actor name with
another key is refused unless it is a rotation signed by the old key or by the operator.

Layers of protection: SQLite triggers refuse UPDATE/DELETE; ``PRAGMA integrity_check`` is part
of ``verify``; a row edited anyway no longer parses, hashes to its stored hash, or verifies;
a row re-hashed by hand breaks the next row's ``prev`` link and its receipt; a rewritten chain
fails the genesis key, which must be this Notary's pinned key; a shortened one fails a kept head.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from caramba.actors.identity import (
    Identity,
    canonical,
    registration_bytes,
    rotation_bytes,
    verify_signature,
)
from caramba.actors.messages import Message
from caramba.errors import CarambaError

KINDS = ("intent", "event", "claim", "artifact")
Kind = Literal["intent", "event", "claim", "artifact"]
Verdict = Literal["VERIFIED", "VOIDED", "UNKNOWN"]
GENESIS_PREV = "0" * 64
FORMAT = 2  # on-disk format (PRAGMA user_version); 1 had no receipts, proofs or tree heads
TREE_HEAD_FORMAT = "caramba-tree-head/1"

# ArtifactChecker: key -> (sha256, size) of the bytes stored now; raises CarambaError if missing.
ArtifactChecker = Callable[[str], tuple[str, int]]

class LedgerError(CarambaError):
    """The ledger refused an entry (bad signature, unregistered key, unknown dependency, bad
    kind or payload) or cannot be opened with this Notary's key. The message says which."""


class UnknownEntry(LedgerError):
    """No entry with that hash (or ``#seq``) exists in the ledger."""


class IdentityBound(LedgerError):
    """The actor name is already bound to another key. Register the new key under another
    name, or rotate: sign ``rotation_bytes(actor, old_key, new_key)`` with the old key or the
    operator (Notary) key and pass it as ``rotation``."""


class MalformedEntry(LedgerError):
    """A ledger row does not have the shape the Notary writes (an edited kind, garbage JSON, a
    wrong type, NULL, bad hex): it was changed outside the Notary. The message names the row;
    ``caramba notary verify`` lists every such row. A malformed row never makes anything VALID."""


class CorruptLedger(LedgerError):
    """The ledger file itself is damaged: SQLite cannot read it, or its integrity check fails.
    Restore the file from a copy; ``caramba notary verify --against HEAD`` tells whether a
    restored copy still extends the tree head you kept."""


class TreeHeadError(LedgerError):
    """A tree head could not be read: neither a file holding tree-head JSON nor that JSON."""


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
    """A recorded entry (a row of the ledger). ``receipt`` is the Notary's signature over the
    row's position (``receipt_bytes(seq, prev, hash)``)."""

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
    receipt: str = ""

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


def receipt_bytes(seq: int, prev: str, entry_hash: str) -> bytes:
    """What the Notary signs for every row it appends: the row's position in the ledger."""
    return canonical({"receipt": "caramba-ledger", "seq": seq, "prev": prev, "hash": entry_hash})


# ---- Merkle tree heads (RFC 6962 section 2.1) --------------------------------------------------
def merkle_root(leaves: list[bytes]) -> str:
    """The RFC 6962 Merkle Tree Hash of ``leaves`` (hex): leaves are hashed as
    ``sha256(0x00 || leaf)``, nodes as ``sha256(0x01 || left || right)``, and a lone right node
    moves up a level unchanged (which builds the RFC's left-complete tree)."""
    if not leaves:
        return hashlib.sha256(b"").hexdigest()
    level = [hashlib.sha256(b"\x00" + x).digest() for x in leaves]
    while len(level) > 1:
        nxt = [hashlib.sha256(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0].hex()


class TreeHead(Message):
    """A signed tree head: the ledger's first ``size`` entries hash (as a Merkle tree over their
    entry hashes) to ``root``, says the Notary with key ``notary_key``. ``time`` is the time of
    the newest entry it covers. Keep one (``caramba notary head --out FILE``) to check later
    that the ledger was neither truncated nor rewritten (``caramba notary verify --against``)."""

    format: str = TREE_HEAD_FORMAT
    size: int
    root: str
    time: float
    notary_key: str
    signature: str

    def signed_bytes(self) -> bytes:
        return canonical({"format": self.format, "size": self.size, "root": self.root, "time": self.time,
                          "notary_key": self.notary_key})

    def signature_ok(self) -> bool:
        return verify_signature(self.notary_key, self.signature, self.signed_bytes())

    def label(self) -> str:
        return f"tree head (size {self.size}, root {self.root[:12]}…)"

    @classmethod
    def load(cls, source: str) -> "TreeHead":
        """A kept head from ``source``: a file holding tree-head JSON, or the JSON itself."""
        text, where = source, "the given JSON"
        if not source.lstrip().startswith("{"):
            try:
                text, where = Path(source).read_text(), f"file {source}"
            except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
                raise TreeHeadError(f"cannot read tree head {source!r}: {getattr(exc, 'strerror', None) or exc}",
                                    hint="pass a file written by `caramba notary head --out FILE`, or its JSON") from None
        try:
            head = cls.model_validate_json(text)
        except ValidationError as exc:
            raise TreeHeadError(f"{where} is not a caramba tree head: {exc.errors()[0]['msg']}",
                                hint="`caramba notary head` prints one; keep its JSON as it is") from None
        if head.format != TREE_HEAD_FORMAT:
            raise TreeHeadError(f"{where}: tree head format {head.format!r} is not {TREE_HEAD_FORMAT!r}")
        return head


class Reason(Message):
    """One link of a reason chain: which entry, and what is wrong with it (or which dependency).
    ``kind == "row"`` means the row itself could not be read as an entry."""

    seq: int
    entry: str
    kind: str
    name: str
    problem: str

    def __str__(self) -> str:
        if self.kind == "row":
            return f"row {self.seq}: {self.problem}"
        if self.seq < 0:  # no entry: what was asked for, not a row
            return f"'{self.entry}': {self.problem}"
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
    """End-to-end integrity of the whole ledger: the database file (``database``), every row
    (chain, receipts, signatures, bound keys, dependencies, artifacts: ``problems``) and, when a
    kept tree head was given, consistency with it (``head_problems``). ``tree`` is the signed
    head of the ledger as it is now (None when the ledger does not verify)."""

    ok: bool
    entries: int
    head: str
    problems: list[Reason] = Field(default_factory=list)
    file: str = ""
    database: list[str] = Field(default_factory=list)
    head_problems: list[str] = Field(default_factory=list)
    against: TreeHead | None = None
    tree: TreeHead | None = None
    deleted: list[str] = Field(default_factory=list, description="runs deleted by the operator, one line each")

    def as_text(self) -> str:
        gone = [f"  deleted: {d}" for d in self.deleted]
        if self.ok:
            kept = f"; extends the kept {self.against.label()}" if self.against else ""
            return "\n".join([f"ledger OK: {self.entries} entries, head {self.head[:12]}{kept}", *gone])
        n = len(self.database) + len(self.problems) + len(self.head_problems)
        lines = [f"ledger INVALID: {n} problem(s) in {self.entries} entries ({self.file})"]
        lines += [f"  {d}" for d in self.database]
        lines += [f"  {h}" for h in self.head_problems]
        lines += [f"  {p}" for p in self.problems]
        return "\n".join(lines + gone)


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


# ---- rows: the table, and reading a row without trusting it -------------------------------------
_SCHEMA = (
    """CREATE TABLE entries (
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
        signature TEXT NOT NULL,
        receipt TEXT NOT NULL
    )""",
    "CREATE INDEX entries_subject ON entries (subject, name)",
    "CREATE INDEX entries_signature ON entries (signature)",
    """CREATE TRIGGER entries_append_only_update BEFORE UPDATE ON entries
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END""",
    """CREATE TRIGGER entries_append_only_delete BEFORE DELETE ON entries
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END""",
    f"PRAGMA user_version = {FORMAT}",
)
_COLS = "seq, hash, prev, time, kind, actor, subject, name, payload, depends_on, procedure, public_key, signature, receipt"
_HEX = {64: re.compile(r"[0-9a-f]{64}"), 128: re.compile(r"[0-9a-f]{128}")}


def _show(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bytes):
        return f"a {len(v)}-byte BLOB"
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "…"


def _parse_row(row: tuple) -> tuple[Entry, list[str]]:
    """The entry a row holds, and what is wrong with the row's shape ([] for a well-formed row).
    A malformed row still yields an Entry (with placeholders) so that it keeps its place."""
    bad: list[str] = []

    def text(col: str, v: Any) -> str:
        if isinstance(v, str):
            try:
                v.encode()
            except UnicodeEncodeError:  # bytes that are not UTF-8 (see ``_text``)
                bad.append(f"{col} is not UTF-8 text")
                return v.encode(errors="surrogateescape").decode(errors="replace")
            return v
        bad.append(f"{col} is {_show(v)}, not text")
        return "" if v is None else str(v)

    def hexa(col: str, v: Any, digits: int) -> str:
        s = text(col, v)
        if isinstance(v, str) and not _HEX[digits].fullmatch(s):
            bad.append(f"{col} {_show(s)} is not {digits} lowercase hex digits")
        return s

    def js(col: str, v: Any, want: type) -> Any:
        s = text(col, v)
        if not isinstance(v, str):
            return want()
        try:
            obj = json.loads(s)
        except ValueError as exc:
            bad.append(f"{col} is not JSON ({exc.msg} at character {exc.pos})")
            return want()
        if not isinstance(obj, want):
            bad.append(f"{col} is a JSON {type(obj).__name__}, not a JSON {'object' if want is dict else 'list'}")
            return want()
        return obj

    seq, h, prev, t, kind, actor, subject, name, payload, deps, proc, pk, sig, receipt = row
    if not isinstance(seq, int):  # seq is the rowid: SQLite keeps it an integer
        bad.append(f"seq is {_show(seq)}, not an integer")
        seq = -1
    if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t):
        t = float(t)
    else:
        bad.append(f"time is {_show(t)}, not a finite number")
        t = 0.0
    kind_s = text("kind", kind)
    if isinstance(kind, str) and kind not in KINDS:
        bad.append(f"kind {_show(kind)} is not one of {', '.join(KINDS)}")
    dep_list = js("depends_on", deps, list)
    if not all(isinstance(d, str) and _HEX[64].fullmatch(d) for d in dep_list):
        bad.append("depends_on holds something other than entry hashes (64 hex digits)")
        dep_list = []
    entry = Entry(
        seq=seq, hash=hexa("hash", h, 64), prev=hexa("prev", prev, 64), time=t, kind=kind_s,
        actor=text("actor", actor), subject=text("subject", subject), name=text("name", name),
        payload=js("payload", payload, dict), depends_on=dep_list, procedure=js("procedure", proc, dict),
        public_key=hexa("public_key", pk, 64), signature=hexa("signature", sig, 128),
        receipt=hexa("receipt", receipt, 128),
    )
    return entry, bad


def _text(raw: bytes) -> str:
    """How the ledger reads TEXT: bytes that are not UTF-8 are kept (as surrogates) for
    ``_parse_row`` to name the row, instead of failing the whole read."""
    return raw.decode(errors="surrogateescape")


def _strict(row: tuple) -> Entry:
    entry, bad = _parse_row(row)
    if bad:
        raise MalformedEntry(f"row {entry.seq}: " + "; ".join(bad),
                             hint="the row was changed outside the Notary; `caramba notary verify` lists every damaged row")
    return entry


@dataclass
class _Snapshot:
    """The whole ledger as read for one query, with row-level integrity already checked.
    ``entries`` is what the query sees (up to ``as_of``); ``all`` every row."""

    all: list[Entry]
    entries: list[Entry]
    by_hash: dict[str, Entry]
    index: dict[int, int]  # id(entry) -> index in ``all``
    row_problems: dict[int, list[str]]  # index -> problems with the row itself (integrity)
    malformed: set[int]  # indices of rows that do not parse (only row problems are judged)
    bindings: dict[str, list[Entry]] = field(default_factory=dict)  # actor -> identity entries, oldest first
    identity_problems: dict[int, str] = field(default_factory=dict)  # index of identity event -> why it binds nothing
    voids: dict[str, list[Entry]] = field(default_factory=dict)
    deletions: dict[str, Entry] = field(default_factory=dict)  # run (subject) -> the Notary's first "deleted" event
    first_bad: int | None = None  # index of the first row with integrity problems
    _intents: dict[str, Entry] | None = None

    def at(self, e: Entry) -> int:
        return self.index.get(id(e), -1)

    def intent_of(self, subject: str) -> Entry | None:
        """The first intent recorded for run ``subject``: its author speaks for the run."""
        if self._intents is None:
            self._intents = {}
            for e in self.entries:
                if e.kind == "intent" and e.subject and e.subject not in self._intents:
                    self._intents[e.subject] = e
        return self._intents.get(subject)

    def bound(self, actor: str, e: Entry) -> Entry | None:
        """The identity entry binding ``actor``'s key in force when ``e`` was recorded."""
        found = None
        for reg in self.bindings.get(actor, []):
            if reg.seq < e.seq or reg is e:
                found = reg
        return found


def actor_base(actor: str) -> str:
    """``experiment:r1#9f3a`` -> ``experiment:r1``: the actor, whichever incarnation signed."""
    return actor.split("#", 1)[0]


def speaks_for(actor: str, subject: str, author: str) -> bool:
    """Whether ``actor`` may record run ``subject``'s own evidence, the run's intent having been
    recorded by ``author``. A run with its own key (the author's name has no ``#incarnation``)
    is spoken for by that name alone, which the Notary binds to that key. Otherwise: an
    incarnation of the same actor, or, for a run driven by the Experiment actor, any attempt of
    it (``experiment:<run>``, ``experiment:<run>@<lease>``), names anyone may register."""
    if "#" not in author:  # a run's own key (``Experiment(keys=...)``): that name and key alone
        return actor == author
    family = f"experiment:{subject}"

    def of_run(name: str) -> bool:
        base = actor_base(name)
        return base == family or base.startswith(family + "@")

    return of_run(actor) if of_run(author) else actor_base(actor) == actor_base(author)


# The event the Notary records when the operator deletes a run (``caramba research delete``).
DELETED = "deleted"

# The events of a run's own lifecycle: only the run's author records them.
RUN_EVENTS = ("progress", "resumed", "committed", "cancelled", "failed")


def _authority(snap: _Snapshot, e: Entry) -> list[Reason]:
    """Only the actor that recorded a run's intent (any incarnation of it) speaks for the run:
    its checkpoints, claims and lifecycle events. Another signer's claim or checkpoint about the
    run is not the run's, however well signed. Others may still comment (a review event) or
    void (that only takes validity away)."""
    if not e.subject or not (e.kind in ("claim", "artifact") or (e.kind == "event" and e.name in RUN_EVENTS)):
        return []
    intent = snap.intent_of(e.subject)
    if intent is None or speaks_for(e.actor, e.subject, intent.actor):
        return []
    return [_reason(e, f"signed by '{e.actor}', but run '{e.subject}' is recorded by "
                       f"'{actor_base(intent.actor)}' (its intent #{intent.seq}); only it speaks for the run")]


class Ledger:
    """The ledger in an SQLite file, owned by one Notary ``identity`` (its key is pinned in the
    genesis entry; it countersigns every row and signs tree heads). ``clock`` gives entry times
    (default ``time.time``). The operator key, which may sign key rotations for any actor, is
    the Notary's own key (``operator_key``)."""

    def __init__(self, path: str | os.PathLike, identity: Identity, clock: Callable[[], float] = time.time) -> None:
        self.path = os.fspath(path)
        self.identity = identity
        self.operator_key = identity.public_key
        self.clock = clock
        self._lock = threading.RLock()
        self._sig_cache: dict[tuple[str, str, str], bool] = {}
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.text_factory = _text
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._open()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            if _busy(exc):
                raise
            raise self._corrupt(exc) from None
        except BaseException:
            self._db.close()
            raise

    def _corrupt(self, exc: sqlite3.DatabaseError) -> CorruptLedger:
        return CorruptLedger(
            f"ledger file {self.path} cannot be read by SQLite: {exc}",
            hint="the file was damaged; restore it from a copy and check it with `caramba notary verify --against HEAD`",
        )

    def _open(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            exists = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'entries'").fetchone()
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if exists and version != FORMAT:
                raise LedgerError(
                    f"ledger {self.path} is in format {version or 1}; this caramba reads format {FORMAT} "
                    "(rows countersigned with their sequence number, stored proofs of key possession, "
                    "signed tree heads), which an old ledger cannot be given after the fact",
                    hint="keep the old file for the record (rename it, e.g. ledger-v1.sqlite, and verify it with "
                    "the caramba that wrote it); the Notary then starts a new ledger",
                )
            if not exists and (version or db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]):
                raise CorruptLedger(f"ledger file {self.path} is a database without the ledger's entries table: it was damaged",
                                    hint="restore the file from a copy; a new ledger is started only in a new (empty) file")
            if not exists:
                for stmt in _SCHEMA:
                    db.execute(stmt)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        genesis = db.execute(f"SELECT {_COLS} FROM entries WHERE seq = 0").fetchone()
        ident = self.identity
        if genesis is None:
            self.append_own("event", "genesis", {"public_key": ident.public_key, "format": FORMAT})
            return
        g, _ = _parse_row(genesis)
        if g.public_key != ident.public_key:  # a damaged genesis row with this key opens: verify names it
            raise LedgerError(
                f"ledger {self.path} was created by Notary key {g.public_key[:16]}… (genesis #0), "
                f"not this Notary's key {ident.public_key[:16]}…",
                hint="open it with the Notary's own key file (notary.key next to the ledger)",
            )

    def _rows(self, sql: str, args: Iterable[Any] = ()) -> list[tuple]:
        """Rows of a read, with SQLite's complaints about a damaged file turned into CorruptLedger."""
        with self._lock:
            try:
                return self._db.execute(sql, tuple(args)).fetchall()
            except sqlite3.DatabaseError as exc:
                if _busy(exc):
                    raise
                raise self._corrupt(exc) from None

    # ---- writing ---------------------------------------------------------------------------------
    def _next_row(self, head: tuple | None, body: EntryBody, public_key: str, signature: str) -> tuple:
        """The row that appends ``body`` after ``head`` (``(seq, hash, time)`` of the last row,
        None for an empty ledger): chained, hashed and countersigned (columns as ``_COLS``)."""
        seq, prev, last = (head[0] + 1, head[1], head[2]) if head else (0, GENESIS_PREV, 0.0)
        if not (isinstance(prev, str) and isinstance(last, (int, float))):
            raise MalformedEntry(f"row {seq - 1}, the last one, is malformed: nothing can be chained to it",
                                 hint="`caramba notary verify` names every damaged row; restore the ledger file")
        t = max(float(self.clock()), float(last))
        signed = body.signed_bytes()
        h = row_hash(seq, prev, t, signed, public_key, signature)
        receipt = self.identity.sign(receipt_bytes(seq, prev, h))
        return (
            seq, h, prev, t, body.kind, body.actor, body.subject, body.name,
            canonical(body.payload).decode(), canonical(list(body.depends_on)).decode(),
            canonical(body.procedure).decode(), public_key, signature, receipt,
        )

    def _insert(self, body: EntryBody, public_key: str, signature: str) -> Entry:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                head = self._db.execute("SELECT seq, hash, time FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
                row = self._next_row(head, body, public_key, signature)
                self._db.execute(f"INSERT INTO entries ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return self.get(row[1])

    def register(self, actor: str, public_key: str, proof: str, rotation: str | None = None) -> Entry:
        """Bind ``public_key`` to ``actor``. ``proof`` is the key's signature over
        ``registration_bytes(actor, public_key)`` (possession of the private key). The first
        registration of a name binds it; registering the bound key again returns that entry;
        another key is refused (IdentityBound) unless ``rotation`` is a signature over
        ``rotation_bytes(actor, old_key, public_key)`` by the old key or the operator key."""
        if not verify_signature(public_key, proof, registration_bytes(actor, public_key)):
            raise LedgerError(f"identity registration of '{actor}': proof does not verify against its key")
        with self._lock:
            current = self._binding(actor)
            payload: dict[str, Any] = {"actor": actor, "public_key": public_key, "proof": proof}
            if current is not None:
                old = current.payload["public_key"]  # genesis carries the Notary's
                if old == public_key:
                    return current
                if current.seq == 0:
                    raise IdentityBound(f"'{actor}' is the Notary's own name; it cannot be bound to another key")
                if rotation is None:
                    raise IdentityBound(
                        f"actor '{actor}' is bound to key {old[:16]}… since #{current.seq}; "
                        f"a registration with another key {public_key[:16]}… is refused",
                        hint="register the new key under another name, or rotate: sign rotation_bytes(actor, old key, "
                        "new key) with the old key or the operator (Notary) key and pass it as `rotation`",
                    )
                by = _rotation_signer(rotation, actor, old, public_key, self.operator_key)
                if by is None:
                    raise LedgerError(
                        f"key rotation of '{actor}' from {old[:16]}… to {public_key[:16]}…: the rotation signature "
                        "verifies against neither the old key nor the operator key",
                    )
                payload["rotation"] = {"from": old, "by": by, "signature": rotation}
            return self.append_own("event", "identity", payload, subject=actor)

    def append(self, body: EntryBody, public_key: str, signature: str) -> Entry:
        """Record ``body`` signed by ``public_key``. Refuses bad signatures, keys not bound to the
        actor and unknown dependencies (the entry would be invalid from birth). The same signed
        body sent again (a retry, or a replay) is recorded once: its entry is returned."""
        if body.kind not in KINDS:
            raise LedgerError(f"unknown entry kind '{body.kind}'; valid: {', '.join(KINDS)}")
        signed = body.signed_bytes()
        if not verify_signature(public_key, signature, signed):
            raise LedgerError(f"{body.kind} '{body.name}' from '{body.actor}': signature does not verify")
        with self._lock:
            current = self._binding(body.actor)
            bound = None if current is None else current.payload["public_key"]
            if bound != public_key:
                raise LedgerError(
                    f"{body.kind} '{body.name}': key {public_key[:16]}… is not registered for actor '{body.actor}'"
                    + (f" (its key is {bound[:16]}…, bound in #{current.seq})" if current is not None else ""),
                    hint="register the actor's identity with the Notary first",
                )
            for row in self._rows(f"SELECT {_COLS} FROM entries WHERE signature = ? AND public_key = ?", (signature, public_key)):
                same = _strict(row)
                if same.body().signed_bytes() == signed:
                    return same
            for dep in body.depends_on:
                if not self._rows("SELECT 1 FROM entries WHERE hash = ?", (dep,)):
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

    def _binding(self, actor: str) -> Entry | None:
        """The entry that binds ``actor``'s current key (genesis for the Notary's own name), or
        None. The row found is checked (receipt and Notary signature) before it is trusted."""
        if actor == self.identity.name:
            return self.get("#0")
        rows = self._rows(
            f"SELECT {_COLS} FROM entries WHERE subject = ? AND name = 'identity' AND kind = 'event' "
            "AND actor = ? AND public_key = ? ORDER BY seq DESC LIMIT 1",
            (actor, self.identity.name, self.identity.public_key),
        )
        if not rows:
            return None
        e = _strict(rows[0])
        if not (self._receipt_ok(e) and self._signature_ok(e) and e.payload.get("actor") == actor
                and isinstance(e.payload.get("public_key"), str)):
            raise LedgerError(f"the identity entry #{e.seq} of '{actor}' is damaged: its receipt or signature does not verify",
                              hint="`caramba notary verify` names every damaged row; restore the ledger file")
        return e

    # ---- reading ---------------------------------------------------------------------------------
    def get(self, ref: str) -> Entry:
        """An entry by hash, unique hash prefix (>= 8 hex digits) or ``#seq``. A malformed row
        raises MalformedEntry naming it."""
        if ref.startswith("#"):
            try:
                rows = self._rows(f"SELECT {_COLS} FROM entries WHERE seq = ?", (int(ref[1:]),))
            except ValueError:
                rows = []
        elif len(ref) == 64:
            rows = self._rows(f"SELECT {_COLS} FROM entries WHERE hash = ?", (ref,))
        elif len(ref) >= 8:
            rows = self._rows(f"SELECT {_COLS} FROM entries WHERE hash LIKE ?", (ref + "%",))
        else:
            rows = []
        if len(rows) != 1:
            raise UnknownEntry(f"no entry {ref!r} in the ledger" if not rows else f"entry prefix {ref!r} is ambiguous")
        return _strict(rows[0])

    def scan(
        self, *, subject: str | None = None, kind: str | None = None, name: str | None = None, since: int = 0
    ) -> tuple[list[Entry], list[Reason]]:
        """Recorded entries (as stored, not judged), oldest first, filtered; and the rows that
        matched the filter but are malformed (skipped, each with what is wrong)."""
        sql, args = f"SELECT {_COLS} FROM entries WHERE seq >= ?", [since]
        for col, val in (("subject", subject), ("kind", kind), ("name", name)):
            if val is not None:
                sql += f" AND {col} = ?"
                args.append(val)
        good, skipped = [], []
        for row in self._rows(sql + " ORDER BY seq", args):
            e, bad = _parse_row(row)
            if bad:
                skipped.append(Reason(seq=e.seq, entry=e.hash, kind="row", name=e.name, problem="; ".join(bad)))
            else:
                good.append(e)
        return good, skipped

    def entries(
        self, *, subject: str | None = None, kind: str | None = None, name: str | None = None, since: int = 0
    ) -> list[Entry]:
        """Recorded entries (as stored, not judged), oldest first, filtered. Raises
        MalformedEntry (naming the rows) when a matching row is malformed."""
        good, skipped = self.scan(subject=subject, kind=kind, name=name, since=since)
        if skipped:
            raise MalformedEntry("; ".join(map(str, skipped)),
                                 hint="the rows were changed outside the Notary; `caramba notary verify` lists every damaged row")
        return good

    def head(self) -> Entry:
        return _strict(self._rows(f"SELECT {_COLS} FROM entries ORDER BY seq DESC LIMIT 1")[0])

    def __len__(self) -> int:
        return self._rows("SELECT COUNT(*) FROM entries")[0][0]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- judging ---------------------------------------------------------------------------------
    def _snapshot(self, as_of: float | None) -> _Snapshot:
        rows = self._rows(f"SELECT {_COLS} FROM entries ORDER BY seq")
        everything: list[Entry] = []
        problems: dict[int, list[str]] = {}
        malformed: set[int] = set()
        seen: dict[tuple[str, str], int] = {}  # (key, sha256 of signed body) -> seq: replays
        prev_hash, prev_seq = GENESIS_PREV, -1
        for i, row in enumerate(rows):
            e, p = _parse_row(row)
            if p:
                malformed.add(i)
            if e.seq != prev_seq + 1:
                p.append(f"sequence broken: expected #{prev_seq + 1}, found #{e.seq} (a row was removed or inserted)")
            if e.prev != prev_hash:
                p.append("chain broken: its prev link is not the hash of the entry before it")
            if i not in malformed:
                signed = e.body().signed_bytes()
                recomputed = row_hash(e.seq, e.prev, e.time, signed, e.public_key, e.signature)
                if recomputed != e.hash:
                    p.append(f"row changed after it was recorded: stored hash {e.hash[:12]}…, content hashes to {recomputed[:12]}…")
                elif not self._receipt_ok(e):
                    p.append("the Notary's receipt for this position does not verify (the row was moved, replayed or re-chained)")
                digest = (e.public_key, hashlib.sha256(signed).hexdigest())
                if digest in seen:
                    p.append(f"replay: the same signed {e.kind} by key {e.public_key[:12]}… is already recorded as #{seen[digest]}")
                seen.setdefault(digest, e.seq)
            if i == 0 and (e.public_key != self.identity.public_key or e.name != "genesis"
                           or e.payload.get("public_key") != self.identity.public_key):
                p.append("genesis is not signed by this Notary's pinned key")
            if p:
                problems[i] = p
            prev_hash, prev_seq = e.hash, e.seq
            everything.append(e)
        entries = everything if as_of is None else [e for e in everything if e.time <= as_of]
        snap = _Snapshot(
            everything, entries, {e.hash: e for e in entries}, {id(e): i for i, e in enumerate(everything)},
            problems, malformed,
        )
        snap.first_bad = next((snap.at(e) for e in entries if problems.get(snap.at(e))), None)
        if entries and 0 not in malformed:
            snap.bindings[self.identity.name] = [everything[0]]
        for e in entries:
            i = snap.at(e)
            if i in malformed:
                continue
            if (e.kind == "event" and e.name == "identity" and e.actor == self.identity.name
                    and e.public_key == self.identity.public_key and not problems.get(i)):
                problem = self._identity_problem(snap, e)
                if problem:
                    snap.identity_problems[i] = problem
                else:
                    snap.bindings.setdefault(e.payload["actor"], []).append(e)
            if e.kind == "event" and e.name == "void":
                for target in e.depends_on:
                    snap.voids.setdefault(target, []).append(e)
            if (e.kind == "event" and e.name == DELETED and e.subject and e.actor == self.identity.name
                    and e.public_key == self.identity.public_key and not problems.get(i)):
                snap.deletions.setdefault(e.subject, e)
        return snap

    def _identity_problem(self, snap: _Snapshot, e: Entry) -> str | None:
        """Why identity event ``e`` binds nothing (None: it binds ``payload.actor`` to ``payload.public_key``)."""
        p = e.payload
        actor, key, proof = p.get("actor"), p.get("public_key"), p.get("proof")
        if not (isinstance(actor, str) and isinstance(key, str) and isinstance(proof, str)):
            return "identity registration without actor, public_key and proof"
        if not self._cached_verify(key, proof, registration_bytes(actor, key)):
            return f"the proof of possession for key {key[:12]}… does not verify"
        if actor == self.identity.name:
            return f"re-binds the Notary's own name '{actor}'"
        current = snap.bound(actor, e)
        if current is None:
            return None
        old = current.payload["public_key"]
        if old == key:
            return f"registers key {key[:12]}… for '{actor}' again (already bound in #{current.seq})"
        rot = p.get("rotation")
        sig = rot.get("signature") if isinstance(rot, dict) else None
        signed = rotation_bytes(actor, old, key)
        if not (isinstance(sig, str) and any(self._cached_verify(k, sig, signed) for k in (old, self.operator_key))):
            return (f"re-binds '{actor}' from key {old[:12]}… (bound in #{current.seq}) to key {key[:12]}… "
                    "without a rotation signed by the old key or the operator")
        return None

    def _signature_ok(self, e: Entry) -> bool:
        return self._cached_verify(e.public_key, e.signature, e.body().signed_bytes())

    def _receipt_ok(self, e: Entry) -> bool:
        return self._cached_verify(self.identity.public_key, e.receipt, receipt_bytes(e.seq, e.prev, e.hash))

    def _cached_verify(self, public_key: str, signature: str, data: bytes) -> bool:
        key = (public_key, signature, hashlib.sha256(data).hexdigest())
        ok = self._sig_cache.get(key)
        if ok is None:
            ok = self._sig_cache[key] = verify_signature(public_key, signature, data)
        return ok

    def _own_checks(self, snap: _Snapshot, e: Entry, artifacts: ArtifactChecker | None) -> list[Check]:
        """Checks about the entry itself (not its dependencies), in the order they are reported."""
        i = snap.at(e)
        row = snap.row_problems.get(i, [])
        checks = [Check(name="row", ok=not row, detail="; ".join(row) or "hash, chain link and receipt match")]
        if i in snap.malformed:
            return checks  # nothing more can be read from it
        sig = self._signature_ok(e)
        checks.append(
            Check(name="signature", ok=sig, detail="ed25519 ok" if sig else f"signature does not verify against key {e.public_key[:12]}…")
        )
        checks.append(self._identity_check(snap, e))
        if i in snap.identity_problems:
            checks.append(Check(name="registration", ok=False, detail=snap.identity_problems[i]))
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
            checks.append(self._artifact_check(e, artifacts, snap.deletions.get(e.subject)))
        return checks

    def _identity_check(self, snap: _Snapshot, e: Entry) -> Check:
        reg = snap.bound(e.actor, e)
        if reg is None:
            return Check(name="identity", ok=False, detail=f"key {e.public_key[:12]}… was not registered for '{e.actor}' before this entry")
        key = reg.payload.get("public_key")
        if key != e.public_key:
            return Check(name="identity", ok=False,
                         detail=f"key {e.public_key[:12]}… is not the key bound to '{e.actor}' at this point ({str(key)[:12]}…, bound in #{reg.seq})")
        return Check(name="identity", ok=True, detail=f"key bound in #{reg.seq}")

    def _artifact_check(self, e: Entry, artifacts: ArtifactChecker | None, deletion: Entry | None = None) -> Check:
        """Re-hash the artifact's bytes. A run the operator deleted (a later ``deleted`` event
        signed by the Notary) may have lost them: gone is then what the ledger says, not
        damage; bytes still there are checked as ever."""
        key, want, size = e.payload["key"], e.payload["sha256"], e.payload["size"]
        deleted = deletion is not None and deletion.seq > e.seq
        if artifacts is None:
            if deleted:
                return Check(name="artifact", ok=True, detail=f"artifact '{key}' not re-checked: run deleted in #{deletion.seq}")
            return Check(name="artifact", ok=False, detail=f"cannot re-check artifact '{key}': no storage to read it from")
        try:
            got, got_size = artifacts(key)
        except CarambaError as exc:
            if deleted and _is_missing(exc):
                return Check(name="artifact", ok=True,
                             detail=f"artifact '{key}' removed when run '{e.subject}' was deleted (#{deletion.seq})")
            return Check(name="artifact", ok=False, detail=f"artifact '{key}' cannot be read: {exc.message}")
        if got != want or got_size != size:
            return Check(
                name="artifact", ok=False,
                detail=f"artifact '{key}' changed: recorded sha256 {want[:12]}… ({size} bytes), stored bytes hash to {got[:12]}… ({got_size} bytes)",
            )
        return Check(name="artifact", ok=True, detail=f"sha256 {want[:12]}… re-checked")

    def _judge(self, snap: _Snapshot, e: Entry, artifacts: ArtifactChecker | None, memo: dict, as_of: float | None) -> list[Reason]:
        """[] if ``e`` is valid, else the reason chain from ``e`` to the failing evidence."""
        if id(e) in memo:
            return memo[id(e)]
        memo[id(e)] = [_reason(e, "depends on itself")]
        out: list[Reason] = []
        bad = [c for c in self._own_checks(snap, e, artifacts) if not c.ok]
        if bad:
            out = [_reason(e, "; ".join(c.detail for c in bad), malformed=snap.at(e) in snap.malformed)]
        if not out:
            out = _authority(snap, e)
        if not out:
            reg = snap.bound(e.actor, e)
            if reg is not None and reg is not e:
                sub = self._judge(snap, reg, artifacts, memo, as_of)
                if sub:
                    out = [_reason(e, f"signed with a key registered in #{reg.seq}, which is invalid"), *sub]
        if not out:
            for dep in e.depends_on:
                d = snap.by_hash[dep]
                sub = self._judge(snap, d, artifacts, memo, as_of)
                if sub:
                    out = [_reason(e, f"depends on {d.label()}, which is invalid"), *sub]
                    break
        if not out:
            for v in snap.voids.get(e.hash, []):
                if v.seq > e.seq and not [c for c in self._own_checks(snap, v, artifacts) if not c.ok]:
                    why = v.payload.get("reason", "no reason given")
                    step = v.payload.get("step")
                    out = [_reason(e, f"voided by #{v.seq} ({v.actor})" + (f" at step {step}" if step is not None else "") + f": {why}")]
                    break
        memo[id(e)] = out
        return out

    def _resolve(self, snap: _Snapshot, ref: str) -> Entry | None:
        """``ref`` among all rows (malformed ones too): ``#seq``, a hash or a unique prefix."""
        if ref.startswith("#"):
            return next((e for e in snap.all if f"#{e.seq}" == ref), None)
        found = [e for e in snap.all if e.hash == ref] or (
            [e for e in snap.all if e.hash.startswith(ref)] if len(ref) >= 8 else [])
        return found[0] if len(found) == 1 else None

    def validity(self, ref: str, as_of: float | None = None, artifacts: ArtifactChecker | None = None) -> Validity:
        """Is entry ``ref`` valid (now, or as of time ``as_of``)? Walks its dependency DAG."""
        snap = self._snapshot(as_of)
        e = self._resolve(snap, ref)
        if e is None:
            return Validity(entry=ref, verdict="UNKNOWN", as_of=as_of, reasons=[
                Reason(seq=-1, entry=ref, kind="?", name="?", problem="no such entry in the ledger")])
        if as_of is not None and e.time > as_of:
            return Validity(entry=e.hash, verdict="UNKNOWN", as_of=as_of, reasons=[
                _reason(e, f"recorded at {e.time:.3f}, after as_of {as_of:.3f}")])
        reasons = self._judge(snap, e, artifacts, {}, as_of)
        if not reasons and snap.first_bad is not None and snap.first_bad < snap.at(e):
            # no damaged evidence in its own DAG, but the chain it sits on is broken before it
            b = snap.all[snap.first_bad]
            where = f"row {b.seq}" if snap.first_bad in snap.malformed else b.label()
            reasons = [_reason(e, f"the chain is broken before it, at {where}: {'; '.join(snap.row_problems[snap.first_bad])}")]
        return Validity(entry=e.hash, verdict="VOIDED" if reasons else "VERIFIED", reasons=reasons, as_of=as_of)

    def audit(self, ref: str, as_of: float | None = None, artifacts: ArtifactChecker | None = None) -> Audit:
        """The verdict on ``ref`` with every entry of its DAG and the checks made on each."""
        validity = self.validity(ref, as_of, artifacts)
        snap = self._snapshot(as_of)
        e = self._resolve(snap, validity.entry)
        seen: dict[int, Entry] = {}
        stack = [e] if e is not None and (as_of is None or e.time <= as_of) else []
        while stack:
            cur = stack.pop()
            if id(cur) in seen:
                continue
            seen[id(cur)] = cur
            stack += [snap.by_hash[d] for d in cur.depends_on if d in snap.by_hash]
            reg = snap.bound(cur.actor, cur)
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

    # ---- the whole ledger: integrity, tree heads -------------------------------------------------
    def _database_problems(self) -> list[str]:
        """What is wrong with the file as a database: SQLite's own integrity check, and any
        difference from the schema the Notary creates (a dropped trigger, an edited table)."""
        where = f"ledger file {self.path}"
        try:
            found = [r[0] for r in self._rows("PRAGMA integrity_check(20)")]
            with self._lock:
                self._db.text_factory = bytes  # an edited schema need not even be UTF-8
                try:
                    schema = self._rows("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name")
                finally:
                    self._db.text_factory = _text
        except CorruptLedger as exc:
            return [exc.message]
        problems = [] if found == ["ok"] else [f"{where}: PRAGMA integrity_check: {line}" for line in found]
        have = {r[1]: r for r in schema}
        want = {r[1]: r for r in _expected_schema()}
        for name in sorted(have.keys() | want.keys()):
            label = name.decode(errors="replace")
            if name not in have:
                problems.append(f"{where}: schema: {want[name][0].decode()} {label} is missing")
            elif name not in want:
                problems.append(f"{where}: schema: unexpected {have[name][0].decode(errors='replace')} {label}")
            elif have[name] != want[name]:
                problems.append(f"{where}: schema: {label} was changed")
        return problems

    def _integrity(self, snap: _Snapshot, artifacts: ArtifactChecker | None, *, judged: bool) -> list[Reason]:
        """Per-entry integrity problems (``judged``: also dependencies and artifacts)."""
        problems = []
        for e in snap.entries:
            checks = self._own_checks(snap, e, artifacts)
            if not judged:
                checks = [c for c in checks if c.name != "artifact"]
            bad = [c for c in checks if not c.ok and c.name not in INVARIANTS]
            if bad:
                problems.append(_reason(e, "; ".join(c.detail for c in bad), malformed=snap.at(e) in snap.malformed))
        return problems

    def _sign_head(self, snap: _Snapshot, size: int) -> TreeHead:
        unsigned = TreeHead(size=size, root=merkle_root(_leaves(snap.all[:size])), time=snap.all[size - 1].time if size else 0.0,
                            notary_key=self.identity.public_key, signature="")
        return unsigned.model_copy(update={"signature": self.identity.sign(unsigned.signed_bytes())})

    def tree_head(self) -> TreeHead:
        """The signed tree head of the ledger as it is now. Refused (LedgerError naming the
        damage) when the rows do not verify: the Notary vouches only for an intact history."""
        snap = self._snapshot(None)
        damage = self._database_problems() + [str(p) for p in self._integrity(snap, None, judged=False)]
        if damage:
            raise LedgerError(f"ledger {self.path} does not verify, so no tree head is signed for it: " + "; ".join(damage[:5])
                              + (f" (+{len(damage) - 5} more)" if len(damage) > 5 else ""),
                              hint="`caramba notary verify` lists every problem")
        return self._sign_head(snap, len(snap.all))

    def _head_problems(self, snap: _Snapshot, kept: TreeHead) -> list[str]:
        """Does the ledger still extend ``kept``? (RFC 6962 consistency, recomputed from the rows.)"""
        label = f"kept {kept.label()}"
        if kept.notary_key != self.identity.public_key:
            return [f"{label} was signed by Notary key {kept.notary_key[:16]}…, not this ledger's {self.identity.public_key[:16]}…: "
                    "the ledger was replaced, or the head belongs to another one"]
        if not kept.signature_ok():
            return [f"{label}: its signature does not verify (the head file was edited)"]
        if len(snap.all) < kept.size:
            return [f"{label}: the ledger has only {len(snap.all)} entries: it was truncated or rolled back "
                    f"(entries #{len(snap.all)}..#{kept.size - 1} are gone)"]
        root = merkle_root(_leaves(snap.all[: kept.size]))
        if root != kept.root:
            return [f"{label}: its first {kept.size} entries now hash to {root[:12]}…: the history it covers was rewritten or rolled back"]
        return []

    def verify(self, artifacts: ArtifactChecker | None = None, against: TreeHead | None = None) -> LedgerReport:
        """Integrity end to end: the database file, every row, link, receipt, signature, key
        binding, dependency and artifact; with ``against``, that the ledger still extends that
        kept tree head. (Invariants and voids are judgements, not integrity: see ``validity``.)"""
        database = self._database_problems()
        try:
            snap = self._snapshot(None)
        except CorruptLedger as exc:
            return LedgerReport(ok=False, entries=0, head="", file=self.path, database=[*database, exc.message], against=against)
        problems = self._integrity(snap, artifacts, judged=True)
        head_problems = self._head_problems(snap, against) if against is not None else []
        ok = not (database or problems or head_problems)
        deleted = [f"run {subject} (#{d.seq}{', ' + str(d.payload['reason']) if d.payload.get('reason') else ''})"
                   for subject, d in snap.deletions.items()]
        return LedgerReport(
            ok=ok, entries=len(snap.entries), head=snap.entries[-1].hash if snap.entries else "", problems=problems,
            file=self.path, database=database, head_problems=head_problems, against=against,
            tree=self._sign_head(snap, len(snap.all)) if ok else None, deleted=deleted,
        )

    def record_deletion(self, subject: str, payload: dict[str, Any]) -> Entry:
        """Record that the operator deleted run ``subject`` (the Notary signs it): the run's
        evidence stays, its artifacts may be gone. Recorded once; again, the first is returned."""
        if not subject:
            raise LedgerError("a deletion names the run it deletes (an empty subject was given)")
        with self._lock:
            done = [e for e in self.scan(subject=subject, kind="event", name=DELETED)[0]
                    if e.actor == self.identity.name and e.public_key == self.identity.public_key]
            if done:
                return done[0]
            intents = self.scan(subject=subject, kind="intent")[0]
            return self.append_own("event", DELETED, payload, subject=subject,
                                   depends_on=[intents[0].hash] if intents else [])

    def latest_valid(
        self, subject: str, name: str, *, kind: str | None = None, artifacts: ArtifactChecker | None = None
    ) -> tuple[Entry | None, list[Validity]]:
        """The newest entry ``(subject, name)`` that is VERIFIED, and the verdicts on newer ones
        that were not (so callers can say why they skipped them; a malformed row is one of them)."""
        good, malformed = self.scan(subject=subject, name=name, kind=kind)
        skipped = []
        candidates = sorted([*good, *malformed], key=lambda x: x.seq)
        for e in reversed(candidates):
            if isinstance(e, Reason):
                skipped.append(Validity(entry=e.entry, verdict="VOIDED", reasons=[e]))
                continue
            v = self.validity(e.hash, artifacts=artifacts)
            if v.valid:
                return e, skipped
            skipped.append(v)
        return None, skipped


def _is_missing(exc: CarambaError) -> bool:
    from caramba.store.blobs import BlobNotFound

    return isinstance(exc, BlobNotFound)


def _expected_schema() -> list[tuple]:
    """``sqlite_master`` as the Notary creates it (as bytes, like the file is read)."""
    global _SCHEMA_ROWS
    if _SCHEMA_ROWS is None:
        db = sqlite3.connect(":memory:")
        db.text_factory = bytes
        for stmt in _SCHEMA:
            db.execute(stmt)
        _SCHEMA_ROWS = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall()
        db.close()
    return _SCHEMA_ROWS


_SCHEMA_ROWS: list[tuple] | None = None


def _reason(e: Entry, problem: str, *, malformed: bool = False) -> Reason:
    return Reason(seq=e.seq, entry=e.hash or f"#{e.seq}", kind="row" if malformed else e.kind, name=e.name, problem=problem)


def _busy(exc: sqlite3.DatabaseError) -> bool:
    """A lock held by another connection, not damage."""
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def _leaves(entries: list[Entry]) -> list[bytes]:
    """Merkle leaves: the entry hashes as stored (a malformed hash still counts, as its text)."""
    return [bytes.fromhex(e.hash) if _HEX[64].fullmatch(e.hash) else e.hash.encode() for e in entries]


def _rotation_signer(signature: str, actor: str, old: str, new: str, operator_key: str) -> str | None:
    """Who signed the rotation of ``actor`` from ``old`` to ``new``: "key" (the old key), "operator", or None."""
    data = rotation_bytes(actor, old, new)
    if verify_signature(old, signature, data):
        return "key"
    if verify_signature(operator_key, signature, data):
        return "operator"
    return None


def _procedure() -> dict[str, Any]:
    from caramba import __version__

    return {"hash": "sha256", "signature": "ed25519", "caramba": __version__}


def procedure(**extra: Any) -> dict[str, Any]:
    """The procedure record actors put in their evidence (hash algorithm, code revision, and
    e.g. ``manifest_hash``)."""
    return {**_procedure(), **{k: v for k, v in extra.items() if v is not None}}
