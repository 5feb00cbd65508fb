"""Deleted runs in the Notary's ledger: the Notary's ``deleted`` event makes a run's missing
artifact bytes what the ledger says happened (verify passes and lists the run), and nothing
else does: not a deletion by another key, not one recorded after the fact for bytes that are
still there but altered, not another run's deletion."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from caramba.actors.ledger import EntryBody, LedgerError

_spec = importlib.util.spec_from_file_location("ledger_world", Path(__file__).with_name("test_ledger.py"))
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)  # the World of test_ledger.py: a notary, storage and one small run "r1"
World = _mod.World


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    w.run()
    return w


def _gone(world):
    for art in world.checkpoints:
        world.blobs.delete(art.payload["key"])


def test_a_recorded_deletion_keeps_the_ledger_verifying(world):
    before = world.ledger.verify(artifacts=world.digest)
    assert before.ok and before.deleted == []
    entry = world.ledger.record_deletion("r1", {"reason": "bad data", "removed": ["runs/r1/ckpt/10"]})
    assert entry.actor == world.notary.name and entry.name == "deleted" and entry.subject == "r1"
    assert world.ledger.record_deletion("r1", {"reason": "again"}).hash == entry.hash  # once
    _gone(world)
    report = world.ledger.verify(artifacts=world.digest)
    assert report.ok, report.as_text()
    assert report.deleted == [f"run r1 (#{entry.seq}, bad data)"] and "deleted: run r1" in report.as_text()
    audit = world.ledger.audit(world.claim.hash, artifacts=world.digest)
    checks = [c for e in audit.entries for c in e.checks if c.name == "artifact"]
    assert checks and all(c.ok and "deleted" in c.detail for c in checks)
    with pytest.raises(LedgerError, match="names the run"):
        world.ledger.record_deletion("", {})


def test_missing_bytes_without_a_deletion_are_damage(world):
    _gone(world)
    report = world.ledger.verify(artifacts=world.digest)
    assert not report.ok and any("cannot be read" in str(p) for p in report.problems)


def test_a_deletion_by_another_key_covers_nothing(world):
    body = EntryBody(kind="event", actor=world.exp.name, subject="r1", name="deleted", payload={"reason": "me"})
    world.ledger.append(body, world.exp.public_key, world.exp.sign(body.signed_bytes()))
    _gone(world)
    report = world.ledger.verify(artifacts=world.digest)
    assert not report.ok and report.deleted == []


def test_a_deletion_does_not_excuse_altered_bytes_or_other_runs(world):
    world.ledger.record_deletion("r2", {"reason": "another run"})
    _gone(world)
    assert not world.ledger.verify(artifacts=world.digest).ok  # r1 was not deleted
    (world.root / "w2").mkdir()
    world2 = World(world.root / "w2")
    world2.run()
    world2.ledger.record_deletion("r1", {"reason": "kept bytes"})
    art = world2.checkpoints[0]
    path = world2.blobs.object_path(art.payload["sha256"])
    path.write_bytes(b"altered" + path.read_bytes())
    report = world2.ledger.verify(artifacts=world2.digest)
    assert not report.ok and any("changed" in str(p) for p in report.problems)


def test_entries_after_the_deletion_are_not_covered(world):
    world.ledger.record_deletion("r1", {"reason": "early"})
    ref = world.blobs.put("runs/r1/ckpt/30", b"later weights")
    world.emit("artifact", "checkpoint", {"key": ref.key, "sha256": ref.sha256, "size": ref.size, "step": 30})
    world.blobs.delete(ref.key)
    report = world.ledger.verify(artifacts=world.digest)
    assert not report.ok and any("runs/r1/ckpt/30" in str(p) for p in report.problems)
