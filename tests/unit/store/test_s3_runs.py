"""The S3 run store against moto's S3 server on loopback (tests/unit/store/conftest.py)."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from caramba.errors import ConfigError
from caramba.store.registry import parse_s3_url
from caramba.store.runs import RunStore, StoreUnavailable, open_runs

pytest.importorskip("boto3")


def _store(url: str, cache: Path):
    from caramba.store.s3run import S3RunStore

    return S3RunStore(url, cache=cache)


def _child_env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[3] / "src")
    return {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_a_second_replica_sees_everything_a_writer_recorded(s3_env, tmp_path):
    bucket, _client = s3_env
    url = f"s3://{bucket}/team/lab"
    a = open_runs(url)
    assert a.url == url + "/" and (Path(a.root) / "store.url").read_text().strip() == url + "/"
    rec = a.create_run("exp", steps=3, config={"lr": 0.1}, seed=7)
    a.start(rec.id)
    for step in range(3):
        a.log_metrics(rec.id, step, {"loss": 1.0 / (step + 1), "nan": float("nan")})
    a.log_rows(rec.id, [(3, "val", {"loss": 0.25})])
    art = a.add_artifact(rec.id, "notes/readme.txt", "hello S3")
    a.tag(rec.id, add=["baseline", "s3"])
    a.annotate(rec.id, "a note")
    a.update_summary(rec.id, {"acc": 0.5})
    a.finish(rec.id, summary={"acc": 0.75})

    b = _store(url, tmp_path / "other-host")  # another host: an empty replica
    got = b.get(rec.id[:12])
    assert (got.id, got.status, got.seed, got.config, got.tags, got.note) == (rec.id, "finished", 7, {"lr": 0.1}, ["baseline", "s3"], "a note")
    assert got.summary == {"acc": 0.75} and got.created == pytest.approx(rec.created)
    assert b.series(rec.id, "loss", "train") == ([0, 1, 2], [1.0, 0.5, 1.0 / 3])
    assert math.isnan(b.metrics(rec.id, "nan")[0][3])
    assert b.metrics(rec.id, split="val") == [(3, "val", "loss", 0.25)]
    [listed] = b.artifacts(rec.id)
    assert (listed.name, listed.sha256, listed.size) == ("notes/readme.txt", art.sha256, art.size)
    assert listed.path.read_text() == "hello S3" and listed.path.is_relative_to(b.root)
    # the same replicas agree row for row
    assert a.metrics(rec.id, "loss") == b.metrics(rec.id, "loss") and a.timed_series(rec.id, "loss", "train") == b.timed_series(rec.id, "loss", "train")
    b.delete(rec.id, reason="cleanup")
    with pytest.raises(Exception, match="was deleted"):
        a.get(rec.id)


def test_the_folder_of_a_replica_reopens_the_bucket(s3_env):
    bucket, _ = s3_env
    s = open_runs(f"s3://{bucket}/p")
    again = open_runs(s.root)  # what the engine hands the Experiment actor
    assert type(again) is type(s) and again.url == s.url
    rec = again.create_run("x")
    assert s.get(rec.id).id == rec.id


def test_file_urls_and_paths_are_the_local_store(tmp_path):
    assert type(open_runs(f"file://{tmp_path}/a")) is RunStore
    assert Path(open_runs(f"file://{tmp_path}/a").root) == tmp_path / "a"
    assert type(open_runs(tmp_path / "b")) is RunStore


@pytest.mark.slow  # two Python processes starting on a shared 2-core machine: 5-20 s
def test_two_writer_processes_lose_no_metric_rows(s3_env, tmp_path):
    bucket, _ = s3_env
    url = f"s3://{bucket}/conc"
    rec = _store(url, tmp_path / "creator").create_run("conc")
    code = textwrap.dedent("""
        import sys
        from caramba.store.s3run import S3RunStore
        url, cache, run, name = sys.argv[1:5]
        s = S3RunStore(url, cache=cache)
        for i in range(20):
            s.log_metrics(run, i, {name: float(i)})
        s.tag(run, add=[name])
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, url, str(tmp_path / f"host{k}"), rec.id, f"w{k}"],
                              env=_child_env(), stderr=subprocess.PIPE, text=True) for k in (0, 1)]
    for p in procs:
        assert p.wait(timeout=60) == 0, p.stderr.read()
    reader = _store(url, tmp_path / "reader")
    rows = reader.metrics(rec.id)
    assert len(rows) == 40
    assert sorted(r[2] for r in rows) == ["w0"] * 20 + ["w1"] * 20
    assert sorted(reader.get(rec.id).tags) == ["w0", "w1"]  # tag events merge, none is lost
    # the writers' own replicas converge to the same rows
    assert _store(url, tmp_path / "host0").metrics(rec.id) == rows


def test_a_late_event_rebuilds_the_run_in_key_order(s3_env, tmp_path):
    bucket, client = s3_env
    url = f"s3://{bucket}/late"
    w = _store(url, tmp_path / "w")
    rec = w.create_run("late")
    w.log_metrics(rec.id, 5, {"loss": 2.0})
    r = _store(url, tmp_path / "r")
    assert r.metrics(rec.id) == [(5, "train", "loss", 2.0)]
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="late/runs/")["Contents"])
    # an event from a writer whose clock was behind: it sorts before the one already seen
    body = json.loads(client.get_object(Bucket=bucket, Key=keys[-1])["Body"].read())
    body["args"]["values"] = {"loss": 9.0}
    early = keys[-1].rsplit("/", 1)[0] + "/" + "0" * 19 + "1-otherhost-1-abcd.json"
    assert early.rsplit("/", 1)[1] < keys[-1].rsplit("/", 1)[1]
    client.put_object(Bucket=bucket, Key=early, Body=json.dumps(body).encode())
    # key order decides: the later key (2.0) wins, in every replica
    assert r.metrics(rec.id) == [(5, "train", "loss", 2.0)]
    assert _store(url, tmp_path / "fresh").metrics(rec.id) == [(5, "train", "loss", 2.0)]


def test_foreign_objects_in_the_bucket_are_skipped_with_a_warning(s3_env, tmp_path):
    bucket, client = s3_env
    url = f"s3://{bucket}/junk"
    good = _store(url, tmp_path / "a").create_run("good")
    for key, body in [("junk/runs/x/events/1-h-1-a.json", b"{not json"),
                      ("junk/runs/y/events/1-h-1-a.json", json.dumps({"v": 1, "op": "create_run", "run": "z", "t": 1}).encode()),
                      ("junk/runs/w/events/1-h-1-a.json", json.dumps({"v": 1, "op": "rm -rf", "run": "w", "t": 1}).encode()),
                      ("junk/runs/v/events/1-h-1-a.json", json.dumps({"v": 1, "op": "create_run", "run": "v", "t": 1, "args": {}}).encode()),
                      # paths out of the replica: a run called "..", an artifact called ../../x
                      ("junk/runs/../events/1-h-1-a.json", json.dumps({"v": 1, "op": "delete", "run": "..", "t": 1, "args": {}}).encode()),
                      (f"junk/runs/{good.id}/events/2-h-1-a.json", json.dumps(
                          {"v": 1, "op": "add_artifact", "run": good.id, "t": 2,
                           "args": {"name": "../../../escaped.txt", "kind": "file", "sha256": "0" * 64, "size": 1}}).encode())]:
        client.put_object(Bucket=bucket, Key=key, Body=body)
    with pytest.warns(UserWarning, match="is skipped"):
        runs = _store(url, tmp_path / "b").list()
    assert [r.id for r in runs] == [good.id]
    b = _store(url, tmp_path / "b")
    assert b.artifacts(good.id) == [] and (tmp_path / "b").is_dir()
    assert not any(p.name == "escaped.txt" for p in tmp_path.rglob("escaped.txt"))


def test_an_upload_killed_midway_lists_nothing(s3_env, tmp_path):
    bucket, client = s3_env
    url = f"s3://{bucket}/kill"
    cache = tmp_path / "writer"
    rec = _store(url, cache).create_run("kill")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(24 << 20))  # 24 MiB: a multipart upload of 8 MiB parts
    code = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from caramba.store.s3run import S3RunStore
        url, cache, run, big = sys.argv[1:5]
        s = S3RunStore(url, cache=cache)
        # the test's hook: each part takes a while, so the kill lands mid-upload
        s._s3.meta.events.register("before-call.s3.UploadPart", lambda **kw: time.sleep(1.0))
        s.add_artifact(run, "model.bin", Path(big), kind="checkpoint")
        print("UPLOADED", flush=True)
    """)
    p = subprocess.Popen([sys.executable, "-c", code, url, str(cache), rec.id, str(big)], env=_child_env(),
                         stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not client.list_multipart_uploads(Bucket=bucket).get("Uploads"):
        time.sleep(0.05)
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads"), "the upload never started"
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    assert "UPLOADED" not in p.stdout.read()
    for where in (cache, tmp_path / "reader"):  # the killed writer's own replica, and another host's
        assert _store(url, where).artifacts(rec.id) == []
    assert "Contents" not in client.list_objects_v2(Bucket=bucket, Prefix="kill/artifacts/")


def test_a_replica_change_whose_event_was_never_written_is_undone(s3_env, tmp_path):
    bucket, _ = s3_env
    url = f"s3://{bucket}/crash"
    s = _store(url, tmp_path / "c")
    rec = s.create_run("crash")
    s.log_metrics(rec.id, 0, {"loss": 1.0})
    # what a process killed between the replica write and the event write leaves behind
    RunStore.log_metrics(s, rec.id, 1, {"loss": 0.5})
    (tmp_path / "c" / ".pending-otherhost-999999").write_text("x")
    assert _store(url, tmp_path / "c").metrics(rec.id) == [(0, "train", "loss", 1.0)]


def test_an_unreachable_endpoint_is_one_error_naming_the_url(s3_env):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"s3://somebucket/x?endpoint=http://127.0.0.1:{port}"
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable, match=r"s3://somebucket/x/.*cannot be reached") as err:
        open_runs(url)
    assert time.monotonic() - t0 < 20
    assert f"127.0.0.1:{port}" in str(err.value)


def test_a_missing_bucket_and_missing_credentials_are_named(s3_env, monkeypatch, tmp_path):
    with pytest.raises(StoreUnavailable, match=r"s3://no-such-bucket-here/p/.*bucket 'no-such-bucket-here' does not exist"):
        open_runs("s3://no-such-bucket-here/p")
    bucket, _ = s3_env
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StoreUnavailable, match=rf"s3://{bucket}/p/.*no AWS credentials"):
        open_runs(f"s3://{bucket}/p")


def test_without_boto3_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(ConfigError, match=r"s3://b0b/x/ needs boto3") as err:
        open_runs("s3://b0b/x")
    assert "pip install 'caramba[s3]'" in err.value.hint


@pytest.mark.parametrize(("url", "says"), [
    ("s3://", "names no bucket"),
    ("s3:///x", "names no bucket"),
    ("s3://b/../x", "'..'"),
    ("s3://bucket/a/./b", "'.'"),
    ("s3://bucket/a//b", "empty"),
    ("s3://Bad_Bucket/x", "not an S3 bucket name"),
    ("s3://ab/x", "not an S3 bucket name"),
    ("s3://key:secret@bucket/x", "credentials"),
    ("s3://bucket/x?foo=1", "unknown option"),
    ("s3://bucket/x?endpoint=file:///etc/passwd", "not an http"),
    ("s3://bucket/x#frag", "fragment"),
    ("s3://bucket/x\ny", "control characters"),
    ("s3://bucket/" + "a" * 2000, "at most 1024"),
    ("s3://bucket/a b", "characters other than"),
    ("ftp://x", "unknown URL scheme 'ftp'"),
    ("gopher://x/y", "unknown URL scheme"),
    ("file://", "names no folder"),
])
def test_hostile_urls_get_clear_errors(url, says):
    with pytest.raises(ConfigError, match=None) as err:
        open_runs(url)
    assert says in str(err.value), str(err.value)


def test_a_canonical_url_keys_the_replica():
    loc = parse_s3_url("s3://bucket/a/b/?region=eu-west-1&endpoint=http://127.0.0.1:9")
    assert (loc.bucket, loc.prefix, loc.url) == ("bucket", "a/b/", "s3://bucket/a/b/?endpoint=http://127.0.0.1:9&region=eu-west-1")
    assert parse_s3_url("s3://bucket").prefix == ""


def test_the_cli_names_a_bad_store_url_without_a_traceback():
    p = subprocess.run([sys.executable, "-c", "from caramba.cli import main; main()", "research", "status", "--store", "ftp://x"],
                       env=_child_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "unknown URL scheme 'ftp'" in p.stderr and "Traceback" not in p.stderr


def test_the_store_setting_of_a_config_file_takes_a_url(s3_env, tmp_path):
    from caramba.config import load_settings

    bucket, _ = s3_env
    cfg = tmp_path / "caramba.yml"
    cfg.write_text(f"store: s3://{bucket}/from-config\n")
    store = open_runs(load_settings(str(cfg)).store)
    assert store.url == f"s3://{bucket}/from-config/"
    rec = store.create_run("cfg")
    assert [r.id for r in _store(store.url, tmp_path / "other").list()] == [rec.id]


@pytest.mark.parametrize(("run", "args", "says"), [
    ("..", {}, "not a run ID"),
    (".", {}, "not a run ID"),
    ("a b", {}, "not a run ID"),
    ("r1", {"name": "../../x", "kind": "file", "sha256": "0" * 64, "size": 1}, "not a relative path"),
    ("r1", {"name": "/etc/passwd", "kind": "file", "sha256": "0" * 64, "size": 1}, "not a relative path"),
])
def test_event_objects_naming_paths_outside_the_replica_are_refused(run, args, says):
    from caramba.store.s3run import _event

    body = json.dumps({"v": 1, "op": "add_artifact", "run": run, "t": 1.0, "args": args})
    with pytest.raises(ValueError, match=says):
        _event(body, run)
