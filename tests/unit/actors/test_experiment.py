"""The Experiment actor on the local transport: a real training run (linear regression on the cpu
backend), evidence to the Notary, VERIFIED -> Model vN+1, VOIDED, pause/resume/cancel, and
resuming from the last valid checkpoint after crashes."""

import hashlib
from pathlib import Path

import pytest

from caramba.actors import ActorSystem
from caramba.actors.backend import BackendActor, GetCapabilities
from caramba.actors.drivers import LinearRegression
from caramba.actors.experiment import (
    Cancel,
    GetStatus,
    Pause,
    Resume,
    RunSpec,
    recorded_metrics,
)
from caramba.actors.model import Commit, GetVersion, NotVerified, Versions
from caramba.actors.notary import AuditOf, Query, ValidityOf, VerifyLedger
from caramba.actors.services import run_experiment, spawn_experiment, start_services, wait
from caramba.actors.storage import Get


def spec(**kw):
    base = {"run_id": "r1", "steps": 40, "checkpoint_every": 10, "model": "lin"}
    return RunSpec(**{**base, **kw})


class CrashOnce(LinearRegression):
    """Raises a non-caramba error (a bug, as far as supervision knows) once, at ``crash_at``."""

    marker: Path | None = None
    crash_at = 25

    def step(self):
        if self.steps_done + 1 == self.crash_at and self.marker is not None and not self.marker.exists():
            self.marker.write_text("crashed")
            raise RuntimeError(f"worker lost at step {self.crash_at}")
        return super().step()


@pytest.fixture
def env(tmp_path):
    with ActorSystem() as system:
        start_services(system, tmp_path)
        yield system, tmp_path


def reference_run(tmp_path, **kw):
    with ActorSystem() as system:
        start_services(system, tmp_path / "reference")
        status = run_experiment(system, spec(**kw))
        _, metrics = recorded_metrics(system.lookup("notary"), status.run_id)
        return status, metrics


def test_a_run_is_verified_and_committed(env):
    system, _ = env
    status = run_experiment(system, spec())
    assert status.state == "verified" and status.verdict == "VERIFIED" and status.model_version == 1
    assert status.metrics["eval_loss"] < 0.05
    notary = system.lookup("notary")
    first, metrics = recorded_metrics(notary, "r1")
    assert first == 1 and len(metrics["loss"]) == 40 and metrics["loss"][-1] < metrics["loss"][0]
    assert notary.ask(VerifyLedger()).ok
    kinds = [(e.kind, e.name) for e in notary.ask(Query(subject="r1")).entries]
    assert kinds.count(("artifact", "checkpoint")) == 4 and kinds.count(("event", "progress")) == 4
    assert ("claim", "final") in kinds and ("event", "committed") in kinds
    version = system.lookup("models").ask(GetVersion(model="lin"))
    assert version.version == 1 and version.claim == status.claim and version.parent is None
    blob = system.lookup("storage").ask(Get(key=version.key))
    assert hashlib.sha256(blob.data).hexdigest() == version.sha256 == status.last_checkpoint.sha256
    audit = notary.ask(AuditOf(entry=status.claim))
    assert audit.validity.valid and {e.kind for e in audit.entries} == {"event", "intent", "artifact", "claim"}


def test_same_spec_same_numbers(env, tmp_path):
    system, _ = env
    status = run_experiment(system, spec())
    _, metrics = recorded_metrics(system.lookup("notary"), "r1")
    ref_status, ref_metrics = reference_run(tmp_path)
    assert metrics == ref_metrics
    assert status.last_checkpoint.sha256 == ref_status.last_checkpoint.sha256
    assert status.metrics == ref_status.metrics


def test_next_version_starts_from_a_copy_of_the_latest(env):
    system, _ = env
    v1 = run_experiment(system, spec())
    v2 = run_experiment(system, spec(run_id="r2", seed=0, base_version="latest", steps=10, checkpoint_every=5))
    assert v2.state == "verified" and v2.model_version == 2
    versions = system.lookup("models").ask(Versions(model="lin")).versions
    assert [(v.version, v.parent) for v in versions] == [(1, None), (2, 1)]
    # starting from v1's parameters, the first loss is v1's final quality, not a fresh init's
    _, m2 = recorded_metrics(system.lookup("notary"), "r2")
    _, m1 = recorded_metrics(system.lookup("notary"), "r1")
    assert m2["loss"][0] < m1["loss"][0] / 10
    assert v1.model_version == 1


def test_divergence_is_voided_with_the_failing_step(env):
    system, _ = env
    status = run_experiment(system, spec(run_id="boom", steps=60, config={"lr": 5000.0}))
    assert status.state == "voided" and status.verdict == "VOIDED" and status.model_version is None
    assert any("metric 'loss' is inf at step 39" in r for r in status.reasons)
    notary = system.lookup("notary")
    void = notary.ask(Query(subject="boom", name="void")).entries[-1]
    assert void.payload["step"] == 39 and "finite_metrics" in void.payload["reason"]
    assert system.lookup("models").ask(Versions(model="lin")).versions == []
    assert notary.ask(VerifyLedger()).ok


def test_pause_resume_cancel(env):
    system, _ = env
    ref = spawn_experiment(system, spec(run_id="p", steps=30))
    system.run_until_idle(max_messages=8)
    step = ref.ask(Pause()).step
    assert ref.ask(GetStatus()).state == "paused"
    system.run_until_idle()
    assert ref.ask(GetStatus()).step == step  # nothing ran while paused
    assert ref.ask(Resume()).state == "running"
    assert wait(system, ref).state == "verified"

    ref2 = spawn_experiment(system, spec(run_id="c", steps=30))
    system.run_until_idle(max_messages=5)
    assert ref2.ask(Cancel(reason="not needed")).state == "cancelled"
    system.run_until_idle()
    assert ref2.ask(GetStatus()).state == "cancelled"
    assert system.lookup("notary").ask(Query(subject="c", name="cancelled")).entries[0].payload["reason"] == "not needed"
    with pytest.raises(Exception, match="only a running experiment pauses"):
        ref2.ask(Pause())


def test_a_crash_resumes_from_the_last_valid_checkpoint(env, tmp_path):
    system, _ = env
    CrashOnce.marker = tmp_path / "crashed"
    try:
        status = run_experiment(system, spec(driver=f"{CrashOnce.__module__}:CrashOnce"))
    finally:
        CrashOnce.marker = None
    assert (tmp_path / "crashed").exists()
    assert status.state == "verified" and status.resumed_from == 20
    assert any("RuntimeError: worker lost at step 25" in d for d in system.dead_letters)
    ref_status, ref_metrics = reference_run(tmp_path)
    assert status.last_checkpoint.sha256 == ref_status.last_checkpoint.sha256
    _, metrics = recorded_metrics(system.lookup("notary"), "r1")
    assert metrics == ref_metrics  # steps 21-24 ran twice but were recorded once


def test_a_killed_experiment_resumes_elsewhere_skipping_damaged_checkpoints(env, tmp_path):
    system, root = env
    ref = spawn_experiment(system, spec())
    while ref.ask(GetStatus()).step < 33:
        system.run_until_idle(max_messages=1)
    before = ref.ask(GetStatus())
    assert before.last_checkpoint.step == 30
    system.kill(ref.name)  # as if its process died: no cleanup, no more evidence
    notary = system.lookup("notary")
    recorded = [e.hash for e in notary.ask(Query()).entries]
    # damage the newest checkpoint: the next incarnation must not trust it
    from caramba.store import LocalBlobStore

    blobs = LocalBlobStore(root / "blobs")
    path = blobs.object_path(before.last_checkpoint.sha256)
    path.chmod(0o644)
    path.write_bytes(b"\x00" * path.stat().st_size)
    again = spawn_experiment(system, spec(), name="experiment:r1#2")
    status = wait(system, again)
    assert status.state == "verified" and status.resumed_from == 20
    resumed = notary.ask(Query(subject="r1", name="resumed")).entries[-1]
    assert "artifact" in resumed.payload["skipped"][0] and "changed" in resumed.payload["skipped"][0]
    ref_status, ref_metrics = reference_run(tmp_path)
    assert status.last_checkpoint.sha256 == ref_status.last_checkpoint.sha256
    assert recorded_metrics(notary, "r1")[1] == ref_metrics
    after = [e.hash for e in notary.ask(Query()).entries]
    assert after[: len(recorded)] == recorded  # nothing recorded was lost
    report = notary.ask(VerifyLedger())
    assert report.ok  # re-putting the true checkpoint bytes repaired the damaged object


def test_a_run_id_cannot_be_reused_for_another_spec(env):
    system, _ = env
    run_experiment(system, spec(steps=10))
    status = run_experiment(system, spec(steps=20), name="experiment:r1-again")
    assert status.state == "failed" and "already recorded" in status.error


def test_models_refuse_unverified_claims(env):
    system, _ = env
    status = run_experiment(system, spec(run_id="boom", steps=60, config={"lr": 5000.0}))
    notary = system.lookup("notary")
    claim = notary.ask(Query(subject="boom", kind="event", name="progress")).entries[-1]
    with pytest.raises(NotVerified, match="is VOIDED, not VERIFIED"):
        system.lookup("models").ask(Commit(model="lin", parent=None, key="k", sha256="0" * 64, size=1, claim=claim.hash))
    assert not notary.ask(ValidityOf(entry=claim.hash)).valid
    assert status.state == "voided"


def test_the_driver_can_train_through_a_backend_actor(env, tmp_path):
    system, _ = env
    backend = system.spawn(BackendActor, "backend", kwargs={"spec": "cpu"})
    caps = backend.ask(GetCapabilities())
    assert caps.location == "cpu" and "linalg.matmul" in caps.ops
    status = run_experiment(system, spec(config={"backend_actor": "backend"}))
    ref_status, _ = reference_run(tmp_path)
    assert status.state == "verified"
    assert status.last_checkpoint.sha256 == ref_status.last_checkpoint.sha256
