"""User-facing transforms: ``vjp``, ``grad``, ``value_and_grad`` on graph values, and
``grad_graph`` / ``vjp_graph`` that return a new graph."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from caramba.autodiff.core import NotDifferentiable, resolve_wrt, vjp_refs
from caramba.errors import GraphError
from caramba.ir.graph import Graph, Ref, Value


def _graph_of(values: Sequence[Value]) -> Graph:
    graphs = {id(v.graph): v.graph for v in values}
    if len(graphs) != 1:
        raise GraphError("all outputs must belong to one graph")
    return next(iter(graphs.values()))


def _as_list(wrt: Any) -> tuple[list[Any], bool]:
    if isinstance(wrt, (Value, str)):
        return [wrt], True
    items = list(wrt)
    if not items:
        raise GraphError("wrt is empty: name the values or state to differentiate with respect to")
    return items, False


def vjp(outputs: Value | Sequence[Value], wrt: Any, cotangents: Value | Sequence[Value]) -> Value | list[Value]:
    """Vector-Jacobian product: ``sum_k <cotangents[k], d outputs[k] / d wrt>``.

    ``wrt`` is a value, a state name (every read of that state in the graph counts), or a
    list of them; the result has the same structure. Cotangents have the outputs' types. The
    backward nodes are added to the outputs' graph.
    """
    outs = [outputs] if isinstance(outputs, Value) else list(outputs)
    cts = [cotangents] if isinstance(cotangents, Value) else list(cotangents)
    if len(outs) != len(cts):
        raise GraphError(f"vjp got {len(outs)} outputs but {len(cts)} cotangents")
    g = _graph_of(outs)
    for o, c in zip(outs, cts, strict=True):
        if not isinstance(c, Value) or c.graph is not g:
            raise GraphError(f"cotangent for {o.ref} must be a value of the same graph")
        if c.type != o.type:
            raise GraphError(f"cotangent {c.type} does not match output {o.ref} of type {o.type}")
        if not o.dtype.is_float:
            raise NotDifferentiable(f"output {o.ref} is {o.type}: only float outputs have gradients", node=o.ref.node)
    items, single = _as_list(wrt)
    groups = [resolve_wrt(g, w) for w in items]
    result = vjp_refs(g, [o.ref for o in outs], cts, groups)
    return result[0] if single else result


def _seed(output: Value) -> Value:
    if output.shape != ():
        raise GraphError(
            f"grad needs a scalar output, got {output.type}; reduce it (e.g. .sum()) or use vjp with a cotangent",
            node=output.ref.node,
        )
    if not output.dtype.is_float:
        raise NotDifferentiable(f"output {output.ref} is {output.type}: only float outputs have gradients",
                                node=output.ref.node)
    return output.graph.constant(np.ones((), dtype=output.dtype.numpy), id=output.graph.fresh_id(f"d.{output.ref.node}.seed"))


def grad(output: Value, wrt: Any) -> Value | list[Value]:
    """Gradient of the scalar ``output`` with respect to ``wrt`` (a value, a state name, or a
    list of them), built into the output's graph."""
    return vjp(output, wrt, _seed(output))


def value_and_grad(output: Value, wrt: Any) -> tuple[Value, Value | list[Value]]:
    """``(output, grad(output, wrt))``."""
    return output, grad(output, wrt)


def _graph_wrt(graph: Graph, names: Sequence[str]) -> list[Any]:
    out: list[Any] = []
    for name in names:
        if name in graph.state:
            out.append(name)
        elif graph.has_node(name):
            out.append(graph.value(Ref(name)))
        else:
            from caramba.errors import did_you_mean

            choices = [n.id for n in graph.inputs] + list(graph.state)
            raise GraphError(f"'{name}' is neither an input, a node nor state of graph '{graph.name}'; "
                             + did_you_mean(name, choices))
    return out


def grad_graph(graph: Graph, output: str, wrt: Sequence[str], *, prefix: str = "grad.") -> Graph:
    """A copy of ``graph`` with outputs ``grad.<name>``: the gradient of the scalar output
    ``output`` with respect to each input, node or state ``name``."""
    g = graph.copy()
    if output not in g.outputs:
        raise GraphError(f"graph '{graph.name}' has no output '{output}'; outputs are {list(g.outputs)}")
    grads = grad(g.value(g.outputs[output]), _graph_wrt(g, wrt))
    for name, v in zip(wrt, grads, strict=True):  # type: ignore[arg-type]
        g.output(prefix + name, v)
    return g


def vjp_graph(graph: Graph, outputs: Sequence[str], wrt: Sequence[str], *, prefix: str = "grad.",
              cotangent_prefix: str = "cotangent.") -> Graph:
    """A copy of ``graph`` with an input ``cotangent.<out>`` per output and outputs
    ``grad.<name>`` holding the vector-Jacobian product with respect to each ``name``."""
    g = graph.copy()
    unknown = [o for o in outputs if o not in g.outputs]
    if unknown:
        raise GraphError(f"graph '{graph.name}' has no output(s) {unknown}; outputs are {list(g.outputs)}")
    outs = [g.value(g.outputs[o]) for o in outputs]
    cts = [g.input(cotangent_prefix + o, v.shape, v.dtype) for o, v in zip(outputs, outs, strict=True)]
    grads = vjp(outs, _graph_wrt(g, wrt), cts)
    for name, v in zip(wrt, grads, strict=True):  # type: ignore[arg-type]
        g.output(prefix + name, v)
    return g
