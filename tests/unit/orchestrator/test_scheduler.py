"""Placement: only nodes that have what a job needs, least loaded first, never a dead node."""

from caramba.cluster import HardwareProfile, NodeRegistry
from caramba.cluster.profile import BackendInfo
from caramba.orchestrator import JobQueue, JobSpec, Orchestrator, Requirements


def node(name, backends=("cpu",), slots=1, gflops=10.0):
    return HardwareProfile(
        node_id=name, slots=slots, gflops=gflops, backends={b: BackendInfo(name=b, available=True) for b in backends}
    )


def orch():
    return Orchestrator(JobQueue(), NodeRegistry(heartbeat_ttl=10), lease_ttl=30)


def test_jobs_go_to_nodes_that_have_their_backend():
    o = orch()
    o.register(node("cpu-box"), now=0)
    o.register(node("xla-box", backends=("cpu", "xla"), gflops=5.0), now=0)
    xla = o.queue.submit(JobSpec(name="x", requirements=Requirements(backend="xla")), now=0)
    cuda = o.queue.submit(JobSpec(name="c", requirements=Requirements(backend="cuda")), now=0)
    _, granted = o.schedule(now=1)
    assert [(g.job_id, g.node_id) for g in granted] == [(xla.id, "xla-box")]
    assert "no backend 'cuda'" in o.unplaced[cuda.id]
    assert o.queue.job(cuda.id).state == "queued"  # waits for a node that has it; never rerouted


def test_a_sweep_spreads_least_loaded_first():
    o = orch()
    for name, g in (("a", 10.0), ("b", 20.0), ("c", 15.0)):
        o.register(node(name, slots=2, gflops=g), now=0)
    for i in range(7):
        o.queue.submit(JobSpec(name=f"r{i}"), now=0)
    _, granted = o.schedule(now=1)
    # equal load: fastest first; then every node gets a second job before anyone a third
    assert [g.node_id for g in granted] == ["b", "c", "a", "b", "c", "a"]
    assert "busy" in next(iter(o.unplaced.values()))
    assert o.queue.active_counts() == {"a": 2, "b": 2, "c": 2}


def test_dead_nodes_get_nothing_and_their_leases_expire():
    o = orch()
    o.register(node("a"), now=0)
    o.register(node("b"), now=0)
    job = o.queue.submit(JobSpec(name="r"), now=0)
    lease = o.poll("a", now=1)[0]
    assert lease.job_id == job.id
    # "a" goes silent; "b" keeps polling; after the lease TTL the job moves to "b"
    assert o.poll("b", now=20) == []
    moved = o.poll("b", now=40)
    assert [(x.job_id, x.node_id, x.token) for x in moved] == [(job.id, "b", 2)]
    assert o.queue.lease(lease.id).state == "expired"
