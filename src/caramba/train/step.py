"""One train step as one graph, and the small driver that runs it with resident state.

``TrainStep`` builds forward + loss + backward + optimizer update into a single ``ir.Graph``
(parameters and optimizer slots are state; the update writes them back). ``Trainer`` compiles
that graph once per set of requested outputs on a runner and runs it every step: parameters and
optimizer state never leave the runner, and only the scalars asked for are downloaded::

    model = MLP([64, 256, 256, 10])
    step = TrainStep(model, loss_fn, AdamW(1e-3), inputs={"x": ((128, 64), "float64"),
                                                           "y": ((128,), "int64")})
    trainer = Trainer(step, caramba.compute.new("cpu"))
    trainer.init(seed=0)
    for batch in batches:
        print(trainer.step(batch, fetch=("loss", "accuracy")))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from caramba import autodiff
from caramba.compute.runner import Executable, Runner
from caramba.compute.tensor import Tensor
from caramba.errors import ConfigError, GraphError, did_you_mean
from caramba.ir.dtypes import DType
from caramba.ir.dtypes import dtype as as_dtype
from caramba.ir.graph import Graph, Value
from caramba.train import checkpoint as ckpt
from caramba.train.layers import STEP_KEY, Module
from caramba.train.optimizers import STEP, Optimizer

InputSpec = tuple[Sequence[int], "DType | str"]


def _declare_inputs(g: Graph, inputs: Mapping[str, InputSpec]) -> dict[str, Value]:
    out = {}
    for name, spec in inputs.items():
        if not (isinstance(spec, (tuple, list)) and len(spec) == 2):
            raise ConfigError(f"input '{name}' must be given as (shape, dtype), got {spec!r}")
        out[name] = g.input(name, tuple(spec[0]), as_dtype(spec[1]))
    return out


def _split_result(result: Any) -> tuple[Value, dict[str, Value]]:
    if isinstance(result, Value):
        return result, {}
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], Value) and isinstance(result[1], Mapping):
        return result[0], dict(result[1])
    raise GraphError(f"loss_fn must return a scalar loss value or (loss, {{name: metric value}}), got {type(result).__name__}")


class TrainStep:
    """The graph of one training step.

    ``loss_fn(model, **inputs)`` builds the forward pass and returns the scalar loss, or
    ``(loss, {name: value})`` with extra outputs (metrics). Outputs of the graph: ``loss``, the
    extras, ``lr``, ``step`` and (when the optimizer clips) ``grad_norm``. Gradients are taken
    with respect to every trainable parameter of ``model`` (all reads of its state).

    ``optimizer=None`` makes an evaluation-only step: forward, loss and the step counter, no
    gradient and no update (outputs ``loss``, the extras and ``step``), so the model needs no
    trainable parameter (a frozen pretrained model, a parameter-free topology); its parameters
    are still state, initialized and checkpointed like any, and ``eval_graph`` reads them.
    """

    def __init__(self, model: Module, loss_fn: Callable[..., Any], optimizer: Optimizer | None,
                 inputs: Mapping[str, InputSpec], *, name: str = "train_step") -> None:
        self.model, self.loss_fn, self.optimizer = model, loss_fn, optimizer
        self.inputs = dict(inputs)
        self.params = model.parameters(trainable_only=True) if optimizer is not None else {}
        if optimizer is not None and not self.params:
            raise ConfigError("the model has no trainable parameters, so there is nothing to train",
                              hint="unfreeze a parameter, or evaluate only (optimizer=None; in a manifest a run "
                                   "with mode: eval or steps: 0)")
        self.graph = self._build(name)
        self.extras = tuple(k for k in self.graph.outputs if k != "loss")

    def _build(self, name: str) -> Graph:
        g = Graph(name)
        with g:
            ins = _declare_inputs(g, self.inputs)
            step = g.variable(STEP, (), DType.int64, init="zeros") + g.constant(np.ones((), np.int64))
            token = STEP_KEY.set(step)
            was_training = self.model.training
            self.model.train(self.optimizer is not None)  # an evaluation-only step runs the model in eval mode
            try:
                loss, extras = _split_result(self.loss_fn(self.model, **ins))
            finally:
                STEP_KEY.reset(token)
                self.model.train(was_training)
            if loss.shape != () or not loss.dtype.is_float:
                raise GraphError(f"the loss must be a float scalar, got {loss.type}")
            names = [n for n in self.params if n in g.state]
            unused = [n for n in self.params if n not in g.state]
            grads = dict(zip(names, autodiff.grad(loss, names), strict=True)) if names else {}
            reads = {}
            for n in self.params:
                first = next((x for x in g.nodes if x.op == "state.read" and x.attrs["name"] == n), None)
                reads[n] = g.value(first.outputs[0]) if first is not None else self.params[n].read()
            for n in unused:  # never read by the loss: a zero gradient (weight decay still applies)
                grads[n] = g.constant(np.zeros((), dtype=reads[n].dtype.numpy))
                grads[n] = g.call("shape.broadcast_to", (grads[n],), {"shape": reads[n].shape})
            report = self.optimizer.update(g, reads, grads, step) if self.optimizer is not None else {}
            g.write(STEP, step)
            g.output("loss", loss)
            reserved = {"loss", "step", *report}
            for k, v in extras.items():
                if k in reserved:
                    raise GraphError(f"extra output '{k}' collides with a train-step output ({sorted(reserved)})")
                g.output(k, v)
            for k, v in report.items():
                g.output(k, v)
            g.output("step", step)
        return g

    def eval_graph(self, fn: Callable[..., Any], inputs: Mapping[str, InputSpec], *, name: str = "eval") -> Graph:
        """A graph of ``fn(model, **inputs)`` (a value or ``{name: value}``) with the model in
        eval mode; compiled on the same runner it reads the same parameters."""
        g = Graph(name)
        with g:
            ins = _declare_inputs(g, inputs)
            was_training = self.model.training
            self.model.eval()
            try:
                result = fn(self.model, **ins)
            finally:
                self.model.train(was_training)
            for k, v in (result.items() if isinstance(result, Mapping) else [("out", result)]):
                g.output(k, v)
        return g

    @property
    def state_names(self) -> list[str]:
        return list(self.graph.state)


class Trainer:
    """Runs a ``TrainStep`` on a runner: compiled once per output set, state resident."""

    def __init__(self, step: TrainStep, runner: Runner) -> None:
        self.train_step = step
        self.runner = runner
        self._exes: dict[tuple[str, ...], Executable] = {}
        self.graph_hash = step.graph.fingerprint()

    # ---- state ------------------------------------------------------------------------

    def init(self, seed: int) -> None:
        """Draw every parameter from ``seed`` on the host and upload it; reset optimizer state
        and the step counter (they are recreated as zeros on the device)."""
        params = self.train_step.model.parameters()
        present = set(self.runner.state)  # (StateStore lookups of missing names raise)
        for name in self.train_step.graph.state:
            if name in present and name not in params:
                del self.runner.state[name]
        for name, p in params.items():  # one host array at a time: a large (pretrained) model is not held twice
            self.runner.state[name] = self.runner.upload(p.initial_value(seed), donate=True)

    def parameters(self) -> dict[str, np.ndarray]:
        """Download every parameter (an explicit transfer)."""
        return {n: self.runner.state[n].download() for n in self.train_step.model.parameters()}

    @property
    def step_count(self) -> int:
        return int(self.runner.state[STEP].download()) if STEP in set(self.runner.state) else 0

    # ---- running ----------------------------------------------------------------------

    def executable(self, fetch: Sequence[str]) -> Executable:
        key = tuple(fetch)
        exe = self._exes.get(key)
        if exe is None:
            outputs = self.train_step.graph.outputs
            unknown = [f for f in key if f not in outputs]
            if unknown:
                raise ConfigError(f"cannot fetch {unknown}; {did_you_mean(unknown[0], list(outputs))}")
            exe = self.runner.compile(self.train_step.graph, targets=key)
            self._exes[key] = exe
        return exe

    def upload_batch(self, batch: Mapping[str, Any]) -> dict[str, Tensor]:
        """Host arrays become tensors of this runner (explicitly); tensors pass through."""
        return {k: v if isinstance(v, Tensor) else self.runner.upload(v) for k, v in batch.items()}

    def step(self, batch: Mapping[str, Any], fetch: Sequence[str] = ("loss",)) -> dict[str, float]:
        """Run one step; returns the requested scalars as Python floats."""
        outs = self.executable(fetch).run(self.upload_batch(batch))
        return {k: float(outs[k].download()) for k in fetch}

    def run(self, batches: Iterable[Mapping[str, Any]], fetch: Sequence[str] = ("loss",)) -> list[dict[str, float]]:
        return [self.step(b, fetch) for b in batches]

    # ---- checkpoints ------------------------------------------------------------------

    def save(self, path: "str | Path", manifest_hash: str = "") -> Path:
        """Parameters, optimizer state and step counter as safetensors, with metadata."""
        present = set(self.runner.state)
        names = [n for n in self.train_step.graph.state if n in present]
        return ckpt.save_checkpoint(path, self.runner, names, step=self.step_count, graph_hash=self.graph_hash,
                                    manifest_hash=manifest_hash)

    def load(self, path: "str | Path", *, check_graph: bool = True, sha256: str | None = None) -> ckpt.Checkpoint:
        """Upload a checkpoint into this runner's state (refuses one from another graph unless
        ``check_graph=False``, and one whose bytes do not hash to ``sha256`` when given)."""
        return ckpt.load_checkpoint(path, self.runner, expect_graph_hash=self.graph_hash if check_graph else None,
                                    expect=self.train_step.graph.state, sha256=sha256)


__all__ = ["TrainStep", "Trainer"]
