"""Cluster runs on the local transport: a sweep spreads over workers; a worker that dies mid-run
loses its lease, the job is requeued, resumes from its checkpoint elsewhere, and the ledger
still verifies end to end (deterministic: the orchestrator's clock is manual)."""

from caramba.actors.experiment import RunSpec, recorded_metrics
from caramba.actors.notary import Query
from caramba.actors.services import run_experiment, start_services
from caramba.actors.system import ActorSystem
from caramba.orchestrator.actor import AdvanceClock, CancelJob, ListNodes
from caramba.orchestrator.run import Cluster, run_cluster


def spec(run_id, **kw):
    return RunSpec(**{"run_id": run_id, "steps": 40, "checkpoint_every": 10, "model": "lin", **kw})


def test_a_sweep_spreads_over_the_workers(tmp_path):
    report = run_cluster(specs=[spec(f"s{i}", seed=i) for i in range(4)], cluster="local", workers=2, root=tmp_path)
    assert report.ok and report.ledger_ok
    assert sorted(len(v) for v in report.by_node().values()) == [2, 2]
    assert {o.result["state"] for o in report.outcomes} == {"verified"}
    assert sorted(o.result["model_version"] for o in report.outcomes) == [1, 2, 3, 4]


def test_a_dead_worker_loses_its_lease_and_the_run_resumes_elsewhere(tmp_path):
    with ActorSystem() as ref_system:  # the uninterrupted run, for comparison
        start_services(ref_system, tmp_path / "reference")
        reference = run_experiment(ref_system, spec("r1"))
        _, ref_metrics = recorded_metrics(ref_system.lookup("notary"), "r1")

    with Cluster("local", root=tmp_path / "cluster", workers=2, clock="manual", lease_ttl=10, heartbeat_ttl=5) as c:
        c.submit([spec("r1")])
        notary = c.system.lookup("notary")
        c.tick(max_messages=0)
        while len(notary.ask(Query(subject="r1", name="progress")).entries) < 2:
            c.system.run_until_idle(max_messages=1)
        c.system.run_until_idle(max_messages=8)  # a few steps past the checkpoint at 20
        victim = c.job_states()[0].node
        before = notary.ask(Query()).entries
        recorded = [e.hash for e in before]
        last_checkpoint = max(e.payload["step"] for e in before if e.kind == "artifact")
        c.kill_worker(victim)
        c.system.run_until_idle()  # nothing left of the run in this process
        c.orchestrator.ask(AdvanceClock(seconds=11))  # past the lease and heartbeat TTLs
        jobs = c.wait(timeout=120)
        report = c.report()
        _, metrics = recorded_metrics(notary, "r1")
        nodes = {n.node_id: n.health for n in c.orchestrator.ask(ListNodes()).nodes}

    job = jobs[0]
    assert job.state == "done" and job.attempts == 2 and job.node != victim
    assert nodes[victim] != "alive"
    assert job.result["state"] == "verified"
    assert report.ledger_ok, report.problems
    entries = [e.hash for e in notary_entries(tmp_path / "cluster")]
    assert entries[: len(recorded)] == recorded  # nothing already recorded was lost
    resumed = [e for e in notary_entries(tmp_path / "cluster") if e.name == "resumed"]
    assert [e.payload["step"] for e in resumed] == [last_checkpoint] and 20 <= last_checkpoint < 40
    final = [e for e in notary_entries(tmp_path / "cluster") if e.kind == "claim"][-1]
    assert final.payload["checkpoint"]["sha256"] == reference.last_checkpoint.sha256
    assert final.payload["metrics"] == reference.metrics
    assert metrics == ref_metrics  # every step recorded once, as in the uninterrupted run


def notary_entries(root):
    from caramba.actors.identity import Identity
    from caramba.actors.ledger import Ledger

    ledger = Ledger(root / "notary" / "ledger.sqlite", Identity.load_or_create(root / "notary" / "notary.key", "notary"))
    try:
        return ledger.entries()
    finally:
        ledger.close()


def test_cancelling_a_job_cancels_its_experiment(tmp_path):
    with Cluster("local", root=tmp_path, workers=1) as c:
        (job,) = c.submit([spec("c1", steps=400, checkpoint_every=100)])
        c.tick(max_messages=0)
        c.system.run_until_idle(max_messages=20)
        assert c.orchestrator.ask(CancelJob(job_id=job.id)).state == "cancelled"
        jobs = c.wait(timeout=60)
        notary = c.system.lookup("notary")
        cancelled = notary.ask(Query(subject="c1", name="cancelled")).entries
        claims = notary.ask(Query(subject="c1", kind="claim")).entries
    assert jobs[0].state == "cancelled"
    assert [e.payload["reason"] for e in cancelled] == ["the job was cancelled"] and claims == []
