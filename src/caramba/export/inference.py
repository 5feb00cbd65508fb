"""A run's model for inference: the manifest's topology lowered without its training-only parts.

A published output is *training-only* when it is the trainer's loss, a listed metric, or when
computing it needs a loss or metric op (``train.*``: they read labels). What is left is the
inference graph: the topology inputs those outputs read (labels drop out), the parameters as
resident state, and the outputs. Its parameters are the checkpoint's tensors of that name
(optimizer state is not a parameter and is left out).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from caramba.errors import ConfigError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Graph, Ref

DTYPES = ("float64", "float32")


@dataclass(frozen=True)
class Inference:
    """A trained run's inference model: ``graph(batch)`` builds its IR graph for a batch size;
    ``params`` holds the trained parameters (cast to ``dtype``), keyed by state name."""

    run_id: str
    step: int
    checkpoint_sha256: str
    dtype: DType
    outputs: tuple[str, ...]
    params: dict[str, np.ndarray]
    prep: Any
    topology: Any

    def lowered(self, batch: int) -> Any:
        from caramba.manifest.lower import lower_topology

        dims = _dims(self.prep, self.topology)
        dims["batch"] = batch
        return lower_topology(self.topology, self.prep.doc, dims=dims, outputs=list(self.outputs),
                              name=self.prep.manifest.name, model_spec=self.prep.manifest.model)

    def graph(self, batch: int) -> Graph:
        """The inference graph at ``batch``: only the nodes the outputs need (so no label input)."""
        return prune(self.lowered(batch).graph)


def _dims(prep: Any, topology: Any) -> dict[str, int]:
    dims = dict(prep.dims)
    for spec in topology.inputs.values():
        for d in spec.shape:
            if isinstance(d, str):
                dims.setdefault(d, 1)
    return dims


def prune(graph: Graph) -> Graph:
    """``graph`` with only the nodes its outputs depend on (unused inputs included)."""
    live = {r.node for r in graph.outputs.values()}
    for node in reversed(graph.nodes):
        if node.id in live:
            live.update(r.node for r in node.inputs)
    nodes = [n for n in graph.nodes if n.id in live]
    used = {n.attrs["name"] for n in nodes if n.op in ("state.read", "state.write")}
    return graph.rebuilt(nodes, state={k: v for k, v in graph.state.items() if k in used})


def _ancestors(graph: Graph, ref: Ref) -> set[str]:
    seen, todo = set(), [ref.node]
    while todo:
        nid = todo.pop()
        if nid in seen:
            continue
        seen.add(nid)
        todo.extend(r.node for r in graph.node(nid).inputs)
    return seen


def training_only(graph: Graph, name: str, prep: Any) -> str | None:
    """Why output ``name`` of ``graph`` is training-only, or None when inference computes it."""
    m = prep.manifest
    if m.trainer is not None and name == m.trainer.loss:
        return "it is the trainer's loss"
    if name in (m.metrics or ()):
        return "it is a metric"
    for nid in _ancestors(graph, graph.outputs[name]):
        op = graph.node(nid).op
        if op.startswith("train."):
            return f"it is computed with {op} (node '{nid}')"
    return None


def _topology(prep: Any, dtype: DType) -> Any:
    topo = prep.manifest.topology
    if dtype.value == topo.dtype:
        return topo
    inputs = {k: (v.model_copy(update={"dtype": dtype.value}) if v.dtype in DTYPES else v)
              for k, v in topo.inputs.items()}
    return topo.model_copy(update={"dtype": dtype.value, "inputs": inputs})


def inference_model(ref: str, store: Any = None, *, dtype: str | None = None,
                    outputs: Sequence[str] | None = None) -> Inference:
    """Run ``ref``'s (ID, prefix or ``latest``) trained model for inference: ``dtype``
    (float64 or float32; default the manifest's) for parameters, float inputs and compute;
    ``outputs`` picks published values (default: every output that is not training-only)."""
    from caramba.run.trained import load_trained

    if dtype is not None and dtype not in DTYPES:
        raise ConfigError(f"--dtype {dtype!r} is not an export dtype; use one of: {', '.join(DTYPES)}")
    run = load_trained(ref, store, purpose="export")
    prep = run.prep
    topo_dtype = prep.manifest.topology.dtype
    if topo_dtype not in DTYPES:
        raise ConfigError(f"run {run.run_id}'s model computes in {topo_dtype}; export handles {', '.join(DTYPES)}")
    d = DType(dtype or topo_dtype)
    topology = _topology(prep, d)
    probe = Inference(run.run_id, run.step, run.checkpoint_sha256, d, (), {}, prep, topology)
    from caramba.manifest.lower import lower_topology

    full = lower_topology(topology, prep.doc, dims={**_dims(prep, topology), "batch": 1},
                          name=prep.manifest.name, model_spec=prep.manifest.model)
    g = full.graph
    if outputs:
        chosen = tuple(dict.fromkeys(outputs))
        probe = Inference(run.run_id, run.step, run.checkpoint_sha256, d, chosen, {}, prep, topology)
        g = probe.lowered(1).graph
        for name in chosen:
            why = training_only(g, name, prep)
            if why is not None:
                raise ConfigError(f"output '{name}' of run {run.run_id} is training-only ({why}); "
                                  f"an exported model has no labels")
    else:
        chosen = tuple(k for k in g.outputs if training_only(g, k, prep) is None)
        if not chosen:
            why = "; ".join(f"'{k}': {training_only(g, k, prep)}" for k in g.outputs)
            raise ConfigError(f"run {run.run_id}'s model publishes no inference output ({why})",
                              hint="name a published value with --output (a node ID of the topology)")
    specs = full.params
    missing = sorted(set(specs) - set(run.params))
    if missing:
        raise ConfigError(f"run {run.run_id}'s checkpoint lacks parameter '{missing[0]}' ({len(missing)} missing)")
    params: dict[str, np.ndarray] = {}
    for name, spec in specs.items():
        arr = np.asarray(run.params[name])
        if tuple(arr.shape) != tuple(spec.shape):
            raise ConfigError(f"run {run.run_id}'s checkpoint tensor '{name}' has shape {list(arr.shape)}; "
                              f"the model's parameter is {list(spec.shape)}")
        want = d.numpy if spec.dtype.value in DTYPES else spec.dtype.numpy
        params[name] = np.ascontiguousarray(arr.astype(want, copy=False))
    return Inference(run.run_id, run.step, run.checkpoint_sha256, d, chosen, params, prep, topology)


__all__ = ["DTYPES", "Inference", "inference_model", "prune", "training_only"]
