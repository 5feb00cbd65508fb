"""The reverse-mode transform: a forward sweep to find the path, a reversed loop, a rule lookup.

Everything is built into the graph that holds the outputs, so forward, backward and whatever
uses the gradients (an optimizer update) form one graph. Rules build their cotangents from
ordinary IR ops; the core never imports a backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from caramba.autodiff.rules import RULES
from caramba.errors import CarambaError, GraphError
from caramba.ir.graph import Graph, Node, Ref, Value
from caramba.ir.opdef import get_op
from caramba.ir.types import ValueType


class NotDifferentiable(CarambaError):
    """A gradient was asked for through something that has none.

    Either an op declared ``differentiable=False`` (comparisons, argmax, rounding, random draws,
    optimizer updates) lies between the inputs you differentiate with respect to and the output,
    or the gradient would have to flow through an integer or bool value. Detach that path (feed
    the value as an input instead) or differentiate with respect to something else.
    """


class MissingVJP(CarambaError):
    """An op is declared differentiable but autodiff has no VJP rule for it.

    Add a rule to ``caramba/autodiff/rules/<family>.py`` (``@vjp("family.name")``), or declare
    the op ``differentiable=False`` if it has no gradient.
    """


class Scope:
    """The graph as seen by one VJP rule.

    Values bound to a scope behave like ordinary graph values (operators, ``ops.*``), but every
    node they create is named ``d.<forward node>.<op>_<n>`` and carries the forward node's
    origin and precision, so errors in the backward pass point back at the forward node.
    """

    def __init__(self, graph: Graph, node: Node | None, stem: str | None = None) -> None:
        self.graph = graph
        self.stem = stem if stem is not None else f"d.{node.id}" if node is not None else "d"
        self.origin = node.origin if node is not None else None
        self.precision = node.precision if node is not None else None

    def _ref(self, v: Any) -> Ref:
        if isinstance(v, Value):
            if v.graph is not self.graph and getattr(v.graph, "graph", None) is not self.graph:
                raise GraphError("value belongs to another graph", node=self.stem)
            return v.ref
        if isinstance(v, Ref):
            return v
        raise GraphError(f"inputs must be graph values, got {type(v).__name__}", node=self.stem)

    def call(self, op: str, inputs: Sequence[Any] = (), attrs: Any = None, *, id: str | None = None,
             precision: Any = None, origin: Any = None) -> Any:
        opdef = get_op(op)
        node = self.graph.apply(
            op,
            [self._ref(v) for v in inputs],
            attrs,
            id=id if id is not None else self.graph.fresh_id(f"{self.stem}.{opdef.name}"),
            precision=precision if precision is not None else self.precision,
            origin=origin if origin is not None else self.origin,
        )
        vals = tuple(Value(self, r) for r in node.outputs)  # type: ignore[arg-type]
        return vals[0] if len(vals) == 1 else vals

    def constant(self, value: Any, dtype: Any = None, *, id: str | None = None) -> Value:
        from caramba.ir.dtypes import dtype as as_dtype

        arr = np.asarray(value)
        arr = arr.astype(as_dtype(dtype).numpy if dtype is not None else as_dtype(arr.dtype).numpy)
        nid = id if id is not None else self.graph.fresh_id(f"{self.stem}.constant")
        node = self.graph.apply("graph.constant", (), {"value": arr}, id=nid, origin=self.origin)
        return Value(self, node.outputs[0])  # type: ignore[arg-type]

    def type_of(self, ref: Ref):
        return self.graph.type_of(ref)

    def node(self, node_id: str) -> Node:
        return self.graph.node(node_id)

    def value(self, ref: Ref) -> Value:
        return Value(self, ref)  # type: ignore[arg-type]


class Ctx:
    """What a VJP rule gets besides the cotangents: the node, its inputs ``x`` and outputs ``y``
    as values of the rule's scope, which inputs ``needs`` a cotangent, and ``call`` to apply an
    op by ID (helpers for the common shapes of rules are in ``rules/_util.py``)."""

    __slots__ = ("needs", "node", "scope", "x", "y")

    def __init__(self, scope: Scope, node: Node, needs: tuple[bool, ...]) -> None:
        self.node = node
        self.scope = scope
        self.x = tuple(scope.value(r) for r in node.inputs)
        self.y = tuple(scope.value(r) for r in node.outputs)
        self.needs = needs

    @property
    def attrs(self):
        return self.node.attrs

    def call(self, op: str, inputs: Sequence[Any] = (), attrs: Any = None) -> Any:
        return self.scope.call(op, inputs, attrs)


def _zeros(scope: Scope, t) -> Value:
    z = scope.constant(np.zeros((), dtype=t.dtype.numpy))
    return z if t.shape == () else scope.call("shape.broadcast_to", (z,), {"shape": t.shape})


def resolve_wrt(graph: Graph, item: Any) -> tuple[list[Ref], ValueType]:
    """A wrt entry -> the refs it stands for and its type: a value, or a state name (every
    read of that state in the graph)."""
    if isinstance(item, Value):
        if item.graph is not graph:
            raise GraphError("wrt value belongs to another graph")
        return [item.ref], item.type
    if isinstance(item, str):
        if item not in graph.state:
            from caramba.errors import did_you_mean

            raise GraphError(f"wrt '{item}' is not declared state of graph '{graph.name}'; "
                             + did_you_mean(item, list(graph.state)))
        refs = [n.outputs[0] for n in graph.nodes if n.op == "state.read" and n.attrs["name"] == item]
        return refs, graph.state[item].type
    raise GraphError(f"wrt entries are graph values or state names, got {type(item).__name__}")


def blocking_node(graph: Graph, outputs: Sequence[Ref], wrt: Iterable[Ref]) -> Node | None:
    """The first node (from the outputs back) a gradient of ``outputs`` with respect to ``wrt``
    would have to cross but cannot (a non-differentiable op on a float path between them), or
    None: what ``vjp_refs`` would refuse, found without building the backward graph (manifest
    validation asks it before any run starts)."""
    position = {n.id: i for i, n in enumerate(graph.nodes)}
    last = max((position[r.node] for r in outputs), default=-1)
    nodes = graph.nodes[: last + 1]
    on_path: set[Ref] = set(wrt)
    for node in nodes:
        if any(r in on_path for r in node.inputs):
            on_path.update(node.outputs)
    reached = {r for r in outputs if r in on_path and graph.type_of(r).dtype.is_float}
    for node in reversed(nodes):
        if not any(r in reached for r in node.outputs):
            continue
        ins = [r for r in node.inputs if r in on_path and graph.type_of(r).dtype.is_float]
        if not ins:
            continue
        if not get_op(node.op).differentiable:
            return node
        reached.update(ins)
    return None


def vjp_refs(
    graph: Graph,
    outputs: Sequence[Ref],
    cotangents: Sequence[Value],
    wrt: Sequence[tuple[Sequence[Ref], ValueType]],
) -> list[Value]:
    """Core transform on refs: one cotangent value (in ``graph``) per ``wrt`` group.

    A group is the refs standing for one differentiated quantity (every read of one state
    entry) and its type; its cotangent is the sum over the refs (zeros when none is reached).
    """
    position = {n.id: i for i, n in enumerate(graph.nodes)}
    for refs, _ in wrt:
        for r in refs:
            t = graph.type_of(r)
            if not t.dtype.is_float:
                raise NotDifferentiable(
                    f"cannot differentiate with respect to {r} of type {t}: only float values have gradients",
                    node=r.node,
                )
    wrt_refs = {r for refs, _ in wrt for r in refs}
    last = max((position[r.node] for r in outputs), default=-1)
    nodes = graph.nodes[: last + 1]

    # Forward sweep: which values depend on a wrt value.
    on_path: set[Ref] = set(wrt_refs)
    for node in nodes:
        if any(r in on_path for r in node.inputs):
            on_path.update(node.outputs)

    cts: dict[Ref, Value] = {}

    def accumulate(ref: Ref, ct: Value, stem: str) -> None:
        old = cts.get(ref)
        if old is None:
            cts[ref] = ct
        else:
            scope = Scope(graph, graph.node(ref.node), stem=f"d.{ref.node}.acc")
            cts[ref] = Value(graph, scope.call("math.add", (old, ct)).ref)

    for ref, ct in zip(outputs, cotangents, strict=True):
        if ref in on_path:
            accumulate(ref, ct, "seed")

    # Reverse sweep over the nodes between the wrt values and the outputs.
    for node in reversed(nodes):
        out_cts = [cts.get(r) for r in node.outputs]
        if all(c is None for c in out_cts):
            continue
        needs = tuple(r in on_path for r in node.inputs)
        if not any(needs):
            continue  # a wrt value itself (or unrelated to every wrt value)
        opdef = get_op(node.op)
        if not opdef.differentiable:
            raise NotDifferentiable(
                f"the gradient flows through {node.op}, which is not differentiable",
                node=node.id,
                op=node.op,
                origin=node.origin,
                hint="this op's output must not feed the differentiated output on a path from a wrt value",
            )
        rule = RULES.get(node.op)
        if rule is None:
            raise MissingVJP(f"no VJP rule for {node.op}", node=node.id, op=node.op, origin=node.origin)
        scope = Scope(graph, node)
        out_cts = [None if c is None else scope.value(c.ref) for c in out_cts]
        if len(out_cts) > 1:
            out_cts = [c if c is not None else _zeros(scope, t) for c, t in zip(out_cts, node.types, strict=True)]
        ctx = Ctx(scope, node, needs)
        result = rule(ctx, *out_cts)
        if not isinstance(result, (tuple, list)) or len(result) != len(node.inputs):
            raise MissingVJP(
                f"the VJP rule of {node.op} returned {result!r}, not one cotangent per input ({len(node.inputs)})",
                node=node.id,
                op=node.op,
            )
        for i, (ref, ct) in enumerate(zip(node.inputs, result, strict=True)):
            if ct is None or not needs[i]:
                continue
            t = graph.type_of(ref)
            if not t.dtype.is_float:
                src = graph.node(ref.node)
                raise NotDifferentiable(
                    f"the gradient would flow through {ref} ({t}, made by {src.op}) into input {i} of "
                    f"{node.op}; integer and bool values have no gradient",
                    node=node.id,
                    op=node.op,
                    origin=node.origin,
                )
            ct_type = graph.type_of(ct.ref)
            if ct_type != t:
                raise MissingVJP(
                    f"the VJP rule of {node.op} gave a {ct_type} cotangent for input {i} of type {t}",
                    node=node.id,
                    op=node.op,
                )
            accumulate(ref, Value(graph, ct.ref), node.id)

    results = []
    for refs, t in wrt:
        total: Value | None = None
        for r in refs:
            ct = cts.get(r)
            if ct is None:
                continue
            if total is None:
                total = Value(graph, ct.ref)
            else:
                scope = Scope(graph, graph.node(r.node), stem=f"d.{r.node}.acc")
                total = Value(graph, scope.call("math.add", (total, ct)).ref)
        if total is None:
            scope = Scope(graph, graph.node(refs[0].node)) if refs else Scope(graph, None, stem="d.zeros")
            total = Value(graph, _zeros(scope, t).ref)
        results.append(total)
    return results
