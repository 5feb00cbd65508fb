"""The Orchestrator actor (persistent queue, node registry, leases) and the Worker actor.

A Worker stands for one node: it registers the node's hardware profile, and on every ``Poll``
heartbeats, receives the leases placed on its node and spawns one Experiment actor per new
lease, on its own node. The Experiment renews the lease at every tick and reports the outcome.
If the worker's process dies, its experiments die with it (they are its children); their
leases expire, the jobs are requeued and another worker resumes them from their last valid
checkpoint.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from caramba.actors.base import Actor, ActorDied, ActorError, AskTimeout, Placement, handler
from caramba.actors.experiment import Cancel, Experiment, GetStatus, Start
from caramba.actors.messages import Message
from caramba.cluster.profile import HardwareProfile, probe
from caramba.cluster.registry import NodeInfo, NodeRegistry
from caramba.errors import ConfigError
from caramba.orchestrator.queue import Job, JobQueue, JobSpec, JobState, Lease, LeaseLost
from caramba.orchestrator.scheduler import Orchestrator
from caramba.store.runs import this_process


class RegisterNode(Message):
    profile: HardwareProfile


class Heartbeat(Message):
    node_id: str


class Submit(Message):
    spec: JobSpec


class PollLeases(Message):
    node_id: str


class LeaseGrant(Message):
    lease: Lease
    job: Job


class LeaseList(Message):
    leases: list[LeaseGrant] = Field(default_factory=list)


class Renew(Message):
    lease_id: str
    token: int


class Complete(Message):
    lease_id: str
    token: int
    result: dict[str, Any] = Field(default_factory=dict)


class Fail(Message):
    lease_id: str
    token: int
    error: str
    retry: bool = True


class Tick(Message):
    pass


class TickReport(Message):
    expired: list[Lease] = Field(default_factory=list)
    granted: list[Lease] = Field(default_factory=list)
    unplaced: dict[str, str] = Field(default_factory=dict)


class ListJobs(Message):
    state: JobState | None = None


class JobList(Message):
    jobs: list[Job] = Field(default_factory=list)


class GetJob(Message):
    job_id: str


class CancelJob(Message):
    job_id: str


class ListNodes(Message):
    pass


class NodeList(Message):
    nodes: list[NodeInfo] = Field(default_factory=list)


class ListLeases(Message):
    job_id: str | None = None
    node_id: str | None = None


class Leases(Message):
    leases: list[Lease] = Field(default_factory=list)


class AdvanceClock(Message):
    """Manual clock only: move time forward (deterministic tests and simulations)."""

    seconds: float = Field(ge=0)


class _ManualClock:
    def __init__(self, start: float = 1_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t


class OrchestratorActor(Actor):
    """Queue and registry in ``root/orchestrator.sqlite``. ``clock="manual"`` freezes time until
    ``AdvanceClock`` moves it (for deterministic fault tests)."""

    def __init__(
        self,
        root: str,
        lease_ttl: float = 30.0,
        heartbeat_ttl: float = 10.0,
        clock: Literal["system", "manual"] = "system",
    ) -> None:
        if clock not in ("system", "manual"):
            raise ConfigError(f"orchestrator clock must be 'system' or 'manual', got {clock!r}")
        self.root = Path(root)
        self.lease_ttl = lease_ttl
        self.heartbeat_ttl = heartbeat_ttl
        self.manual = _ManualClock() if clock == "manual" else None

    def started(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "orchestrator.sqlite"
        clock = self.manual or time.time
        self.orch = Orchestrator(
            JobQueue(path, clock), NodeRegistry(path, heartbeat_ttl=self.heartbeat_ttl, clock=clock), lease_ttl=self.lease_ttl
        )

    def stopped(self) -> None:
        self.orch.queue.close()
        self.orch.registry.close()

    @handler
    def register(self, msg: RegisterNode) -> NodeInfo:
        return self.orch.register(msg.profile)

    @handler
    def heartbeat(self, msg: Heartbeat) -> NodeInfo:
        return self.orch.registry.heartbeat(msg.node_id)

    @handler
    def submit(self, msg: Submit) -> Job:
        return self.orch.queue.submit(msg.spec)

    @handler
    def poll(self, msg: PollLeases) -> LeaseList:
        leases = self.orch.poll(msg.node_id)
        return LeaseList(leases=[LeaseGrant(lease=lease, job=self.orch.queue.job(lease.job_id)) for lease in leases])

    @handler
    def renew(self, msg: Renew) -> Lease:
        return self.orch.renew(msg.lease_id, msg.token)

    @handler
    def complete(self, msg: Complete) -> Job:
        return self.orch.queue.complete(msg.lease_id, msg.token, msg.result)

    @handler
    def fail(self, msg: Fail) -> Job:
        return self.orch.queue.fail(msg.lease_id, msg.token, msg.error, retry=msg.retry)

    @handler
    def tick(self, msg: Tick) -> TickReport:
        expired, granted = self.orch.schedule()
        return TickReport(expired=expired, granted=granted, unplaced=self.orch.unplaced)

    @handler
    def list_jobs(self, msg: ListJobs) -> JobList:
        return JobList(jobs=self.orch.queue.jobs(msg.state))

    @handler
    def get_job(self, msg: GetJob) -> Job:
        return self.orch.queue.job(msg.job_id)

    @handler
    def cancel_job(self, msg: CancelJob) -> Job:
        return self.orch.queue.cancel(msg.job_id)

    @handler
    def list_nodes(self, msg: ListNodes) -> NodeList:
        return NodeList(nodes=self.orch.registry.nodes())

    @handler
    def list_leases(self, msg: ListLeases) -> Leases:
        return Leases(leases=self.orch.queue.leases(job_id=msg.job_id, node_id=msg.node_id))

    @handler
    def advance_clock(self, msg: AdvanceClock) -> float:
        if self.manual is None:
            raise ConfigError("AdvanceClock needs an orchestrator started with clock='manual'")
        self.manual.t += msg.seconds
        return self.manual.t


# ---- worker -----------------------------------------------------------------------------------
class Poll(Message):
    pass


class WhoAmI(Message):
    pass


class WorkerStatus(Message):
    node_id: str
    pid: int
    node: str
    running: dict[str, str] = Field(default_factory=dict)  # lease id -> experiment actor name
    finished: int = 0


class Worker(Actor):
    """One node's worker: while it polls, the leases of its node stay renewed; it watches the
    experiments it spawned and gives back (``Fail``, retry) the lease of one that died. ``profile``: a HardwareProfile dict (default: probe this machine, named
    ``node_id``); ``services``: names of Notary/Storage/Model actors for its experiments;
    ``run_store``: the run store root its experiments also record to (None: ledger only);
    ``keys``: the folder of the runs' own signing keys (shared with the other workers)."""

    def __init__(
        self,
        node_id: str,
        orchestrator: str = "orchestrator",
        services: dict[str, str] | None = None,
        profile: dict[str, Any] | None = None,
        steps_per_tick: int = 1,
        measure: bool = False,
        status_timeout: float = 2.0,
        run_store: str | None = None,
        keys: str | None = None,
    ) -> None:
        self.node_id = node_id
        self.keys = keys
        self.run_store = run_store
        self.status_timeout = status_timeout
        self.orchestrator = orchestrator
        self.services = services or {}
        self.profile = HardwareProfile.model_validate(profile) if profile else None
        self.steps_per_tick = steps_per_tick
        self.measure = measure
        self.running: dict[str, str] = {}
        self.jobs: dict[str, str] = {}  # lease id -> job id
        self.finished = 0

    def started(self) -> None:
        profile = self.profile or probe(self.node_id, measure=self.measure)
        if profile.node_id != self.node_id:
            profile = profile.model_copy(update={"node_id": self.node_id})
        self.profile = profile
        self.context.lookup(self.orchestrator).ask(RegisterNode(profile=profile))

    def status(self) -> WorkerStatus:
        return WorkerStatus(node_id=self.node_id, pid=os.getpid(), node=self.context.node, running=dict(self.running), finished=self.finished)

    @handler
    def whoami(self, msg: WhoAmI) -> WorkerStatus:
        return self.status()

    @handler
    def poll(self, msg: Poll) -> WorkerStatus:
        orch = self.context.lookup(self.orchestrator)
        grants = orch.ask(PollLeases(node_id=self.node_id)).leases
        active = {g.lease.id: g for g in grants}
        for lease_id, name in list(self.running.items()):
            if lease_id in active:
                # polling renewed the lease; make sure the experiment holding it is still there
                try:
                    self.context.lookup(name).ask(GetStatus(), timeout=self.status_timeout)
                    continue
                except AskTimeout:
                    continue  # busy in a long step: alive
                except ActorDied as exc:
                    lease = active.pop(lease_id).lease
                    try:
                        orch.ask(Fail(lease_id=lease_id, token=lease.token, error=exc.message, retry=True))
                    except LeaseLost:
                        pass
            else:  # finished, or the lease moved on; a cancelled job is cancelled in the ledger too
                job_id = self.jobs.get(lease_id)
                if job_id is not None and orch.ask(GetJob(job_id=job_id)).state == "cancelled":
                    try:
                        self.context.lookup(name).ask(Cancel(reason="the job was cancelled"), timeout=self.status_timeout)
                    except ActorError:
                        pass
            del self.running[lease_id]  # the child is done
            self.jobs.pop(lease_id, None)
            self.finished += 1
            try:
                self.context.system.stop(name)
            except ActorError:
                pass
        grants = list(active.values())
        for g in grants:
            if g.lease.id in self.running or g.job.kind != "experiment":
                continue
            spec = g.job.payload["spec"]
            name = f"experiment:{spec['run_id']}@{g.lease.id[:8]}"
            self.context.spawn(
                Experiment,
                name,
                kwargs={
                    "spec": spec,
                    "services": self.services,
                    "autostart": True,  # also after Ray restarts its process: resume from the ledger
                    "steps_per_tick": self.steps_per_tick,
                    "lease": {"lease_id": g.lease.id, "token": g.lease.token, "job_id": g.job.id,
                              "holder": this_process()},  # its experiments stop recording if this process dies
                    "orchestrator": self.orchestrator,
                    "run_store": self.run_store,
                    "keys": self.keys,  # every attempt of a run signs with the run's own key
                },
                placement=Placement(node=self.context.node),
            ).tell(Start())
            self.running[g.lease.id] = name
            self.jobs[g.lease.id] = g.job.id
            try:  # spawning can take a while (a new process on Ray): renew right after it
                orch.ask(Renew(lease_id=g.lease.id, token=g.lease.token))
            except LeaseLost:
                pass  # expired meanwhile: the next poll stops the child
        return self.status()
