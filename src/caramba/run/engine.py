"""The run engine: a manifest's runs, each driven by an Experiment actor and signed by the Notary.

``run_experiment`` plans a manifest's runs (tuner arms x targets x runs) and executes each one
through the same actors a cluster uses, on the in-process transport: the Experiment actor
drives ``caramba.run.driver.ManifestRun``, records an Intent, a checkpoint and a progress Event
every ``trainer.checkpoint_every`` steps and a final Claim with the Notary (a ledger beside the
run store), and writes the run store's record, metrics and artifacts. ``resume_run`` continues
an interrupted run on the same run ID from its newest checkpoint the Notary accepts.

    result = run_experiment("examples/digits_mlp.yml", overrides=["trainer.steps=200"])
    print(result.table())
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caramba.errors import CarambaError, ConfigError
from caramba.manifest.compile import Prepared, prepare
from caramba.manifest.errors import ManifestError
from caramba.manifest.schema import Run, Target
from caramba.run.events import Progress, observe


@dataclass
class RunPlan:
    """One run to execute: a tuner arm (or none), a target and a run spec."""

    prep: Prepared
    target: Target
    run: Run
    backend: str
    arm: str = ""
    overrides: list[str] = field(default_factory=list)  # the --set items before the arm's
    cycle: int = 0  # a tuner's repeat of this run with another seed (caramba.run.tuner.pull_seed)

    @property
    def steps(self) -> int:
        t = self.prep.manifest.trainer
        if self.run.mode == "eval":
            return 0
        return self.run.steps if self.run.steps is not None else (t.steps if t else 0)

    @property
    def label(self) -> str:
        parts = [p for p in (self.arm, self.target.name, self.run.id) if p]
        return "/".join(parts) + (f"#{self.cycle}" if self.cycle else "")


@dataclass
class RunResult:
    run_id: str
    label: str
    status: str
    summary: dict[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass
class ExperimentResult:
    experiment: str
    group_id: str
    runs: list[RunResult]
    metric: str | None = None
    mode: str = "min"

    def ranked(self) -> list[RunResult]:
        if not self.metric:
            return list(self.runs)
        sign = 1.0 if self.mode == "min" else -1.0

        def key(r: RunResult) -> float:
            v = r.summary.get(self.metric)  # type: ignore[arg-type]
            return sign * v if isinstance(v, (int, float)) and math.isfinite(v) else math.inf

        return sorted(self.runs, key=key)

    def columns(self) -> list[str]:
        keys: list[str] = []
        for r in self.runs:
            for k, v in r.summary.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in keys:
                    keys.append(k)
        order = ("train.loss", "val.loss", "val.accuracy", "test.loss", "test.accuracy")
        return sorted(keys, key=lambda k: (order.index(k) if k in order else len(order), k))

    def table(self) -> str:
        """A plain-text comparison table (the CLI renders the same rows with rich)."""
        cols = [c for c in self.columns() if c not in ("params",)]
        rows = [["run", "status", *cols]]
        for r in self.ranked():
            rows.append([r.label, r.status, *(_fmt(r.summary.get(c)) for c in cols)])
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows)

    @property
    def ok(self) -> bool:
        return all(r.status == "finished" for r in self.runs)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def plan_runs(source: Any, overrides: Iterable[str] | Mapping[str, Any] | None = None, *, backend: str | None = None,
              target: str | None = None, default_backend: str | None = None) -> list[RunPlan]:
    """Every run a manifest asks for: tuner arms x targets x runs (each arm re-loads the manifest
    with its overrides applied, so an arm may change anything, variables included)."""
    base_overrides = _override_list(overrides)
    base = prepare(source, base_overrides, load_data=False)
    arms = [(a.id, [f"{k}={_yaml_scalar(v)}" for k, v in a.set.items()]) for a in base.manifest.tuner.arms] \
        if base.manifest.tuner else [("", [])]
    plans: list[RunPlan] = []
    for arm_id, arm_overrides in arms:
        try:
            prep = prepare(source, base_overrides + arm_overrides)
        except ManifestError as exc:
            if arm_id:
                exc.args = (f"{exc.args[0]}\n  while applying tuner arm '{arm_id}'",)
            raise
        if not prep.manifest.is_experiment:
            raise prep.doc.error((), "this manifest has no trainer and no eval runs: there is nothing to run",
                                 hint="`caramba manifest validate` checks a model-only manifest")
        targets = prep.manifest.targets or [Target(name="default")]
        if target is not None:
            names = [t.name for t in targets]
            if target not in names:
                from caramba.errors import did_you_mean

                raise prep.doc.error(("targets",), f"no target '{target}'; {did_you_mean(target, names)}")
            targets = [t for t in targets if t.name == target]
        for ti, t in enumerate(targets):
            _check_passes(prep, ti, t)
            spec = backend or t.backend or default_backend or _default_backend()
            for r in t.runs:
                if r.mode == "train" and prep.manifest.trainer is None:
                    raise prep.doc.error(("targets",), f"run '{r.id}' trains but the manifest has no trainer")
                plans.append(RunPlan(prep, t, r, spec, arm_id, list(base.doc.overrides)))
    return plans


def _check_passes(prep: Prepared, index: int, t: Target) -> None:
    from caramba.compiler.pipeline import optional_stages
    from caramba.errors import did_you_mean

    allowed = optional_stages()
    for j, name in enumerate(t.disable_passes):
        if name not in allowed:
            raise prep.doc.error(("targets", index, "disable_passes", j),
                                 f"'{name}' is not a pass that can be disabled; {did_you_mean(name, allowed)}")


def _default_backend() -> str:
    from caramba.compute.registry import default_spec

    return default_spec()


def _override_list(overrides: Iterable[str] | Mapping[str, Any] | None) -> list[str]:
    if not overrides:
        return []
    if isinstance(overrides, Mapping):
        return [f"{k}={_yaml_scalar(v)}" for k, v in overrides.items()]
    return list(overrides)


def _yaml_scalar(v: Any) -> str:
    from caramba.manifest.loader import _flow

    return _flow(v)



def run_experiment(
    source: Any,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
    *,
    backend: str | None = None,
    target: str | None = None,
    store: Any = None,
    progress: Progress | None = None,
    default_backend: str | None = None,
    on_decision: Callable[[Any], None] | None = None,
) -> ExperimentResult:
    """Run every planned run of a manifest (path, YAML text or Document) and record it.

    ``overrides`` are ``--set`` items (``["trainer.steps=50"]`` or ``{"trainer.steps": 50}``);
    ``backend`` replaces every target's backend; a target without one uses ``default_backend``
    (default: ``CARAMBA_BACKEND`` or the ``backend`` setting); ``target`` picks one target;
    ``store`` is a ``RunStore`` (default: the configured local store). A run that fails is recorded as failed
    with its error and the others still run; ``result.ok`` says whether all finished.

    A tuner with a sequential strategy (grid, random, active_inference) runs ``tuner.budget``
    runs one after the other, each of the arm it picks from the results so far (``run_tuned``);
    ``on_decision`` is called with each ``caramba.run.tuner.Decision`` before its run starts.
    """
    from caramba.store.runs import open_runs

    store = store if store is not None else open_runs()
    plans = plan_runs(source, overrides, backend=backend, target=target, default_backend=default_backend)
    from caramba.compute.registry import require

    for spec in dict.fromkeys(p.backend for p in plans):  # an unusable backend: refused before any run is recorded
        require(spec)
    m = plans[0].prep.manifest
    group = f"{m.name}-{secrets.token_hex(3)}"
    tuner = m.tuner
    if tuner is not None and tuner.strategy != "all":
        results = run_tuned(plans, tuner, store, progress, group, on_decision)
    else:
        results = [execute(p, store, progress, group) for p in plans]
    return ExperimentResult(m.name, group, results, tuner.metric if tuner else None, tuner.mode if tuner else "min")


def run_tuned(plans: list[RunPlan], tuner: Any, store: Any, progress: Progress | None = None, group: str = "",
              on_decision: Callable[[Any], None] | None = None) -> list[RunResult]:
    """A sequential tuner's runs: ``budget`` steps, each choosing an arm
    (``caramba.run.tuner.Chooser``), running one run of it and observing its ``tuner.metric``
    (a failed run, or one without a finite value of the metric, is a failure observation).

    The ``j``-th pull of an arm runs the arm's planned (target, run) pairs in order, cycling;
    a repeat (cycle ``c > 0``) runs with ``pull_seed(seed, c)``. Each run's config records the
    decision: ``config.tuner = {strategy, step, budget, arm, reason, beliefs}``."""
    from caramba.run.tuner import TunedPlans

    seq = TunedPlans(tuner, plans)
    results: list[RunResult] = []
    for decision, plan in seq:
        if on_decision is not None:
            on_decision(decision)
        result = execute(plan, store, progress, group, tuner=decision.to_json())
        seq.observe(decision, result.summary.get(tuner.metric) if result.status == "finished" else None)
        results.append(result)
    if results:  # the beliefs after the last observation, with the tuner's pick, on the last run
        store.update_config(results[-1].run_id, {"tuner_final": seq.final()})
    return results


# ---- one run ------------------------------------------------------------------------------


def run_spec(plan: RunPlan, run_id: str, store_root: str | None, data_roots: list[str] | None = None) -> Any:
    """The Experiment actor's RunSpec for ``plan``: the manifest as written travels with it, so
    the run can be resumed (or moved) without the file."""
    from caramba.actors.experiment import RunSpec

    prep, t = plan.prep, plan.prep.manifest.trainer
    every = (t.checkpoint_every if t is not None and t.checkpoint_every is not None else prep.manifest.checkpoints.every)
    doc = prep.doc
    source = Path(doc.source)
    config = {
        "manifest_text": doc.text, "source": str(source.resolve()) if source.is_file() else doc.source,
        "root": str(Path(doc.root).resolve()),
        "overrides": list(plan.overrides), "target": plan.target.name, "run": plan.run.id, "arm": plan.arm,
        "backend": plan.backend, "experiment": prep.manifest.name, "store": store_root,
        "keep_checkpoints": prep.manifest.checkpoints.keep,
        "data_roots": list(data_roots) if data_roots is not None else None,  # where it may read (a server's rule)
    }
    pretrained = prep.manifest.topology.pretrained
    if pretrained is not None:  # the weights a fine-tune starts from are part of what was run
        config["weights_sha256"] = pretrained.checkpoint.digests()
    return RunSpec(run_id=run_id, driver="manifest", config=config, seed=plan.run.seed, steps=plan.steps,
                   checkpoint_every=every, manifest_hash=prep.sha256)


def execute(plan: RunPlan, store: Any, progress: Progress | None = None, group: str = "",
            data_roots: list[str] | None = None, tuner: Mapping[str, Any] | None = None) -> RunResult:
    """Run one planned run; records everything in ``store`` and never raises for a failed run
    (a KeyboardInterrupt leaves it "interrupted", to be resumed). ``data_roots``: the run reads
    files only under these folders (``caramba.data.sources.data_roots``), on resume too.
    ``tuner``: the tuner's decision that chose this run, kept in its config (``config.tuner``)."""
    prep, m = plan.prep, plan.prep.manifest
    progress = progress or Progress()
    config = {"manifest": prep.doc.data, "overrides": list(prep.doc.overrides), "dims": prep.dims,
              "backend": plan.backend, "arm": plan.arm, "run": plan.run.model_dump()}
    if tuner is not None:
        config["tuner"] = dict(tuner)
    rec = store.create_run(
        m.name, group_id=group, arm=plan.arm, target=plan.target.name, run_name=plan.run.id, seed=plan.run.seed,
        backend=plan.backend, steps=plan.steps, manifest_path=str(prep.doc.source), manifest_sha256=prep.sha256,
        config=config,
    )
    spec = run_spec(plan, rec.id, str(store.root), data_roots)
    store.update_config(rec.id, {"ledger_run": rec.id, "executor": "local", "spec": spec.model_dump(mode="json")})
    store.add_artifact(rec.id, "manifest.yml", prep.doc.as_yaml(), kind="manifest")
    progress.start(plan, rec.id, plan.steps)
    return _drive(spec, store, progress, plan.label, rec.id)


def resume_run(ref: str, store: Any = None, progress: Progress | None = None) -> RunResult:
    """Continue an interrupted run (ID, prefix or ``latest``) on the same run ID, from its
    newest checkpoint the Notary accepts: same data order, random streams and schedule."""
    from caramba.actors.experiment import RunSpec
    from caramba.store.runs import open_runs

    store = store if store is not None else open_runs()
    rec = store.get(ref)
    if rec.status not in ("interrupted", "failed", "cancelled"):
        hint = "it is still running" if rec.status == "running" else "it is done"
        raise ConfigError(f"run {rec.id} is {rec.status}; only an interrupted run can be resumed ({hint})")
    if "spec" not in rec.config:
        raise ConfigError(f"run {rec.id} was recorded before runs became resumable (no run spec in its record)")
    spec = RunSpec.model_validate(rec.config["spec"])
    progress = progress or Progress()
    from types import SimpleNamespace

    label = "/".join(p for p in (rec.arm, rec.target, rec.run_name) if p)
    plan = SimpleNamespace(label=label, backend=rec.backend, arm=rec.arm, target=SimpleNamespace(name=rec.target),
                           run=SimpleNamespace(id=rec.run_name, seed=rec.seed), steps=spec.steps)
    progress.start(plan, rec.id, spec.steps)
    return _drive(spec, store, progress, label, rec.id)


def _drive(spec: Any, store: Any, progress: Progress, label: str, record: str) -> RunResult:
    """One Experiment actor on the in-process transport, with the Notary, Storage and Model
    actors of the store, until the run (``record`` in the run store) ends."""
    from caramba.actors.experiment import Experiment
    from caramba.actors.services import start_services, wait
    from caramba.actors.system import ActorSystem

    system = ActorSystem("local")
    try:
        with observe(spec.run_id, progress):
            services = start_services(system, ledger_root(store))
            ref = system.spawn(Experiment, f"experiment:{spec.run_id}", kwargs={
                "spec": spec.model_dump(mode="json"), "services": services.model_dump(), "autostart": True,
                "run_store": str(store.root), "keys": str(ledger_root(store) / "keys")})
            wait(system, ref, timeout=math.inf)
    except KeyboardInterrupt:
        store.interrupt(record, "interrupted (KeyboardInterrupt); `caramba research resume` continues it")
        raise
    except Exception as exc:  # the services would not start, or the actor died (crashed past its restarts)
        _record_crash(store, record, exc)
    finally:
        system.shutdown()
    rec = store.get(record)
    status = rec.status if rec.status in ("finished", "cancelled") else "failed"
    result = RunResult(rec.id, label, status, rec.summary if status == "finished" else {}, rec.error)
    if status == "finished":
        _plots(store, rec.id, rec.experiment, rec.summary)
        from caramba.store.vectors import embed_after_run

        result = embed_after_run(store, rec, result)  # the manifest's embeddings into the vector store
    progress.end(result)
    return result


def _record_crash(store: Any, record: str, exc: Exception) -> None:
    """A run that ended without recording its outcome is failed, with the reason (and, for a
    bug, the traceback) kept with it."""
    import traceback

    if store.get(record).status not in ("created", "running", "interrupted"):
        return
    if not isinstance(exc, CarambaError):
        store.add_artifact(record, "error.txt", "".join(traceback.format_exception(exc)), kind="log")
    store.finish(record, "failed", error=f"{type(exc).__name__}: {exc}")


def ledger_root(store: Any) -> Path:
    """Where a run store's actors keep their state: the Notary's ledger and keys, the stored
    blobs and the model versions (``<store>/cluster``, shared by local and cluster runs)."""
    return Path(store.root) / "cluster"


def loss_curve(store: Any, run_id: str, title: str = "", baseline: tuple[str, float] | None = None) -> bytes:
    """The loss curve PNG of a run (train loss per logged step, val/test loss at each evaluation)."""
    from caramba.run.plot import line_chart

    series = []
    for split in ("train", "val", "test"):
        xs, ys = store.series(run_id, "loss", split)
        if xs:
            series.append((f"{split} loss", xs, ys))
    return line_chart(series, None, title=title or run_id, ylabel="loss", baseline=baseline)


def _plots(store: Any, run_id: str, name: str, summary: Mapping[str, Any]) -> None:
    baseline = None
    for s in ("val", "test"):
        v = summary.get(f"baseline.unigram_{s}_loss")
        if isinstance(v, (int, float)):
            baseline = (f"unigram {s} loss {v:.3f}", v)
            break
    store.add_artifact(run_id, "plots/loss.png", loss_curve(store, run_id, f"{name}: loss", baseline), kind="plot")


def inspect_run(run_id: str, store: Any = None) -> dict[str, Any]:
    """Everything ``research inspect`` shows: record, resolved manifest, metrics, IR summary, plot path."""
    from caramba.store.runs import open_runs

    store = store if store is not None else open_runs()
    rec = store.get(run_id)
    rows = store.metrics(rec.id)
    final: dict[str, dict[str, float]] = {}
    for _step, split, name, value in rows:
        final.setdefault(split, {})[name] = value
    plot = rec.dir / "plots" / "loss.png"
    if rec.status in ("finished", "failed", "running") and store.series(rec.id, "loss", "train")[0]:
        baseline = next(((f"unigram {s} loss {rec.summary[f'baseline.unigram_{s}_loss']:.3f}",
                          rec.summary[f"baseline.unigram_{s}_loss"]) for s in ("val", "test")
                         if f"baseline.unigram_{s}_loss" in rec.summary), None)
        data = loss_curve(store, rec.id, f"{rec.experiment}: loss", baseline)
        store.add_artifact(rec.id, "plots/loss.png", data, kind="plot")
    return {"record": rec, "final": final, "plot": plot if plot.exists() else None,
            "artifacts": store.artifacts(rec.id), "metrics": rows}


def ir_summary(rec: Any) -> str:
    """IR summary of a run's model, re-lowered from its resolved manifest."""
    from caramba.manifest.compile import prepare as _prepare
    from caramba.manifest.loader import load_string

    text = (rec.dir / "manifest.yml").read_text() if (rec.dir / "manifest.yml").exists() else None
    if text is None:
        raise ConfigError(f"run {rec.id} has no resolved manifest")
    doc = load_string(text, str(rec.dir / "manifest.yml"), root=rec.dir)
    prep = _prepare(doc, load_data=False)
    dims = dict(rec.config.get("dims") or {})
    prep.dims.update(dims)
    return prep.lower(batch=dims.get("batch")).summary()


__all__ = [
    "ExperimentResult", "RunPlan", "RunResult", "execute", "ledger_root", "inspect_run", "ir_summary", "loss_curve", "plan_runs",
    "resume_run", "run_experiment", "run_spec", "run_tuned",
]
