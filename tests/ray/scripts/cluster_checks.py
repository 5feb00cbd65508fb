"""Ray checks, run by tests/ray/test_ray_cluster.py inside netns-run (loopback only).

Phase "sweep": the same experiment on the local transport and on Ray gives identical results,
and a sweep of runs spreads over the Ray workers. Phase "fault": a worker process is killed
(SIGKILL) mid-run; its lease expires, the job is requeued and resumes from its checkpoint on
the other worker, nothing recorded is lost and the ledger verifies end to end.
Prints one JSON object on the last line of stdout.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from caramba.actors import ActorDied, ActorSystem
from caramba.actors.experiment import GetStatus, RunSpec, recorded_metrics
from caramba.actors.notary import GetEntry, Query
from caramba.actors.services import run_experiment, start_services
from caramba.orchestrator.actor import WhoAmI
from caramba.orchestrator.run import Cluster

ROOT = Path(sys.argv[1])
STEPS = 40
FAULT_STEPS, FAULT_EVERY = 2000, 200  # long enough that the kill lands mid-run


def spec(run_id: str, seed: int = 0, steps: int = STEPS, every: int = 10) -> RunSpec:
    return RunSpec(run_id=run_id, seed=seed, steps=steps, checkpoint_every=every, model=f"lin-{run_id}")


def local_reference(run_id: str, **kw) -> dict:
    with ActorSystem("local") as system:
        start_services(system, ROOT / f"local-{run_id}")
        status = run_experiment(system, spec(run_id, **kw), steps_per_tick=25)  # same numbers, fewer messages
        _, metrics = recorded_metrics(system.lookup("notary"), run_id)
    return {"state": status.state, "sha256": status.last_checkpoint.sha256, "metrics": status.metrics, "losses": metrics["loss"]}


def outcome(cluster: Cluster, run_id: str) -> dict:
    notary = cluster.system.lookup("notary")
    job = next(j for j in cluster.job_states() if j.name == run_id)
    if not job.result or "claim" not in job.result:
        return {"state": job.state, "error": job.error, "result": job.result, "node": job.node, "attempts": job.attempts}
    claim = notary.ask(GetEntry(ref=job.result["claim"]))
    _, metrics = recorded_metrics(notary, run_id)
    return {
        "state": job.result["state"], "sha256": claim.payload["checkpoint"]["sha256"], "metrics": claim.payload["metrics"],
        "losses": metrics["loss"], "node": job.node, "attempts": job.attempts,
    }


def sweep(system: ActorSystem) -> dict:
    t = time.time()
    reference = local_reference("s0")
    with Cluster("ray", root=ROOT / "sweep", workers=2, system=system, lease_ttl=60, poll_interval=0.1) as c:
        c.submit([spec(f"s{i}", seed=i) for i in range(4)])
        c.wait(timeout=240)
        report = c.report()
        on_ray = outcome(c, "s0")
    return {
        "reference": reference, "ray": on_ray, "by_node": report.by_node(), "ledger_ok": report.ledger_ok,
        "states": sorted({o.result.get("state", o.state) for o in report.outcomes}), "seconds": round(time.time() - t, 1),
    }


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (dead, not yet reaped) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


def fault(system: ActorSystem) -> dict:
    t = time.time()
    reference = local_reference("f0", steps=FAULT_STEPS, every=FAULT_EVERY)
    killed: dict = {}

    def kill_once(c: Cluster) -> None:
        if killed:
            return
        notary = c.system.lookup("notary")
        progress = notary.ask(Query(subject="f0", name="progress")).entries
        job = c.job_states()[0]
        if not progress:
            return  # wait for the first checkpoint
        if job.state != "leased":
            return
        me = c.workers[job.node].ask(WhoAmI())
        children = [c.system.lookup(name).ask(GetStatus()).pid for name in me.running.values()]
        os.kill(me.pid, signal.SIGKILL)  # the worker's process dies; its experiments (Ray children) with it
        # the ledger as the killed attempt left it: once its process is gone and what it had in
        # flight has landed (a record sent a moment before the kill is a committed record)
        deadline = time.time() + 60
        while any(_alive(p) for p in children) and time.time() < deadline:
            time.sleep(0.05)
        if any(_alive(p) for p in children):
            raise SystemExit(f"the killed worker's experiments {children} still ran 60 s later")
        time.sleep(1.0)
        before = notary.ask(Query()).entries
        killed.update(node=job.node, pid=me.pid, entries=[e.hash for e in before])

    with Cluster("ray", root=ROOT / "fault", workers=2, system=system, lease_ttl=8.0, heartbeat_ttl=2.0,
                 poll_interval=0.2) as c:
        c.submit([spec("f0", steps=FAULT_STEPS, every=FAULT_EVERY)])
        c.wait(timeout=240, on_tick=kill_once)
        report = c.report()
        if not killed:
            raise SystemExit(f"no worker was killed: the run ended first: {c.job_states()}")
        result = outcome(c, "f0")
        notary = c.system.lookup("notary")
        entries = notary.ask(Query()).entries
        after = [e.hash for e in entries]
        resumed_events = notary.ask(Query(subject="f0", name="resumed")).entries
        resumed = [e.payload["step"] for e in resumed_events]
        # the killed attempt's evidence is what the ledger held once its process was gone (every
        # attempt of the run signs with the run's own key, so the name does not tell them apart): its
        # last checkpoint is where to resume, and nothing about the run may be recorded between
        # then and the next attempt's `resumed` event
        before = set(killed["entries"])
        mine = [e for e in entries if e.hash in before and e.subject == "f0"]
        killed["checkpoint"] = max((e.payload["step"] for e in mine if e.kind == "artifact"), default=None)
        last_before = max((e.seq for e in entries if e.hash in before), default=-1)
        zombie = [e.seq for e in entries if e.subject == "f0" and resumed_events
                  and last_before < e.seq < resumed_events[0].seq]
        try:
            c.workers[killed["node"]].ask(WhoAmI(), timeout=30)
            dead_error = ""
        except ActorDied as exc:
            dead_error = str(exc)
        c.workers.pop(killed["node"])  # dead: nothing to stop at close
    return {
        "reference": reference, "ray": result, "killed_node": killed.get("node"), "killed_checkpoint": killed.get("checkpoint"),
        "resumed": resumed, "zombie_entries": zombie, "kept": after[: len(killed.get("entries", []))] == killed.get("entries"),
        "ledger_ok": report.ledger_ok, "problems": report.problems, "dead_error": dead_error,
        "seconds": round(time.time() - t, 1),
    }


def placement(system: ActorSystem) -> dict:
    """A Backend actor lands where its backend is; one nobody offers is refused, not moved."""
    from caramba.actors import Placement, PlacementError
    from caramba.actors.backend import BackendActor, GetCapabilities, placement_for

    ref = system.spawn(BackendActor, "backend:cpu", kwargs={"spec": "cpu"}, placement=placement_for("cpu"))
    caps = ref.ask(GetCapabilities())
    try:
        system.spawn(BackendActor, "backend:nope", kwargs={"spec": "cpu"}, placement=Placement(backend="nope"))
        refused = ""
    except PlacementError as exc:
        refused = str(exc)
    system.stop("backend:cpu")
    return {"location": caps.location, "has_matmul": "linalg.matmul" in caps.ops, "refused": refused}


def main() -> None:
    t = time.time()
    with ActorSystem("ray", num_cpus=2, namespace="sweep") as system:
        started = round(time.time() - t, 1)
        out = {"ray_start_seconds": started, "placement": placement(system), "sweep": sweep(system)}
        out["fault"] = fault(ActorSystem("ray", namespace="fault"))
    out["seconds"] = round(time.time() - t, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
