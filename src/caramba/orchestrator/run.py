"""Run many experiments across workers: ``run_cluster`` and the ``Cluster`` it drives.

``Cluster("local")`` runs the services, the orchestrator and N workers in this process
(deterministic); ``Cluster("ray")`` runs each of them as a Ray actor, so a sweep of runs is
spread over the workers and a worker that dies only costs the steps since its runs' last
checkpoints. Everything durable lives under ``root``: the ledger, the blobs, model versions,
the job queue.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from caramba.actors.base import ActorError
from caramba.actors.experiment import RunSpec, Services
from caramba.actors.notary import VerifyLedger
from caramba.actors.services import start_services
from caramba.actors.system import ActorRef, ActorSystem
from caramba.errors import CarambaError
from caramba.orchestrator.actor import ListJobs, OrchestratorActor, Poll, Submit, Tick, Worker
from caramba.orchestrator.queue import FINAL, Job, JobSpec, Requirements


class ClusterError(CarambaError):
    """The cluster run could not finish (timeout, no worker can take a job); the message says which."""


def requirements_for(spec: RunSpec) -> Requirements:
    """A run needs the backend its driver runs on (``config.backend``, default cpu)."""
    backend = str(spec.config.get("backend") or "cpu").partition(":")[0]
    return Requirements(backend=backend)


class RunOutcome(BaseModel):
    run_id: str
    job_id: str
    state: str
    node: str | None
    attempts: int
    result: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class ClusterReport(BaseModel):
    """What a cluster run did: one outcome per run, and whether the ledger verifies end to end."""

    cluster: str
    root: str
    workers: list[str]
    outcomes: list[RunOutcome]
    ledger_ok: bool
    ledger_entries: int
    problems: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.ledger_ok and all(o.state == "done" and o.result.get("state") == "verified" for o in self.outcomes)

    def as_text(self) -> str:
        lines = [f"{len(self.outcomes)} runs on {self.cluster} ({len(self.workers)} workers), store {self.root}"]
        for o in self.outcomes:
            r = o.result
            what = r.get("state", o.state)
            extra = f" model v{r['model_version']}" if r.get("model_version") else ""
            why = f": {o.error}" if o.state != "done" and o.error else ""
            lines.append(f"  {o.run_id:<40} {what:<9} on {o.node or '-'} (attempt {o.attempts}){extra}{why}")
        lines.append(f"ledger: {self.ledger_entries} entries, " + ("verifies end to end" if self.ledger_ok else "DOES NOT VERIFY"))
        lines += [f"  {p}" for p in self.problems]
        return "\n".join(lines)

    def by_node(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for o in self.outcomes:
            out.setdefault(o.node or "-", []).append(o.run_id)
        return out


class Cluster:
    """Services + orchestrator + workers on one actor system; a context manager.

    ``workers``: how many (default: 2 on Ray, 1 locally); ``clock="manual"`` freezes the
    orchestrator's clock (tests); ``system``: reuse an existing ActorSystem; ``run_store``: also
    record every run in the run store at that root."""

    def __init__(
        self,
        cluster: str = "local",
        *,
        root: str | os.PathLike,
        workers: int | None = None,
        storage_url: str | None = None,
        lease_ttl: float = 30.0,
        heartbeat_ttl: float | None = None,
        poll_interval: float = 0.2,
        clock: str = "system",
        steps_per_tick: int = 1,
        system: ActorSystem | None = None,
        ray_options: dict[str, Any] | None = None,
        run_store: str | os.PathLike | None = None,
    ) -> None:
        self.kind = cluster
        if run_store is not None:  # a URL stays a URL (each worker opens its own replica); a folder is made absolute
            from caramba.store.registry import is_url

            run_store = str(run_store) if is_url(run_store) else str(Path(run_store).absolute())
        self.run_store = run_store
        self.root = Path(root).absolute()
        self.n_workers = workers if workers is not None else (2 if cluster == "ray" else 1)
        self.storage_url = storage_url
        self.lease_ttl = lease_ttl
        self.heartbeat_ttl = heartbeat_ttl if heartbeat_ttl is not None else max(lease_ttl / 2, poll_interval * 5)
        self.poll_interval = poll_interval
        self.clock = clock
        self.steps_per_tick = steps_per_tick
        self._owns = system is None
        self.system = system or ActorSystem(cluster, **(ray_options or {}))
        self.services = Services()
        self.workers: dict[str, ActorRef] = {}
        self.jobs: list[Job] = []

    def __enter__(self) -> "Cluster":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        start_services(self.system, self.root, storage_url=self.storage_url, names=self.services)
        self.orchestrator = self.system.spawn(
            OrchestratorActor,
            "orchestrator",
            kwargs={"root": str(self.root / "orchestrator"), "lease_ttl": self.lease_ttl,
                    "heartbeat_ttl": self.heartbeat_ttl, "clock": self.clock},
        )
        for i in range(self.n_workers):
            self.add_worker(f"worker-{i + 1}")

    def add_worker(self, node_id: str, profile: dict[str, Any] | None = None) -> ActorRef:
        from caramba.actors.base import NEVER

        ref = self.system.spawn(
            Worker,
            f"worker:{node_id}",
            kwargs={"node_id": node_id, "services": self.services.model_dump(), "profile": profile,
                    "steps_per_tick": self.steps_per_tick, "run_store": self.run_store,
                    "keys": str(self.root / "keys")},
            supervision=NEVER,  # a worker that dies stays dead; its leases expire and its jobs move on
        )
        self.workers[node_id] = ref
        return ref

    def submit(self, specs: Iterable[RunSpec], *, max_attempts: int = 3) -> list[Job]:
        for spec in specs:
            job = self.orchestrator.ask(Submit(spec=JobSpec(
                name=spec.run_id, payload={"spec": spec.model_dump(mode="json")},
                requirements=requirements_for(spec), max_attempts=max_attempts,
            )))
            self.jobs.append(job)
        return list(self.jobs)

    def tick(self, max_messages: int | None = None) -> None:
        """Expire and place leases, then let every worker poll (dead workers are skipped).
        Locally, then process up to ``max_messages`` queued messages (default: all)."""
        self.orchestrator.ask(Tick())
        for ref in self.workers.values():
            ref.tell(Poll())
        if max_messages is None:
            self.system.run_until_idle()
        else:
            self.system.run_until_idle(max_messages)

    def kill_worker(self, node_id: str) -> None:
        """Kill a worker as if its machine died (its experiments die with it)."""
        self.system.kill(self.workers[node_id].name)

    def job_states(self) -> list[Job]:
        mine = {j.id for j in self.jobs}
        return [j for j in self.orchestrator.ask(ListJobs()).jobs if j.id in mine]

    def wait(self, timeout: float = 3600.0, on_tick: Callable[["Cluster"], None] | None = None) -> list[Job]:
        deadline = time.monotonic() + timeout
        while True:
            self.tick()
            jobs = self.job_states()
            if all(j.state in FINAL for j in jobs):
                return jobs
            if on_tick is not None:
                on_tick(self)
            if time.monotonic() > deadline:
                pending = ", ".join(f"{j.name}={j.state}" for j in jobs if j.state not in FINAL)
                raise ClusterError(f"cluster run did not finish within {timeout:g}s: {pending}")
            if self.kind != "local":
                time.sleep(self.poll_interval)

    def report(self) -> ClusterReport:
        jobs = self.job_states()
        ledger = self.system.lookup(self.services.notary).ask(VerifyLedger())
        return ClusterReport(
            cluster=self.kind, root=str(self.root), workers=sorted(self.workers),
            outcomes=[RunOutcome(run_id=j.name, job_id=j.id, state=j.state, node=j.node, attempts=j.attempts,
                                 result=j.result or {}, error=j.error) for j in jobs],
            ledger_ok=ledger.ok, ledger_entries=ledger.entries, problems=[str(p) for p in ledger.problems],
        )

    def close(self) -> None:
        if self._owns:
            try:
                self.system.shutdown()
            except ActorError:
                pass


def run_cluster(
    manifest_path: str | os.PathLike | None = None,
    runs: Iterable[str] | None = None,
    *,
    specs: Iterable[RunSpec] | None = None,
    cluster: str = "ray",
    overrides: Iterable[str] | dict[str, Any] | None = None,
    backend: str | None = None,
    target: str | None = None,
    workers: int | None = None,
    root: str | os.PathLike | None = None,
    run_store: str | os.PathLike | None = None,
    timeout: float = 3600.0,
    **options: Any,
) -> ClusterReport:
    """Run a manifest's runs (or explicit ``specs``) across workers: ``caramba research run
    --cluster ray``. ``runs`` picks run IDs or labels (default: all); ``cluster`` is ``ray`` or
    ``local``; ``workers`` defaults to 2 on Ray. The ledger, checkpoints, model versions and the
    job queue live under ``root`` (default: ``<store>/cluster``); manifest runs are also recorded
    in the run store (``run_store``, default: the configured store) like local runs. The report
    says where each run ran, its verdict and model version, and whether the ledger verifies."""
    if specs is None:
        if manifest_path is None:
            raise ClusterError("run_cluster needs a manifest path or explicit run specs")
        from caramba.orchestrator.manifest import run_specs
        from caramba.orchestrator.tuned import run_cluster_tuned, sequential_tuner

        ov = [f"{k}={v}" for k, v in overrides.items()] if isinstance(overrides, dict) else list(overrides or [])
        tuned = sequential_tuner(manifest_path, ov, backend, target)
        if tuned is not None:  # grid/random/active_inference: the tuner submits one chosen run at a time
            if runs is not None:
                raise ClusterError("a manifest whose tuner chooses its runs (tuner.strategy) runs as a whole; "
                                   "drop the run selection, or use tuner.strategy: all")
            if run_store is None:
                from caramba.config import settings

                run_store = settings().store
            if root is None:
                from caramba.config import settings

                root = Path(settings().store) / "cluster"
            return run_cluster_tuned(manifest_path, tuned[0], tuned[1], lambda: Cluster(
                cluster, root=root, workers=workers, run_store=run_store, **options), run_store, timeout)

        specs = run_specs(manifest_path, runs, overrides=overrides, backend=backend, target=target)
        if run_store is None:
            from caramba.config import settings

            run_store = settings().store
    specs = list(specs)
    if root is None:
        from caramba.config import settings

        root = Path(settings().store) / "cluster"
    with Cluster(cluster, root=root, workers=workers, run_store=run_store, **options) as c:
        c.submit(specs)
        c.wait(timeout)
        return c.report()
