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
