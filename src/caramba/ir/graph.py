"""Graph, Node, Ref and Value: the IR data structures and the builder.

A Graph is a list of immutable Nodes in program order (every input is defined by an
earlier node, so a graph can never contain a cycle), a table of state declarations and a
table of named outputs. Graph inputs and constants are nodes too (``graph.input``,
``graph.constant``), so passes see one uniform structure.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from caramba.errors import CarambaError, GraphError, StateError
from caramba.ir.attrs import Attrs
from caramba.ir.dtypes import DType
from caramba.ir.dtypes import dtype as as_dtype
from caramba.ir.opdef import OpDef, get_op
from caramba.ir.types import Effect, ValueType

# The origin nodes made without one of their own get (``origin_scope``): what a manifest's
# trainer section emits (schedule, clipping, optimizer update) points at its line.
_ORIGIN: contextvars.ContextVar["Origin | None"] = contextvars.ContextVar("caramba_default_origin", default=None)
_CURRENT: contextvars.ContextVar["Graph | None"] = contextvars.ContextVar(
    "caramba_graph", default=None
)


@dataclass(frozen=True, slots=True)
class Ref:
    """Output ``index`` of node ``node``."""

    node: str
    index: int = 0

    def __str__(self) -> str:
        return f"%{self.node}" if self.index == 0 else f"%{self.node}#{self.index}"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a node came from: manifest file, line, column, dotted path, repeat/include notes."""

    file: str | None = None
    line: int | None = None
    col: int | None = None
    path: str | None = None
    note: str | None = None

    def __str__(self) -> str:
        loc = self.file or "<graph>"
        if self.line is not None:
            loc += f":{self.line}"
            if self.col is not None:
                loc += f":{self.col}"
        if self.path:
            loc += f" ({self.path})"
        if self.note:
            loc += f" [{self.note}]"
        return loc


@dataclass(frozen=True, slots=True)
class Node:
    """One op application. ``precision`` is the precision the node requires (None: its dtype)."""

    id: str
    op: str
    inputs: tuple[Ref, ...]
    attrs: Attrs
    types: tuple[ValueType, ...]
    version: int = 1
    precision: DType | None = None
    origin: Origin | None = field(default=None, compare=False)

    @property
    def opdef(self) -> OpDef:
        return get_op(self.op)

    @property
    def effect(self) -> Effect:
        return self.opdef.effect

    @property
    def type(self) -> ValueType:
        if len(self.types) != 1:
            raise GraphError(f"node has {len(self.types)} outputs, pick one", node=self.id)
        return self.types[0]

    @property
    def outputs(self) -> tuple[Ref, ...]:
        return tuple(Ref(self.id, i) for i in range(len(self.types)))

    def required_precision(self) -> DType | None:
        """Precision this node must be computed at: explicit opt-in, else its float output type."""
        if self.precision is not None:
            return self.precision
        floats = [t.dtype for t in self.types if t.dtype.is_float]
        if not floats:
            floats = [t.dtype for t in self.types]
        return floats[0] if floats else None

    def replace(self, **changes: Any) -> "Node":
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class StateDecl:
    """A named piece of state kept resident on the runner between executions.

    ``init`` says how a runner creates it when it is first used: ``"zeros"``/``"ones"`` (made
    on the device, no transfer), or ``"external"`` (must be set with ``runner.state[name] =``).
    """

    name: str
    type: ValueType
    init: str = "external"

    def __post_init__(self) -> None:
        if self.init not in ("zeros", "ones", "external"):
            raise GraphError(f"state '{self.name}': init must be zeros, ones or external")


class Graph:
    """A typed IR graph. Use as a builder::

        with Graph() as g:
            x = g.input("x", (4, 8))
            y = ops.gelu(x @ w + b)
            g.output("y", y)
    """

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.nodes: list[Node] = []
        self.state: dict[str, StateDecl] = {}
        self.outputs: dict[str, Ref] = {}
        self._index: dict[str, Node] = {}
        self._counters: dict[str, int] = {}
        self._token: contextvars.Token | None = None

    # ---- context -------------------------------------------------------------------------
    def __enter__(self) -> "Graph":
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)
            self._token = None

    # ---- lookup --------------------------------------------------------------------------
    def node(self, node_id: str) -> Node:
        try:
            return self._index[node_id]
        except KeyError:
            raise GraphError(f"no node '{node_id}' in graph '{self.name}'") from None

    def has_node(self, node_id: str) -> bool:
        return node_id in self._index

    def type_of(self, ref: Ref) -> ValueType:
        node = self.node(ref.node)
        if ref.index >= len(node.types):
            raise GraphError(f"{ref} refers to output {ref.index} of a {len(node.types)}-output node")
        return node.types[ref.index]

    @property
    def inputs(self) -> list[Node]:
        return [n for n in self.nodes if n.op == "graph.input"]

    def value(self, ref: "Ref | str") -> "Value":
        if isinstance(ref, str):
            ref = Ref(ref)
        self.type_of(ref)
        return Value(self, ref)

    # ---- building ------------------------------------------------------------------------
    def fresh_id(self, stem: str) -> str:
        n = self._counters.get(stem, 0)
        while True:
            n += 1
            candidate = f"{stem}_{n}"
            if candidate not in self._index:
                self._counters[stem] = n
                return candidate

    def append(self, node: Node) -> Node:
        """Append an already-typed node (used by passes and the codec). No re-inference."""
        if node.id in self._index:
            raise GraphError(f"duplicate node ID '{node.id}'", node=node.id, origin=node.origin)
        self.nodes.append(node)
        self._index[node.id] = node
        return node

    def apply(
        self,
        op: str,
        inputs: Sequence["Value | Ref"] = (),
        attrs: Mapping[str, Any] | None = None,
        *,
        id: str | None = None,
        precision: "DType | str | None" = None,
        origin: Origin | None = None,
    ) -> Node:
        """Add a node: validates arity and attributes and infers output types now."""
        origin = origin if origin is not None else _ORIGIN.get()
        opdef = get_op(op)
        node_id = id if id is not None else self.fresh_id(opdef.name)
        refs = tuple(self._as_ref(v, node_id, op) for v in inputs)
        try:
            opdef.check_arity(len(refs))
            canon = opdef.make_attrs(attrs or {})
            in_types = tuple(self.type_of(r) for r in refs)
            types = tuple(opdef.infer(in_types, canon))
        except CarambaError as exc:
            raise GraphError(exc.message, node=node_id, op=op, origin=origin, hint=exc.hint) from None
        prec = as_dtype(precision) if precision is not None else None
        if prec is not None and not prec.is_float:
            raise GraphError(f"precision must be a float type, got {prec}", node=node_id, op=op)
        if opdef.effect in (Effect.state_read, Effect.state_write):
            self._check_state_use(opdef, canon, in_types, node_id, origin)
        node = Node(node_id, op, refs, canon, types, opdef.version, prec, origin)
        return self.append(node)

    def call(
        self,
        op: str,
        inputs: Sequence["Value | Ref"] = (),
        attrs: Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> "Value | tuple[Value, ...]":
        """Like ``apply`` but returns the output value(s): one Value, or a tuple for multi-output ops."""
        node = self.apply(op, inputs, attrs, **kw)
        vals = tuple(Value(self, r) for r in node.outputs)
        return vals[0] if len(vals) == 1 else vals

    def _as_ref(self, v: "Value | Ref", node_id: str, op: str) -> Ref:
        if isinstance(v, Value):
            if v.graph is not self:
                raise GraphError("input belongs to another graph", node=node_id, op=op)
            return v.ref
        if isinstance(v, Ref):
            return v
        raise GraphError(
            f"inputs must be graph values, got {type(v).__name__}; wrap constants with "
            "g.constant(...)",
            node=node_id,
            op=op,
        )

    def _check_state_use(self, opdef, attrs, in_types, node_id, origin) -> None:
        name = attrs["name"]
        decl = self.state.get(name)
        if decl is None:
            raise StateError(
                f"state '{name}' is not declared; declare it with g.variable(...)",
                node=node_id,
                op=opdef.id,
                origin=origin,
            )
        if opdef.id == "state.write" and in_types and in_types[0] != decl.type:
            raise GraphError(
                f"state.write of {in_types[0]} into state '{name}' declared {decl.type}",
                node=node_id,
                op=opdef.id,
                origin=origin,
            )

    def input(self, name: str, shape: Sequence[int], dtype: "DType | str" = DType.float64) -> "Value":
        """Declare a graph input (fed at execute time)."""
        node = self.apply("graph.input", (), {"shape": tuple(shape), "dtype": as_dtype(dtype)}, id=name)
        return Value(self, node.outputs[0])

    def constant(self, value: Any, dtype: "DType | str | None" = None, *, id: str | None = None) -> "Value":
        """Embed a host constant in the graph (its bytes become part of the graph)."""
        arr = np.asarray(value)
        arr = arr.astype(as_dtype(dtype).numpy) if dtype is not None else arr.astype(as_dtype(arr.dtype).numpy)
        node = self.apply("graph.constant", (), {"value": arr}, id=id)
        return Value(self, node.outputs[0])

    def variable(
        self, name: str, shape: Sequence[int], dtype: "DType | str" = DType.float64, init: str = "external"
    ) -> "Value":
        """Declare resident state ``name`` and return a read of its current value."""
        decl = StateDecl(name, ValueType(tuple(shape), as_dtype(dtype)), init)
        old = self.state.get(name)
        if old is not None and old != decl:
            raise StateError(f"state '{name}' declared twice with different types: {old} vs {decl}")
        self.state[name] = decl
        return self.read(name)

    def read(self, name: str, *, id: str | None = None) -> "Value":
        decl = self.state.get(name)
        if decl is None:
            raise StateError(f"state '{name}' is not declared; declare it with g.variable(...)")
        attrs = {"name": name, "shape": decl.type.shape, "dtype": decl.type.dtype}
        node = self.apply("state.read", (), attrs, id=id)
        return Value(self, node.outputs[0])

    def write(self, name: str, value: "Value", *, id: str | None = None) -> Node:
        return self.apply("state.write", (value,), {"name": name}, id=id)

    def output(self, name: str, value: "Value | Ref") -> None:
        ref = value.ref if isinstance(value, Value) else value
        self.type_of(ref)
        self.outputs[name] = ref

    # ---- copying and identity ------------------------------------------------------------
    def rebuilt(
        self,
        nodes: Iterable[Node],
        outputs: Mapping[str, Ref] | None = None,
        state: Mapping[str, StateDecl] | None = None,
    ) -> "Graph":
        """A new graph with the same name/state and the given nodes (passes use this)."""
        g = Graph(self.name)
        g.state = dict(self.state if state is None else state)
        for n in nodes:
            g.append(n)
        g.outputs = dict(self.outputs if outputs is None else outputs)
        return g

    def copy(self) -> "Graph":
        return self.rebuilt(self.nodes)

    def fingerprint(self) -> str:
        """Stable content hash (sha256 of the canonical codec form)."""
        from caramba.ir.codec import dumps

        return hashlib.sha256(dumps(self).encode()).hexdigest()

    def as_text(self) -> str:
        from caramba.ir.printer import print_graph

        return print_graph(self)

    def __str__(self) -> str:
        return self.as_text()

    def __repr__(self) -> str:
        return f"<Graph {self.name!r}: {len(self.nodes)} nodes, outputs {list(self.outputs)}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (
            self.name == other.name
            and self.nodes == other.nodes
            and self.state == other.state
            and self.outputs == other.outputs
        )

    __hash__ = None  # type: ignore[assignment]

    def users(self) -> dict[str, list[Node]]:
        """node ID -> nodes that consume any of its outputs."""
        out: dict[str, list[Node]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for r in n.inputs:
                out[r.node].append(n)
        return out


def current_graph() -> Graph:
    g = _CURRENT.get()
    if g is None:
        raise GraphError("no graph is being built; use `with caramba.ir.Graph() as g:`")
    return g


class Value:
    """A handle on one value of a graph being built; supports Python operators."""

    __slots__ = ("graph", "ref")
    __array_priority__ = 1000  # numpy scalars defer to our operators

    def __init__(self, graph: Graph, ref: Ref) -> None:
        self.graph = graph
        self.ref = ref

    @property
    def type(self) -> ValueType:
        return self.graph.type_of(self.ref)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def node(self) -> Node:
        return self.graph.node(self.ref.node)

    def __repr__(self) -> str:
        return f"Value({self.ref}: {self.type})"

    def __bool__(self) -> bool:
        raise GraphError(
            "a graph value has no truth value while the graph is being built; use "
            "ops.where(...) for data-dependent choices"
        )

    # Python operators --------------------------------------------------------------------
    def _bin(self, op: str, other: Any, swap: bool = False) -> "Value":
        other = lift(other, like=self)
        a, b = (other, self) if swap else (self, other)
        return self.graph.call(op, (a, b))

    def __add__(self, o: Any) -> "Value":
        return self._bin("math.add", o)

    def __radd__(self, o: Any) -> "Value":
        return self._bin("math.add", o, True)

    def __sub__(self, o: Any) -> "Value":
        return self._bin("math.sub", o)

    def __rsub__(self, o: Any) -> "Value":
        return self._bin("math.sub", o, True)

    def __mul__(self, o: Any) -> "Value":
        return self._bin("math.mul", o)

    def __rmul__(self, o: Any) -> "Value":
        return self._bin("math.mul", o, True)

    def __truediv__(self, o: Any) -> "Value":
        return self._bin("math.div", o)

    def __rtruediv__(self, o: Any) -> "Value":
        return self._bin("math.div", o, True)

    def __pow__(self, o: Any) -> "Value":
        return self._bin("math.pow", o)

    def __rpow__(self, o: Any) -> "Value":
        return self._bin("math.pow", o, True)

    def __matmul__(self, o: Any) -> "Value":
        return self._bin("linalg.matmul", o)

    def __rmatmul__(self, o: Any) -> "Value":
        return self._bin("linalg.matmul", o, True)

    def __neg__(self) -> "Value":
        return self.graph.call("math.neg", (self,))

    def __abs__(self) -> "Value":
        return self.graph.call("math.abs", (self,))

    def __lt__(self, o: Any) -> "Value":
        return self._bin("math.less", o)

    def __le__(self, o: Any) -> "Value":
        return self._bin("math.less_equal", o)

    def __gt__(self, o: Any) -> "Value":
        return self._bin("math.greater", o)

    def __ge__(self, o: Any) -> "Value":
        return self._bin("math.greater_equal", o)

    def __getitem__(self, index: Any) -> "Value":
        from caramba.ir.indexing import getitem

        return getitem(self, index)

    # A few array-API conveniences (each is one op).
    @property
    def T(self) -> "Value":
        return self.graph.call("shape.transpose", (self,), {})

    def reshape(self, *shape: Any) -> "Value":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return self.graph.call("shape.reshape", (self,), {"shape": shape})

    def astype(self, dtype: "DType | str") -> "Value":
        return self.graph.call("math.cast", (self,), {"dtype": as_dtype(dtype)})

    def sum(self, axes: Any = None, keepdims: bool = False) -> "Value":
        return self.graph.call("reduce.sum", (self,), {"axes": axes, "keepdims": keepdims})

    def mean(self, axes: Any = None, keepdims: bool = False) -> "Value":
        return self.graph.call("reduce.mean", (self,), {"axes": axes, "keepdims": keepdims})


def lift(x: Any, like: Value) -> Value:
    """Turn a Python/NumPy scalar or array into a constant of ``like``'s graph and dtype."""
    if isinstance(x, Value):
        return x
    if isinstance(x, (bool, int, float, np.number, np.bool_)):
        return like.graph.constant(np.asarray(x, dtype=like.dtype.numpy))
    if isinstance(x, (np.ndarray, list, tuple)):
        return like.graph.constant(np.asarray(x), dtype=like.dtype)
    raise GraphError(f"cannot use {type(x).__name__} as a graph value")


class origin_scope:
    """Nodes added inside take ``origin`` unless they name their own (None: no change), so an
    error about a node the library generated names the manifest line that asked for it."""

    def __init__(self, origin: "Origin | None") -> None:
        self.origin = origin
        self._token: contextvars.Token | None = None

    def __enter__(self) -> "origin_scope":
        if self.origin is not None:
            self._token = _ORIGIN.set(self.origin)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _ORIGIN.reset(self._token)
            self._token = None
