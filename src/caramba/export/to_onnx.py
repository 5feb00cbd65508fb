"""A trained run as a self-contained ONNX inference model with a dynamic batch dimension.

The graph is lowered by the one IR -> ONNX lowering (``caramba.onnx.export``, with the ONNX
Runtime CPU profile, so float64 Erf and Conv take their accurate decompositions). Parameters,
which that lowering makes graph inputs (resident state), become initializers holding the trained
values.

caramba's IR has static shapes, so the batch dimension is made dynamic afterwards: the graph is
exported at three batch sizes, which must give the same nodes; an integer constant that differs
(a Reshape target, an Expand shape ...) must be ``a * batch + c`` in each entry, and is replaced
by that expression of the input's batch size (``Shape`` of a batched input) computed at run
time. Anything else that depends on the batch size (a float constant, a node attribute) means
the model mixes samples across the batch, and the export refuses it instead of baking one size in.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from caramba.errors import ConfigError, GraphError
from caramba.export.inference import Inference, inference_model

# Batch sizes the graph is exported at to find what depends on the batch: primes that are
# unlikely model sizes (a constant equal to one would be merged with a batch-sized one).
PROBES = (1009, 1013, 1019)
BATCH_DIM = "batch"


def export_onnx(ref: str, out: str | os.PathLike[str] | None = None, *, store: Any = None,
                dtype: str | None = None, outputs: list[str] | None = None) -> Path:
    """Write run ``ref``'s inference model as an ONNX file at ``out`` (default ``<run id>.onnx``)."""
    import onnx

    inf = inference_model(ref, store, dtype=dtype, outputs=outputs)
    model = onnx_model(inf)
    path = Path(out) if out is not None else Path(f"{inf.run_id}.onnx")
    if path.is_dir():
        path = path / f"{inf.run_id}.onnx"
    tmp = path.with_name(path.name + f".tmp{os.getpid()}-{threading.get_ident()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(model, str(tmp))
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}", hint="pick another -o path") from None
    return path


def onnx_model(inf: Inference) -> Any:
    """The ONNX ModelProto of ``inf``: trained weights as initializers, dynamic batch."""
    import onnx
    from onnx import helper, numpy_helper

    from caramba.onnx.export import ORT_CPU, export_graph

    ex = [export_graph(inf.graph(b), ORT_CPU, name=inf.prep.manifest.name) for b in PROBES]
    models = [e.model for e in ex]
    g0 = models[0].graph
    _same_nodes(models)
    inits = [{t.name: numpy_helper.to_array(t) for t in m.graph.initializer} for m in models]
    if any(set(i) != set(inits[0]) for i in inits):
        raise GraphError("the exported graphs' constants differ in name between batch sizes; the batch size "
                         "cannot be made dynamic")
    batch_src = _batch_input(models)
    pre: list[Any] = []
    changed: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, a0 in inits[0].items():
        vals = [i[name] for i in inits]
        if all(v.shape == a0.shape and np.array_equal(v, a0) for v in vals):
            continue
        changed[name] = _affine(name, vals)
    if changed and batch_src is None:  # pragma: no cover - a batch-sized constant needs a batched input
        raise GraphError("constants depend on the batch size but no graph input has a batch dimension")
    if changed:
        src, axis = batch_src
        pre.append(helper.make_node("Shape", [src], ["batch.shape"], name="batch|shape", start=axis, end=axis + 1))
        pre.append(helper.make_node("Squeeze", ["batch.shape"], ["batch.size"], name="batch|size"))
        have_i32 = False
        for name, (slope, _) in changed.items():
            b = "batch.size"
            if slope.dtype == np.int32:
                if not have_i32:
                    pre.append(helper.make_node("Cast", ["batch.size"], ["batch.size_i32"], name="batch|i32",
                                                to=onnx.TensorProto.INT32))
                    have_i32 = True
                b = "batch.size_i32"
            pre.append(helper.make_node("Mul", [b, f"{name}.per_batch"], [f"{name}.scaled"], name=f"{name}|mul"))
            pre.append(helper.make_node("Add", [f"{name}.scaled", f"{name}.at_zero"], [name], name=f"{name}|add"))
    state = ex[0].state_inputs  # caramba parameter -> ONNX input name
    by_input = {v: k for k, v in state.items()}
    initializers = [t for t in g0.initializer if t.name not in changed]
    for name, (slope, icpt) in changed.items():
        initializers.append(numpy_helper.from_array(slope, f"{name}.per_batch"))
        initializers.append(numpy_helper.from_array(icpt, f"{name}.at_zero"))
    for pname, iname in state.items():
        initializers.append(numpy_helper.from_array(inf.params[pname], iname))
    inputs = [_dynamic(models, i, "input") for i, v in enumerate(g0.input) if v.name not in by_input]
    outputs = [_dynamic(models, i, "output") for i in range(len(g0.output))]
    if ex[0].state_outputs:
        raise GraphError(f"the inference graph writes state ({', '.join(ex[0].state_outputs)}); "
                         "an exported model must be a pure function of its inputs")
    graph = helper.make_graph([*pre, *g0.node], g0.name, inputs, outputs, initializer=initializers)
    meta = {"caramba.run": inf.run_id, "caramba.step": str(inf.step),
            "caramba.checkpoint_sha256": inf.checkpoint_sha256, "caramba.dtype": inf.dtype.value,
            "caramba.inputs": ",".join(ex[0].inputs), "caramba.outputs": ",".join(ex[0].outputs)}
    model = helper.make_model(graph, opset_imports=list(models[0].opset_import), ir_version=models[0].ir_version,
                              producer_name="caramba")
    for k, v in meta.items():
        model.metadata_props.add(key=k, value=v)
    _rename_outputs(model, ex[0].outputs)
    onnx.checker.check_model(model)
    return model


def _rename_outputs(model: Any, outputs: dict[str, str]) -> None:
    """Name the graph outputs as the manifest does (``logits``, not ``out.logits``) where free."""
    g = model.graph
    used = {n for node in g.node for n in (*node.input, *node.output)} | {t.name for t in g.initializer}
    used |= {v.name for v in g.input}
    for want, have in outputs.items():
        if want == have or want in used:
            continue
        for node in g.node:
            for k, n in enumerate(node.output):
                if n == have:
                    node.output[k] = want
        for v in g.output:
            if v.name == have:
                v.name = want
        used.add(want)


def _same_nodes(models: list[Any]) -> None:
    ref = models[0].graph.node
    for m in models[1:]:
        if len(m.graph.node) != len(ref):
            raise GraphError(f"the graph has {len(ref)} ONNX nodes at batch {PROBES[0]} and {len(m.graph.node)} at "
                             "another batch size; its structure depends on the batch size, which cannot be dynamic")
        for a, b in zip(ref, m.graph.node, strict=True):
            if a != b:
                raise GraphError(f"ONNX node {a.name or a.op_type} ({a.op_type}) changes with the batch size "
                                 "(an attribute or wiring depends on it); the batch size cannot be made dynamic")


def _affine(name: str, vals: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(slope, intercept)`` with ``vals[k] == slope * PROBES[k] + intercept`` entrywise."""
    a0 = vals[0]
    if any(v.shape != a0.shape for v in vals) or a0.dtype not in (np.int64, np.int32):
        raise GraphError(f"constant '{name}' ({a0.dtype}, shape {list(a0.shape)}) depends on the batch size: the model "
                         "combines values across the batch (e.g. a mean over it), so it cannot take a dynamic batch")
    d = (vals[1].astype(np.int64) - a0) // (PROBES[1] - PROBES[0])
    c = a0.astype(np.int64) - d * PROBES[0]
    for p, v in zip(PROBES, vals, strict=True):
        if not np.array_equal(d * p + c, v):
            raise GraphError(f"constant '{name}' is not a multiple of the batch size; the batch cannot be dynamic")
    return d.astype(a0.dtype), c.astype(a0.dtype)


def _batch_input(models: list[Any]) -> tuple[str, int] | None:
    """A graph input and the axis that carries the batch size (PROBES[k] in model k)."""
    for i, v in enumerate(models[0].graph.input):
        dims = [[d.dim_value for d in m.graph.input[i].type.tensor_type.shape.dim] for m in models]
        for ax in range(len(dims[0])):
            if all(dm[ax] == p for dm, p in zip(dims, PROBES, strict=True)):
                return v.name, ax
    return None


def _dynamic(models: list[Any], i: int, kind: str) -> Any:
    """Graph input/output ``i`` of models[0] with the batch-sized axes symbolic."""
    from onnx import helper

    vs = [getattr(m.graph, kind)[i] for m in models]
    tt = vs[0].type.tensor_type
    shape: list[int | str | None] = []
    for ax, d in enumerate(tt.shape.dim):
        sizes = [v.type.tensor_type.shape.dim[ax].dim_value for v in vs]
        if len(set(sizes)) == 1:
            shape.append(d.dim_value)
        elif sizes == list(PROBES):
            shape.append(BATCH_DIM)
        else:
            shape.append(None)  # a multiple of the batch: unnamed
    return helper.make_tensor_value_info(vs[0].name, tt.elem_type, shape)


__all__ = ["BATCH_DIM", "export_onnx", "onnx_model"]
