"""Runs as the API sees them: read from the run store, executed in this process.

The run store (``caramba.store.runs``) is the source of truth for runs, metrics and artifacts:
the API reads it, the metric stream tails it, and a run submitted here writes to it like
``caramba research run`` does. What only this process knows, that a live run is paused, is
laid over the stored status.

Metric cursor: the store gives a run's metric rows ordered by step (then by when they were
written), and rows are only appended at the run's current step or later. A cursor ``(step,
count)`` says "every row before ``step``, and the first ``count`` rows at ``step``, were
delivered", so resuming from it neither skips nor repeats a row, even when an evaluation adds
rows to a step whose training rows were already sent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caramba.api.errors import Conflict, NotFound
from caramba.run.events import RunCancelled

TERMINAL = ("finished", "failed", "cancelled", "interrupted")
PAUSE_WAIT_S = 5.0
ALL_STATUSES = ("created", "running", "paused", "finished", "failed", "cancelled", "interrupted")


@dataclass(frozen=True, order=True)
class Cursor:
    """Every metric row before ``step``, and ``count`` rows at ``step``, have been delivered."""

    step: int = -1
    count: int = 0

    def __str__(self) -> str:
        return f"{self.step}:{self.count}"

    @classmethod
    def parse(cls, text: str | None, after: int | None = None) -> "Cursor":
        """``Last-Event-ID`` (``step:count``) wins over ``?after=step`` (everything up to and
        including that step was seen); neither means from the start."""
        if text:
            step, sep, count = text.strip().partition(":")
            try:
                return cls(int(step), int(count) if sep else 1 << 62)
            except ValueError:
                pass  # a malformed ID from a confused client: fall back to ?after
        if after is not None:
            return cls(after, 1 << 62)
        return cls()


def rows_after(rows: list[tuple[int, str, str, float]], cursor: Cursor) -> tuple[list[tuple], Cursor]:
    """The rows past ``cursor`` and the cursor after them. ``rows`` are ``(step, split, name,
    value)`` in store order (by step, then as written)."""
    new: list[tuple] = []
    seen_at_cursor = 0
    step, count = cursor.step, cursor.count
    for r in rows:
        s = r[0]
        if s < cursor.step:
            continue
        if s == cursor.step:
            seen_at_cursor += 1
            if seen_at_cursor <= cursor.count:
                continue
        new.append(r)
        if s == step:
            count += 1
        else:
            step, count = s, 1
    return new, Cursor(step, count)


def point(r: tuple) -> dict[str, Any]:
    return {"step": r[0], "split": r[1], "name": r[2], "value": r[3]}


@dataclass
class Control:
    """How the API steers a live run: the executing thread checks these between steps."""

    pause: threading.Event = field(default_factory=threading.Event)
    cancel: threading.Event = field(default_factory=threading.Event)
    resume: threading.Event = field(default_factory=threading.Event)
    parked: threading.Event = field(default_factory=threading.Event)  # the run waits between two steps
    reason: str = ""

    def checkpoint(self) -> bool:
        """Called between steps: blocks while paused; True when the run must stop now."""
        if self.pause.is_set() and not self.cancel.is_set():
            self.parked.set()
            try:
                while self.pause.is_set() and not self.cancel.is_set():
                    self.resume.wait(0.2)
            finally:
                self.parked.clear()
        return self.cancel.is_set()


class _Steer:
    """The experiment runner's progress callbacks (``caramba.run.Progress``),
    used to steer a run between its steps: a pause blocks there, a cancel raises there."""

    def __init__(self, service: "RunService", started: threading.Event) -> None:
        self.service = service
        self.started = started
        self.run_id: str | None = None
        self.control = Control()

    def start(self, plan: Any, run_id: str, total: int) -> None:
        self.run_id = run_id
        with self.service.lock:
            self.service.live[run_id] = self.control
        self.started.set()

    def step(self, step: int, total: int, values: Any, samples_per_s: float) -> None:
        if self.control.checkpoint():
            raise RunCancelled(self.control.reason or "cancelled")

    def evaluate(self, step: int, split: str, values: Any) -> None:
        if self.control.cancel.is_set():
            raise RunCancelled(self.control.reason or "cancelled")

    def end(self, result: Any) -> None:
        self.release()

    def message(self, text: str) -> None:
        pass

    def release(self) -> None:
        if self.run_id is not None:
            with self.service.lock:
                self.service.live.pop(self.run_id, None)


def plan_submission(path: Path, overrides: list[str], targets: list[str], run_ids: list[str]) -> list[Any]:
    """The runs a submitted manifest plans, narrowed to ``targets`` and ``run_ids``, with every
    model lowered once, so a bad one is a located 422 and not a failed run. Inside
    ``data_roots`` a checkpoint given as a path must lie under the roots too."""
    from caramba.data.sources import outside_roots
    from caramba.errors import did_you_mean
    from caramba.run import plan_runs

    plans = plan_runs(path, overrides)
    doc = plans[0].prep.doc
    known_targets = list(dict.fromkeys(p.target.name for p in plans))
    for t in targets:
        if t not in known_targets:
            raise doc.error(("targets",), f"no target '{t}'; {did_you_mean(t, known_targets)}")
    plans = [p for p in plans if not targets or p.target.name in targets]
    known_runs = list(dict.fromkeys(p.run.id for p in plans))
    for r in run_ids:
        if r not in known_runs:
            raise doc.error(("targets",), f"no run '{r}' in the chosen targets; {did_you_mean(r, known_runs)}")
    plans = [p for p in plans if not run_ids or p.run.id in run_ids]
    from caramba.compute.registry import require

    for spec in dict.fromkeys(p.backend for p in plans):  # a backend this server cannot run: 409, nothing recorded
        require(spec)
    checked: set[int] = set()
    for p in plans:
        ref = p.run.checkpoint
        if ref and ("/" in ref or ref.startswith(("~", "."))) and outside_roots(path.parent, ref):
            raise doc.error(("targets",), f"the checkpoint of run '{p.run.id}' is a path outside the folders this "
                            "server reads from", hint="name the run whose checkpoint to start from (its ID or "
                            "`latest`), or put the file under a data root")
        if id(p.prep) not in checked:
            checked.add(id(p.prep))
            p.prep.lower(training=p.prep.manifest.trainer is not None)
    return plans


class RunService:
    """The run store at ``root`` plus the runs this process executes."""

    def __init__(self, root: Path, settings: Any, *, workers: int = 2, sandbox: Any = None) -> None:
        from caramba.api.sandbox import Sandbox
        from caramba.store.runs import open_runs

        self.root = Path(root)
        self.settings = settings
        self.store = open_runs(self.root)
        self.sandbox = sandbox if sandbox is not None else Sandbox(
            settings.serve_validate_timeout_s, settings.serve_validate_memory_mb)
        self.workers = workers
        self.live: dict[str, Control] = {}
        self.threads: dict[str, threading.Thread] = {}
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self._slots = threading.BoundedSemaphore(workers)
        self._graphs: dict[str, Any] = {}
        from caramba.api.actors import ActorHost

        self.actors = ActorHost(self.root / "cluster", self.root)

    # ---- reading ---------------------------------------------------------------------------
    def record(self, ref: str) -> Any:
        from caramba.store.runs import RunNotFound

        try:
            return self.store.get(ref)
        except RunNotFound as exc:  # the store's message names its folder on this server
            raise NotFound(exc.message.replace(f" in {self.store.root}", ""), hint=exc.hint) from None

    def _actor_state(self, rec: Any) -> str | None:
        ledger_run = rec.config.get("ledger_run") if isinstance(rec.config, dict) else None
        if not ledger_run or rec.status in TERMINAL or ledger_run not in self.actors.experiments:
            return None
        return self.actors.state(ledger_run)

    def status_of(self, rec: Any, actor_state: str | None = None) -> str:
        control = self.live.get(rec.id)
        if control is not None and rec.status == "running" and control.parked.is_set():
            return "paused"
        if actor_state == "paused" and rec.status == "running":
            return "paused"
        return rec.status

    def view(self, rec: Any) -> dict[str, Any]:
        """A run as the API returns it."""
        actor_state = self._actor_state(rec)
        control = self.live.get(rec.id)
        error = rec.error or None
        if control is not None and rec.status in TERMINAL and control.cancel.is_set():
            error = control.reason or error  # recorded as interrupted a moment before the reason is
        live = (control is not None and rec.status not in TERMINAL) or actor_state is not None
        return {
            "id": rec.id, "experiment": rec.experiment, "status": self.status_of(rec, actor_state), "target": rec.target,
            "name": rec.run_name, "group_id": rec.group_id, "arm": rec.arm, "seed": rec.seed, "backend": rec.backend,
            "created": rec.created, "started": rec.started, "finished": rec.finished, "step": rec.step,
            "steps": rec.steps, "summary": rec.summary, "error": error,
            "manifest_sha256": rec.manifest_sha256 or None, "live": live,
            "executor": rec.config.get("executor") or ("actors" if rec.config.get("ledger_run") else "local"),
            "ledger_run": rec.config.get("ledger_run"), "tags": rec.tags, "note": rec.note,
        }

    def runs(self, *, experiment: str | None = None, group_id: str | None = None, status: str | None = None,
             target: str | None = None, backend: str | None = None) -> list[dict[str, Any]]:
        out = [self.view(r) for r in self.store.list(limit=1_000_000, experiment=experiment, group_id=group_id)]
        for key, want in (("status", status), ("target", target), ("backend", backend)):
            if want is not None:
                out = [r for r in out if r[key] == want]
        return out

    def experiments(self) -> list[dict[str, Any]]:
        groups: dict[str, dict[str, Any]] = {}
        for r in self.runs():  # newest first
            g = groups.get(r["experiment"])
            if g is None:
                g = groups[r["experiment"]] = {"name": r["experiment"], "runs": 0, "statuses": {},
                                               "updated": r["created"], "latest_run": r["id"]}
            g["runs"] += 1
            g["statuses"][r["status"]] = g["statuses"].get(r["status"], 0) + 1
        return list(groups.values())

    def metrics(self, run_id: str, cursor: Cursor = Cursor()) -> tuple[list[dict[str, Any]], Cursor]:
        rows, nxt = rows_after(self.store.metrics(run_id), cursor)
        return [point(r) for r in rows], nxt

    def artifacts(self, run_id: str) -> list[Any]:
        return self.store.artifacts(run_id)

    def artifact(self, run_id: str, name: str) -> Any:
        for a in self.store.artifacts(run_id):
            if a.name == name:
                if not a.path.is_file():
                    raise NotFound(f"artifact '{name}' of run {run_id} is recorded but its file is gone")
                return a
        raise NotFound(f"run {run_id} has no artifact '{name}'",
                       hint="GET /api/v1/runs/{id}/artifacts lists them")

    def graph_report(self, run_id: str, build: Callable[[], Any]) -> Any:
        """The compile report of a run's manifest, built once per run."""
        if run_id not in self._graphs:
            self._graphs[run_id] = build()
        return self._graphs[run_id]

    # ---- executing -------------------------------------------------------------------------
    def submit(self, text: str, name: str, overrides: list[str], targets: list[str], run_ids: list[str],
               executor: str = "local") -> dict[str, Any]:
        """Plan a manifest's runs (a bad manifest raises a located ManifestError here, before
        anything runs), then execute them one after another in a background thread; returns
        once the first run is recorded (or the submission waits for a free worker).

        The plan is made twice: first in a sandbox worker (``caramba.api.sandbox``: time and
        memory bounded), then, once that answered, here for the runs to use."""
        import secrets

        from caramba.api.sandbox import submission_roots
        from caramba.api.staging import staged
        from caramba.data.sources import data_roots

        if self.closing.is_set():
            raise Conflict("the server is shutting down")
        group = None
        with staged(self.root, text, name, keep=True, folder=f"s-{secrets.token_hex(6)}") as path:
            roots = submission_roots(path.parent, self.settings)
            args = {"path": str(path), "overrides": list(overrides), "targets": list(targets), "run_ids": list(run_ids)}
            self.sandbox.run("plan", args, roots=roots, folder=path.parent)
            with data_roots(roots):
                plans = plan_submission(path, overrides, targets, run_ids)
            if executor == "actors":
                return self._submit_actors(path, overrides, plans, roots)
            group = f"{plans[0].prep.manifest.name}-{secrets.token_hex(3)}"
        first = threading.Event()
        thread = threading.Thread(target=self._execute, args=(plans, group, first, roots), name=f"caramba-run-{group}",
                                  daemon=True)
        with self.lock:
            self.threads[group] = thread
        thread.start()
        first.wait(timeout=10.0)  # the record exists once the first run starts (unless queued)
        runs = [self.view(r) for r in self.store.list(limit=len(plans), group_id=group)]
        return {
            "experiment": plans[0].prep.manifest.name,
            "group_id": group,
            "planned": [{"label": p.label, "target": p.target.name, "run": p.run.id, "arm": p.arm,
                         "backend": p.backend, "seed": p.run.seed, "steps": p.steps} for p in plans],
            "runs": runs[::-1],
        }

    def _submit_actors(self, path: Path, overrides: list[str], plans: list[Any], roots: list[str]) -> dict[str, Any]:
        """One Experiment actor per planned run (the manifest driver): evidence goes to the
        Notary, a VERIFIED result becomes a model version, the run store gets the metrics at
        each checkpoint. Re-submitting a manifest that already ran finds its verified runs."""
        from caramba.orchestrator.manifest import run_specs

        wanted = {p.label for p in plans}
        specs = [s for s in run_specs(path, overrides=overrides, data_roots=roots) if s.run_id.split("/", 1)[1] in wanted]
        group = specs[0].run_id.split("/", 1)[0]
        for spec in specs:
            self.actors.spawn(spec)
        deadline = time.monotonic() + 15.0  # the record appears once the model is built
        mine: list[Any] = []
        while time.monotonic() < deadline:
            mine = [r for r in self.store.list(limit=10_000, group_id=group)
                    if r.config.get("ledger_run") in {s.run_id for s in specs}]
            if mine:
                break
            time.sleep(0.05)
        return {
            "experiment": plans[0].prep.manifest.name,
            "group_id": group,
            "planned": [{"label": p.label, "target": p.target.name, "run": p.run.id, "arm": p.arm,
                         "backend": p.backend, "seed": p.run.seed, "steps": p.steps} for p in plans],
            "runs": [self.view(r) for r in mine[::-1]],
        }

    def _execute(self, plans: list[Any], group: str, first: threading.Event, roots: list[str]) -> None:
        from caramba.run import execute
        from caramba.run.tuner import SEQUENTIAL, tuned_jobs

        tuner = plans[0].prep.manifest.tuner if plans else None
        if tuner is not None and tuner.strategy in SEQUENTIAL:  # grid/random/active_inference: the tuner picks each run
            self._in_slot(group, first, tuned_jobs(plans, tuner, self.store, group, roots))  # type: ignore[arg-type]
            return
        self._in_slot(group, first, [lambda steer, plan=plan: execute(plan, self.store, steer, group, roots)
                                     for plan in plans])

    def _resume(self, rec: Any) -> dict[str, Any]:
        """Continue an interrupted run in a background thread (``caramba research resume``)."""
        from caramba.run import resume_run

        if self.closing.is_set():
            raise Conflict("the server is shutting down")
        if "spec" not in rec.config:
            raise Conflict(f"run {rec.id} was recorded before runs became resumable")
        first = threading.Event()
        key = f"resume-{rec.id}"
        thread = threading.Thread(target=self._in_slot, args=(key, first, [lambda steer: resume_run(rec.id, self.store, steer)]),
                                  name=f"caramba-{key}", daemon=True)
        with self.lock:
            if key in self.threads:
                raise Conflict(f"run {rec.id} is already being resumed")
            self.threads[key] = thread
        thread.start()
        first.wait(timeout=10.0)
        return self.view(self.store.get(rec.id))

    def _in_slot(self, key: str, first: threading.Event, jobs: list[Callable[[Any], Any]]) -> None:
        """Run ``jobs`` one after another in a worker slot, each steered by its own _Steer."""
        try:
            if not self._slots.acquire(blocking=False):
                first.set()  # queued behind other runs: answer the submission now
                while not self._slots.acquire(timeout=0.2):  # wait for a worker, unless shutting down
                    if self.closing.is_set():
                        return
            try:
                for job in jobs:
                    if self.closing.is_set():
                        return
                    steer = _Steer(self, first)
                    try:  # a cancel raises RunCancelled in the run's thread: recorded as cancelled, with its reason
                        job(steer)
                    finally:
                        steer.release()
                        first.set()
            finally:
                self._slots.release()
        finally:
            first.set()
            with self.lock:
                self.threads.pop(key, None)

    # ---- steering --------------------------------------------------------------------------
    def control(self, run_id: str, verb: str) -> dict[str, Any]:
        rec = self.record(run_id)
        if self._actor_state(rec) is not None:  # an Experiment actor runs it: ask the actor
            self.actors.steer(rec.config["ledger_run"], verb)
            return self.view(self.store.get(rec.id))
        if verb == "resume" and rec.status == "interrupted":  # its process died: continue it here
            return self._resume(rec)
        control = self.live.get(rec.id)
        status = self.status_of(rec)
        if control is None or rec.status in TERMINAL:
            if verb == "cancel" and rec.status in TERMINAL:
                return self.view(rec)  # cancelling a finished run changes nothing, like the actors do
            raise Conflict(f"run {rec.id} is {status} and not executing in this server; only a live run can {verb}")
        if verb == "pause":
            control.resume.clear()
            control.pause.set()
            control.parked.wait(timeout=PAUSE_WAIT_S)  # answer "paused" once it is (usually within a step)
        elif verb == "resume":
            if status != "paused":
                raise Conflict(f"run {rec.id} is {status}; only a paused run resumes")
            control.pause.clear()
            control.resume.set()
            deadline = time.monotonic() + PAUSE_WAIT_S
            while control.parked.is_set() and time.monotonic() < deadline:  # answer once it runs again
                time.sleep(0.01)
        elif verb == "cancel":
            control.reason = "cancelled through the API"
            control.cancel.set()
            control.resume.set()
        return self.view(self.store.get(rec.id))

    def close(self) -> None:
        """Cancel live runs and stop streams; wait briefly for the threads to record it."""
        self.closing.set()
        self.actors.close()
        with self.lock:
            controls = list(self.live.values())
            threads = list(self.threads.values())
        for c in controls:
            c.reason = "the server shut down"
            c.cancel.set()
            c.resume.set()
        for t in threads:
            t.join(timeout=10)
