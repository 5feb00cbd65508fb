"""The Notary actor: the only judge of what is valid.

Other actors emit evidence (``Evidence`` signs it with the actor's key and appends it); the
Notary records it in its ledger and answers ``ValidityOf`` / ``AuditOf`` by walking the
dependency DAG, re-hashing artifacts through the Storage actor as it goes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from caramba.actors.base import Actor, handler
from caramba.actors.identity import Identity
from caramba.actors.ledger import (
    Audit,
    Entry,
    EntryBody,
    Ledger,
    LedgerReport,
    Validity,
    procedure,
    registration_bytes,
)
from caramba.actors.messages import Message
from caramba.actors.storage import Digest


class RegisterIdentity(Message):
    actor: str
    public_key: str
    proof: str


class Append(Message):
    body: EntryBody
    public_key: str
    signature: str


class GetEntry(Message):
    ref: str


class Query(Message):
    subject: str | None = None
    kind: str | None = None
    name: str | None = None
    since: int = 0


class EntryList(Message):
    entries: list[Entry] = Field(default_factory=list)


class ValidityOf(Message):
    entry: str
    as_of: float | None = None


class AuditOf(Message):
    entry: str
    as_of: float | None = None


class VerifyLedger(Message):
    pass


class LatestValid(Message):
    subject: str
    name: str
    kind: str | None = None


class LatestValidReply(Message):
    entry: Entry | None = None
    skipped: list[Validity] = Field(default_factory=list)


class Notary(Actor):
    """Keeps the ledger in ``root/ledger.sqlite``; its own key is ``root/notary.key``.

    ``storage`` names the Storage actor holding the artifacts (None: artifacts cannot be
    re-checked, so every artifact-backed entry is VOIDED)."""

    def __init__(self, root: str, storage: str | None = "storage") -> None:
        self.root = Path(root)
        self.storage = storage
        self.ledger: Ledger | None = None

    def started(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        ident = Identity.load_or_create(self.root / "notary.key", self.context.name)
        self.ledger = Ledger(self.root / "ledger.sqlite", ident)

    def stopped(self) -> None:
        if self.ledger is not None:
            self.ledger.close()

    @property
    def book(self) -> Ledger:
        assert self.ledger is not None
        return self.ledger

    def _digest(self, key: str) -> tuple[str, int]:
        info = self.context.lookup(self.storage).ask(Digest(key=key)) if self.storage else None
        if info is None:
            from caramba.store.blobs import StoreError

            raise StoreError("the Notary has no Storage actor to read artifacts from")
        return info.sha256, info.size

    @handler
    def register(self, msg: RegisterIdentity) -> Entry:
        return self.book.register(msg.actor, msg.public_key, msg.proof)

    @handler
    def append(self, msg: Append) -> Entry:
        return self.book.append(msg.body, msg.public_key, msg.signature)

    @handler
    def get(self, msg: GetEntry) -> Entry:
        return self.book.get(msg.ref)

    @handler
    def query(self, msg: Query) -> EntryList:
        return EntryList(entries=self.book.entries(subject=msg.subject, kind=msg.kind, name=msg.name, since=msg.since))

    @handler
    def validity(self, msg: ValidityOf) -> Validity:
        return self.book.validity(msg.entry, msg.as_of, artifacts=self._digest)

    @handler
    def audit(self, msg: AuditOf) -> Audit:
        return self.book.audit(msg.entry, msg.as_of, artifacts=self._digest)

    @handler
    def verify(self, msg: VerifyLedger) -> LedgerReport:
        return self.book.verify(artifacts=self._digest)

    @handler
    def latest_valid(self, msg: LatestValid) -> LatestValidReply:
        entry, skipped = self.book.latest_valid(msg.subject, msg.name, kind=msg.kind, artifacts=self._digest)
        return LatestValidReply(entry=entry, skipped=skipped)


class Evidence:
    """How an actor emits evidence: signs entries with its identity and appends them.

    The identity is registered with the Notary on first use (with proof of possession)."""

    def __init__(self, actor: Actor, notary: str = "notary", **procedure_extra: Any) -> None:
        self.actor = actor
        self.notary = notary
        self.procedure = procedure(**procedure_extra)
        self._registered = False

    @property
    def ref(self):
        return self.actor.context.lookup(self.notary)

    def emit(
        self,
        kind: str,
        name: str,
        payload: dict[str, Any] | None = None,
        *,
        subject: str = "",
        depends_on: list[str] | tuple[str, ...] = (),
    ) -> Entry:
        ident = self.actor.identity
        notary = self.ref
        if not self._registered:
            notary.ask(RegisterIdentity(
                actor=ident.name, public_key=ident.public_key,
                proof=ident.sign(registration_bytes(ident.name, ident.public_key)),
            ))
            self._registered = True
        body = EntryBody(
            kind=kind,  # type: ignore[arg-type]
            actor=ident.name, subject=subject, name=name, payload=payload or {},
            depends_on=list(depends_on), procedure=self.procedure,
        )
        return notary.ask(Append(body=body, public_key=ident.public_key, signature=ident.sign(body.signed_bytes())))

    def validity(self, entry: str) -> Validity:
        return self.ref.ask(ValidityOf(entry=entry))
