"""A manifest's runs on the cluster: the Experiment actor drives the manifest's own model,
optimizer and data through caramba.train; crash resume gives the uninterrupted numbers."""

import pytest

from caramba.actors import ActorSystem
from caramba.actors.experiment import GetStatus
from caramba.actors.notary import Query
from caramba.actors.services import spawn_experiment, start_services, wait
from caramba.errors import ConfigError
from caramba.orchestrator.manifest import run_specs
from caramba.orchestrator.run import run_cluster
from caramba.store.runs import RunStore

from ..blobs_manifest import blobs_manifest

BLOBS = blobs_manifest("blobs", n=240, trainer="{loss: loss, optimizer: {op: optimizer.adamw, weight_decay: 0.0}, "
                                              "lr: 0.03, batch_size: 16, steps: 30}", extra="checkpoints: {every: 10}\n")


@pytest.fixture
def manifest(tmp_path):
    path = tmp_path / "blobs.yml"
    path.write_text(BLOBS)
    return path


def test_manifest_runs_become_run_specs(manifest):
    specs = run_specs(manifest)
    assert [s.config["run"] for s in specs] == ["s0", "s1"]
    s0 = specs[0]
    assert s0.driver == "manifest" and s0.steps == 30 and s0.checkpoint_every == 10 and s0.model == "blobs"
    assert s0.run_id.startswith("blobs-") and s0.run_id.endswith("/cpu/s0") and s0.manifest_hash
    assert [s.seed for s in run_specs(manifest, ["cpu/s1"])] == [1]
    with pytest.raises(ConfigError, match="has no run 's9'"):
        run_specs(manifest, ["s9"])


def test_a_manifest_sweep_on_the_cluster(manifest, tmp_path):
    report = run_cluster(manifest, cluster="local", workers=2, root=tmp_path / "cluster", run_store=tmp_path / "runs")
    assert report.ok, report
    assert sorted(len(v) for v in report.by_node().values()) == [1, 1]
    metrics = report.outcomes[0].result["metrics"]
    assert metrics["test.accuracy"] > 0.5 and "val.loss" in metrics
    # running it again finds the verified runs in the ledger instead of training again
    again = run_cluster(manifest, cluster="local", workers=1, root=tmp_path / "cluster", run_store=tmp_path / "runs")
    assert again.ok and [o.result["claim"] for o in again.outcomes] == [o.result["claim"] for o in report.outcomes]
    # the runs are in the run store too, as `caramba research status` shows them
    store = RunStore(tmp_path / "runs")
    recs = sorted(store.list(), key=lambda r: r.run_name)
    # recorded like a local run: the run ID as its name, the target in its own column
    assert [(r.experiment, r.target, r.run_name, r.status, r.step) for r in recs] == [
        ("blobs", "cpu", "s0", "finished", 30), ("blobs", "cpu", "s1", "finished", 30)]
    steps, losses = store.series(recs[0].id, "loss", "train")
    assert steps == list(range(1, 31)) and losses[-1] < losses[0] and recs[0].summary["verdict"] == "verified"
    assert recs[0].summary["test.accuracy"] == metrics["test.accuracy"] or recs[1].summary["test.accuracy"] == metrics["test.accuracy"]


def test_a_killed_manifest_run_resumes_to_the_same_result(manifest, tmp_path):
    (spec,) = run_specs(manifest, ["s0"])
    with ActorSystem() as system:
        start_services(system, tmp_path / "a")
        straight = wait(system, spawn_experiment(system, spec))
    with ActorSystem() as system:
        start_services(system, tmp_path / "b")
        ref = spawn_experiment(system, spec)
        while ref.ask(GetStatus()).step < 15:
            system.run_until_idle(max_messages=1)
        system.kill(ref.name)
        # another attempt of the run's experiment (only the run's experiment speaks for it)
        resumed = wait(system, spawn_experiment(system, spec, name=f"experiment:{spec.run_id}@again"))
        assert [e.payload["step"] for e in system.lookup("notary").ask(Query(name="resumed")).entries] == [10]
    assert straight.state == resumed.state == "verified"
    assert resumed.last_checkpoint.sha256 == straight.last_checkpoint.sha256
    assert resumed.metrics == straight.metrics
