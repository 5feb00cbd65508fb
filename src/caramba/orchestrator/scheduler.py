"""Placement: queued jobs -> alive nodes that can run them, least loaded first.

``schedule`` first expires overdue leases (their jobs go back to the queue), then places
queued jobs in priority order. A job goes only to an alive node whose profile satisfies its
requirements (its backend is available there, enough memory and cores) and that has a free
slot; among those, the one with the lowest load (active leases / slots), then the fastest
(measured GFLOP/s), then by name, so placement is deterministic. A job no alive node can run
stays queued with the reason recorded; nothing is ever placed on a node that lacks what it needs.
"""

from __future__ import annotations

from collections.abc import Callable

from caramba.cluster.profile import HardwareProfile
from caramba.cluster.registry import NodeInfo, NodeRegistry
from caramba.orchestrator.queue import Job, JobQueue, Lease, refusal


class Orchestrator:
    """Queue + registry + placement policy; every method takes an optional ``now``."""

    def __init__(self, queue: JobQueue, registry: NodeRegistry, *, lease_ttl: float = 30.0) -> None:
        self.queue = queue
        self.registry = registry
        self.lease_ttl = lease_ttl
        self.unplaced: dict[str, str] = {}  # job id -> why no node took it (last schedule)

    @property
    def clock(self) -> Callable[[], float]:
        return self.queue.clock

    def register(self, profile: HardwareProfile, now: float | None = None) -> NodeInfo:
        return self.registry.register(profile, now)

    def schedule(self, now: float | None = None) -> tuple[list[Lease], list[Lease]]:
        """Expire overdue leases, then place queued jobs. Returns (expired, granted)."""
        t = self.queue._now(now)
        expired = self.queue.expire(t)
        nodes = [n for n in self.registry.nodes(t) if n.health == "alive"]
        load = self.queue.active_counts()
        granted: list[Lease] = []
        self.unplaced = {}
        for job in self.queue.queued():
            node, why = self._pick(job, nodes, load)
            if node is None:
                self.unplaced[job.id] = why
                continue
            granted.append(self.queue.grant(job.id, node.node_id, self.lease_ttl, t))
            load[node.node_id] = load.get(node.node_id, 0) + 1
        return expired, granted

    def _pick(self, job: Job, nodes: list[NodeInfo], load: dict[str, int]) -> tuple[NodeInfo | None, str]:
        fits, reasons = [], []
        for n in nodes:
            why = refusal(job.requirements, n.profile)
            if why is None and load.get(n.node_id, 0) >= n.profile.slots:
                why = f"node '{n.node_id}' is busy ({load[n.node_id]}/{n.profile.slots} slots)"
            if why is None:
                fits.append(n)
            else:
                reasons.append(why)
        if not fits:
            return None, "; ".join(reasons) or "no alive node"
        best = min(fits, key=lambda n: (load.get(n.node_id, 0) / n.profile.slots, -n.profile.gflops, n.node_id))
        return best, ""

    def poll(self, node_id: str, now: float | None = None) -> list[Lease]:
        """A node checks in: heartbeat, renew the leases it holds (a live node keeps its jobs),
        schedule, and return its active leases. A node that stops polling loses its leases
        after ``lease_ttl``."""
        t = self.queue._now(now)
        self.registry.heartbeat(node_id, t)
        self.schedule(t)
        held = self.queue.leases(node_id=node_id, state="active")
        return [self.queue.renew(lease.id, lease.token, self.lease_ttl, t) for lease in held]

    def renew(self, lease_id: str, token: int, now: float | None = None) -> Lease:
        return self.queue.renew(lease_id, token, self.lease_ttl, now)
