"""Deleting a run without breaking the Notary's chain.

The ledger is append-only: a run's evidence (intent, checkpoints, progress, claim) stays in it
forever. Deleting a run therefore means: the Notary records a ``deleted`` event about the run
(signed with its own key, listing what is removed and why), then the run's checkpoint blobs,
its run-store record, metrics, artifacts and folder are removed, and a tombstone keeps its ID.
``caramba notary verify`` then still passes: an artifact of a deleted run whose bytes are gone
is what the ledger says happened, and the report lists the run as deleted. Blobs that a
committed model version is made of are kept (the version still needs its weights).

    from caramba.run.manage import delete_run
    done = delete_run(store, "tiny-20261201-1200-ab12", reason="wrong dataset")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from caramba.errors import CarambaError, ConfigError

LIVE = ("created", "running")
MAX_REASON_CHARS = 2000


@dataclass
class Deletion:
    """What ``delete_run`` did: the run, the ledger entry recording it (``""``: the store has
    no ledger), the blobs removed and those kept for committed model versions."""

    run_id: str
    ledger_entry: str = ""
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    reason: str = ""

    def as_text(self) -> str:
        lines = [f"deleted run {self.run_id}"]
        if self.ledger_entry:
            lines.append(f"  the Notary recorded it: entry {self.ledger_entry[:12]}")
        if self.removed:
            lines.append(f"  removed {len(self.removed)} checkpoint blob(s)")
        if self.kept:
            lines.append(f"  kept {len(self.kept)} blob(s) of committed model versions")
        return "\n".join(lines)


Ask = Callable[[str, Any], Any]  # ask(role, message), role "notary" or "storage"


def delete_run(store: Any, ref: str, *, reason: str = "", ask: Ask | None = None) -> Deletion:
    """Delete run ``ref`` (ID, unique prefix or ``latest``) from ``store`` (a RunStore).

    ``ask(role, message)`` reaches the Notary and Storage actors of the store's ledger (the API
    passes its own); by default they are started on a local actor system when the store has a
    ledger. A live run (created or running) is refused: cancel it first. Raises RunNotFound
    (RunDeleted for one already deleted) when there is no such run."""
    from caramba.run.engine import ledger_root

    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        raise ConfigError(f"a deletion reason is text of at most {MAX_REASON_CHARS} characters")
    rec = store.get(ref)
    if rec.status in LIVE:
        raise ConfigError(f"run {rec.id} is {rec.status}: a live run cannot be deleted",
                          hint=f"cancel it first (`POST /api/v1/runs/{rec.id}/cancel`, or stop its process), then delete it")
    subject = str(rec.config.get("ledger_run") or rec.id) if isinstance(rec.config, dict) else rec.id
    done = Deletion(rec.id, reason=reason)
    ledger = ledger_root(store) / "notary" / "ledger.sqlite"
    from caramba.store.registry import remote_of

    remote = remote_of(ledger_root(store))  # an s3:// store: its ledger is in the bucket, the file a replica
    if remote is not None and ask is None:
        from caramba.actors.ledger_s3 import ledger_exists

        has_ledger = ledger_exists(remote)
    else:
        has_ledger = ledger.exists()
    if ask is None and has_ledger:
        from caramba.actors.services import start_services
        from caramba.actors.system import ActorSystem

        system = ActorSystem("local")
        try:
            services = start_services(system, ledger_root(store))
            names = {"notary": services.notary, "storage": services.storage}
            _record(lambda role, msg: system.lookup(names[role]).ask(msg), subject, rec, done)
        finally:
            system.shutdown()
    elif ask is not None:
        _record(ask, subject, rec, done)
    store.delete(rec.id, ledger_entry=done.ledger_entry, reason=reason)
    return done


def _record(ask: Ask, subject: str, rec: Any, done: Deletion) -> None:
    """Record the deletion with the Notary first, then remove the run's blobs: if the removal
    stops half way, the ledger already says why the rest is missing."""
    from caramba.actors.notary import Query, RecordDeletion
    from caramba.actors.storage import Delete, ListBlobs

    entries = ask("notary", Query(subject=subject)).entries
    keys = [e.payload["key"] for e in entries if e.kind == "artifact" and isinstance(e.payload.get("key"), str)]
    by_hash = {e.hash: e for e in entries}
    kept: set[str] = set()
    for e in entries:  # a committed model version is made of the checkpoint its claim cites
        if e.kind == "event" and e.name == "committed":
            for dep in e.depends_on:
                claim = by_hash.get(dep)
                ck = claim.payload.get("checkpoint") if claim is not None else None
                if isinstance(ck, dict) and isinstance(ck.get("key"), str):
                    kept.add(ck["key"])
    prefix = f"runs/{subject}/"
    try:
        listed = [b.key for b in ask("storage", ListBlobs(prefix=prefix)).items]
    except CarambaError:
        listed = []
    removable = [k for k in dict.fromkeys([*keys, *listed]) if k not in kept]
    if not entries and not removable:
        return  # the ledger never heard of this run: nothing of it to keep straight
    payload = {"run": rec.id, "experiment": rec.experiment, "reason": done.reason,
               "removed": removable, "kept": sorted(kept)}
    done.ledger_entry = ask("notary", RecordDeletion(subject=subject, payload=payload)).hash
    for key in removable:
        try:
            ask("storage", Delete(key=key))
            done.removed.append(key)
        except CarambaError:
            pass  # already gone: the ledger's deletion covers it either way
    done.kept = sorted(kept)


__all__ = ["Deletion", "delete_run"]
