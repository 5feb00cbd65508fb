"""The Experiment actor: drives one run through a ``RunDriver`` and reports evidence to the Notary.

Lifecycle::

    pending -> running <-> paused
               running -> checkpointed (final claim recorded) -> verified | voided
               any live state -> cancelled | failed

Every ``checkpoint_every`` steps it stores the driver's checkpoint through the Storage actor,
records an ArtifactRef and a ``progress`` Event (with the metrics of those steps) and asks the
Notary whether that evidence is valid. At the end it records a ``final`` Claim; only when the
Notary answers VERIFIED does it ask the Model actor to commit version N+1; otherwise it
records a ``void`` Event with the failing step and the Notary's reason chain.

Crash recovery lives in the ledger, not in memory: a fresh incarnation (after a supervised
restart, a process death or a requeued job on another worker) finds the run's Intent, skips
checkpoints the Notary no longer accepts, and resumes from the newest VERIFIED one. Steps run
after that checkpoint were never recorded, so nothing recorded is lost or duplicated.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import os
import time
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import Field

from caramba.actors.base import Actor, handler
from caramba.actors.identity import Identity, canonical
from caramba.actors.ledger import Entry, Validity
from caramba.actors.messages import Message
from caramba.actors.model import Commit, GetVersion
from caramba.actors.notary import Evidence, GetEntry, LatestValid, Query, ValidityOf
from caramba.actors.storage import Get, Put, Stat
from caramba.errors import CarambaError, did_you_mean
from caramba.run.events import RunCancelled

State = Literal["pending", "running", "paused", "checkpointed", "verified", "voided", "failed", "cancelled"]
TERMINAL = ("verified", "voided", "failed", "cancelled")


class ExperimentError(CarambaError):
    """The experiment cannot do what was asked (wrong state, conflicting run ID, bad driver)."""


class RunSpec(Message):
    """One run: which driver trains what (``config``), for how many steps, with which seed.

    ``model`` names the model a VERIFIED result is committed to; ``base_version`` starts the
    run from a copy of that version (``"latest"`` or a number; None: fresh initialization)."""

    run_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-=+@:,/]*$")
    driver: str = "linear"
    config: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0
    steps: int = Field(ge=0)
    checkpoint_every: int = Field(0, ge=0, description="0: only at the end")
    model: str | None = None
    base_version: int | Literal["latest"] | None = None
    manifest_hash: str | None = None

    def spec_hash(self) -> str:
        return hashlib.sha256(canonical(self.model_dump(mode="json"))).hexdigest()


@runtime_checkable
class RunDriver(Protocol):
    """What the Experiment actor drives. A driver owns the training state of one run.

    ``start`` begins fresh (optionally from ``initial``: the checkpoint of a model version to
    copy parameters from) or resumes from one of its own ``checkpoint`` blobs. ``step`` runs
    one training step and returns its metrics; ``steps_done`` counts steps since the run began
    (restored by a resume). ``metrics`` evaluates the current state. The same spec and seed
    must give the same numbers, so a resumed run ends where an uninterrupted one would."""

    steps_done: int

    def start(self, spec: RunSpec, checkpoint: bytes | None = None, initial: bytes | None = None) -> None: ...

    def step(self) -> dict[str, float]: ...

    def checkpoint(self) -> bytes: ...

    def metrics(self) -> dict[str, float]: ...

    def close(self) -> None: ...


# name -> "module:Class". One line per driver; a spec may also name "module:Class" directly.
DRIVERS: dict[str, str] = {
    "linear": "caramba.actors.drivers:LinearRegression",
    "manifest": "caramba.run.driver:ManifestRun",
}


def make_driver(name: str, actor: Actor | None = None) -> RunDriver:
    path = DRIVERS.get(name, name)
    if ":" not in path:
        raise ExperimentError(f"unknown run driver '{name}'; {did_you_mean(name, DRIVERS)}")
    module, _, qual = path.partition(":")
    try:
        cls: Any = importlib.import_module(module)
        for part in qual.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError) as exc:
        raise ExperimentError(f"run driver {path!r} cannot be loaded: {exc}") from None
    driver = cls(actor) if getattr(cls, "needs_actor", False) else cls()
    if not isinstance(driver, RunDriver):
        raise ExperimentError(f"{path!r} does not implement RunDriver (start, step, checkpoint, metrics, close, steps_done)")
    return driver


# ---- messages --------------------------------------------------------------------------------------
class Start(Message):
    pass


class Advance(Message):
    """Internal tick: run a few steps, then tell itself the next tick."""


class Pause(Message):
    pass


class Resume(Message):
    pass


class Cancel(Message):
    reason: str = "cancelled by request"


class GetStatus(Message):
    pass


class CheckpointInfo(Message):
    step: int
    key: str
    sha256: str
    artifact: str
    event: str


class ExperimentStatus(Message):
    run_id: str
    state: State
    step: int = 0
    steps: int = 0
    intent: str | None = None
    last_checkpoint: CheckpointInfo | None = None
    resumed_from: int | None = None
    claim: str | None = None
    verdict: str | None = None
    reasons: list[str] = Field(default_factory=list)
    model_version: int | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    pid: int | None = None  # the process the experiment runs in (where an operator looks when it hangs)
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.state in TERMINAL


class Services(Message):
    """Names of the actors an experiment talks to."""

    notary: str = "notary"
    storage: str = "storage"
    models: str = "models"


def _holder_alive(holder: str) -> bool:
    """Whether the worker process ``host:pid`` still runs (only checkable on its own host: a
    holder elsewhere, or none given, counts as alive and the lease's TTL decides)."""
    import socket

    from caramba.store.runs import _owner_alive

    host, _, pid = holder.rpartition(":")
    if not holder or host != socket.gethostname() or not pid.isdigit():
        return True
    return _owner_alive(holder, None, 0.0)


class LeaseInfo(Message):
    lease_id: str
    token: int
    job_id: str
    holder: str = ""  # the worker process that holds the lease (host:pid): dead, the lease is no longer ours


# ---- what a driver reports besides its per-step metrics ----------------------------------------------
class _Sink:
    """Where a driver's logged metrics, evaluations and artifacts go: the run store (live, so
    curves and streams update) and, in this process, the caller's ``Progress``. The rows since
    the last checkpoint are also kept, to be committed again with the checkpoint in one
    transaction."""

    def __init__(self, actor: "Experiment") -> None:
        self.actor = actor
        self.pending: list[tuple[int, str, dict[str, float]]] = []  # since the last checkpoint
        self.unwritten: list[tuple[int, str, dict[str, float]]] = []  # not yet in the run store

    @property
    def store_root(self) -> str | None:
        return self.actor.run_store_root

    def _observer(self) -> Any:
        from caramba.run.events import observer

        return observer(self.actor.spec.run_id)

    def metrics(self, step: int, values: dict[str, float], split: str = "train", live: bool = True) -> None:
        """Record metrics of ``step``; ``live=False`` holds them until the next live row (one
        run-store write per logged step, not per step)."""
        row = (step, split, {k: float(v) for k, v in values.items()})
        self.pending.append(row)
        self.unwritten.append(row)
        if not live:
            return
        store, record = self.actor._runs(), self.actor.record
        if store is not None and record is not None:
            store.log_rows(record, self.unwritten)
            self.actor._beat(force=False, logged=True)
        self.unwritten = []
        if split != "train" and (obs := self._observer()) is not None:
            obs.evaluate(step, split, row[2])

    def progress(self, step: int, total: int, values: dict[str, float], samples_per_s: float) -> None:
        if (obs := self._observer()) is not None:
            obs.step(step, total, values, samples_per_s)

    def artifact(self, name: str, data: bytes | str, kind: str) -> None:
        store, record = self.actor._runs(), self.actor.record
        if store is not None and record is not None:
            store.add_artifact(record, name, data, kind=kind)

    def message(self, text: str) -> None:
        if (obs := self._observer()) is not None:
            obs.message(text)


# ---- the actor ---------------------------------------------------------------------------------------
class Experiment(Actor):
    """Runs ``spec`` (a RunSpec as a dict). ``autostart`` begins (or resumes) as soon as the actor
    starts, which is what a supervised restart needs. ``lease`` + ``orchestrator``: renew the
    lease before recording evidence and report the outcome to the orchestrator. ``run_store``:
    also record the run, its metrics (as the ledger has them) and its outcome in the run store
    at that root (what ``caramba research status`` and the web UI show)."""

    def __init__(
        self,
        spec: dict[str, Any],
        services: dict[str, str] | None = None,
        autostart: bool = False,
        steps_per_tick: int = 1,
        lease: dict[str, Any] | None = None,
        orchestrator: str | None = None,
        run_store: str | None = None,
        keys: str | None = None,
    ) -> None:
        self.spec = RunSpec.model_validate(spec)
        self.run_store_root = run_store
        self.keys_dir = keys
        self.record: str | None = None  # this run's ID in the run store
        self.services = Services.model_validate(services or {})
        self.autostart = autostart
        self.steps_per_tick = max(1, int(steps_per_tick))
        self.lease = LeaseInfo.model_validate(lease) if lease else None
        self.orchestrator = orchestrator
        self.state: State = "pending"
        self.driver: RunDriver | None = None
        self.intent: Entry | None = None
        self.last: CheckpointInfo | None = None
        self.resumed_from: int | None = None
        self.claim: str | None = None
        self.verdict: Validity | None = None
        self.model_version: int | None = None
        self.buffer: list[dict[str, float]] = []
        self.buffer_start = 1
        self.base: int | None = None
        self.error: str | None = None
        self.summary: dict[str, float] = {}
        self.extra: dict[str, Any] = {}  # the driver's own summary (sizes, timings) for the run store
        self.sink = _Sink(self)
        self._beat_at = 0.0

    # ---- plumbing ----------------------------------------------------------------------------------
    @property
    def identity(self) -> Identity:
        """With ``keys`` (a folder), the run's own key, kept there: every incarnation and attempt
        of the run signs as ``experiment:<run>`` with it, and that name is bound to that key
        alone, so nobody else can speak for the run. Without, an incarnation key (Actor)."""
        if self._identity is None and self.keys_dir is not None:
            from pathlib import Path

            name = hashlib.sha256(self.spec.run_id.encode()).hexdigest()[:32]
            self._identity = Identity.load_or_create(Path(self.keys_dir) / f"{name}.key", f"experiment:{self.spec.run_id}")
        return super().identity

    def started(self) -> None:
        self.evidence = Evidence(self, self.services.notary, manifest_hash=self.spec.manifest_hash)
        if self.autostart:
            self.context.self_ref.tell(Start())

    def restarted(self, cause: str) -> None:
        # a crash lost the in-memory run; the ledger still has it: resume from the last valid checkpoint
        if not self.autostart:
            self.context.self_ref.tell(Start())

    def _notary(self):
        return self.context.lookup(self.services.notary)

    def _emit(self, kind: str, name: str, payload: dict[str, Any], deps: list[str | None]) -> Entry:
        return self.evidence.emit(kind, name, payload, subject=self.spec.run_id, depends_on=[d for d in deps if d])

    def status(self) -> ExperimentStatus:
        return ExperimentStatus(
            run_id=self.spec.run_id, state=self.state, step=self.driver.steps_done if self.driver else (self.last.step if self.last else 0),
            steps=self.spec.steps, intent=self.intent.hash if self.intent else None, last_checkpoint=self.last,
            resumed_from=self.resumed_from, claim=self.claim, verdict=self.verdict.verdict if self.verdict else None,
            reasons=[str(r) for r in self.verdict.reasons] if self.verdict else [], model_version=self.model_version,
            metrics=self.summary, error=self.error, pid=os.getpid(),
        )

    # ---- handlers ----------------------------------------------------------------------------------
    @handler
    def get_status(self, msg: GetStatus) -> ExperimentStatus:
        return self.status()

    @handler
    def start(self, msg: Start) -> ExperimentStatus:
        if self.state != "pending":
            return self.status()
        try:
            self._begin()
        except CarambaError as exc:
            self._fail(exc)
        return self.status()

    @handler
    def pause(self, msg: Pause) -> ExperimentStatus:
        if self.state not in ("running", "paused"):
            raise ExperimentError(f"experiment '{self.spec.run_id}' is {self.state}; only a running experiment pauses")
        self.state = "paused"
        return self.status()

    @handler
    def resume(self, msg: Resume) -> ExperimentStatus:
        if self.state not in ("running", "paused"):
            raise ExperimentError(f"experiment '{self.spec.run_id}' is {self.state}; only a paused experiment resumes")
        if self.state == "paused":
            self.state = "running"
            self.context.self_ref.tell(Advance())
        return self.status()

    @handler
    def cancel(self, msg: Cancel) -> ExperimentStatus:
        if self.state in TERMINAL:
            return self.status()
        if self.intent is not None:
            self._emit("event", "cancelled", {"step": self._step(), "reason": msg.reason},
                       [self.intent.hash, self.last.event if self.last else None])
        self.state = "cancelled"
        self.error = msg.reason
        self._close_driver()
        self._report({"state": "cancelled", "reason": msg.reason}, ok=True)
        return self.status()

    @handler
    def advance(self, msg: Advance) -> None:
        if self.state != "running":
            return
        assert self.driver is not None
        try:
            failing = None
            for _ in range(self.steps_per_tick):
                if self.driver.steps_done >= self.spec.steps:
                    break
                m = {k: float(v) for k, v in self.driver.step().items()}
                self.buffer.append(m)
                if not all(math.isfinite(v) for v in m.values()):
                    failing = self.driver.steps_done
                    break
            done = self.driver.steps_done >= self.spec.steps
            every = self.spec.checkpoint_every
            if failing is not None or done or (every and self.driver.steps_done % every == 0 and self.buffer):
                # fencing: only the lease holder records evidence (renewal also proves it is alive)
                if not self._renew() or not self._checkpoint(failing):
                    return
            if done:
                self._finish()
            else:
                self._beat(force=False)
                self.context.self_ref.tell(Advance())
        except RunCancelled as exc:
            self.cancel(Cancel(reason=exc.message))
        except CarambaError as exc:
            self._fail(exc)
        except Exception:  # a bug, or a lost resource: supervision restarts us from the ledger
            self._keep_traceback()
            raise

    # ---- the run -----------------------------------------------------------------------------------
    def _step(self) -> int:
        return self.driver.steps_done if self.driver else (self.last.step if self.last else 0)

    def _begin(self) -> None:
        spec, notary = self.spec, self._notary()
        spec_hash = spec.spec_hash()
        intents = notary.ask(Query(subject=spec.run_id, kind="intent", name="run")).entries
        for old in intents:
            if old.payload.get("spec_hash") != spec_hash:
                raise ExperimentError(
                    f"run '{spec.run_id}' was already recorded (#{old.seq}) with another spec; give this run a new run_id"
                )
        if intents:
            self.intent = intents[0]
            self.base = self.intent.payload.get("base_version")
        else:
            self.base = self._resolve_base()
            self.intent = self._emit("intent", "run", {"spec": spec.model_dump(mode="json"), "spec_hash": spec_hash,
                                                       "base_version": self.base}, [])
        if self._already_finished(notary):
            return
        self.driver = make_driver(spec.driver, self)
        if hasattr(self.driver, "attach"):
            self.driver.attach(self.sink)
        found = notary.ask(LatestValid(subject=spec.run_id, name="checkpoint", kind="artifact"))
        self._store_begin(found.entry.payload["step"] if found.entry is not None else 0)
        if found.entry is not None:
            art = found.entry
            blob = self.context.lookup(self.services.storage).ask(Get(key=art.payload["key"]))
            if blob.sha256 != art.payload["sha256"]:
                raise ExperimentError(f"checkpoint {art.payload['key']} changed between the Notary's check and its read")
            self.driver.start(spec, checkpoint=blob.data)
            event = self._progress_event_of(notary, art.hash)
            self.last = CheckpointInfo(step=art.payload["step"], key=art.payload["key"], sha256=art.payload["sha256"],
                                       artifact=art.hash, event=event.hash)
            self.resumed_from = art.payload["step"]
            self._emit("event", "resumed", {"step": self.resumed_from,
                                            "skipped": [v.explain() for v in found.skipped]}, [self.intent.hash, event.hash])
        else:
            initial = None
            if self.base is not None and spec.model:
                version = self.context.lookup(self.services.models).ask(GetVersion(model=spec.model, version=self.base))
                initial = self.context.lookup(self.services.storage).ask(Get(key=version.key)).data
            self.driver.start(spec, initial=initial)
        self.buffer, self.buffer_start = [], self.driver.steps_done + 1
        self.state = "running"
        self.context.self_ref.tell(Advance())

    def _resolve_base(self) -> int | None:
        spec = self.spec
        if spec.base_version is None or spec.model is None:
            return None
        if spec.base_version == "latest":
            from caramba.actors.model import UnknownVersion

            try:
                return self.context.lookup(self.services.models).ask(GetVersion(model=spec.model)).version
            except UnknownVersion:
                return None
        return int(spec.base_version)

    def _already_finished(self, notary) -> bool:
        """A previous incarnation may have finished (or been cancelled) just before it died."""
        spec = self.spec
        for e in reversed(notary.ask(Query(subject=spec.run_id, kind="event", name="cancelled")).entries):
            self.state, self.error = "cancelled", e.payload.get("reason")
            self._report({"state": "cancelled", "reason": self.error}, ok=True)
            return True
        for c in reversed(notary.ask(Query(subject=spec.run_id, kind="claim", name="final")).entries):
            v = notary.ask(ValidityOf(entry=c.hash))
            if v.valid:
                self.claim, self.verdict, self.summary = c.hash, v, c.payload.get("metrics", {})
                self.last = None
                self._commit_and_report(c)
                return True
        return False

    def _progress_event_of(self, notary, artifact: str) -> Entry:
        for e in reversed(notary.ask(Query(subject=self.spec.run_id, kind="event", name="progress")).entries):
            if artifact in e.depends_on and notary.ask(ValidityOf(entry=e.hash)).valid:
                return e
        raise ExperimentError(f"checkpoint {artifact[:12]}… of run '{self.spec.run_id}' has no valid progress event")

    def _checkpoint(self, failing: int | None) -> bool:
        """Store a checkpoint and its evidence; False if the Notary voided the run."""
        assert self.driver is not None and self.intent is not None
        data = self.driver.checkpoint()
        step = self.driver.steps_done
        sha = hashlib.sha256(data).hexdigest()
        key = f"runs/{self.spec.run_id}/checkpoints/{step:08d}-{sha[:12]}.safetensors"
        info = self.context.lookup(self.services.storage).ask(Put(key=key, data=data))
        art = self._emit("artifact", "checkpoint", {"key": info.key, "sha256": info.sha256, "size": info.size, "step": step},
                         [self.intent.hash, self.last.artifact if self.last else None])
        columns: dict[str, list[float]] = {}
        for m in self.buffer:
            for k, v in m.items():
                columns.setdefault(k, []).append(v)
        event = self._emit("event", "progress", {"step": step, "first_step": self.buffer_start, "metrics": columns},
                           [art.hash, self.last.event if self.last else self.intent.hash])
        self.last = CheckpointInfo(step=step, key=info.key, sha256=info.sha256, artifact=art.hash, event=event.hash)
        self._store_checkpoint(step, data, info.sha256)
        self.buffer, self.buffer_start = [], step + 1
        verdict = self._notary().ask(ValidityOf(entry=event.hash))
        if not verdict.valid:
            self._void(event.hash, verdict, failing if failing is not None else step)
            return False
        return True

    def _finish(self) -> None:
        assert self.driver is not None and self.intent is not None and self.last is not None
        self.summary = {k: float(v) for k, v in self.driver.metrics().items()}
        self.extra = dict(self.driver.summary()) if hasattr(self.driver, "summary") else {}
        claim = self._emit("claim", "final", {
            "step": self.driver.steps_done, "metrics": self.summary,
            "checkpoint": {"key": self.last.key, "sha256": self.last.sha256},
            "spec_hash": self.spec.spec_hash(), "base_version": self.base,
        }, [self.intent.hash, self.last.artifact, self.last.event])
        self.claim = claim.hash
        self.state = "checkpointed"
        self.verdict = self._notary().ask(ValidityOf(entry=claim.hash))
        if not self.verdict.valid:
            self._void(claim.hash, self.verdict, self.driver.steps_done)
            return
        self._commit_and_report(claim)

    def _commit_and_report(self, claim: Entry) -> None:
        spec = self.spec
        if spec.model:
            ck = claim.payload["checkpoint"]
            size = self.context.lookup(self.services.storage).ask(Stat(key=ck["key"])).size
            version = self.context.lookup(self.services.models).ask(Commit(
                model=spec.model, parent=claim.payload.get("base_version"), key=ck["key"], sha256=ck["sha256"],
                size=size, claim=claim.hash, run_id=spec.run_id, metrics=claim.payload.get("metrics", {}),
            ))
            self.model_version = version.version
            committed = self._notary().ask(Query(subject=spec.run_id, kind="event", name="committed")).entries
            if not any(claim.hash in e.depends_on for e in committed):
                self._emit("event", "committed", {"model": spec.model, "version": version.version}, [claim.hash])
        self.state = "verified"
        self._close_driver()
        self._report({"state": "verified", "claim": claim.hash, "model_version": self.model_version,
                      "metrics": claim.payload.get("metrics", {})}, ok=True)

    def _void(self, entry: str, verdict: Validity, step: int) -> None:
        self.verdict = verdict
        self._emit("event", "void", {"step": step, "reason": verdict.explain()}, [entry])
        self.state = "voided"
        self._close_driver()
        self._report({"state": "voided", "step": step, "reasons": [str(r) for r in verdict.reasons]}, ok=True)

    def _fail(self, exc: CarambaError) -> None:
        self.error = f"{type(exc).__name__}: {exc}"
        if self.intent is not None:
            try:
                self._emit("event", "failed", {"step": self._step(), "error": self.error},
                           [self.intent.hash, self.last.event if self.last else None])
            except CarambaError:
                pass  # the failure itself is what we report; the ledger may be what failed
        self.state = "failed"
        self._close_driver()
        self._report({"state": "failed", "error": self.error}, ok=False)

    def _keep_traceback(self) -> None:
        """The traceback of a crash, kept with the run (the actor may be restarted, or die)."""
        import traceback

        store = self._runs()
        if store is not None and self.record is not None:
            try:
                store.add_artifact(self.record, "error.txt", traceback.format_exc(), kind="log")
            except CarambaError:
                pass  # the crash is what matters; an unusable store is reported by the caller

    def _close_driver(self) -> None:
        if self.driver is not None:
            self.driver.close()

    # ---- lease -------------------------------------------------------------------------------------
    def _renew(self) -> bool:
        """Renew the lease before recording evidence; False (and stop) if it was lost. Between
        checkpoints the worker's polls keep the lease alive."""
        if self.lease is None or self.orchestrator is None:
            return True
        from caramba.orchestrator.actor import Renew
        from caramba.orchestrator.queue import LeaseLost

        if not _holder_alive(self.lease.holder):
            # the worker that spawned us was killed; the lease outlives it until its TTL, but its
            # experiments die with it (their process goes a moment later): record nothing more
            self.state, self.error = "failed", f"the worker holding the lease ({self.lease.holder}) died"
            self._close_driver()
            return False
        try:
            self.context.lookup(self.orchestrator).ask(Renew(lease_id=self.lease.lease_id, token=self.lease.token))
        except LeaseLost as exc:
            # the job went to someone else: stop without recording anything more
            self.state, self.error = "failed", f"lease lost: {exc.message}"
            self._close_driver()
            return False
        return True

    def _report(self, result: dict[str, Any], ok: bool) -> None:
        self._store_end(result)
        if self.lease is None or self.orchestrator is None:
            return
        from caramba.orchestrator.actor import Complete, Fail
        from caramba.orchestrator.queue import LeaseLost

        ref = self.context.lookup(self.orchestrator)
        try:
            if ok:
                ref.ask(Complete(lease_id=self.lease.lease_id, token=self.lease.token, result=result))
            else:
                ref.ask(Fail(lease_id=self.lease.lease_id, token=self.lease.token, error=str(result.get("error")), retry=False))
        except LeaseLost:
            pass  # someone else holds the job now; their outcome counts


    # ---- run store ---------------------------------------------------------------------------------
    def _runs(self):
        if self.run_store_root is None:
            return None
        if getattr(self, "_run_store", None) is None:  # opened once: opening checks the schema
            from caramba.store.runs import open_runs

            self._run_store = open_runs(self.run_store_root)
        return self._run_store

    def _store_begin(self, resumed_step: int) -> None:
        """Open (or, for a resumed run, reopen) the run's record: running in this process, and
        nothing recorded after the step it resumes from."""
        store = self._runs()
        if store is None:
            return
        from caramba.store.runs import RunNotFound

        spec = self.spec
        try:  # the engine creates the record first and names the ledger run after it
            self.record = spec.run_id if store.get(spec.run_id).id == spec.run_id else None
        except RunNotFound:
            self.record = None
        group, _, name = spec.run_id.partition("/")
        name = name or spec.run_id
        if self.record is None:
            old = [r for r in store.list(1000, group_id=group) if r.config.get("ledger_run") == spec.run_id]
            if old:  # a resumed run continues its record
                self.record = old[0].id
        if self.record is None:
            cfg = spec.config
            rec = store.create_run(
                str(cfg.get("experiment") or group.split("-")[0] or spec.run_id), group_id=group, arm=str(cfg.get("arm", "")),
                target=str(cfg.get("target", "")), run_name=str(cfg.get("run") or name), seed=spec.seed, backend=str(cfg.get("backend", "cpu")),
                steps=spec.steps, manifest_path=str(cfg.get("manifest", "")), manifest_sha256=spec.manifest_hash or "",
                config={"ledger_run": spec.run_id, "spec": spec.model_dump(mode="json"), "intent": self.intent.hash if self.intent else None},
            )
            self.record = rec.id
        store.rewind(self.record, resumed_step)
        store.start(self.record)
        self._beat_at = time.monotonic()

    def _beat(self, *, force: bool, logged: bool = False) -> None:
        """Tell the run store this run's process is alive (throttled; a logged row counts)."""
        from caramba.store.runs import HEARTBEAT_EVERY_S

        now = time.monotonic()
        if logged:
            self._beat_at = now
            return
        if not force and now - self._beat_at < HEARTBEAT_EVERY_S:
            return
        store = self._runs()
        if store is not None and self.record is not None:
            store.heartbeat(self.record)
        self._beat_at = now

    def _store_checkpoint(self, step: int, data: bytes, sha256: str) -> None:
        """The checkpoint (a link to the stored blob in the run folder) with every metric row up
        to ``step``, in one run-store transaction."""
        store = self._runs()
        if store is None or self.record is None:
            return
        from caramba.store.runs import Artifact

        if self.sink.pending:
            rows = self.sink.pending
        else:  # drivers without a sink: the per-step metrics the ledger has
            rows = [(self.buffer_start + i, "train", m) for i, m in enumerate(self.buffer)]
        name = f"checkpoints/step{step:08d}.safetensors"
        path = store.run_dir(self.record) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        store.commit_checkpoint(self.record, step, rows, Artifact(self.record, name, "checkpoint", sha256, len(data), path))
        self.sink.pending, self.sink.unwritten = [], []
        self._prune_checkpoints(store)

    def _prune_checkpoints(self, store: Any) -> None:
        """Keep the run folder's newest ``keep`` checkpoints (the ledger's blobs stay: they are
        the evidence its entries point at)."""
        keep = int(self.spec.config.get("keep_checkpoints") or 0)
        if keep <= 0:
            return
        old = store.artifacts(self.record, "checkpoint")
        for a in old[: max(0, len(old) - keep)]:
            store.remove_artifact(self.record, a.name)

    def _store_end(self, result: dict[str, Any]) -> None:
        store = self._runs()
        if store is None or self.record is None:
            return
        state = result.get("state")
        status = {"verified": "finished", "cancelled": "cancelled"}.get(state, "failed")
        summary = {**self.extra, **self.summary, "verdict": state, "claim": self.claim,
                   "model_version": self.model_version, "checkpoint": self.last.key if self.last else None}
        if status == "cancelled":
            error = str(result.get("reason") or "")
        else:
            error = "" if status != "failed" else str(result.get("error") or "; ".join(result.get("reasons", [])) or state)
        store.finish(self.record, status, summary=summary, error=error)


def recorded_metrics(notary, run_id: str) -> tuple[int, dict[str, list[float]]]:
    """The per-step metrics the ledger holds for ``run_id``, following the newest valid progress
    event back through its predecessors: ``(first step, {name: values})``."""
    events = notary.ask(Query(subject=run_id, kind="event", name="progress")).entries
    newest = next((e for e in reversed(events) if notary.ask(ValidityOf(entry=e.hash)).valid), None)
    chain: list[Entry] = []
    by_hash = {e.hash: e for e in events}
    cur = newest
    while cur is not None:
        chain.append(cur)
        cur = next((by_hash[d] for d in cur.depends_on if d in by_hash), None)
    columns: dict[str, list[float]] = {}
    for e in reversed(chain):
        for k, vs in e.payload["metrics"].items():
            columns.setdefault(k, []).extend(vs)
    first = chain[-1].payload["first_step"] if chain else 1
    return first, columns


def entry_of(notary, ref: str) -> Entry:
    return notary.ask(GetEntry(ref=ref))
