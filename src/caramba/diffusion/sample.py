"""Sampling a trained denoiser: the manifest's topology, cut at its ``diffusion.noise`` node.

A diffusion manifest trains ``loss(denoiser(x_t, t_features), target)`` with
``(x_t, t_features, target) = diffusion.noise(x)``. To sample, ``find_denoiser`` cuts the
topology there: the nodes the prediction depends on (the prediction is the other input of the
one node that reads ``target``, the loss) are kept, and the noise node's outputs become the
inputs of a sampling graph. Nothing about the layers changes (no mode flag): the same node IDs
lower to the same parameter names, so a run's checkpoint loads as it is.

``sample`` builds two graphs and runs them on one runner: one draws x_T ~ N(0, I); one step
evaluates the denoiser at x and time index k and applies the scheduler's update (a DDPM ancestral
step, or an Euler step of the flow). x stays on the runner between steps; only the final
samples are downloaded.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from caramba.diffusion.schedule import GraphEmit, Scheduler, scheduler, take, time_features
from caramba.errors import ConfigError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Graph
from caramba.ir.types import ValueType

NOISE_OP = "diffusion.noise"
MAX_IMAGES = 1024  # samples per call (one batch on the runner)
ROLES = ("x_t", "t_features", "target", "t")  # diffusion.noise outputs, in order
X_INPUT, K_INPUT = "sample_x", "sample_k"  # the step graph's inputs
PRED_INPUT = PRED_OUTPUT = "prediction"  # split_graphs: the predict graph's output, the update graph's input


@dataclass(frozen=True)
class Denoiser:
    """Where a topology's denoiser is: the noise node (top-level index, resolved config), the
    published names of its outputs by role, the prediction's name and the nodes it needs."""

    prep: Any
    index: int
    config: dict[str, Any]
    names: dict[str, tuple[str, ...]]
    prediction: str
    kept: tuple[int, ...]
    x_type: ValueType  # of one example batch: [1, ...]

    @property
    def scheduler(self) -> Scheduler:
        return scheduler(self.config)

    @property
    def data_range(self) -> tuple[float, float]:
        lo, hi = self.config["data_range"]
        return float(lo), float(hi)

    @property
    def example_shape(self) -> tuple[int, ...]:
        return tuple(self.x_type.shape[1:])


def find_denoiser(prep: Any) -> Denoiser:
    """The denoiser of a prepared diffusion manifest; a ConfigError that says why when there is none."""
    from caramba.manifest.registry import registry

    topo = prep.manifest.topology
    name = prep.manifest.name
    hits = [i for i, n in enumerate(topo.nodes) if n.op == NOISE_OP]
    if not hits:
        raise ConfigError(f"'{name}' is not a diffusion model: its topology has no {NOISE_OP} node (at the top level)",
                          hint="examples/digits_diffusion.yml shows one")
    if len(hits) > 1:
        ids = [topo.nodes[i].id for i in hits]
        raise ConfigError(f"'{name}' has {len(hits)} {NOISE_OP} nodes {ids}; sampling needs exactly one")
    index = hits[0]
    node = topo.nodes[index]

    def bad(key: str | None, msg: str) -> None:
        raise ConfigError(f"node '{node.id}' ({NOISE_OP}): {msg}")

    config = registry().get(NOISE_OP, ("operation",)).resolve_config(node.config, bad)
    names: dict[str, tuple[str, ...]] = {r: () for r in ROLES}
    names["x_t"] = (node.id,)
    for role, out in zip(ROLES, node.out):
        names[role] = tuple(dict.fromkeys((*names[role], out)))
    targets = set(names["target"])
    readers = [n for n in topo.nodes if targets & set(n.in_)]
    if len(readers) != 1 or len(readers[0].in_) != 2 or len(set(readers[0].in_) & targets) != 1:
        found = ", ".join(f"'{n.id}' ({n.op}, in: {n.in_})" for n in readers) or "none"
        raise ConfigError(f"cannot tell the prediction of '{name}': it is the other input of the one node that reads "
                          f"{NOISE_OP}'s target (the loss), which takes two inputs; nodes reading the target: {found}",
                          hint="name the noise node's outputs (out: [x_t, t_features, target]) and feed target to "
                               "one loss: loss.mse(prediction, target)")
    reader = readers[0]
    prediction = next(i for i in reader.in_ if i not in targets)
    producers: dict[str, int] = {}
    for i, n in enumerate(topo.nodes):
        for p in (n.id, *n.out):
            producers.setdefault(p, i)
    given = {p for r in ("x_t", "t_features", "t") for p in names[r]}
    kept: set[int] = set()
    todo = [prediction]
    while todo:
        v = todo.pop()
        if v in given:
            continue
        if v in targets:
            raise ConfigError(f"the prediction '{prediction}' of '{name}' depends on the target; it cannot be sampled")
        if v in topo.inputs:
            raise ConfigError(f"the prediction '{prediction}' of '{name}' reads the topology input '{v}' besides "
                              f"{NOISE_OP}'s outputs, so it cannot be sampled from noise alone")
        i = producers.get(v)
        if i is None or i in kept:
            continue
        kept.add(i)
        todo.extend(topo.nodes[i].in_)
    low = prep.lower(batch=1)
    x_type = low.graph.type_of(low.published[node.in_[0]])
    return Denoiser(prep, index, config, names, prediction, tuple(sorted(kept)), x_type)


def _cut(den: Denoiser, n: int, width: int) -> tuple[Any, Any]:
    """(topology, document): the kept nodes, the noise node's outputs as inputs; node paths in the
    document renumbered so origins still point at the manifest lines."""
    from caramba.manifest.schema import InputSpec

    prep = den.prep
    topo = prep.manifest.topology
    dtype = den.x_type.dtype.value
    shapes = {"x_t": [n, *den.example_shape], "t_features": [n, width], "t": [n]}
    inputs = {p: InputSpec(shape=shapes[r], dtype=dtype) for r in ("x_t", "t_features", "t") for p in den.names[r]}
    cut = topo.model_copy(update={"inputs": inputs, "nodes": [topo.nodes[i] for i in den.kept], "outputs": {}})
    new = {old: j for j, old in enumerate(den.kept)}

    def renumber(locs: Mapping[tuple, Any]) -> dict[tuple, Any]:
        out: dict[tuple, Any] = {}
        for p, loc in locs.items():
            if len(p) >= 3 and p[:2] == ("topology", "nodes"):
                if p[2] in new:
                    out[("topology", "nodes", new[p[2]], *p[3:])] = loc
            else:
                out[p] = loc
        return out

    doc = dataclasses.replace(prep.doc, locations=renumber(prep.doc.locations),
                              key_locations=renumber(prep.doc.key_locations))
    return cut, doc


def _seed(seed: int, what: str) -> int:
    return zlib.crc32(f"sample:{seed}:{what}".encode()) & 0x7FFF_FFFF


def _init_graph(den: Denoiser, n: int, seed: int, steps: int | None) -> tuple[Any, Graph]:
    """(the scheduler's plan, the graph drawing x_T ~ N(0, I)), after checking n and seed."""
    from caramba.errors import ConfigError

    if not 1 <= n <= MAX_IMAGES:
        raise ConfigError(f"n must be in 1..{MAX_IMAGES}, got {n}")
    if seed < 0:
        raise ConfigError(f"seed must be >= 0, got {seed}")
    plan = den.scheduler.plan(steps)
    init = Graph(f"{den.prep.manifest.name}.sample_init")
    x_t = GraphEmit(init, "sampler").op("random.normal", (), {"shape": (n, *den.example_shape), "seed": _seed(seed, "init"),
                                                                "dtype": den.x_type.dtype}, name="x_T")
    init.output("x", x_t)
    return plan, init


def _predict(g: Graph, den: Denoiser, plan: Any, x: Any, k: Any) -> Any:
    """The denoiser's prediction at x and time index k, lowered into ``g``."""
    from caramba.manifest.lower import lower_into

    n, dtype = x.shape[0], den.x_type.dtype
    e = GraphEmit(g, "sampler")
    width = den.config["t_features"]
    s = take(e, plan.times, k, dtype, "time")
    feats = e.op("shape.broadcast_to", (time_features(e, s, width, dtype),), {"shape": (n, width)}, name="t_features_n")
    t_n = e.op("shape.broadcast_to", (s,), {"shape": (n,)}, name="time_n")
    values = {"x_t": x, "t_features": feats, "t": t_n}
    topo, doc = _cut(den, n, width)
    inputs = {p: values[r] for r in ("x_t", "t_features", "t") for p in den.names[r]}
    published, _ = lower_into(g, topo, doc, inputs, training=False, model_spec=den.prep.manifest.model)
    pred = published[den.prediction]
    if pred.type != x.type:
        raise ConfigError(f"the prediction '{den.prediction}' is {pred.type}; the denoiser must predict the shape "
                          f"of its input x_t {x.type}")
    return pred


def _update(g: Graph, den: Denoiser, plan: Any, x: Any, pred: Any, k: Any, seed: int) -> Any:
    """The scheduler's step from x with the prediction (its noise z drawn for DDPM), into ``g``."""
    e = GraphEmit(g, "sampler")
    z = None
    if den.scheduler.stochastic:
        z = e.op("random.normal", (k,), {"shape": x.shape, "seed": _seed(seed, "z"), "dtype": x.dtype}, name="z")
    return den.scheduler.update(e, plan, x, pred, k, z)


def sampler_graphs(den: Denoiser, n: int, *, seed: int = 0, steps: int | None = None) -> tuple[Graph, Graph, int]:
    """(init graph: x_T ~ N(0, I); step graph: (x, k) -> x at the next step; number of steps)."""
    plan, init = _init_graph(den, n, seed, steps)
    g = Graph(f"{den.prep.manifest.name}.sample_step")
    x = g.input(X_INPUT, (n, *den.example_shape), den.x_type.dtype)
    k = g.input(K_INPUT, (), DType.int64)
    g.output("x", _update(g, den, plan, x, _predict(g, den, plan, x, k), k, seed))
    return init, g, plan.steps


def split_graphs(den: Denoiser, n: int, *, seed: int = 0, steps: int | None = None) -> tuple[Graph, Graph, Graph, int]:
    """``sampler_graphs`` with the step cut in two, for a program that calls the denoiser and the
    scheduler as separate steps: (init; predict: (x, k) -> prediction; update: (x, prediction,
    k) -> x; number of steps). The same seeds: the same samples as ``sample``."""
    plan, init = _init_graph(den, n, seed, steps)
    shape, dtype, name = (n, *den.example_shape), den.x_type.dtype, den.prep.manifest.name
    g = Graph(f"{name}.predict")
    x, k = g.input(X_INPUT, shape, dtype), g.input(K_INPUT, (), DType.int64)
    g.output(PRED_OUTPUT, _predict(g, den, plan, x, k))
    u = Graph(f"{name}.update")
    ux, up, uk = u.input(X_INPUT, shape, dtype), u.input(PRED_INPUT, shape, dtype), u.input(K_INPUT, (), DType.int64)
    u.output("x", _update(u, den, plan, ux, up, uk, seed))
    return init, g, u, plan.steps


def sample(den: Denoiser, params: Mapping[str, np.ndarray], *, n: int = 16, seed: int = 0, steps: int | None = None,
           backend: Any = "cpu") -> np.ndarray:
    """``n`` samples [n, ...] in the data's range, from the trained ``params`` (by name), on
    ``backend`` (a spec or a runner). The same seed gives the same samples on a backend."""
    from caramba import compute

    init, step, count = sampler_graphs(den, n, seed=seed, steps=steps)
    own = not hasattr(backend, "compile")
    runner = compute.new(backend) if own else backend
    try:
        missing = sorted(set(step.state) - set(params))
        if missing:
            raise ConfigError(f"no value for parameter '{missing[0]}' of the denoiser ({len(missing)} missing)")
        for name, decl in step.state.items():
            arr = np.asarray(params[name])
            if arr.shape != decl.type.shape:
                raise ConfigError(f"parameter '{name}' is {list(arr.shape)}; the denoiser declares {list(decl.type.shape)}")
            runner.state[name] = runner.upload(arr, decl.type.dtype)
        x = runner.compile(init).run({})["x"]
        exe = runner.compile(step)
        ks = [runner.upload(np.array(i, np.int64)) for i in range(count)]
        for k in ks:
            x = exe.run({X_INPUT: x, K_INPUT: k})["x"]
        out = x.download().astype(np.float64)
    finally:
        if own:
            runner.close()
    lo, hi = den.data_range
    return lo + (np.clip(out, -1.0, 1.0) + 1.0) * 0.5 * (hi - lo)


def load_run(ref: str, store: Any = None, *, denoiser: bool = False) -> Any:
    """Run ``ref`` (ID, prefix or ``latest``): its manifest as recorded and its newest checkpoint
    (``caramba.run.trained.TrainedRun``). ``denoiser=True`` first checks that it is a diffusion
    run (``find_denoiser``), so that error comes before a missing checkpoint."""
    from caramba.run.trained import load_trained

    return load_trained(ref, store, purpose="sample from", check=find_denoiser if denoiser else None)


__all__ = ["MAX_IMAGES", "Denoiser", "find_denoiser", "load_run", "sample", "sampler_graphs"]
