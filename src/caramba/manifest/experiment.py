"""Experiments: run a manifest's targets x runs (x tuner arms) through ``caramba.train``.

Every run is recorded in the run store (resolved manifest, metrics, checkpoint, IR summary,
loss curve). The model is the manifest topology wrapped as a ``train.Module``; the train step
(forward, loss, backward, optimizer update, schedule, clipping) is ``train.TrainStep`` and the
driver ``train.Trainer``: this module only feeds data, evaluates, and records.

    result = run_experiment("examples/digits_mlp.yml", overrides=["trainer.steps=200"])
    print(result.table())

``run_experiment`` is what ``caramba research run`` and the API server call; it takes a path,
YAML text or a loaded Document.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from caramba.errors import CarambaError, ConfigError
from caramba.manifest.compile import Prepared, prepare
from caramba.manifest.errors import ManifestError
from caramba.manifest.lower import ParamSpec, lower_into, resolve_dims
from caramba.manifest.schema import Run, Target

# ---- the model ----------------------------------------------------------------------------


def _initializer(spec: ParamSpec) -> Any:
    from caramba.train import init

    if spec.init == "zeros":
        return init.zeros()
    if spec.init == "ones":
        return init.ones()
    if spec.init == "uniform":
        return init.uniform(-spec.bound, spec.bound)
    return init.normal(0.0, spec.std)


def manifest_model(prep: Prepared) -> Any:
    """The manifest topology as a ``caramba.train.Module``: its parameters are the layers'
    parameters (named after the manifest nodes), and calling it builds the topology into the
    graph being built and returns every published value by name."""
    from caramba.train.layers import Module, Parameter

    class ManifestModel(Module):
        def __init__(self) -> None:
            super().__init__()
            object.__setattr__(self, "prep", prep)
            low = prep.lower(batch=prep.dims.get("batch", 1), training=False)
            object.__setattr__(self, "specs", low.params)
            for name, spec in low.params.items():
                setattr(self, name, Parameter(spec.shape, _initializer(spec), spec.dtype))

        def __call__(self, **inputs: Any) -> dict[str, Any]:
            from caramba.ir.graph import current_graph

            published, _ = lower_into(current_graph(), prep.manifest.topology, prep.doc, inputs,
                                      training=self.training)
            return published

        def __repr__(self) -> str:
            return f"ManifestModel({prep.manifest.name}: {len(self.specs)} parameters)"

    return ManifestModel()


def build_optimizer(prep: Prepared, steps: int) -> Any:
    """The trainer's optimizer from ``caramba.train`` with its schedule and gradient clipping."""
    from caramba import train

    t = prep.manifest.trainer
    assert t is not None and prep.optimizer is not None
    asset, cfg = prep.optimizer
    classes = {
        "optimizer.sgd": train.SGD, "optimizer.adam": train.Adam, "optimizer.adamw": train.AdamW,
        "optimizer.adamax": train.Adamax, "optimizer.rmsprop": train.RMSprop, "optimizer.adagrad": train.Adagrad,
        "optimizer.lion": train.Lion, "optimizer.lamb": train.Lamb,
    }
    cls = classes.get(asset.op)
    if cls is None:
        raise prep.doc.error(("trainer", "optimizer"), f"optimizer {asset.op} has no implementation in caramba.train")
    sched = t.schedule
    warm = min(sched.warmup_steps, max(steps - 1, 0))
    if sched.kind == "cosine":
        schedule = train.cosine(t.lr, max(1, steps - warm), warm, min(sched.min_lr, t.lr))
    elif warm:
        schedule = train.linear_warmup(t.lr, warm)
    else:
        schedule = train.constant(t.lr)
    kwargs = dict(cfg)
    if "beta1" in kwargs or "beta2" in kwargs:
        kwargs["betas"] = (kwargs.pop("beta1", 0.9), kwargs.pop("beta2", 0.999))
    try:
        return cls(schedule, clip_norm=t.grad_clip, **kwargs)
    except CarambaError as exc:
        raise prep.doc.error(("trainer", "optimizer"), exc.message) from None


# ---- runs ---------------------------------------------------------------------------------


@dataclass
class RunPlan:
    """One run to execute: a tuner arm (or none), a target and a run spec."""

    prep: Prepared
    target: Target
    run: Run
    backend: str
    arm: str = ""

    @property
    def steps(self) -> int:
        t = self.prep.manifest.trainer
        if self.run.mode == "eval":
            return 0
        return self.run.steps if self.run.steps is not None else (t.steps if t else 0)

    @property
    def label(self) -> str:
        parts = [p for p in (self.arm, self.target.name, self.run.id) if p]
        return "/".join(parts)


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


class RunCancelled(CarambaError):
    """Raised by a Progress callback to stop a run; the run is recorded as cancelled."""


class Progress:
    """Callbacks a caller (the CLI's progress bar, the API's event stream) receives; all optional.
    A callback may raise RunCancelled to stop the run (it is recorded as cancelled)."""

    def start(self, plan: RunPlan, run_id: str, total: int) -> None: ...

    def step(self, step: int, total: int, values: Mapping[str, float], samples_per_s: float) -> None: ...

    def evaluate(self, step: int, split: str, values: Mapping[str, float]) -> None: ...

    def end(self, result: RunResult) -> None: ...

    def message(self, text: str) -> None: ...


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
                plans.append(RunPlan(prep, t, r, spec, arm_id))
    return plans


def _check_passes(prep: Prepared, index: int, t: Target) -> None:
    from caramba.compiler.pipeline import optional_stages
    from caramba.errors import did_you_mean

    allowed = optional_stages()
    for j, name in enumerate(t.disable_passes):
        if name not in allowed:
            raise prep.doc.error(("targets", index, "disable_passes", j),
                                 f"'{name}' is not a pass that can be disabled; {did_you_mean(name, allowed)}")


def _trainer(step: Any, runner: Any, disable: tuple[str, ...]) -> Any:
    """A ``train.Trainer`` whose executables skip the target's disabled compiler passes."""
    from caramba import train

    class Trainer(train.Trainer):
        def executable(self, fetch: Any) -> Any:
            key = tuple(fetch)
            if disable and key not in self._exes:
                self._exes[key] = self.runner.compile(self.train_step.graph, targets=key, disable=disable)
            return super().executable(fetch)

    return Trainer(step, runner)


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
) -> ExperimentResult:
    """Run every planned run of a manifest (path, YAML text or Document) and record it.

    ``overrides`` are ``--set`` items (``["trainer.steps=50"]`` or ``{"trainer.steps": 50}``);
    ``backend`` replaces every target's backend; a target without one uses ``default_backend``
    (default: ``CARAMBA_BACKEND`` or the ``backend`` setting); ``target`` picks one target;
    ``store`` is a ``RunStore`` (default: the configured local store). A run that fails is recorded as failed
    with its error and the others still run; ``result.ok`` says whether all finished.
    """
    import secrets

    from caramba.store.runs import open_runs

    store = store if store is not None else open_runs()
    plans = plan_runs(source, overrides, backend=backend, target=target, default_backend=default_backend)
    m = plans[0].prep.manifest
    group = f"{m.name}-{secrets.token_hex(3)}"
    results = [execute(p, store, progress, group) for p in plans]
    tuner = m.tuner
    return ExperimentResult(m.name, group, results, tuner.metric if tuner else None, tuner.mode if tuner else "min")


# ---- one run ------------------------------------------------------------------------------


class _Feeder:
    """Dataset batches -> topology inputs, cast to the declared dtypes (host side, explicit)."""

    def __init__(self, prep: Prepared, batch: int) -> None:
        self.prep = prep
        self.types = resolve_dims(prep.manifest.topology, prep.doc, {**prep.dims, "batch": batch}, ("topology",))

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for inp, fld in self.prep.feed.items():
            arr = batch[fld]
            want = self.types[inp].dtype.numpy
            out[inp] = arr if arr.dtype == want else arr.astype(want)
        return out

    def specs(self, n: int) -> dict[str, tuple[tuple[int, ...], str]]:
        return {k: ((n, *t.shape[1:]), t.dtype.value) for k, t in self.types.items()}


class _Evaluator:
    """Scalar metrics over a split: one eval graph per batch size, averaged weighted by size."""

    def __init__(self, step: Any, trainer: Any, prep: Prepared, names: list[str], batch: int, limit: int | None,
                 disable: tuple[str, ...] = ()) -> None:
        self.step, self.trainer, self.prep, self.disable = step, trainer, prep, disable
        self.names, self.batch, self.limit = names, batch, limit
        self.feeder = _Feeder(prep, batch)
        self._exes: dict[int, Any] = {}

    def _exe(self, n: int) -> Any:
        exe = self._exes.get(n)
        if exe is None:
            names = self.names

            def fn(model: Any, **ins: Any) -> dict[str, Any]:
                out = model(**ins)
                return {k: out[k] for k in names}

            graph = self.step.eval_graph(fn, self.feeder.specs(n), name=f"{self.prep.manifest.name}.eval{n}")
            exe = self.trainer.runner.compile(graph, disable=self.disable)
            self._exes[n] = exe
        return exe

    def __call__(self, split: str) -> dict[str, float]:
        ds = self.prep.dataset
        totals = dict.fromkeys(self.names, 0.0)
        count = 0
        for batch in ds.eval_batches(split, self.batch, self.limit):
            arrays = self.feeder(batch)
            n = len(next(iter(arrays.values())))
            outs = self._exe(n).run(self.trainer.upload_batch(arrays))
            for k in self.names:
                totals[k] += float(outs[k].download()) * n
            count += n
        return {k: v / max(count, 1) for k, v in totals.items()}


def _resolve_checkpoint(ref: str, prep: Prepared, store: Any) -> Path:
    """A checkpoint file, or the latest checkpoint of a run (ID, prefix or ``latest`` of this experiment)."""
    from caramba.store.runs import RunNotFound

    base = Path(prep.doc.source).parent if prep.doc.source not in ("<string>", "") else prep.doc.root
    p = Path(ref).expanduser()
    for cand in (p, base / p):
        if cand.is_file():
            return cand
    try:
        if ref == "latest":  # the newest finished run of a model with exactly these parameters
            sig = _param_signature(prep)
            rec = next((r for r in store.list(500) if r.status == "finished" and r.summary.get("graph_params") == sig
                        and store.artifacts(r.id, "checkpoint")), None)
            if rec is None:
                raise RunNotFound("no finished run with a checkpoint of this model in the store")
        else:
            rec = store.get(ref)
    except RunNotFound as exc:
        raise ManifestError(f"checkpoint '{ref}' is neither a file nor a run with a checkpoint: {exc.message}") from None
    ckpts = store.artifacts(rec.id, "checkpoint")
    if not ckpts:
        raise ManifestError(f"run {rec.id} saved no checkpoint")
    return ckpts[-1].path


def _param_signature(prep: Prepared) -> str:
    import hashlib

    low = prep.lower(batch=1)
    text = ";".join(f"{k}:{list(v.shape)}:{v.dtype.value}" for k, v in sorted(low.params.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def execute(plan: RunPlan, store: Any, progress: Progress | None = None, group: str = "") -> RunResult:
    """Run one planned run; records everything in ``store`` and never raises for a failed run."""
    import traceback

    prep, m = plan.prep, plan.prep.manifest
    progress = progress or Progress()
    rec = store.create_run(
        m.name, group_id=group, arm=plan.arm, target=plan.target.name, run_name=plan.run.id, seed=plan.run.seed,
        backend=plan.backend, steps=plan.steps, manifest_path=str(prep.doc.source), manifest_sha256=prep.sha256,
        config={"manifest": prep.doc.data, "overrides": list(prep.doc.overrides), "dims": prep.dims,
                "backend": plan.backend, "arm": plan.arm, "run": plan.run.model_dump()},
    )
    store.add_artifact(rec.id, "manifest.yml", prep.doc.as_yaml(), kind="manifest")
    store.start(rec.id)
    progress.start(plan, rec.id, plan.steps)
    try:
        summary = _train_and_evaluate(plan, store, rec.id, progress)
    except KeyboardInterrupt:
        store.finish(rec.id, "cancelled", error="interrupted")
        raise
    except RunCancelled as exc:
        result = RunResult(rec.id, plan.label, "cancelled", error=exc.message)
        store.finish(rec.id, "cancelled", error=exc.message)
        progress.end(result)
        return result
    except CarambaError as exc:
        result = RunResult(rec.id, plan.label, "failed", error=f"{type(exc).__name__}: {exc}")
        store.finish(rec.id, "failed", error=result.error)
        progress.end(result)
        return result
    except Exception as exc:  # a bug: keep the traceback with the run
        result = RunResult(rec.id, plan.label, "failed", error=f"{type(exc).__name__}: {exc}")
        store.add_artifact(rec.id, "error.txt", traceback.format_exc(), kind="log")
        store.finish(rec.id, "failed", error=result.error)
        progress.end(result)
        return result
    store.finish(rec.id, "finished", summary=summary)
    result = RunResult(rec.id, plan.label, "finished", summary)
    progress.end(result)
    return result


def _train_and_evaluate(plan: RunPlan, store: Any, run_id: str, progress: Progress) -> dict[str, Any]:
    from caramba import train
    from caramba.compute import new

    prep, m = plan.prep, plan.prep.manifest
    t = m.trainer
    if t is None:
        raise ManifestError("eval runs need a trainer section for the loss and batch sizes", loc=prep.doc.loc(()))
    ds = prep.dataset
    if ds is None:
        raise prep.doc.error(("datasets",), "this run needs a dataset")
    steps = plan.steps
    batch = prep.dims.get("batch", t.batch_size)
    metrics = [x for x in dict.fromkeys([t.loss, *m.metrics])]
    extras = [x for x in metrics if x != t.loss]
    model = manifest_model(prep)
    optimizer = build_optimizer(prep, max(steps, 1))
    feeder = _Feeder(prep, batch)

    def loss_fn(model: Any, **ins: Any) -> Any:
        out = model(**ins)
        return out[t.loss], {k: out[k] for k in extras}

    t0 = time.perf_counter()
    step_graph = train.TrainStep(model, loss_fn, optimizer, feeder.specs(batch), name=f"{m.name}.train_step")
    summary: dict[str, Any] = {"params": sum(s.size for s in model.specs.values()),
                               "graph_params": _param_signature(prep)}
    summary.update({f"baseline.{k}": v for k, v in ds.info.items() if k.startswith("unigram_")})
    runner = new(plan.backend)
    try:
        disable = tuple(plan.target.disable_passes)
        trainer = _trainer(step_graph, runner, disable)
        if plan.run.checkpoint:
            path = _resolve_checkpoint(plan.run.checkpoint, prep, store)
            if plan.run.mode == "eval":
                tensors, _ = train.read_checkpoint(path)
                missing = [n for n in model.specs if n not in tensors]
                if missing:
                    raise ManifestError(f"checkpoint {path} lacks parameters {missing[:5]}")
                for n in model.specs:
                    runner.state[n] = runner.upload(tensors[n])
            else:
                trainer.init(plan.run.seed)
                trainer.load(path, check_graph=False)
            progress.message(f"loaded checkpoint {path}")
        else:
            trainer.init(plan.run.seed)
        store.add_artifact(run_id, "ir/train_step.txt", step_graph.graph.as_text(), kind="ir")
        splits = [s for s in ("val", "test") if ds.size(s)]
        # Default eval batch: whole small splits at once (one compiled graph); the train batch for text.
        eval_batch = t.eval_batch_size or (batch if _is_text(ds) else max(batch, 512))
        eval_batch = min(eval_batch, max((ds.size(s) for s in splits), default=batch))
        evaluator = _Evaluator(step_graph, trainer, prep, metrics, max(1, eval_batch), t.eval_batches, disable)
        rng = np.random.default_rng(plan.run.seed)
        stream = ds.train_batches(batch, rng) if steps else iter(())
        fetch_log = ("loss", "lr", *(("grad_norm",) if t.grad_clip else ()), *extras)
        compile_s = time.perf_counter() - t0
        summary["compile_seconds"] = round(compile_s, 3)
        last: dict[str, float] = {}
        ema = None
        t_train = time.perf_counter()
        done = 0
        for i in range(1, steps + 1):
            arrays = feeder(next(stream))
            log = i % t.log_every == 0 or i == 1 or i == steps
            vals = trainer.step(arrays, fetch_log if log else ("loss",))
            done += 1
            loss = vals["loss"]
            if not math.isfinite(loss):
                store.log_metrics(run_id, i, vals)
                raise CarambaError(f"the loss became {loss} at step {i}", hint="lower trainer.lr or set trainer.grad_clip")
            ema = loss if ema is None else 0.9 * ema + 0.1 * loss
            elapsed = time.perf_counter() - t_train
            sps = done * batch / elapsed if elapsed > 0 else 0.0
            if log:
                store.log_metrics(run_id, i, {**vals, "samples_per_s": sps})
                last = vals
            progress.step(i, steps, {"loss": loss, "loss_ema": ema}, sps)
            if t.eval_every and i % t.eval_every == 0 and i != steps:
                for s in splits:
                    ev = evaluator(s)
                    store.log_metrics(run_id, i, ev, split=s)
                    progress.evaluate(i, s, ev)
            if m.checkpoints.every and i % m.checkpoints.every == 0 and i != steps:
                _checkpoint(trainer, store, run_id, i, prep, m.checkpoints.keep)
        train_s = time.perf_counter() - t_train
        if steps:
            summary.update({f"train.{k}": v for k, v in last.items() if k not in ("lr", "grad_norm")})
            summary["samples_per_s"] = round(steps * batch / train_s, 1) if train_s > 0 else None
            summary["train_seconds"] = round(train_s, 3)
        for s in splits:
            ev = evaluator(s)
            store.log_metrics(run_id, steps, ev, split=s)
            progress.evaluate(steps, s, ev)
            summary.update({f"{s}.{k}": v for k, v in ev.items()})
        if steps and m.checkpoints.at_end:
            _checkpoint(trainer, store, run_id, steps, prep, m.checkpoints.keep)
        summary["steps"] = steps
        summary["seconds"] = round(time.perf_counter() - t0, 3)
        _plots(store, run_id, m.name, ds)
        return summary
    finally:
        runner.close()


def _is_text(ds: Any) -> bool:
    from caramba.data import TextDataset

    return isinstance(ds, TextDataset)


def _checkpoint(trainer: Any, store: Any, run_id: str, step: int, prep: Prepared, keep: int) -> None:
    name = f"checkpoints/step{step:08d}.safetensors"
    path = store.run_dir(run_id) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    trainer.save(path, manifest_hash=prep.sha256)
    store.add_artifact(run_id, name, path, kind="checkpoint")
    old = store.artifacts(run_id, "checkpoint")
    for a in old[: max(0, len(old) - keep)]:
        store.remove_artifact(run_id, a.name)


def loss_curve(store: Any, run_id: str, title: str = "", baseline: tuple[str, float] | None = None) -> bytes:
    """The loss curve PNG of a run (train loss per logged step, val/test loss at each evaluation)."""
    from caramba.manifest.plot import line_chart

    series = []
    for split in ("train", "val", "test"):
        xs, ys = store.series(run_id, "loss", split)
        if xs:
            series.append((f"{split} loss", xs, ys))
    return line_chart(series, None, title=title or run_id, ylabel="loss", baseline=baseline)


def _plots(store: Any, run_id: str, name: str, ds: Any) -> None:
    baseline = None
    for s in ("val", "test"):
        v = ds.info.get(f"unigram_{s}_loss")
        if v is not None:
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
    "ExperimentResult", "Progress", "RunCancelled", "RunPlan", "RunResult", "build_optimizer", "execute", "inspect_run", "ir_summary",
    "loss_curve", "manifest_model", "plan_runs", "run_experiment",
]
