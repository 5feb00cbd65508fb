"""Tampering with a real Notary ledger from outside (write access to the file, not to the keys):
every change is caught by ``verify_ledger`` (what ``caramba notary verify`` runs), and every
report names the row, the kept tree head or the file. The ledger comes from real runs: two
LinearRegression experiments through the Storage / Notary / Model actors, plus an auditor that
registers and signs an event of its own."""

import json
import re
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from caramba.actors import Actor, ActorSystem, Message, handler
from caramba.actors.experiment import RunSpec
from caramba.actors.identity import Identity, registration_bytes, rotation_bytes
from caramba.actors.ledger import (
    Entry,
    EntryBody,
    IdentityBound,
    Ledger,
    LedgerError,
    MalformedEntry,
    TreeHead,
    row_hash,
)
from caramba.actors.notary import (
    Append,
    AuditOf,
    Evidence,
    LatestValid,
    Query,
    RegisterIdentity,
    TreeHeadOf,
    ValidityOf,
    verify_ledger,
)
from caramba.actors.services import run_experiment, start_services
from caramba.cli import app

COLS = ("seq", "hash", "prev", "time", "kind", "actor", "subject", "name", "payload", "depends_on", "procedure",
        "public_key", "signature", "receipt")
INSERT = f"INSERT INTO entries ({', '.join(COLS)}) VALUES ({', '.join('?' * len(COLS))})"
FLIP_STRIDE = 173  # raw byte flips: every byte of the file header, then one byte in FLIP_STRIDE


def names(k: int) -> str:
    return rf"(?:#|row ){k}\b"


class Template:
    """The honest ledger: built once, copied for each tamper case (blobs shared, read-only)."""

    def __init__(self, root: Path):
        self.root = root
        with ActorSystem() as system:
            start_services(system, root)
            for run in ("r1", "r2"):
                status = run_experiment(system, RunSpec(run_id=run, steps=20, checkpoint_every=10, model="lin"))
                assert status.verdict == "VERIFIED"
            notary = system.lookup("notary")
            self.auditor = Identity.generate("auditor")
            a = self.auditor
            notary.ask(RegisterIdentity(actor=a.name, public_key=a.public_key, proof=a.sign(registration_bytes(a.name, a.public_key))))
            self.claim = notary.ask(Query(subject="r1", kind="claim")).entries[-1]
            body = EntryBody(kind="event", actor=a.name, subject="r1", name="reviewed", payload={"ok": True},
                             depends_on=[self.claim.hash])
            notary.ask(Append(body=body, public_key=a.public_key, signature=a.sign(body.signed_bytes())))
            self.head = notary.ask(TreeHeadOf())
        self.rows = dump(root)
        assert not (root / "notary" / "ledger.sqlite-wal").exists()  # closed: everything is in the one file

    def copy(self, dst: Path) -> Path:
        (dst / "notary").mkdir(parents=True)
        for f in ("ledger.sqlite", "notary.key"):
            shutil.copy2(self.root / "notary" / f, dst / "notary" / f)
        (dst / "blobs").symlink_to(self.root / "blobs")
        return dst


def ledger_file(root: Path) -> Path:
    return root / "notary" / "ledger.sqlite"


def dump(root: Path) -> tuple:
    db = sqlite3.connect(ledger_file(root))
    try:
        rows = db.execute("SELECT * FROM entries ORDER BY seq").fetchall()
        schema = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall()
        return rows, schema, db.execute("PRAGMA user_version").fetchone()
    finally:
        db.close()


def tamper(root: Path, *statements: tuple, restore: bool = True) -> None:
    """Run SQL on the ledger file with the append-only triggers dropped (and put back after,
    as a careful attacker would: the schema check does not see the edit, the row checks must)."""
    db = sqlite3.connect(ledger_file(root))
    triggers = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in triggers:
        db.execute(f"DROP TRIGGER {name}")
    for sql, *args in statements:
        db.execute(sql, args)
    for _, sql in triggers if restore else ():
        db.execute(sql)
    db.commit()
    db.close()


def detected(root: Path, head: TreeHead | None, *patterns: str):
    report = verify_ledger(root, against=head)
    text = report.as_text()
    assert not report.ok, f"undetected:\n{text}"
    for p in patterns:
        assert re.search(p, text), f"{p!r} not in:\n{text}"
    return report


@pytest.fixture(scope="module")
def tpl(tmp_path_factory):
    return Template(tmp_path_factory.mktemp("honest"))


@pytest.fixture
def case(tpl, tmp_path):
    return tpl.copy(tmp_path / "case")


def one_byte_edits(value):
    """The value with one byte changed: a bit of an integer's second byte, the last byte of a
    float, or the first and the middle character of a text."""
    if isinstance(value, int):
        return [value ^ 0x100]
    if isinstance(value, float):
        b = bytearray(struct.pack(">d", value))
        b[-1] ^= 1
        return [struct.unpack(">d", bytes(b))[0]]
    if not value:
        return ["x"]
    return [value[:i] + chr(ord(value[i]) ^ 1) + value[i + 1:] for i in sorted({0, len(value) // 2})]


# ---- the honest ledger --------------------------------------------------------------------------
def test_the_honest_ledger_verifies_with_and_without_its_kept_head(tpl, case):
    report = verify_ledger(case)
    assert report.ok and report.entries == len(tpl.rows[0]) and report.as_text().startswith("ledger OK:")
    report = verify_ledger(case, against=tpl.head)
    assert report.ok and "extends the kept tree head" in report.as_text()
    assert report.tree == tpl.head  # the same history gives the same signed head
    # the ledger grows: it still extends the old head
    with ActorSystem() as system:
        start_services(system, case)
        status = run_experiment(system, RunSpec(run_id="r3", steps=10, checkpoint_every=10, model="lin"))
        assert status.verdict == "VERIFIED"
        newer = system.lookup("notary").ask(TreeHeadOf())
    assert newer.size > tpl.head.size and newer.signature_ok()
    assert verify_ledger(case, against=tpl.head).ok and verify_ledger(case, against=newer).ok


# ---- single-byte edits of every column of every row --------------------------------------------
def test_a_single_byte_edit_of_any_column_of_any_row_is_detected_and_named(tpl, tmp_path):
    cases = missed = 0
    failures = []
    for row in tpl.rows[0]:
        seq = row[0]
        for col, value in zip(COLS, row, strict=True):
            for new in one_byte_edits(value):
                root = tpl.copy(tmp_path / f"c{cases}")
                cases += 1
                tamper(root, (f"UPDATE entries SET {col} = ? WHERE seq = ?", new, seq))
                report = verify_ledger(root, against=tpl.head)
                text = report.as_text()
                if report.ok or not re.search(names(seq), text):
                    missed += 1
                    failures.append(f"row {seq} {col} {value!r} -> {new!r}:\n{text}")
                shutil.rmtree(root)
    print(f"single-byte edits: {cases} cases, {cases - missed} detected and named")
    assert cases > 400 and not failures, "\n".join(failures[:5])


# ---- raw byte flips in the database file ---------------------------------------------------------
def _flip_bytes(tpl, tmp_path, positions):
    data = ledger_file(tpl.root).read_bytes()
    counts = {"detected": 0, "no effect": 0}
    failures = []
    for n, pos in enumerate(positions):
        root = tpl.copy(tmp_path / f"f{n}")
        flipped = bytearray(data)
        flipped[pos] ^= 0xFF
        ledger_file(root).write_bytes(bytes(flipped))
        try:
            report = verify_ledger(root, against=tpl.head)
        except Exception as exc:  # never a traceback: a failed report
            failures.append(f"byte {pos}: verify raised {exc!r}")
            continue
        if not report.ok:
            counts["detected"] += 1
            assert str(ledger_file(root)) in report.as_text()
        else:
            try:  # "OK" is right only if nothing the ledger holds changed (free space, counters)
                same = dump(root) == tpl.rows
            except sqlite3.DatabaseError as exc:
                same = False
                failures.append(f"byte {pos}: verify said OK but the file does not read: {exc}")
            if same:
                counts["no effect"] += 1
            else:
                failures.append(f"byte {pos}: content changed and verify said OK")
        shutil.rmtree(root)
    return counts, failures


def test_raw_byte_flips_in_the_file_are_detected_unless_they_change_nothing(tpl, tmp_path):
    size = ledger_file(tpl.root).stat().st_size
    positions = [*range(100), *range(100, size, FLIP_STRIDE)]
    counts, failures = _flip_bytes(tpl, tmp_path, positions)
    print(f"byte flips: {len(positions)} of {size} bytes, {counts}")
    assert not failures, "\n".join(failures[:5])
    assert counts["detected"] > len(positions) // 3


@pytest.mark.slow
def test_byte_flips_all_over_the_file(tpl, tmp_path):  # about 4 minutes on one core
    size = ledger_file(tpl.root).stat().st_size
    counts, failures = _flip_bytes(tpl, tmp_path, range(0, size, 5))
    print(f"byte flips: every fifth of {size} bytes, {counts}")
    assert not failures, "\n".join(failures[:5])


def test_a_dropped_trigger_is_reported(tpl, case):
    tamper(case, restore=False)
    report = detected(case, tpl.head, "schema: trigger entries_append_only_delete is missing")
    assert not report.problems  # every row is intact


def test_a_dropped_table_is_not_taken_for_a_new_ledger(tpl, case):
    tamper(case, ("DROP TABLE entries",), restore=False)
    detected(case, None, "without the ledger's entries table", re.escape(str(ledger_file(case))))


def test_index_corruption_fails_the_database_integrity_check(tpl, case):
    path = ledger_file(case)
    db = sqlite3.connect(path)
    (root_page,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'entries_subject'").fetchone()
    (page_size,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    data = bytearray(path.read_bytes())
    start = (root_page - 1) * page_size
    at = data.index(b"progress", start, start + page_size)  # a key of the (subject, name) index
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    assert dump(case)[0] == tpl.rows[0]  # the table itself is intact: only SQLite's check sees it
    report = detected(case, tpl.head, "PRAGMA integrity_check", re.escape(str(path)))
    assert report.database and not report.problems


@pytest.mark.parametrize("damage", ["header", "truncated", "garbage", "empty"])
def test_a_file_that_is_not_a_database_is_a_failed_report_naming_it(tpl, case, damage):
    path = ledger_file(case)
    data = path.read_bytes()
    path.write_bytes({"header": b"\x00" * 16 + data[16:], "truncated": data[: len(data) // 2],
                      "garbage": bytes(range(256)) * 16, "empty": b""}[damage])
    detected(case, tpl.head, re.escape(str(path)))


# ---- rows removed, moved, replayed, forged ---------------------------------------------------------
def test_deleting_a_middle_row_breaks_the_sequence(tpl, case):
    tamper(case, ("DELETE FROM entries WHERE seq = 5",))
    detected(case, None, names(6), "sequence broken: expected #5, found #6")


def test_deleting_the_tail_is_detected_against_a_kept_head(tpl, case):
    n = len(tpl.rows[0])
    tamper(case, ("DELETE FROM entries WHERE seq >= ?", n - 2))
    assert verify_ledger(case).ok  # without a kept head a shorter history is a consistent one
    report = detected(case, tpl.head, "kept tree head", f"only {n - 2} entries", "truncated or rolled back")
    assert report.head_problems and not report.problems


def test_deleting_a_row_and_rechaining_the_rest_fails_the_receipts(tpl, case):
    """The attacker removes row 4 and renumbers and re-hashes every later row: the chain is
    consistent again, but the Notary's receipts (its signature over each row's position) are not."""
    statements = [("DELETE FROM entries WHERE seq >= 4",)]
    prev = tpl.rows[0][3][1]
    for seq, row in enumerate(tpl.rows[0][5:], start=4):
        e = _row(tpl, row[0])
        h = row_hash(seq, prev, e["time"], _body(e).signed_bytes(), e["public_key"], e["signature"])
        statements.append((INSERT, seq, h, prev, *row[3:]))
        prev = h
    tamper(case, *statements)
    detected(case, None, names(4), "receipt for this position does not verify")
    detected(case, tpl.head, "kept tree head")


def test_reordering_rows_is_detected(tpl, case):
    a, b = tpl.rows[0][3], tpl.rows[0][5]  # swap every column but seq
    tamper(case, ("DELETE FROM entries WHERE seq IN (3, 5)",), (INSERT, 3, *b[1:]), (INSERT, 5, *a[1:]))
    detected(case, tpl.head, names(3), names(5))


def _append_raw(case: Path, row: dict) -> int:
    """Append a row the way an attacker with the file (not the keys) can: chained and hashed."""
    db = sqlite3.connect(ledger_file(case))
    seq, prev, t = db.execute("SELECT seq + 1, hash, time FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
    db.close()
    body = _body(row)
    h = row_hash(seq, prev, t + 1, body.signed_bytes(), row["public_key"], row["signature"])
    tamper(case, (INSERT, seq, h, prev, t + 1, body.kind, body.actor, body.subject, body.name, json.dumps(body.payload),
                  json.dumps(body.depends_on), json.dumps(body.procedure), row["public_key"], row["signature"],
                  row["receipt"]))
    return seq


def _body(row: dict) -> EntryBody:
    return EntryBody(**{k: row[k] for k in ("kind", "actor", "subject", "name", "payload", "depends_on", "procedure")})


def _row(tpl, seq: int) -> dict:
    r = dict(zip(COLS, tpl.rows[0][seq], strict=True))
    for c in ("payload", "depends_on", "procedure"):
        r[c] = json.loads(r[c])
    return r


def test_a_replayed_signed_row_is_detected(tpl, case):
    seq = _append_raw(case, _row(tpl, 4))  # the first progress event of r1, signature and receipt as recorded
    detected(case, None, names(seq), "replay: the same signed event", "already recorded as #4",
             "receipt for this position does not verify")


def test_a_row_signed_by_an_unregistered_key_is_detected(tpl, case):
    stranger = Identity.generate("stranger")
    body = EntryBody(kind="claim", actor="stranger", subject="r1", name="final", payload={"metrics": {"eval_loss": 0.0}})
    seq = _append_raw(case, {**body.model_dump(), "public_key": stranger.public_key,
                             "signature": stranger.sign(body.signed_bytes()), "receipt": stranger.sign(b"x")})
    detected(case, None, names(seq), "was not registered for 'stranger'")


def test_reregistering_an_actor_name_with_a_new_key_is_refused_and_detected(tpl, case):
    """The attack of issue 17: a fresh key for an existing name, then a claim with perfect metrics."""
    victim = _row(tpl, 2)["actor"]  # the experiment that recorded r1
    mallory = Identity.generate(victim)
    proof = mallory.sign(registration_bytes(victim, mallory.public_key))
    forged = EntryBody(kind="claim", actor=victim, subject="r1", name="final",
                       payload={"metrics": {"eval_loss": 1.0, "accuracy": 1.0}})
    with ActorSystem() as system:
        start_services(system, case)
        notary = system.lookup("notary")
        with pytest.raises(IdentityBound, match=f"actor '{re.escape(victim)}' is bound to key"):
            notary.ask(RegisterIdentity(actor=victim, public_key=mallory.public_key, proof=proof))
        with pytest.raises(LedgerError, match="is not registered for actor"):
            notary.ask(Append(body=forged, public_key=mallory.public_key, signature=mallory.sign(forged.signed_bytes())))
    assert verify_ledger(case, against=tpl.head).ok  # nothing was recorded

    # a Notary that skipped the binding check (or an old ledger) recorded the re-binding: verify names it
    key = Identity.load_or_create(case / "notary" / "notary.key", "notary")
    ledger = Ledger(ledger_file(case), key)
    reg = ledger.append_own("event", "identity", {"actor": victim, "public_key": mallory.public_key, "proof": proof}, subject=victim)
    ledger.close()
    seq = _append_raw(case, {**forged.model_dump(), "public_key": mallory.public_key,
                             "signature": mallory.sign(forged.signed_bytes()), "receipt": key.sign(b"not a receipt")})
    detected(case, tpl.head, names(reg.seq), "without a rotation signed by the old key or the operator",
             names(seq), "is not the key bound to")
    with ActorSystem() as system:
        start_services(system, case)
        notary = system.lookup("notary")
        entry = notary.ask(LatestValid(subject="r1", name="final", kind="claim")).entry
        assert entry.hash == tpl.claim.hash  # the forged claim never wins


def test_a_forged_identity_row_is_detected(tpl, case):
    victim = _row(tpl, 2)["actor"]
    mallory = Identity.generate(victim)
    genesis = _row(tpl, 0)
    body = EntryBody(kind="event", actor=genesis["actor"], subject=victim, name="identity",
                     payload={"actor": victim, "public_key": mallory.public_key,
                              "proof": mallory.sign(registration_bytes(victim, mallory.public_key))})
    seq = _append_raw(case, {**body.model_dump(), "public_key": genesis["public_key"],
                             "signature": mallory.sign(body.signed_bytes()), "receipt": mallory.sign(b"x")})
    detected(case, tpl.head, names(seq), "signature does not verify")


# ---- malformed rows: reported by row, never a crash, never VALID ---------------------------------
MALFORMED = {  # column, SQL value, what the report says
    "kind": ("kind", "?", "clam", "kind 'clam' is not one of intent, event, claim, artifact"),
    "json": ("payload", "?", '{"step": 10, "metr', "payload is not JSON"),
    "type": ("payload", "?", "[1, 2]", "payload is a JSON list, not a JSON object"),
    "time": ("time", "?", "soon", "time is 'soon', not a finite number"),
    "blob": ("name", "?", b"\x00\x01", "name is a 2-byte BLOB, not text"),
    "utf8": ("kind", "CAST(? AS TEXT)", b"cl\xffim", "kind is not UTF-8 text"),
    "hex": ("signature", "?", "zz" * 64, "signature 'zzz"),
    "deps": ("depends_on", "?", '["not a hash"]', "depends_on holds something other than entry hashes"),
}


@pytest.mark.parametrize("what", sorted(MALFORMED))
def test_a_malformed_row_is_named_in_verify_and_queries_do_not_crash(tpl, case, what):
    col, expr, value, message = MALFORMED[what]
    tamper(case, (f"UPDATE entries SET {col} = {expr} WHERE seq = 4", value))
    detected(case, None, r"row 4: " + ".*" + re.escape(message))
    later = tpl.claim
    with ActorSystem() as system:
        start_services(system, case)
        notary = system.lookup("notary")
        listed = notary.ask(Query(subject="r1"))
        assert 4 not in [e.seq for e in listed.entries] and [r.seq for r in listed.malformed] == [4]
        assert message in str(listed.malformed[0])
        v = notary.ask(ValidityOf(entry=later.hash))
        assert v.verdict == "VOIDED" and "row 4" in v.explain()
        assert notary.ask(ValidityOf(entry="#4")).verdict == "VOIDED"
        assert not notary.ask(AuditOf(entry=later.hash)).validity.valid
        found = notary.ask(LatestValid(subject="r1", name="checkpoint", kind="artifact"))
        assert found.entry is None or found.entry.seq < 4
    key = Identity.load_or_create(case / "notary" / "notary.key", "notary")
    ledger = Ledger(ledger_file(case), key)
    try:
        with pytest.raises(MalformedEntry, match="row 4: "):
            ledger.entries(subject="r1")
        with pytest.raises(MalformedEntry, match="row 4: "):
            ledger.get("#4")
    finally:
        ledger.close()


def test_a_null_column_is_named(tpl, case):
    """NOT NULL is part of the schema, so an attacker rebuilds the table without it first."""
    tamper(case, ("CREATE TABLE loose AS SELECT * FROM entries",), ("DROP TABLE entries",),
           ("ALTER TABLE loose RENAME TO entries",), ("UPDATE entries SET actor = NULL WHERE seq = 7",))
    detected(case, tpl.head, r"row 7: actor is NULL, not text")


# ---- keys: rotation -------------------------------------------------------------------------------
def test_a_legitimate_key_rotation_verifies(tpl, case):
    key = Identity.load_or_create(case / "notary" / "notary.key", "notary")
    ledger = Ledger(ledger_file(case), key)
    old = tpl.auditor
    new = Identity.generate(old.name)
    new_proof = new.sign(registration_bytes(old.name, new.public_key))
    with pytest.raises(LedgerError, match="verifies against neither the old key nor the operator key"):
        ledger.register(old.name, new.public_key, new_proof, rotation=new.sign(rotation_bytes(old.name, old.public_key, new.public_key)))
    rotated = ledger.register(old.name, new.public_key, new_proof, rotation=old.sign(rotation_bytes(old.name, old.public_key, new.public_key)))
    assert rotated.payload["rotation"]["by"] == "key"
    body = EntryBody(kind="event", actor=old.name, subject="r2", name="reviewed", payload={"ok": True})
    with pytest.raises(LedgerError, match="is not registered for actor 'auditor'"):
        ledger.append(body, old.public_key, old.sign(body.signed_bytes()))  # the old key is retired
    after = ledger.append(body, new.public_key, new.sign(body.signed_bytes()))
    # the operator (holder of the Notary key) may rotate too
    third = Identity.generate(old.name)
    by_operator = ledger.register(old.name, third.public_key, third.sign(registration_bytes(old.name, third.public_key)),
                                  rotation=key.sign(rotation_bytes(old.name, new.public_key, third.public_key)))
    assert by_operator.payload["rotation"]["by"] == "operator"
    ledger.close()
    report = verify_ledger(case, against=tpl.head)
    assert report.ok, report.as_text()
    with ActorSystem() as system:
        start_services(system, case)
        notary = system.lookup("notary")
        assert notary.ask(ValidityOf(entry=after.hash)).valid  # signed by the new key after the rotation
        reviewed = notary.ask(Query(subject="r1", name="reviewed")).entries[0]
        assert notary.ask(ValidityOf(entry=reviewed.hash)).valid  # signed by the old key before it
    # an entry by the retired key slipped in afterwards is named
    seq = _append_raw(case, {**body.model_copy(update={"name": "late"}).model_dump(), "public_key": old.public_key,
                             "signature": old.sign(body.model_copy(update={"name": "late"}).signed_bytes()),
                             "receipt": old.sign(b"x")})
    detected(case, None, names(seq), "is not the key bound to 'auditor' at this point")


class Write(Message):
    name: str


class Writer(Actor):
    """Signs an event through ``Evidence``, as the Experiment actor does."""

    def started(self):
        self.evidence = Evidence(self)

    @handler
    def write(self, msg: Write) -> Entry:
        return self.evidence.emit("event", msg.name, subject="w")


def test_a_new_incarnation_of_an_actor_signs_under_its_own_name(tmp_path):
    """A respawned actor has a new key and a new incarnation name; the old name stays bound to
    the old key, and both incarnations' evidence verifies."""
    with ActorSystem() as system:
        start_services(system, tmp_path)
        first = system.spawn(Writer, "writer").ask(Write(name="a"))
        system.stop("writer")
        second = system.spawn(Writer, "writer").ask(Write(name="b"))
        assert first.actor.startswith("writer#") and second.actor.startswith("writer#") and first.actor != second.actor
        notary = system.lookup("notary")
        assert notary.ask(ValidityOf(entry=first.hash)).valid and notary.ask(ValidityOf(entry=second.hash)).valid
    assert verify_ledger(tmp_path).ok


# ---- the command line ----------------------------------------------------------------------------
def test_the_cli_exports_a_head_and_verifies_against_it(tpl, case, tmp_path):
    run = CliRunner()
    kept = tmp_path / "head.json"
    res = run.invoke(app, ["notary", "head", "--store", str(case), "--out", str(kept)])
    assert res.exit_code == 0, res.output
    assert TreeHead.load(str(kept)) == tpl.head
    res = run.invoke(app, ["notary", "verify", "--store", str(case), "--against", str(kept)])
    assert res.exit_code == 0 and res.output.startswith("ledger OK:") and "extends the kept tree head" in res.output, res.output
    res = run.invoke(app, ["notary", "verify", "--store", str(case), "--against", kept.read_text()])
    assert res.exit_code == 0, res.output

    tamper(case, ("DELETE FROM entries WHERE seq = ?", len(tpl.rows[0]) - 1))
    res = run.invoke(app, ["notary", "verify", "--store", str(case)])
    assert res.exit_code == 0, res.output  # the truncation is invisible without a kept head ...
    res = run.invoke(app, ["notary", "verify", "--store", str(case), "--against", str(kept)])
    assert res.exit_code == 1 and "ledger INVALID" in res.output and "kept tree head" in res.output, res.output

    res = run.invoke(app, ["notary", "verify", "--store", str(case), "--against", str(tmp_path / "nope.json")])
    assert res.exit_code != 0 and "cannot read tree head" in str(res.exception or res.output)


def test_the_cli_reports_a_damaged_file_without_a_traceback(tpl, case):
    path = ledger_file(case)
    path.write_bytes(b"\x00" * 16 + path.read_bytes()[16:])
    res = CliRunner().invoke(app, ["notary", "verify", "--store", str(case)])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    assert "ledger INVALID" in res.output and str(path) in res.output and "ledger OK" not in res.output
    res = CliRunner().invoke(app, ["notary", "head", "--store", str(case)])
    assert res.exit_code != 0
