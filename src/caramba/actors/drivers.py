"""Run drivers built into caramba.

``LinearRegression`` is a small but real training run on ``caramba.compute``: least squares by
minibatch gradient descent where the forward pass, the gradients and the parameter update are
graph ops and the parameters stay resident as runner state. It runs on a local runner or, with
``backend_actor``, through a Backend actor (graphs travel through the IR codec). It is what the
actor, fault and determinism tests train, and a template for drivers of larger models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from caramba.errors import ConfigError

if TYPE_CHECKING:
    from caramba.actors.base import Actor
    from caramba.actors.experiment import RunSpec


class LinearConfig(BaseModel):
    """``features``/``samples``: data shape (samples divisible by ``batch``); ``lr``: step size;
    ``noise``: label noise; ``backend``: runner spec; ``backend_actor``: run through that actor."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    features: int = Field(4, ge=1)
    samples: int = Field(64, ge=1)
    batch: int = Field(16, ge=1)
    lr: float = Field(0.05, gt=0)
    noise: float = Field(0.1, ge=0)
    backend: str = "cpu"
    backend_actor: str | None = None

    @model_validator(mode="after")
    def _batches(self) -> "LinearConfig":
        if self.samples % self.batch:
            raise ValueError(f"samples ({self.samples}) must be a multiple of batch ({self.batch})")
        return self


def _rng(*key: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(np.random.SeedSequence([k & 0xFFFFFFFF for k in key])))


class _LocalExec:
    def __init__(self, spec: str) -> None:
        from caramba import compute

        self.runner = compute.new(spec)
        self.exes: dict[str, Any] = {}

    def compile(self, name: str, graph) -> None:
        self.exes[name] = self.runner.compile(graph)

    def run(self, name: str, inputs: dict[str, np.ndarray], fetch: list[str]) -> dict[str, np.ndarray]:
        outs = self.exes[name].run({k: self.runner.upload(v) for k, v in inputs.items()})
        return {k: outs[k].download() for k in fetch}

    def set_state(self, values: dict[str, np.ndarray]) -> None:
        for k, v in values.items():
            self.runner.state[k] = self.runner.upload(v)

    def get_state(self, names: list[str]) -> dict[str, np.ndarray]:
        return {k: self.runner.state[k].download() for k in names}

    def close(self) -> None:
        self.runner.close()


class _ActorExec:
    """The same calls through a Backend actor."""

    def __init__(self, ref) -> None:
        self.ref = ref
        self.programs: dict[str, str] = {}

    def compile(self, name: str, graph) -> None:
        from caramba import ir
        from caramba.actors.backend import Compile

        self.programs[name] = self.ref.ask(Compile(graph=ir.dumps(graph))).id

    def run(self, name: str, inputs: dict[str, np.ndarray], fetch: list[str]) -> dict[str, np.ndarray]:
        from caramba.actors.backend import Step, TensorData

        out = self.ref.ask(Step(program=self.programs[name], inputs={k: TensorData.of(v) for k, v in inputs.items()}, fetch=fetch))
        return {k: v.array() for k, v in out.values.items()}

    def set_state(self, values: dict[str, np.ndarray]) -> None:
        from caramba.actors.backend import SetState, TensorData

        self.ref.ask(SetState(values={k: TensorData.of(v) for k, v in values.items()}))

    def get_state(self, names: list[str]) -> dict[str, np.ndarray]:
        from caramba.actors.backend import GetState

        return {k: v.array() for k, v in self.ref.ask(GetState(names=names)).values.items()}

    def close(self) -> None:
        pass


class LinearRegression:
    """Least squares ``y ≈ x @ w + b`` by minibatch SGD on a seeded synthetic dataset.

    Data: ``x ~ N(0, 1)``, ``y = x @ w* + 0.5 + noise * N(0, 1)`` from Philox(seed). Batches
    follow a per-epoch permutation, so step ``s`` always sees the same rows, and a resumed run
    continues exactly where the uninterrupted one would. Metrics: ``loss`` (batch MSE before the
    update); at the end ``eval_loss`` (full data) and ``w_error`` (distance to ``w*``)."""

    needs_actor = True

    def __init__(self, actor: "Actor | None" = None) -> None:
        self.actor = actor
        self.steps_done = 0
        self.exec: _LocalExec | _ActorExec | None = None

    # ---- RunDriver --------------------------------------------------------------------------------
    def start(self, spec: "RunSpec", checkpoint: bytes | None = None, initial: bytes | None = None) -> None:
        try:
            self.cfg = cfg = LinearConfig.model_validate(spec.config)
        except ValueError as exc:
            raise ConfigError(f"run '{spec.run_id}': bad linear driver config: {exc}") from None
        self.spec = spec
        rng = _rng(spec.seed, 1)
        self.x = rng.standard_normal((cfg.samples, cfg.features))
        self.w_true = rng.standard_normal((cfg.features, 1))
        self.y = self.x @ self.w_true + 0.5 + cfg.noise * rng.standard_normal((cfg.samples, 1))
        if cfg.backend_actor:
            if self.actor is None:
                raise ConfigError("backend_actor needs the driver to run inside an actor")
            self.exec = _ActorExec(self.actor.context.lookup(cfg.backend_actor))
            self.prefix = f"{spec.run_id}:"
        else:
            self.exec = _LocalExec(cfg.backend)
            self.prefix = ""
        self.names = [f"{self.prefix}linear.w", f"{self.prefix}linear.b"]
        self.exec.compile("train", self._train_graph())
        self.exec.compile("eval", self._eval_graph())
        if checkpoint is not None:
            params, meta = self._load(checkpoint)
            self.steps_done = int(meta["step"])
        elif initial is not None:
            params, _ = self._load(initial)
            self.steps_done = 0
        else:
            init = _rng(spec.seed, 2)
            params = {"w": 0.1 * init.standard_normal((cfg.features, 1)), "b": np.zeros((1, 1))}
            self.steps_done = 0
        self.exec.set_state({self.names[0]: params["w"], self.names[1]: params["b"]})

    def step(self) -> dict[str, float]:
        assert self.exec is not None
        idx = self._batch(self.steps_done)
        out = self.exec.run("train", {"x": self.x[idx], "y": self.y[idx]}, ["loss"])
        self.steps_done += 1
        return {"loss": float(out["loss"])}

    def checkpoint(self) -> bytes:
        from caramba.train import safetensors

        assert self.exec is not None
        state = self.exec.get_state(self.names)
        tensors = {"w": state[self.names[0]], "b": state[self.names[1]]}
        return safetensors.dumps(tensors, {"step": str(self.steps_done), "driver": "linear", "run": self.spec.run_id})

    def metrics(self) -> dict[str, float]:
        assert self.exec is not None
        out = self.exec.run("eval", {"x": self.x, "y": self.y}, ["loss"])
        w = self.exec.get_state([self.names[0]])[self.names[0]]
        return {"eval_loss": float(out["loss"]), "w_error": float(np.linalg.norm(w - self.w_true))}

    def close(self) -> None:
        if self.exec is not None:
            self.exec.close()
            self.exec = None

    # ---- internals --------------------------------------------------------------------------------
    def _load(self, data: bytes) -> tuple[dict[str, np.ndarray], dict[str, str]]:
        from caramba.train import safetensors

        tensors, meta = safetensors.loads(data, f"checkpoint of run '{self.spec.run_id}'")
        want = {"w": (self.cfg.features, 1), "b": (1, 1)}
        for k, shape in want.items():
            if k not in tensors or tensors[k].shape != shape:
                raise ConfigError(f"run '{self.spec.run_id}': checkpoint has no '{k}' of shape {shape}")
        return tensors, meta

    def _batch(self, step: int) -> np.ndarray:
        per_epoch = self.cfg.samples // self.cfg.batch
        epoch, i = divmod(step, per_epoch)
        if getattr(self, "_epoch", None) != epoch:  # one permutation per epoch, from (seed, epoch) alone
            self._epoch, self._perm = epoch, _rng(self.spec.seed, 3, epoch).permutation(self.cfg.samples)
        return np.sort(self._perm[i * self.cfg.batch : (i + 1) * self.cfg.batch])

    def _params(self, g):
        cfg = self.cfg
        return g.variable(self.names[0], (cfg.features, 1)), g.variable(self.names[1], (1, 1))

    def _train_graph(self):
        from caramba import ir

        cfg = self.cfg
        with ir.Graph("linear_train_step") as g:
            x = g.input("x", (cfg.batch, cfg.features))
            y = g.input("y", (cfg.batch, 1))
            w, b = self._params(g)
            err = x @ w + b - y
            g.output("loss", (err * err).mean())
            grad_w = (x.T @ err) * (2.0 / cfg.batch)
            grad_b = err.mean(axes=(0,), keepdims=True) * 2.0
            g.write(self.names[0], w - cfg.lr * grad_w)
            g.write(self.names[1], b - cfg.lr * grad_b)
        return g

    def _eval_graph(self):
        from caramba import ir

        cfg = self.cfg
        with ir.Graph("linear_eval") as g:
            x = g.input("x", (cfg.samples, cfg.features))
            y = g.input("y", (cfg.samples, 1))
            w, b = self._params(g)
            err = x @ w + b - y
            g.output("loss", (err * err).mean())
        return g


# The manifest driver is the run engine's own: caramba.run.driver.ManifestRun.
def __getattr__(name: str):
    if name == "ManifestRun":
        from caramba.run.driver import ManifestRun

        return ManifestRun
    raise AttributeError(name)
