"""A manifest's topology as a ``train.Module`` and its trainer's optimizer."""

from __future__ import annotations

import hashlib
from typing import Any

from caramba.errors import CarambaError
from caramba.manifest.compile import Prepared
from caramba.manifest.lower import ParamSpec, lower_into


def _initializer(spec: ParamSpec) -> Any:
    from caramba.train import init

    if spec.init == "zeros":
        return init.zeros()
    if spec.init == "ones":
        return init.ones()
    if spec.init == "uniform":
        return init.uniform(-spec.bound, spec.bound)
    return init.normal(0.0, spec.std)


class _FromCheckpoint:
    """An initializer that is a checkpoint tensor, whatever the seed (read when first asked,
    through a reader the model's parameters share: one tensor on the host at a time)."""

    def __init__(self, reader: Any, binding: Any, allow_narrowing: bool, label: str) -> None:
        self.reader, self.binding, self.allow_narrowing, self.label = reader, binding, allow_narrowing, label

    def __call__(self, rng: Any, shape: Any, dtype: Any = None, fan: Any = None) -> Any:
        return self.reader.read(self.binding, tuple(shape), dtype, self.allow_narrowing, self.label)


def _checkpoint_values(prep: Prepared, params: dict[str, ParamSpec]) -> dict[str, _FromCheckpoint]:
    res = prep.manifest.topology.pretrained
    if res is None:
        return {}
    from caramba.manifest.pretrained import bind
    from caramba.pretrained.checkpoint import TensorReader

    binds = bind(res, params, prep.doc)
    reader = TensorReader(res.checkpoint)
    return {p: _FromCheckpoint(reader, b, res.allow_narrowing, f"tensor '{b.tensor}' (for parameter '{p}')")
            for p, b in binds.items()}


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
            loaded = _checkpoint_values(prep, low.params)  # from_safetensors: parameters start as the checkpoint's
            for name, spec in low.params.items():  # model.freeze / model.lora: no gradient, no optimizer state
                init = loaded.get(name) or _initializer(spec)
                setattr(self, name, Parameter(spec.shape, init, spec.dtype, trainable=name not in low.frozen))

        def __call__(self, **inputs: Any) -> dict[str, Any]:
            from caramba.ir.graph import current_graph

            published, _ = lower_into(current_graph(), prep.manifest.topology, prep.doc, inputs,
                                      training=self.training, model_spec=prep.manifest.model)
            return published

        def __repr__(self) -> str:
            return f"ManifestModel({prep.manifest.name}: {len(self.specs)} parameters)"

    return ManifestModel()


OPTIMIZERS = {  # optimizer asset -> caramba.train class name
    "optimizer.sgd": "SGD", "optimizer.adam": "Adam", "optimizer.adamw": "AdamW", "optimizer.adamax": "Adamax",
    "optimizer.rmsprop": "RMSprop", "optimizer.adagrad": "Adagrad", "optimizer.lion": "Lion", "optimizer.lamb": "Lamb",
}


def build_optimizer(prep: Prepared, steps: int) -> Any:
    """The trainer's optimizer from ``caramba.train`` with its schedule and gradient clipping.
    The schedule spans ``steps``: a resumed run passes the run's full budget, not what is left."""
    from caramba import train

    t = prep.manifest.trainer
    assert t is not None and prep.optimizer is not None
    asset, cfg = prep.optimizer
    by_ir = {f"train.{k}": v for k, v in OPTIMIZERS.items()}  # a user's optimizer asset names its update op
    cls = getattr(train, OPTIMIZERS.get(asset.op) or by_ir.get(asset.ir or "", ""), None)
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
        opt = cls(schedule, clip_norm=t.grad_clip, **kwargs)
    except CarambaError as exc:
        raise prep.doc.error(("trainer", "optimizer"), exc.message) from None
    where = {"schedule": (("trainer", "schedule"), ("trainer", "lr")), "clip": (("trainer", "grad_clip"),),
             "update": (("trainer", "optimizer"),)}
    for part, paths in where.items():  # the first of the paths the manifest spells out, else the trainer
        path = next((p for p in paths if p in prep.doc.locations), ("trainer",))
        opt.origins[part] = prep.doc.origin(path, note=f"the trainer's {part}")
    return opt


def param_signature(prep: Prepared) -> str:
    """A short fingerprint of the model's parameter names, shapes and dtypes (which runs'
    checkpoints fit this model)."""
    low = prep.lower(batch=1)
    text = ";".join(f"{k}:{list(v.shape)}:{v.dtype.value}" for k, v in sorted(low.params.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


__all__ = ["OPTIMIZERS", "build_optimizer", "manifest_model", "param_signature"]
