"""Tampering with the Notary's ledger file from outside, through ``caramba notary verify``: each of
the six classic attacks (edit a payload, swap two rows, delete a middle row, truncate the file,
change a signature, insert a forged row) fails verification with a message that names the row or
the file, and verifying never changes the file: what was stored is all still there to inspect."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sqlite3
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from caramba.cli import app

_TAMPER = Path(__file__).resolve().parents[1] / "actors" / "test_notary_tamper.py"
_spec = importlib.util.spec_from_file_location("_attack_notary_tamper_helpers", _TAMPER)
T = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = T  # its actor classes look their module up by name
_spec.loader.exec_module(T)  # the honest ledger template and the tamper helpers of the actors suite


@pytest.fixture(scope="module")
def tpl(tmp_path_factory):
    return T.Template(tmp_path_factory.mktemp("attack_honest"))


@pytest.fixture
def case(tpl, tmp_path):
    return tpl.copy(tmp_path / "case")


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _verify(case: Path, *extra: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["notary", "verify", "--store", str(case), *extra])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output  # never a traceback
    return res.exit_code, res.output


def _edit_payload(tpl, case):
    row = T._row(tpl, 4)
    payload = dict(row["payload"], tampered=True)
    T.tamper(case, ("UPDATE entries SET payload = ? WHERE seq = 4", json.dumps(payload)))
    return [T.names(4)]


def _swap_rows(tpl, case):
    a, b = tpl.rows[0][3], tpl.rows[0][5]
    T.tamper(case, ("DELETE FROM entries WHERE seq IN (3, 5)",), (T.INSERT, 3, *b[1:]), (T.INSERT, 5, *a[1:]))
    return [T.names(3)]


def _delete_middle(tpl, case):
    T.tamper(case, ("DELETE FROM entries WHERE seq = 5",))
    return [T.names(6), "sequence broken"]


def _truncate_file(tpl, case):
    p = T.ledger_file(case)
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    return [re.escape(str(p))]


def _change_signature(tpl, case):
    sig = T._row(tpl, 4)["signature"]
    T.tamper(case, ("UPDATE entries SET signature = ? WHERE seq = 4", ("0" if sig[0] != "0" else "1") + sig[1:]))
    return [T.names(4)]


def _forge_row(tpl, case):
    from caramba.actors.identity import Identity
    from caramba.actors.ledger import EntryBody

    mallory = Identity.generate("notary")  # claims the Notary's own name with a fresh key
    body = EntryBody(kind="claim", actor="notary", subject="r1", name="final", payload={"metrics": {"eval_loss": 0.0}})
    seq = T._append_raw(case, {**body.model_dump(), "public_key": mallory.public_key,
                               "signature": mallory.sign(body.signed_bytes()), "receipt": mallory.sign(b"x")})
    return [T.names(seq)]


ATTACKS = [_edit_payload, _swap_rows, _delete_middle, _truncate_file, _change_signature, _forge_row]


@pytest.mark.slow  # builds the honest ledger from two real runs once (~5 s), then six verifies
@pytest.mark.parametrize("attack", ATTACKS, ids=[a.__name__.strip("_") for a in ATTACKS])
def test_each_attack_is_named_by_the_cli_and_verify_changes_nothing(tpl, case, attack):
    code, out = _verify(case)
    assert code == 0 and out.startswith("ledger OK"), out
    patterns = attack(tpl, case)
    before = _sha(T.ledger_file(case))
    code, out = _verify(case)
    assert code == 1 and "ledger INVALID" in out and "ledger OK" not in out, out
    for p in patterns:
        assert re.search(p, out), f"{p!r} not in:\n{out}"
    assert _sha(T.ledger_file(case)) == before  # verify only reads
    assert not (case / "notary" / "ledger.sqlite-wal").exists() or attack is _truncate_file
    if attack is not _truncate_file:  # every row that was not touched is still there, unchanged
        db = sqlite3.connect(f"file:{T.ledger_file(case)}?mode=ro", uri=True)
        try:
            stored = {r[1]: r for r in db.execute("SELECT * FROM entries")}
        finally:
            db.close()
        same = [r for r in tpl.rows[0] if r[1] in stored and stored[r[1]][1:] == r[1:]]
        assert len(same) >= len(tpl.rows[0]) - 2  # an attack touched at most two rows; verify lost none


def test_a_tampered_kept_head_argument_is_a_clean_error(case, tmp_path):
    for bad in ("[" * 100000, '{"size": "x"}', "null", '{"size": 1e400}'):
        p = tmp_path / "head.json"
        p.write_text(bad)
        res = CliRunner().invoke(app, ["notary", "verify", "--store", str(case), "--against", str(p)])
        assert res.exit_code != 0
        from caramba.errors import CarambaError

        assert isinstance(res.exception, (SystemExit, CarambaError)), repr(res.exception)


def test_a_nul_byte_in_the_kept_head_path_is_a_clean_error(case):
    from caramba.errors import CarambaError

    res = CliRunner().invoke(app, ["notary", "verify", "--store", str(case), "--against", "head\x00.json"])
    assert res.exit_code != 0 and isinstance(res.exception, (SystemExit, CarambaError)), repr(res.exception)


@pytest.mark.slow  # the honest ledger (module fixture, ~5 s)
def test_verify_of_a_store_whose_key_was_deleted_writes_nothing(tpl, case):
    key = case / "notary" / "notary.key"
    key.unlink()
    before = _sha(T.ledger_file(case))
    code, out = _verify(case)
    assert code == 1 and "notary.key" in out, out
    assert _sha(T.ledger_file(case)) == before
    assert not key.exists()  # verify only reads: it must not mint a new Notary identity
