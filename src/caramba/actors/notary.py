"""The Notary actor: the only judge of what is valid.

Other actors emit evidence (``Evidence`` signs it with the actor's key and appends it); the
Notary records it in its ledger and answers ``ValidityOf`` / ``AuditOf`` by walking the
dependency DAG, re-hashing artifacts through the Storage actor as it goes. ``TreeHeadOf``
gives the signed tree head a client keeps; ``VerifyLedger(against=head)`` checks the ledger
still extends it. ``verify_ledger`` is what ``caramba notary verify`` runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field

from caramba.actors.base import Actor, handler
from caramba.actors.identity import Identity, registration_bytes
from caramba.actors.ledger import (
    Audit,
    Entry,
    EntryBody,
    Ledger,
    LedgerReport,
    Reason,
    TreeHead,
    Validity,
    procedure,
)
from caramba.actors.messages import Message
from caramba.actors.storage import Digest
from caramba.errors import CarambaError


class RegisterIdentity(Message):
    """Bind ``public_key`` to ``actor`` (``proof``: the key's signature over
    ``registration_bytes``). Another key for a bound name needs ``rotation``: a signature over
    ``rotation_bytes(actor, old, new)`` by the old key or the operator (Notary) key."""

    actor: str
    public_key: str
    proof: str
    rotation: str | None = None


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
    """Entries as recorded; ``malformed``: matching rows that could not be read (skipped)."""

    entries: list[Entry] = Field(default_factory=list)
    malformed: list[Reason] = Field(default_factory=list)


class ValidityOf(Message):
    entry: str
    as_of: float | None = None


class AuditOf(Message):
    entry: str
    as_of: float | None = None


class VerifyLedger(Message):
    """Check the whole ledger; with ``against``, also that it still extends that kept head."""

    against: TreeHead | None = None


class TreeHeadOf(Message):
    """The signed tree head of the ledger as it is now (refused when the ledger does not verify)."""


class RecordDeletion(Message):
    """The operator deleted run ``subject``: the Notary records it (its own signed ``deleted``
    event), so the run's evidence still verifies once its artifacts are gone. ``payload`` says
    what was removed and why."""

    subject: str
    payload: dict[str, Any] = Field(default_factory=dict)


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
        from caramba.store.registry import remote_of

        remote = remote_of(self.root.parent)  # the services root of a remote store (s3://): its ledger is there
        if remote is not None:
            from caramba.actors.ledger_s3 import S3Ledger

            self.ledger = S3Ledger(remote, ident, self.root / "ledger.sqlite")
        else:
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
        return self.book.register(msg.actor, msg.public_key, msg.proof, msg.rotation)

    @handler
    def append(self, msg: Append) -> Entry:
        return self.book.append(msg.body, msg.public_key, msg.signature)

    @handler
    def get(self, msg: GetEntry) -> Entry:
        return self.book.get(msg.ref)

    @handler
    def query(self, msg: Query) -> EntryList:
        good, malformed = self.book.scan(subject=msg.subject, kind=msg.kind, name=msg.name, since=msg.since)
        return EntryList(entries=good, malformed=malformed)

    @handler
    def validity(self, msg: ValidityOf) -> Validity:
        return self.book.validity(msg.entry, msg.as_of, artifacts=self._digest)

    @handler
    def audit(self, msg: AuditOf) -> Audit:
        return self.book.audit(msg.entry, msg.as_of, artifacts=self._digest)

    @handler
    def verify(self, msg: VerifyLedger) -> LedgerReport:
        return self.book.verify(artifacts=self._digest, against=msg.against)

    @handler
    def tree_head(self, msg: TreeHeadOf) -> TreeHead:
        return self.book.tree_head()

    @handler
    def record_deletion(self, msg: RecordDeletion) -> Entry:
        return self.book.record_deletion(msg.subject, msg.payload)

    @handler
    def latest_valid(self, msg: LatestValid) -> LatestValidReply:
        entry, skipped = self.book.latest_valid(msg.subject, msg.name, kind=msg.kind, artifacts=self._digest)
        return LatestValidReply(entry=entry, skipped=skipped)


class Evidence:
    """How an actor emits evidence: signs entries with its identity and appends them.

    The identity is registered with the Notary on first use (with proof of possession). Each
    incarnation of an actor has its own key and name (``Actor.identity``), so a restarted actor
    never needs its predecessor's name: that stays bound to the predecessor's key."""

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


NO_LEDGER_HINT = "runs record to the Notary with `caramba research run M.yml` (also with --cluster local|ray) or through `caramba serve`"


def verify_ledger(root: str | os.PathLike, against: TreeHead | None = None) -> LedgerReport:
    """``caramba notary verify``: the ledger of the services under ``root`` (``root/notary``),
    checked end to end through a Notary on a local actor system, artifacts re-read through its
    Storage. A ledger file that cannot even be opened is a failed report naming the file."""
    from caramba.actors.services import start_services
    from caramba.actors.system import ActorSystem

    path = Path(root) / "notary" / "ledger.sqlite"
    from caramba.store.registry import remote_of

    remote = remote_of(Path(root))
    if remote is not None:  # the ledger is in the bucket; the local file is only a replica
        from caramba.actors.ledger_s3 import ledger_exists

        if not ledger_exists(remote):
            from caramba.errors import ConfigError

            raise ConfigError(f"no ledger in {remote.split('?')[0]}ledger/", hint=NO_LEDGER_HINT)
    elif not path.exists():
        from caramba.errors import ConfigError

        raise ConfigError(f"no ledger at {path}", hint=NO_LEDGER_HINT)
    if remote is None and path.stat().st_size == 0:  # the Notary would start a new ledger in it: a wiped one is not "OK"
        return LedgerReport(ok=False, entries=0, head="", file=str(path), against=against,
                            database=[f"ledger file {path} is empty (0 bytes): its history was wiped"])
    key = path.parent / "notary.key"
    if not key.exists():  # starting a Notary would mint a new identity: verify only reads
        return LedgerReport(ok=False, entries=0, head="", file=str(path), against=against,
                            database=[f"{key} is missing: the Notary that signed this ledger cannot be checked; "
                                      "restore the key (verify never creates one)"])
    system = ActorSystem("local")
    try:
        try:
            services = start_services(system, root)
        except CarambaError as exc:
            return LedgerReport(ok=False, entries=0, head="", file=str(path), database=[exc.message], against=against)
        return system.lookup(services.notary).ask(VerifyLedger(against=against))
    finally:
        system.shutdown()
