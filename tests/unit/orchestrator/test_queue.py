"""The persistent job queue: leases, fencing tokens, expiry and requeue, retries."""

import pytest

from caramba.cluster import HardwareProfile
from caramba.cluster.profile import BackendInfo
from caramba.orchestrator import JobQueue, JobSpec, LeaseLost, Requirements, refusal
from caramba.orchestrator.queue import QueueError


def test_lease_renew_complete(tmp_path):
    q = JobQueue(tmp_path / "q.sqlite")
    job = q.submit(JobSpec(name="r1", payload={"x": 1}), now=0)
    lease = q.grant(job.id, "n1", ttl=10, now=1)
    assert (lease.token, lease.expires, q.job(job.id).state) == (1, 11, "leased")
    assert q.renew(lease.id, 1, ttl=10, now=9).expires == 19
    done = q.complete(lease.id, 1, {"state": "verified"}, now=12)
    assert done.state == "done" and done.result == {"state": "verified"}
    with pytest.raises(LeaseLost, match="is completed"):
        q.renew(lease.id, 1, ttl=10, now=13)
    with pytest.raises(QueueError, match="is done, not queued"):
        q.grant(job.id, "n2", ttl=10)


def test_expired_leases_requeue_and_stale_holders_are_fenced(tmp_path):
    q = JobQueue(tmp_path / "q.sqlite")
    job = q.submit(JobSpec(name="r1", max_attempts=2), now=0)
    first = q.grant(job.id, "n1", ttl=5, now=0)
    assert q.expire(now=4) == []
    with pytest.raises(LeaseLost, match="expired"):
        q.renew(first.id, first.token, ttl=5, now=6)  # too late even before expire() runs
    expired = q.expire(now=6)
    assert [lease.id for lease in expired] == [first.id]
    requeued = q.job(job.id)
    assert requeued.state == "queued" and requeued.attempts == 1 and "expired" in requeued.error
    second = q.grant(job.id, "n2", ttl=5, now=7)
    assert second.token == 2
    with pytest.raises(LeaseLost):
        q.complete(first.id, first.token, {"state": "late"}, now=8)  # the old holder cannot report
    q.expire(now=20)
    assert q.job(job.id).state == "failed"  # attempts used up


def test_fail_with_and_without_retry_and_cancel(tmp_path):
    q = JobQueue(tmp_path / "q.sqlite")
    a = q.submit(JobSpec(name="a"), now=0)
    lease = q.grant(a.id, "n1", 10, now=0)
    assert q.fail(lease.id, lease.token, "oom", retry=True, now=1).state == "queued"
    lease = q.grant(a.id, "n1", 10, now=2)
    assert q.fail(lease.id, lease.token, "bad config", retry=False, now=3).state == "failed"
    b = q.submit(JobSpec(name="b"), now=0)
    q.grant(b.id, "n1", 10, now=0)
    assert q.cancel(b.id).state == "cancelled"
    assert q.leases(job_id=b.id)[0].state == "released"


def test_the_queue_survives_a_restart(tmp_path):
    q = JobQueue(tmp_path / "q.sqlite")
    ids = [q.submit(JobSpec(name=f"r{i}", priority=i % 2), now=i).id for i in range(4)]
    q.grant(ids[0], "n1", 10, now=5)
    q.close()
    q2 = JobQueue(tmp_path / "q.sqlite")
    assert [j.name for j in q2.queued()] == ["r1", "r3", "r2"]  # priority, then age
    assert q2.active_counts() == {"n1": 1}


def test_requirements_match_profiles():
    cpu_only = HardwareProfile(
        node_id="n1", cpus=2, memory_bytes=8 << 30,
        backends={"cpu": BackendInfo(name="cpu", available=True), "xla": BackendInfo(name="xla", available=False, reason="jax is not installed")},
    )
    assert refusal(Requirements(backend="cpu"), cpu_only) is None
    assert refusal(Requirements(backend="xla"), cpu_only) == "node 'n1' has no backend 'xla' (jax is not installed)"
    assert "needs 17179869184" in refusal(Requirements(min_memory_bytes=16 << 30), cpu_only)
    assert "needs 4" in refusal(Requirements(min_cpus=4), cpu_only)
    assert "lacks label zone=eu" in refusal(Requirements(labels={"zone": "eu"}), cpu_only)
