"""Runs survive interruption: a run killed with SIGKILL is shown as interrupted and
``caramba research resume`` finishes it on the same run ID, bit-identical to an uninterrupted
run, with one metric row per step and a ledger that verifies."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from caramba.cli import app
from caramba.run import resume_run, run_experiment
from caramba.store import RunStore
from caramba.train import read_checkpoint

from ..blobs_manifest import blobs_manifest

STEPS = 4000  # long enough (seconds) that the kill lands mid-run on a loaded machine
MANIFEST = blobs_manifest(
    "resumable", n=300, runs="{id: s0, seed: 3}", backend="cpu:threads=1",
    trainer="{loss: loss, optimizer: {op: optimizer.adamw, weight_decay: 0.01}, lr: 0.01, "
            "schedule: {kind: cosine, warmup_steps: 20}, batch_size: 16, "
            f"steps: {STEPS}, grad_clip: 1.0, eval_every: 250, log_every: 7, checkpoint_every: 100}}")
RUN = CliRunner()


def _final_tensors(store: RunStore, run_id: str) -> dict[str, np.ndarray]:
    ckpt = store.artifacts(run_id, "checkpoint")[-1]
    tensors, info = read_checkpoint(ckpt.path, ckpt.sha256)
    assert info.step == STEPS
    return tensors


def _series(store: RunStore, run_id: str) -> list[tuple[int, str, str, float]]:
    return store.metrics(run_id)


def _kill_mid_run(manifest: Path, root: Path) -> str:
    """Start `caramba research run` in a child process and SIGKILL it once it has committed a
    checkpoint and trained on past it."""
    env = {**os.environ, "CARAMBA_STORE": str(root)}
    proc = subprocess.Popen([sys.executable, "-c", "from caramba.cli import main; main()", "research", "run", str(manifest), "--quiet",
                             "--store", str(root)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"the run ended before it was killed: {proc.stderr.read().decode()[-2000:]}"
            if (root / "runs.sqlite").exists():
                recs = RunStore(root).list(5)
                if recs and recs[0].step >= 230 and RunStore(root).artifacts(recs[0].id, "checkpoint"):
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(30)
                    return recs[0].id
            time.sleep(0.02)
        raise AssertionError("the run did not reach step 230 in time")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


@pytest.mark.slow
def test_a_killed_run_resumes_bit_identical_with_no_gap_and_a_valid_ledger(tmp_path):
    manifest = tmp_path / "resumable.yml"
    manifest.write_text(MANIFEST)
    whole = RunStore(tmp_path / "whole")
    ref = run_experiment(manifest, store=whole).runs[0]
    assert ref.status == "finished", ref.error

    root = tmp_path / "killed"
    run_id = _kill_mid_run(manifest, root)
    store = RunStore(root)
    rec = store.get(run_id)
    assert rec.status == "interrupted", rec.status
    assert STEPS > rec.step >= 230

    res = RUN.invoke(app, ["research", "resume", run_id, "--store", str(root), "--quiet"])
    assert res.exit_code == 0, res.output
    rec = store.get(run_id)
    assert rec.status == "finished" and rec.step == STEPS and rec.summary["verdict"] == "verified"

    a, b = _final_tensors(whole, ref.run_id), _final_tensors(store, run_id)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name
    rows_a, rows_b = _series(whole, ref.run_id), _series(store, run_id)
    keyed = [(s, sp, n) for s, sp, n, _ in rows_b]
    assert len(keyed) == len(set(keyed)), "duplicate metric rows"
    losses = [s for s, sp, n, _ in rows_b if sp == "train" and n == "loss"]
    assert losses == list(range(1, STEPS + 1)), "gap in the loss series"
    drop = ("samples_per_s",)  # wall-clock, the only value allowed to differ
    same = lambda rows: [(s, sp, n, v) for s, sp, n, v in rows if n not in drop]
    assert same(rows_a) == same(rows_b)

    res = RUN.invoke(app, ["notary", "verify", "--store", str(root)])
    assert res.exit_code == 0, res.output


def test_resume_refuses_a_finished_run_and_a_run_without_a_spec(tmp_path):
    from caramba.errors import ConfigError

    manifest = tmp_path / "m.yml"
    manifest.write_text(MANIFEST.replace(f"steps: {STEPS}", "steps: 5"))
    store = RunStore(tmp_path / "s")
    done = run_experiment(manifest, store=store).runs[0]
    with pytest.raises(ConfigError, match="only an interrupted run can be resumed"):
        resume_run(done.run_id, store)
    old = store.create_run("legacy")
    store.interrupt(old.id, "x")
    store.start(old.id, owner="elsewhere:1")
    store.interrupt(old.id, "gone")
    with pytest.raises(ConfigError, match="before runs became resumable"):
        resume_run(old.id, store)


def test_a_run_whose_process_is_gone_reads_as_interrupted(tmp_path):
    import socket

    store = RunStore(tmp_path)
    rec = store.create_run("x")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    store.start(rec.id, owner=f"{socket.gethostname()}:{child.pid}")
    got = store.get(rec.id)
    assert got.status == "interrupted" and "is gone" in got.error
    store.start(rec.id)  # this process: alive
    assert store.get(rec.id).status == "running"
