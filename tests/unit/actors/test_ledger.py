"""The Notary's ledger: hash chain, signatures, DAG validity, voids, as-of queries, tampering."""

import sqlite3

import pytest

from caramba.actors.identity import Identity
from caramba.actors.ledger import EntryBody, Ledger, LedgerError, UnknownEntry, registration_bytes
from caramba.store import LocalBlobStore


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        self.t += 1.0
        return self.t


class World:
    """A notary, a storage and one experiment identity that records a small run."""

    def __init__(self, root):
        self.root = root
        self.notary = Identity.load_or_create(root / "notary.key", "notary")
        self.clock = Clock()
        self.ledger = Ledger(root / "ledger.sqlite", self.notary, clock=self.clock)
        self.blobs = LocalBlobStore(root / "blobs")
        self.exp = Identity.generate("experiment:r1")
        self.ledger.register(self.exp.name, self.exp.public_key, self.exp.sign(registration_bytes(self.exp.name, self.exp.public_key)))

    def digest(self, key):
        ref = self.blobs.digest(key)
        return ref.sha256, ref.size

    def emit(self, kind, name, payload=None, deps=(), ident=None):
        ident = ident or self.exp
        body = EntryBody(kind=kind, actor=ident.name, subject="r1", name=name, payload=payload or {}, depends_on=list(deps))
        return self.ledger.append(body, ident.public_key, ident.sign(body.signed_bytes()))

    def run(self):
        intent = self.emit("intent", "run", {"spec_hash": "abc", "steps": 20})
        self.note = self.emit("event", "note", {"text": "unrelated to the claim"})
        self.checkpoints, self.events = [], []
        prev_art, prev_ev = [intent.hash], []
        for step in (10, 20):
            ref = self.blobs.put(f"runs/r1/ckpt/{step}", f"weights at {step}".encode() * 8)
            art = self.emit("artifact", "checkpoint", {"key": ref.key, "sha256": ref.sha256, "size": ref.size, "step": step}, prev_art)
            ev = self.emit("event", "progress", {"step": step, "first_step": step - 9, "metrics": {"loss": [1.0 / step] * 10}}, [art.hash, *prev_ev])
            self.checkpoints.append(art)
            self.events.append(ev)
            prev_art, prev_ev = [intent.hash, art.hash], [ev.hash]
        self.claim = self.emit("claim", "final", {"metrics": {"eval_loss": 0.01}}, [intent.hash, self.checkpoints[-1].hash, self.events[-1].hash])
        return self.claim

    def tamper_sql(self, sql, *args):
        db = sqlite3.connect(self.root / "ledger.sqlite")
        db.execute("DROP TRIGGER entries_append_only_update")
        db.execute("DROP TRIGGER entries_append_only_delete")
        db.execute(sql, args)
        db.commit()
        db.close()


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    w.run()
    return w


def test_a_clean_run_is_verified(world):
    v = world.ledger.validity(world.claim.hash, artifacts=world.digest)
    assert v.verdict == "VERIFIED" and v.valid and v.reasons == []
    report = world.ledger.verify(artifacts=world.digest)
    assert report.ok and report.entries == len(world.ledger) == 9
    audit = world.ledger.audit(world.claim.hash, artifacts=world.digest)
    names = [(e.kind, e.name) for e in audit.entries]
    assert names[0] == ("event", "genesis") and names[-1] == ("claim", "final")
    assert all(c.ok for e in audit.entries for c in e.checks)
    assert any(c.name == "artifact" and "re-checked" in c.detail for e in audit.entries for c in e.checks)


def test_without_storage_artifacts_cannot_be_rechecked(world):
    v = world.ledger.validity(world.claim.hash)
    assert v.verdict == "VOIDED" and "no storage to read it from" in str(v.reasons[-1])


def test_rows_cannot_be_updated_or_deleted_through_sqlite(world):
    db = sqlite3.connect(world.root / "ledger.sqlite")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        db.execute("UPDATE entries SET name = 'x' WHERE seq = 3")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        db.execute("DELETE FROM entries WHERE seq = 3")
    db.close()


def test_edited_row_voids_everything_that_depends_on_it(world):
    first_progress = world.events[0]
    world.tamper_sql(
        "UPDATE entries SET payload = ? WHERE hash = ?",
        '{"first_step":1,"metrics":{"loss":[0.001,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1]},"step":10}',
        first_progress.hash,
    )
    v = world.ledger.validity(world.claim.hash, artifacts=world.digest)
    assert v.verdict == "VOIDED"
    # the reason chain walks from the claim to the edited row
    assert v.reasons[0].entry == world.claim.hash and "depends on" in v.reasons[0].problem
    assert v.reasons[-1].entry == first_progress.hash
    assert "row changed after it was recorded" in v.reasons[-1].problem
    assert "signature does not verify" in v.reasons[-1].problem
    # an entry recorded before the edit is untouched
    assert world.ledger.validity(world.checkpoints[0].hash, artifacts=world.digest).valid
    report = world.ledger.verify(artifacts=world.digest)
    assert not report.ok and [p.seq for p in report.problems] == [first_progress.seq]
    text = world.ledger.audit(world.claim.hash, artifacts=world.digest).as_text()
    assert "VOIDED" in text and "[BAD]" in text


def test_an_edit_anywhere_before_an_entry_breaks_its_chain(world):
    world.tamper_sql("UPDATE entries SET payload = ? WHERE hash = ?", '{"text":"rewritten"}', world.note.hash)
    v = world.ledger.validity(world.claim.hash, artifacts=world.digest)
    assert v.verdict == "VOIDED" and len(v.reasons) == 1
    assert f"the chain is broken before it, at #{world.note.seq} event 'note'" in v.reasons[0].problem
    assert world.ledger.validity(world.checkpoints[0].hash, as_of=world.note.time - 0.5, artifacts=world.digest).verdict == "UNKNOWN"


def test_rehashed_row_breaks_the_next_link(world):
    from caramba.actors.ledger import row_hash

    e = world.events[0]
    body = e.body().model_copy(update={"name": "forged"})
    new_hash = row_hash(e.seq, e.prev, e.time, body.signed_bytes(), e.public_key, e.signature)
    world.tamper_sql("UPDATE entries SET name = 'forged', hash = ? WHERE seq = ?", new_hash, e.seq)
    v = world.ledger.validity(world.claim.hash, artifacts=world.digest)
    assert v.verdict == "VOIDED"
    assert "chain broken" in v.reasons[-1].problem or "signature does not verify" in v.reasons[-1].problem
    problems = world.ledger.verify(artifacts=world.digest).problems
    assert [p.seq for p in problems] == [e.seq, e.seq + 1, e.seq + 2]
    assert "signature does not verify" in problems[0].problem and "chain broken" in problems[1].problem
    assert "which is not in the ledger" in problems[2].problem  # the next progress event cites the old hash


def test_deleted_row_breaks_the_sequence(world):
    world.tamper_sql("DELETE FROM entries WHERE seq = ?", world.events[0].seq)
    v = world.ledger.validity(world.claim.hash, artifacts=world.digest)
    assert v.verdict == "VOIDED"
    assert "sequence broken: expected #5, found #6" in v.reasons[-1].problem
    problems = world.ledger.verify(artifacts=world.digest).problems
    assert "sequence broken: expected #5, found #6" in problems[0].problem


def test_changed_artifact_byte_is_detected(world):
    ckpt = world.checkpoints[0]
    path = world.blobs.object_path(ckpt.payload["sha256"])
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[3] ^= 0x01
    path.write_bytes(bytes(data))
    v = world.ledger.validity(world.claim.hash, artifacts=world.digest)
    assert v.verdict == "VOIDED"
    assert v.reasons[-1].entry == ckpt.hash
    assert "artifact 'runs/r1/ckpt/10' changed" in v.reasons[-1].problem
    assert v.reasons[0].entry == world.claim.hash
    assert not world.ledger.verify(artifacts=world.digest).ok


def test_voids_and_as_of(world):
    before = world.clock.t
    void = world.emit("event", "void", {"reason": "eval metric regressed", "step": 20}, [world.claim.hash])
    v = world.ledger.validity(world.claim.hash, artifacts=world.digest)
    assert v.verdict == "VOIDED" and f"voided by #{void.seq}" in v.reasons[0].problem and "at step 20" in v.reasons[0].problem
    assert world.ledger.validity(world.claim.hash, as_of=before, artifacts=world.digest).valid
    early = world.ledger.validity(world.claim.hash, as_of=world.events[0].time, artifacts=world.digest)
    assert early.verdict == "UNKNOWN" and "after as_of" in early.reasons[0].problem
    assert world.ledger.verify(artifacts=world.digest).ok  # a void is a judgement, not damage


def test_non_finite_metrics_void_with_the_failing_step(world):
    ev = world.emit("event", "progress", {"step": 30, "first_step": 21, "metrics": {"loss": [0.1] * 6 + [float("nan")] * 4}}, [world.claim.hash])
    v = world.ledger.validity(ev.hash, artifacts=world.digest)
    assert v.verdict == "VOIDED" and "metric 'loss' is nan at step 27" in v.reasons[0].problem


def test_append_refuses_what_would_be_invalid(world):
    stranger = Identity.generate("stranger")
    with pytest.raises(LedgerError, match="not registered for actor 'stranger'"):
        world.emit("event", "x", ident=stranger)
    body = EntryBody(kind="event", actor=world.exp.name, name="x")
    with pytest.raises(LedgerError, match="signature does not verify"):
        world.ledger.append(body, world.exp.public_key, stranger.sign(body.signed_bytes()))
    with pytest.raises(UnknownEntry, match="depends on unknown entry"):
        world.emit("event", "x", deps=["f" * 64])
    with pytest.raises(LedgerError, match=r"payload \{key, sha256, size\}"):
        world.emit("artifact", "x", {"key": "k"})
    with pytest.raises(LedgerError, match="proof does not verify"):
        world.ledger.register("stranger", stranger.public_key, world.exp.sign(b"nope"))


def test_the_ledger_is_pinned_to_its_notary_key(world):
    assert (world.root / "notary.key").stat().st_mode & 0o777 == 0o600
    other = Identity.generate("notary")
    with pytest.raises(LedgerError, match="was created by Notary key"):
        Ledger(world.root / "ledger.sqlite", other)
    reopened = Ledger(world.root / "ledger.sqlite", Identity.load_or_create(world.root / "notary.key", "notary"))
    assert reopened.validity(world.claim.hash, artifacts=world.digest).valid
    assert reopened.get("#0").name == "genesis" and reopened.get(world.claim.hash[:10]).seq == world.claim.seq


def test_latest_valid_skips_damaged_checkpoints(world):
    newest = world.checkpoints[-1]
    path = world.blobs.object_path(newest.payload["sha256"])
    path.chmod(0o644)
    path.write_bytes(b"garbage")
    entry, skipped = world.ledger.latest_valid("r1", "checkpoint", kind="artifact", artifacts=world.digest)
    assert entry.hash == world.checkpoints[0].hash
    assert len(skipped) == 1 and "changed" in skipped[0].reasons[-1].problem


def test_tree_heads_use_rfc6962_merkle_hashing():
    """The Certificate Transparency reference vectors (RFC 6962 leaves, roots for sizes 0..8)."""
    from caramba.actors.ledger import merkle_root

    leaves = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                                         "606162636465666768696a6b6c6d6e6f")]
    roots = ["e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
             "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
             "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
             "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
             "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
             "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
             "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
             "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"]
    assert [merkle_root(leaves[:n]) for n in range(9)] == roots


def test_tree_heads_are_signed_and_checked(world):
    from caramba.actors.ledger import TreeHead, TreeHeadError

    head = world.ledger.tree_head()
    assert head.size == len(world.ledger) and head.signature_ok() and head.notary_key == world.notary.public_key
    assert TreeHead.load(head.model_dump_json()) == head
    assert world.ledger.verify(artifacts=world.digest, against=head).ok
    forged = head.model_copy(update={"size": head.size - 1})
    report = world.ledger.verify(artifacts=world.digest, against=forged)
    assert not report.ok and "its signature does not verify" in report.head_problems[0]
    with pytest.raises(TreeHeadError, match="is not a caramba tree head"):
        TreeHead.load('{"size": 3}')
    world.tamper_sql("UPDATE entries SET payload = ? WHERE hash = ?", '{"text":"rewritten"}', world.note.hash)
    with pytest.raises(LedgerError, match="does not verify, so no tree head is signed"):
        world.ledger.tree_head()


def test_appending_the_same_signed_body_twice_records_it_once(world):
    body = EntryBody(kind="event", actor=world.exp.name, subject="r1", name="note", payload={"text": "again"})
    sig = world.exp.sign(body.signed_bytes())
    first = world.ledger.append(body, world.exp.public_key, sig)
    n = len(world.ledger)
    assert world.ledger.append(body, world.exp.public_key, sig) == first and len(world.ledger) == n


def test_a_name_is_bound_to_its_first_key(world):
    from caramba.actors.ledger import IdentityBound

    again = world.ledger.register(world.exp.name, world.exp.public_key, world.exp.sign(registration_bytes(world.exp.name, world.exp.public_key)))
    assert again.payload["public_key"] == world.exp.public_key  # the same key: the same entry
    other = Identity.generate(world.exp.name)
    with pytest.raises(IdentityBound, match="is bound to key"):
        world.ledger.register(other.name, other.public_key, other.sign(registration_bytes(other.name, other.public_key)))
    with pytest.raises(IdentityBound, match="the Notary's own name"):
        world.ledger.register("notary", other.public_key, other.sign(registration_bytes("notary", other.public_key)))


def test_a_ledger_of_the_old_format_is_refused_with_what_to_do(tmp_path):
    db = sqlite3.connect(tmp_path / "ledger.sqlite")
    db.execute("CREATE TABLE entries (seq INTEGER PRIMARY KEY, hash TEXT NOT NULL UNIQUE)")
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match="is in format 1; this caramba reads format 2") as info:
        Ledger(tmp_path / "ledger.sqlite", Identity.generate("notary"))
    assert "rename it" in info.value.hint


def test_a_file_that_is_not_a_database_is_named(tmp_path):
    from caramba.actors.ledger import CorruptLedger

    (tmp_path / "ledger.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(CorruptLedger, match=r"ledger\.sqlite cannot be read by SQLite: file is not a database"):
        Ledger(tmp_path / "ledger.sqlite", Identity.generate("notary"))
