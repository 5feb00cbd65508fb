"""``ManifestRun``: one run of a manifest, step by step — the only implementation of it.

The Experiment actor drives it on either transport (in process for ``caramba research run``,
on Ray for ``--cluster``). ``spec.config`` names the run:

- ``manifest_text`` + ``source`` + ``root`` (the manifest as written, so a resume does not
  depend on the file being unchanged), or ``manifest`` (a path every worker can read);
- ``overrides`` (``--set`` items), ``target``, ``run``, ``arm``, ``backend``;
- ``store`` (optional): the run store root, to resolve ``checkpoint: <run>`` references.

Parameters come from ``Trainer.init(seed)``, batches from the dataset's stream seeded by the
run's seed; a resumed run replays the stream to its checkpoint and continues exactly as an
uninterrupted run would (the schedule spans the run's whole step budget). Checkpoints are
``caramba.train`` checkpoints (parameters, optimizer state, step counter, graph hash).

What the run reports besides its per-step loss (logged metrics, evaluations, artifacts) goes
to the ``sink`` the Experiment actor attaches.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from caramba.errors import CarambaError, ConfigError

if TYPE_CHECKING:
    from caramba.actors.experiment import RunSpec


class NullSink:
    """Where reports go when nobody listens."""

    store: Any = None

    def metrics(self, step: int, values: dict[str, float], split: str = "train", live: bool = True) -> None: ...

    def progress(self, step: int, total: int, values: dict[str, float], samples_per_s: float) -> None: ...

    def artifact(self, name: str, data: bytes | str, kind: str) -> None: ...

    def message(self, text: str) -> None: ...


class ManifestRun:
    needs_actor = False

    def __init__(self) -> None:
        self.steps_done = 0
        self.runner = None
        self.sink: Any = NullSink()

    def attach(self, sink: Any) -> None:
        self.sink = sink

    # ---- RunDriver --------------------------------------------------------------------------------
    def start(self, spec: "RunSpec", checkpoint: bytes | None = None, initial: bytes | None = None) -> None:
        from caramba.data.sources import data_roots

        t0 = time.perf_counter()
        self.spec = spec
        with data_roots(spec.config.get("data_roots")):  # a server's submission reads only its own folders
            self._start(spec, checkpoint, initial, t0)

    def _start(self, spec: "RunSpec", checkpoint: bytes | None, initial: bytes | None, t0: float) -> None:
        from caramba import compute, train
        from caramba.run.feed import Evaluator, Feeder, eval_batch_size, eval_splits, make_trainer
        from caramba.run.model import build_optimizer, manifest_model, param_signature

        self.plan = plan = self._plan(spec)
        self.prep = prep = plan.prep
        m, t, ds = prep.manifest, prep.manifest.trainer, prep.dataset
        if t is None:
            raise ConfigError(f"run '{spec.run_id}': runs need a trainer section for the loss and batch sizes")
        if ds is None:
            raise prep.doc.error(("datasets",), "this run needs a dataset")
        if spec.manifest_hash and spec.manifest_hash != prep.sha256:
            raise ConfigError(f"run '{spec.run_id}': the manifest changed since the run was recorded "
                              f"(sha256 {prep.sha256[:12]}…, recorded {spec.manifest_hash[:12]}…)",
                              hint="a resumed run needs the manifest and the files it includes as they were")
        self._check_weights(spec, prep)
        self.batch = batch = prep.dims.get("batch", t.batch_size)
        self.metric_names = list(dict.fromkeys([t.loss, *m.metrics]))
        extras = [x for x in self.metric_names if x != t.loss]
        self.fetch_log = ("loss", "lr", *(("grad_norm",) if t.grad_clip else ()), *extras)
        self.feeder = Feeder(prep, batch)
        model = manifest_model(prep)
        # a run with no steps (mode: eval, steps: 0) only evaluates: no backward pass, no update, so
        # a model with no trainable parameter (a frozen checkpoint, a parameter-free topology) runs
        optimizer = build_optimizer(prep, spec.steps) if spec.steps else None

        def loss_fn(model: Any, **ins: Any) -> Any:
            out = model(**ins)
            return out[t.loss], {k: out[k] for k in extras}

        self.step_graph = train.TrainStep(model, loss_fn, optimizer, self.feeder.specs(batch), name=f"{m.name}.train_step")
        self.report: dict[str, Any] = {"params": sum(s.size for s in model.specs.values()),
                                       "graph_params": param_signature(prep)}
        self.report.update({f"baseline.{k}": v for k, v in ds.info.items() if k.startswith("unigram_")})
        disable = tuple(plan.target.disable_passes)
        self.runner = compute.new(plan.backend)
        self.trainer = make_trainer(self.step_graph, self.runner, disable)
        self.trainer.init(spec.seed)
        if checkpoint is not None:
            self.steps_done = self._load(checkpoint, whole=True)
        elif initial is not None:
            self._load(initial, whole=False)
        elif plan.run.checkpoint:
            self._load_reference()
        self.sink.artifact("ir/train_step.txt", self.step_graph.graph.as_text(), "ir")
        self.splits = eval_splits(ds)
        self.evaluator = Evaluator(self.step_graph, self.trainer, prep, self.metric_names, eval_batch_size(prep, batch),
                                   t.eval_batches, disable)
        self.stream = ds.train_batches(batch, np.random.default_rng(spec.seed)) if spec.steps else iter(())
        for _ in range(self.steps_done):  # replay the data stream to where the checkpoint was taken
            next(self.stream)
        if spec.steps:  # the first step's and the evaluations' executables, their kernels compiled together
            with self.runner.compiling_together():
                self.trainer.executable(self.fetch_log)
                self.evaluator.prepare(self.splits)
        self.report["compile_seconds"] = round(time.perf_counter() - t0, 3)
        self.t0, self.t_train, self.trained, self.ema, self.last = t0, time.perf_counter(), 0, None, {}

    def step(self) -> dict[str, float]:
        t = self.prep.manifest.trainer
        assert t is not None
        i, total = self.steps_done + 1, self.spec.steps
        log = i % t.log_every == 0 or i == 1 or i == total
        vals = self.trainer.step(self.feeder(next(self.stream)), self.fetch_log if log else ("loss",))
        self.steps_done, self.trained = i, self.trained + 1
        loss = vals["loss"]
        elapsed = time.perf_counter() - self.t_train
        sps = self.trained * self.batch / elapsed if elapsed > 0 else 0.0
        if log or not math.isfinite(loss):
            self.sink.metrics(i, {**vals, "samples_per_s": sps})
            self.last = vals
        else:  # every step's loss is kept; the run store gets them with the next logged step
            self.sink.metrics(i, {"loss": loss}, live=False)
        if not math.isfinite(loss):
            raise CarambaError(f"the loss became {loss} at step {i}", hint="lower trainer.lr or set trainer.grad_clip")
        self.ema = loss if self.ema is None else 0.9 * self.ema + 0.1 * loss
        self.sink.progress(i, total, {"loss": loss, "loss_ema": self.ema}, sps)
        if t.eval_every and i % t.eval_every == 0 and i != total:
            for s in self.splits:
                self.sink.metrics(i, self.evaluator(s), s)
        return {"loss": loss}

    def checkpoint(self) -> bytes:
        from caramba.train import safetensors

        assert self.runner is not None
        present = set(self.runner.state)
        tensors = {n: self.runner.state[n].download() for n in self.step_graph.graph.state if n in present}
        meta = {"format": "caramba", "step": str(self.steps_done), "graph_hash": self.trainer.graph_hash,
                "manifest_hash": self.prep.sha256}
        return safetensors.dumps(tensors, meta)

    def metrics(self) -> dict[str, float]:
        """The manifest's metrics on every evaluation split (``val.loss``, ``test.accuracy``, ...)."""
        out: dict[str, float] = {}
        for s in self.splits:
            ev = self.evaluator(s)
            self.sink.metrics(self.steps_done, ev, s)
            out.update({f"{s}.{k}": v for k, v in ev.items()})
        return out

    def summary(self) -> dict[str, Any]:
        """What the run store shows besides the verified metrics: sizes, speeds, timings."""
        out = dict(self.report)
        train_s = time.perf_counter() - self.t_train
        if self.trained:
            out.update({f"train.{k}": v for k, v in self.last.items() if k not in ("lr", "grad_norm")})
            out["samples_per_s"] = round(self.trained * self.batch / train_s, 1) if train_s > 0 else None
            out["train_seconds"] = round(train_s, 3)
        out["steps"] = self.steps_done
        out["seconds"] = round(time.perf_counter() - self.t0, 3)
        return out

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None

    # ---- internals --------------------------------------------------------------------------------
    def _plan(self, spec: "RunSpec") -> Any:
        return plan_from_spec(spec)

    @staticmethod
    def _check_weights(spec: "RunSpec", prep: Any) -> None:
        """A fine-tune reads the checkpoint files the run recorded (sha256), not whatever lies at
        that path now."""
        want = spec.config.get("weights_sha256")
        if not want:
            return
        res = prep.manifest.topology.pretrained
        have = res.checkpoint.digests() if res is not None else {}
        for name, digest in sorted(want.items()):
            if have.get(name) != digest:
                found = f"sha256 {have[name][:12]}…" if name in have else "missing"
                raise ConfigError(f"run '{spec.run_id}': checkpoint file {name} changed since the run was recorded "
                                  f"({found}, recorded {digest[:12]}…)",
                                  hint="a run reads the pretrained weights it was started with; restore them, or "
                                       "start a new run")

    def _load(self, data: bytes, *, whole: bool) -> int:
        from caramba.train import safetensors
        from caramba.train.safetensors import CheckpointError

        tensors, meta = safetensors.loads(data, f"checkpoint of run '{self.spec.run_id}'")
        state = self.step_graph.graph.state
        if whole and meta.get("graph_hash") != self.trainer.graph_hash:
            raise CheckpointError(f"checkpoint of run '{self.spec.run_id}' comes from another train-step graph")
        from caramba.manifest.lora import is_adapter

        # a base checkpoint without adapters starts a LoRA run: the adapters keep their own init (B = 0)
        names = list(tensors) if whole else [n for n in self.step_graph.model.parameters()
                                             if n in tensors or not is_adapter(n)]
        for n in names:
            if n not in tensors or n not in state or tensors[n].shape != state[n].type.shape:
                raise CheckpointError(f"checkpoint of run '{self.spec.run_id}' does not fit tensor '{n}'")
            self.runner.state[n] = self.runner.upload(tensors[n])
        return int(meta.get("step", "0"))

    def _load_reference(self) -> None:
        """``checkpoint:`` of the run: its parameters, checked against the recorded digest. A
        run that trains from them starts its own optimizer state, step count and schedule (to
        continue an interrupted run instead, ``caramba research resume`` it)."""
        from caramba.run.checkpoints import resolve_checkpoint
        from caramba.store.runs import RunStore
        from caramba.train.checkpoint import verified_bytes

        plan = self.plan
        root = self.spec.config.get("store") or getattr(self.sink, "store_root", None)
        store = RunStore(root) if root else None
        path, sha = resolve_checkpoint(self.prep, plan.target, plan.run, store)
        try:
            data = verified_bytes(path, sha) if sha else path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read checkpoint {path}: {exc.strerror}") from None
        self._load(data, whole=False)
        self.sink.message(f"loaded checkpoint {path}" + ("" if sha else " (digest not checked: trust_checkpoint)"))


def plan_from_spec(spec: Any) -> Any:
    """The RunPlan a recorded run spec (manifest as written, target, run, arm) describes."""
    from caramba.run.engine import plan_runs

    cfg = spec.config
    try:
        target, run = cfg["target"], cfg["run"]
    except KeyError as exc:
        raise ConfigError(f"run '{spec.run_id}': the manifest driver needs config.{exc.args[0]}") from None
    if cfg.get("manifest_text") is not None:
        from pathlib import Path

        from caramba.manifest.loader import load_string

        source: Any = load_string(cfg["manifest_text"], cfg.get("source") or "<string>",
                                  root=Path(cfg.get("root") or "."))
    elif cfg.get("manifest"):
        source = cfg["manifest"]
    else:
        raise ConfigError(f"run '{spec.run_id}': the manifest driver needs config.manifest or config.manifest_text")
    plans = [p for p in plan_runs(source, cfg.get("overrides"), backend=cfg.get("backend"), target=target)
             if p.run.id == run and p.arm == cfg.get("arm", "")]
    if len(plans) != 1:
        raise ConfigError(f"run '{spec.run_id}': the manifest has no run '{run}' in target '{target}'")
    return plans[0]


__all__ = ["ManifestRun", "NullSink", "plan_from_spec"]
