"""`caramba notary verify|log|audit` read the ledger that `research run --cluster` wrote."""

import sqlite3

from typer.testing import CliRunner

from caramba.cli import app

from .test_manifest_runs import BLOBS

RUN = CliRunner()


def test_notary_commands_read_the_cluster_ledger_and_see_tampering(tmp_path):
    m = tmp_path / "blobs.yml"
    m.write_text(BLOBS.replace("steps: 30", "steps: 10").replace("runs: [{id: s0, seed: 0}, {id: s1, seed: 1}]", "runs: [{id: s0, seed: 0}]"))
    store = str(tmp_path / "store")
    res = RUN.invoke(app, ["research", "run", str(m), "--cluster", "local", "--workers", "1", "--store", store])
    assert res.exit_code == 0, res.output

    res = RUN.invoke(app, ["notary", "verify", "--store", store])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("ledger OK:")

    res = RUN.invoke(app, ["notary", "log", "--store", store, "--kind", "claim"])
    assert res.exit_code == 0, res.output
    claims = [line for line in res.output.splitlines() if line.startswith("#")]
    assert claims and all(" claim " in line for line in claims)
    seq = claims[-1].split()[0]

    res = RUN.invoke(app, ["notary", "audit", seq, "--store", store])
    assert res.exit_code == 0, res.output
    assert "VERIFIED" in res.output and "evidence:" in res.output
    for unknown in ("deadbeef00", "#99999"):  # an entry that is not there: one clear error, not "#-1 ?"
        res = RUN.invoke(app, ["notary", "audit", unknown, "--store", store])
        assert res.exit_code != 0 and f"no entry '{unknown}' in the ledger" in str(res.exception), res.output
        assert "#-1" not in str(res.exception) + res.output

    # edit a recorded row behind the Notary's back: verify and audit say so, naming the entry
    db = sqlite3.connect(tmp_path / "store" / "cluster" / "notary" / "ledger.sqlite")
    triggers = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")]
    for t in triggers:
        db.execute(f"DROP TRIGGER {t}")
    db.execute("UPDATE entries SET name = name || '-edited' WHERE seq = ?", (int(seq[1:]),))
    db.commit()
    db.close()
    res = RUN.invoke(app, ["notary", "verify", "--store", store])
    assert res.exit_code == 1 and "ledger INVALID" in res.output and f"{seq} claim" in res.output, res.output
    res = RUN.invoke(app, ["notary", "audit", seq, "--store", store])
    assert res.exit_code == 1 and "VOIDED" in res.output, res.output


def test_notary_without_a_ledger_says_how_to_get_one(tmp_path):
    res = RUN.invoke(app, ["notary", "verify", "--store", str(tmp_path)])
    assert res.exit_code != 0
    assert "no ledger at" in str(res.exception or res.output)
