"""Rough edges of the command line (issue 21): each was a traceback, a swallowed word or a late
failure; each test failed before its fix."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from caramba.cli import app

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
MAIN = "import sys; from caramba.cli import main; sys.argv = ['caramba', *sys.argv[1:]]; main()"


def _caramba(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", MAIN, *args], capture_output=True, text=True, timeout=timeout,
                          env={"COLUMNS": "300", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())})


def test_version():
    from caramba import __version__

    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"caramba {__version__}"


def test_an_unavailable_backend_is_refused_before_a_run_is_recorded_and_its_hint_keeps_brackets(tmp_path):
    from caramba.compute import build_info
    from caramba.store import RunStore

    if build_info("cuda").available:
        import pytest

        pytest.skip("cuda is available here")
    store = tmp_path / "store"
    p = _caramba("research", "run", str(EXAMPLES / "digits_mlp.yml"), "--backend", "cuda", "--store", str(store))
    assert p.returncode == 2, p.stderr
    assert "backend 'cuda' is not available here" in p.stderr and "Traceback" not in p.stderr
    assert "caramba[cuda]" in p.stderr  # rich markup used to swallow "[cuda]"
    assert RunStore(store).list() == []  # nothing recorded


def test_serve_on_a_busy_port_says_so():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        p = _caramba("serve", "--port", str(port), timeout=60)
    assert p.returncode == 2, p.stderr
    assert f"cannot listen on 127.0.0.1:{port}: the port is in use" in p.stderr and "Traceback" not in p.stderr


def test_a_run_leaves_its_whole_record_behind_after_the_quick_exit(tmp_path):
    """The CLI freezes the heap at exit so that the interpreter's teardown skips its cyclic
    collections (~1 s once Numba has compiled): the run, every metric and artifact, and the
    ledger are complete when the process is gone; the handler is registered once per process."""
    import atexit

    from caramba import cli
    from caramba.store import RunStore

    store = tmp_path / "store"
    p = _caramba("research", "run", str(EXAMPLES / "digits_mlp.yml"), "--store", str(store),
                 "--set", "trainer.steps=12", "--set", "trainer.eval_every=6", timeout=300)
    assert p.returncode == 0, p.stderr
    (rec,) = RunStore(store).list()
    assert rec.status == "finished"
    rows = RunStore(store).metrics(rec.id)
    assert {s for _, s, _, _ in rows} >= {"train", "test"} and max(step for step, *_ in rows) == 12
    assert RunStore(store).artifacts(rec.id)
    v = _caramba("notary", "verify", "--store", str(store))
    assert v.returncode == 0, v.stdout + v.stderr
    before = atexit._ncallbacks()
    cli._freeze_heap_at_exit()
    cli._freeze_heap_at_exit()
    assert atexit._ncallbacks() - before <= 1
