"""The Notary's ledger in S3 (moto's server on loopback): conditional appends, replicas, and a
verify that re-reads the bucket and names every tampered, removed or reordered object."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("boto3")
pytest.importorskip("cryptography")

from caramba.actors.identity import Identity
from caramba.actors.ledger import Ledger
from caramba.actors.ledger_s3 import S3Ledger, entry_key
from caramba.store.registry import parse_s3_url


def _ledger(url: str, key: Path, replica: Path) -> S3Ledger:
    replica.parent.mkdir(parents=True, exist_ok=True)
    return S3Ledger(url, Identity.load_or_create(key, "notary"), replica)


def _filled(s3_env, tmp_path, n: int = 4) -> tuple[str, S3Ledger]:
    bucket, _ = s3_env
    url = f"s3://{bucket}/lab"
    led = _ledger(url, tmp_path / "notary.key", tmp_path / "a" / "ledger.sqlite")
    for i in range(n):
        led.append_own("event", f"e{i}", {"i": i}, subject="run-1")
    return url, led


def test_entries_are_objects_and_a_fresh_replica_reads_them_back(s3_env, tmp_path):
    bucket, client = s3_env
    url, led = _filled(s3_env, tmp_path)
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="lab/ledger/")["Contents"])
    assert keys == [entry_key(parse_s3_url(url), i) for i in range(5)]
    assert keys[0] == "lab/ledger/entries/000000000000.json"
    other = _ledger(url, tmp_path / "notary.key", tmp_path / "b" / "ledger.sqlite")
    assert [e.hash for e in other.entries()] == [e.hash for e in led.entries()]
    report = other.verify()
    assert report.ok, report.as_text()
    assert report.entries == 5 and report.tree is not None
    # the disk ledger's own checks agree: a local copy of the same rows verifies too
    assert Ledger(tmp_path / "b" / "ledger.sqlite", Identity.load_or_create(tmp_path / "notary.key", "notary")).verify().ok
    # a writer on the other replica chains to the head it reads from the bucket
    e = other.append_own("event", "more", {}, subject="run-1")
    assert e.seq == 5 and led.get(e.hash).seq == 5


def test_another_notary_key_is_refused(s3_env, tmp_path):
    url, _ = _filled(s3_env, tmp_path, 1)
    with pytest.raises(Exception, match=r"belongs to another Notary key .*not this Notary.s key"):
        _ledger(url, tmp_path / "other.key", tmp_path / "c" / "ledger.sqlite")


def _edit(client, bucket: str, key: str, change) -> None:
    obj = json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    change(obj)
    client.put_object(Bucket=bucket, Key=key, Body=json.dumps(obj).encode())


def test_a_tampered_object_fails_verify_naming_its_entry(s3_env, tmp_path):
    bucket, client = s3_env
    url, _ = _filled(s3_env, tmp_path)
    key = "lab/ledger/entries/000000000002.json"
    _edit(client, bucket, key, lambda o: o.update(payload=json.dumps({"i": 999})))
    fresh = _ledger(url, tmp_path / "notary.key", tmp_path / "fresh" / "ledger.sqlite")
    report = fresh.verify()
    assert not report.ok
    text = report.as_text()
    assert "#2" in text and "ledger INVALID" in text, text
    # the replica that wrote the entry sees the object changed under it
    mine = _ledger(url, tmp_path / "notary.key", tmp_path / "a" / "ledger.sqlite").verify()
    assert not mine.ok and f"object {key} changed after this host replicated entry #2" in mine.as_text()


def test_a_removed_object_fails_verify_naming_its_key(s3_env, tmp_path):
    bucket, client = s3_env
    url, _ = _filled(s3_env, tmp_path)
    client.delete_object(Bucket=bucket, Key="lab/ledger/entries/000000000002.json")
    report = _ledger(url, tmp_path / "notary.key", tmp_path / "a" / "ledger.sqlite").verify()
    assert not report.ok
    assert "object lab/ledger/entries/000000000002.json is missing: entry #2 was removed" in report.as_text()
    assert "#3" in report.as_text()  # and the chain no longer links at the next entry


def test_reordered_objects_fail_verify_naming_both(s3_env, tmp_path):
    bucket, client = s3_env
    url, _ = _filled(s3_env, tmp_path)
    k2, k3 = "lab/ledger/entries/000000000002.json", "lab/ledger/entries/000000000003.json"
    b2, b3 = (client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in (k2, k3))
    client.put_object(Bucket=bucket, Key=k2, Body=b3)
    client.put_object(Bucket=bucket, Key=k3, Body=b2)
    text = _ledger(url, tmp_path / "notary.key", tmp_path / "z" / "ledger.sqlite").verify().as_text()
    assert f"object {k2} holds entry #3, not #2" in text and f"object {k3} holds entry #2, not #3" in text


def test_a_truncated_ledger_is_named_by_a_replica_that_saw_more(s3_env, tmp_path):
    bucket, client = s3_env
    url, led = _filled(s3_env, tmp_path)
    head = led.tree_head()
    client.delete_object(Bucket=bucket, Key="lab/ledger/entries/000000000004.json")
    text = led.verify().as_text()
    assert "object lab/ledger/entries/000000000004.json is gone" in text
    # a host without history needs the kept tree head, as on disk
    fresh = _ledger(url, tmp_path / "notary.key", tmp_path / "y" / "ledger.sqlite")
    assert fresh.verify().ok
    assert "truncated or rolled back" in fresh.verify(against=head).as_text()


def test_garbage_objects_are_named_not_crashed_on(s3_env, tmp_path):
    bucket, client = s3_env
    url, _ = _filled(s3_env, tmp_path, 2)
    client.put_object(Bucket=bucket, Key="lab/ledger/entries/000000000001.json", Body=b"\xff{not json")
    client.put_object(Bucket=bucket, Key="lab/ledger/entries/notes.txt", Body=b"hi")
    client.put_object(Bucket=bucket, Key="lab/ledger/entries/000000000003.json",
                      Body=json.dumps({c: None for c in ("seq", "hash", "prev", "time", "kind", "actor", "subject", "name",
                                                         "payload", "depends_on", "procedure", "public_key", "signature",
                                                         "receipt")}).encode())
    text = _ledger(url, tmp_path / "notary.key", tmp_path / "g" / "ledger.sqlite").verify().as_text()
    assert "ledger/entries/000000000001.json (entry #1) is not JSON" in text
    assert "lab/ledger/entries/notes.txt is not a ledger entry name" in text
    assert "#3" in text
    from caramba.actors.ledger import MalformedEntry

    with pytest.raises(MalformedEntry, match=r"row 1"):  # a query names it too, and never trusts it
        _ledger(url, tmp_path / "notary.key", tmp_path / "h" / "ledger.sqlite").entries()


@pytest.mark.slow  # two Python processes starting on a shared 2-core machine: 5-20 s
def test_two_writer_processes_take_distinct_positions(s3_env, tmp_path):
    bucket, _ = s3_env
    url = f"s3://{bucket}/conc"
    key = tmp_path / "notary.key"
    _ledger(url, key, tmp_path / "parent" / "ledger.sqlite")  # genesis
    code = textwrap.dedent("""
        import sys
        from pathlib import Path
        from caramba.actors.identity import Identity
        from caramba.actors.ledger_s3 import S3Ledger
        url, key, replica, who = sys.argv[1:5]
        Path(replica).parent.mkdir(parents=True, exist_ok=True)
        led = S3Ledger(url, Identity.load_or_create(key, "notary"), replica)
        for i in range(8):
            led.append_own("event", f"{who}-{i}", {"i": i}, subject=who)
    """)
    src = str(Path(__file__).resolve().parents[3] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = [subprocess.Popen([sys.executable, "-c", code, url, str(key), str(tmp_path / w / "ledger.sqlite"), w],
                              env=env, stderr=subprocess.PIPE, text=True) for w in ("w0", "w1")]
    for p in procs:
        assert p.wait(timeout=60) == 0, p.stderr.read()
    led = _ledger(url, key, tmp_path / "reader" / "ledger.sqlite")
    names = [e.name for e in led.entries()]
    assert len(names) == 17 and sorted(n for n in names if n.startswith("w")) == sorted(
        [f"w0-{i}" for i in range(8)] + [f"w1-{i}" for i in range(8)])
    assert led.verify().ok
