"""`caramba serve` binds 127.0.0.1 by default, generates a token when none is set, and serves."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request

import pytest


def _start(tmp_path, *args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARAMBA_")}
    env.update(HOME=str(tmp_path), **(env_extra or {}))
    code = "from caramba.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--port", "0", "--store", str(tmp_path / "store"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
    )
    last = "caramba serving" if env_extra and "CARAMBA_API_TOKEN" in env_extra else "open "
    lines = []
    for line in proc.stdout:  # the banner comes once the socket is listening
        lines.append(line)
        if line.startswith(last) or len(lines) > 20:
            break
    return proc, "".join(lines)


def _stop(proc):
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_serve_binds_loopback_and_generates_a_token(tmp_path):
    proc, out = _start(tmp_path)
    try:
        m = re.search(r"caramba serving http://([\d.]+):(\d+)/", out)
        assert m, out
        assert m.group(1) == "127.0.0.1"
        token = re.search(r"api token \(generated for this process\): (\S+)", out).group(1)
        assert f"#token={token}" in out
        base = f"http://127.0.0.1:{m.group(2)}"
        with urllib.request.urlopen(base + "/api/v1/health", timeout=10) as r:
            assert json.load(r)["auth"] is True
        req = urllib.request.Request(base + "/api/v1/manifests/validate", data=b'{"manifest": "a: ["}',
                                     headers={"Content-Type": "application/json"}, method="POST")
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(req, timeout=10)
        assert exc.value.code == 401
        req.add_header("Authorization", f"Bearer {token}")
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(req, timeout=10)
        assert exc.value.code == 422
    finally:
        _stop(proc)


def test_serve_uses_the_configured_token_and_does_not_print_it(tmp_path):
    proc, out = _start(tmp_path, env_extra={"CARAMBA_API_TOKEN": "configured-secret"})
    try:
        assert "caramba serving http://127.0.0.1:" in out
        assert "configured-secret" not in out and "generated" not in out
    finally:
        _stop(proc)


def test_serve_help_mentions_the_default_address():
    from typer.testing import CliRunner

    from caramba.cli import app

    r = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "127.0.0.1" in r.output


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_during_a_validation_stops_the_server_and_its_workers(tmp_path):
    import threading
    import time

    node = '{id: "h_${i}", op: projection.linear, in: ["x_${i}"], out: ["x_${next_i}"], config: {out_features: 2}}'
    deep = (f"name: deep\ntopology:\n  inputs:\n    x_0: {{shape: [4, 2]}}\n  nodes:\n    - repeat: 4000\n"
            f"      template:\n        - {node}\n  outputs: {{y: x_4000}}\n")  # seconds to lower
    proc, out = _start(tmp_path, env_extra={"CARAMBA_API_TOKEN": "sig-token"})
    try:
        base = re.search(r"caramba serving (http://[\d.]+:\d+)/", out).group(1)
        req = urllib.request.Request(base + "/api/v1/manifests/validate", data=json.dumps({"manifest": deep}).encode(),
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer sig-token"},
                                     method="POST")
        def ask():  # answered or cut off by the shutdown: either is fine
            try:
                urllib.request.urlopen(req, timeout=60).close()
            except (OSError, urllib.error.HTTPError):
                pass

        threading.Thread(target=ask, daemon=True).start()
        deadline = time.monotonic() + 30
        workers = []
        while not workers and time.monotonic() < deadline:  # the request reached a sandbox worker
            workers = _children(proc.pid)
            time.sleep(0.05)
        assert workers, "no sandbox worker started"
        time.sleep(0.3)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        stopped = time.monotonic() - t0
        time.sleep(0.2)
        alive = [p for p in workers if os.path.exists(f"/proc/{p}") and "caramba.api.sandbox" in
                 open(f"/proc/{p}/cmdline").read().replace("\0", " ")]
        assert not alive, f"sandbox workers outlived the server: {alive}"
        assert stopped < 20
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
