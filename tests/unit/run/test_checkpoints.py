"""Checkpoints are verified against their recorded digests before any load: a flipped bit is a
refused run, never a "finished" evaluation of damaged parameters."""

import hashlib
import shutil

import pytest

from caramba.run import run_experiment
from caramba.store import RunStore
from caramba.train.checkpoint import CheckpointError, read_checkpoint, verified_bytes

TRAINER = "{loss: loss, lr: 0.05, batch_size: 16, steps: 6}"


@pytest.fixture
def manifest(blobs):
    return lambda runs: blobs("ckpt", TRAINER, runs, n=120)


@pytest.fixture
def trained(tmp_path, manifest):
    store = RunStore(tmp_path / "store")
    res = run_experiment(manifest("{id: s0, seed: 0}"), store=store).runs[0]
    assert res.status == "finished", res.error
    return store, res.run_id


def _flip(path, offset_from_end: int, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 1 << bit
    path.chmod(0o644)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", [(1, 6), (8, 0)], ids=["exponent-bit", "low-mantissa-bit"])
def test_a_flipped_bit_in_a_runs_checkpoint_is_refused(manifest, trained, where):
    store, run_id = trained
    ckpt = store.artifacts(run_id, "checkpoint")[-1]
    _flip(ckpt.path, *where)
    res = run_experiment(manifest(f"{{id: ev, mode: eval, checkpoint: {run_id}}}"), store=store).runs[0]
    assert res.status == "failed"
    assert "does not match its recorded digest" in res.error
    assert store.get(res.run_id).status == "failed"


def test_an_intact_runs_checkpoint_evaluates_like_the_run(manifest, trained):
    store, run_id = trained
    res = run_experiment(manifest(f"{{id: ev, mode: eval, checkpoint: {run_id}}}"), store=store).runs[0]
    assert res.status == "finished", res.error
    assert res.summary["test.loss"] == pytest.approx(store.get(run_id).summary["test.loss"], rel=0, abs=0)


def test_a_checkpoint_file_needs_its_digest_or_an_explicit_trust(manifest, trained, tmp_path):
    store, run_id = trained
    src = store.artifacts(run_id, "checkpoint")[-1].path
    copy = tmp_path / "model.safetensors"
    shutil.copyfile(src, copy)
    sha = hashlib.sha256(copy.read_bytes()).hexdigest()

    res = run_experiment(manifest(f"{{id: ev, mode: eval, checkpoint: {copy}}}"), store=store).runs[0]
    assert res.status == "failed" and "has no recorded digest" in res.error and sha in res.error

    ok = run_experiment(manifest(f"{{id: ev, mode: eval, checkpoint: {copy}, checkpoint_sha256: {sha}}}"),
                        store=store).runs[0]
    assert ok.status == "finished", ok.error
    trusted = run_experiment(manifest(f"{{id: ev, mode: eval, checkpoint: {copy}, trust_checkpoint: true}}"),
                             store=store).runs[0]
    assert trusted.status == "finished", trusted.error

    _flip(copy, 3, 2)
    bad = run_experiment(manifest(f"{{id: ev, mode: eval, checkpoint: {copy}, checkpoint_sha256: {sha}}}"),
                         store=store).runs[0]
    assert bad.status == "failed" and "does not match its recorded digest" in bad.error


def test_fine_tuning_from_a_checkpoint_starts_its_own_schedule(manifest, trained):
    """``checkpoint:`` in a training run loads the parameters; the step count and schedule are
    the new run's own (it used to jump to the old run's step and end at lr 0)."""
    store, run_id = trained
    res = run_experiment(manifest(f"{{id: ft, seed: 1, checkpoint: {run_id}}}"), store=store).runs[0]
    assert res.status == "finished", res.error
    ckpt = store.artifacts(res.run_id, "checkpoint")[-1]
    _, info = read_checkpoint(ckpt.path, ckpt.sha256)
    assert info.step == 6


def test_verified_bytes_names_both_digests(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"abc")
    assert verified_bytes(p, hashlib.sha256(b"abc").hexdigest()) == b"abc"
    with pytest.raises(CheckpointError, match="recorded 0000000000000000"):
        verified_bytes(p, "0" * 64)
