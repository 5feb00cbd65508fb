"""ONNX import: an ONNX model -> a caramba ``ir.Graph``, for the ONNX ops caramba has.

Every ONNX node becomes caramba ops with the ONNX op's semantics (broadcasting, negative
axes, opset-dependent attribute/input forms). caramba graphs are statically shaped, so
operands that decide a shape (Reshape's shape, Slice's starts, Pad's pads, TopK's k, ...) must
be known when importing: initializers, ``Constant`` nodes and values computed from them
(``Shape`` of a static tensor, arithmetic on such values) are; a graph input in such a
position must be given in ``static_inputs`` (it then becomes a constant of the graph).

Unsupported things raise ``ImportUnsupported`` naming the ONNX node and op, with ``kind``
``"op"`` (caramba has no such op), ``"dtype"`` (caramba's IR has no such element type) or
``"feature"`` (an attribute or form of a supported op caramba does not implement).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from caramba.errors import UnsupportedOperation
from caramba.ir.dtypes import DType
from caramba.ir.graph import Graph, Origin, Value
from caramba.onnx.emitter import FROM_ONNX

DEFAULT_DOMAINS = ("", "ai.onnx")


class ImportUnsupported(UnsupportedOperation):
    """The ONNX model uses an op, dtype or feature caramba cannot express (``kind`` says which)."""

    def __init__(self, message: str, *, kind: str = "feature", **kw: Any) -> None:
        self.kind = kind
        super().__init__(message, **kw)


class StaticInputRequired(ImportUnsupported):
    """A graph input is used where caramba needs a value at import time (a shape, axes, ...);
    pass it in ``static_inputs``. ``name`` is the input."""

    def __init__(self, name: str, **kw: Any) -> None:
        self.name = name
        super().__init__(f"graph input '{name}' decides a shape; give its value in static_inputs", kind="static", **kw)


Handler = Callable[["Cx"], list]
HANDLERS: dict[str, Handler] = {}


def handles(*op_types: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for t in op_types:
            HANDLERS[t] = fn
        return fn

    return deco


def caramba_dtype(elem_type: int, what: str) -> DType:
    d = FROM_ONNX.get(elem_type)
    if d is None:
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)
        raise ImportUnsupported(f"{what} has element type {name}, which caramba's IR does not have", kind="dtype")
    return d


def _load(model: Any) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    if isinstance(model, (str, Path)):
        return onnx.load(str(model))
    raise TypeError(f"import_model takes a path, bytes or an onnx.ModelProto, got {type(model).__name__}")


def coverage(model: Any) -> tuple[set[str], set[str]]:
    """(ONNX op types caramba has no importer for, element types caramba lacks) in ``model``."""
    m = _load(model)
    missing_ops, missing_types = set(), set()

    def walk(g):
        for n in g.node:
            if n.domain not in DEFAULT_DOMAINS:
                missing_ops.add(f"{n.domain}.{n.op_type}")
            elif n.op_type not in HANDLERS:
                missing_ops.add(n.op_type)
            for a in n.attribute:
                if a.name == "to" and a.type == onnx.AttributeProto.INT and a.i not in FROM_ONNX:
                    missing_types.add(TensorProto.DataType.Name(a.i))
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    walk(sub)
        for vi in list(g.input) + list(g.output):
            t = vi.type
            if t.HasField("tensor_type"):
                if t.tensor_type.elem_type not in FROM_ONNX:
                    missing_types.add(TensorProto.DataType.Name(t.tensor_type.elem_type))
            else:
                missing_types.add(t.WhichOneof("value") or "unknown")
        for init in g.initializer:
            if init.data_type not in FROM_ONNX:
                missing_types.add(TensorProto.DataType.Name(init.data_type))

    walk(m.graph)
    return missing_ops, missing_types


def import_model(
    model: Any,
    *,
    static_inputs: Mapping[str, Any] | None = None,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    name: str | None = None,
) -> Graph:
    """Build a caramba graph from an ONNX model (path, bytes or ModelProto).

    ``static_inputs`` gives values of graph inputs that decide shapes (they become constants);
    ``input_shapes`` fixes symbolic dimensions of the other inputs.
    """
    m = _load(model)
    if m.functions:
        from onnx import inliner

        m = inliner.inline_local_functions(m)
    opset = next((o.version for o in m.opset_import if o.domain in DEFAULT_DOMAINS), None)
    if opset is None:
        raise ImportUnsupported("the model does not import the default ONNX domain", kind="op")
    return _Importer(m, opset, dict(static_inputs or {}), dict(input_shapes or {}), name).run()


class _Importer:
    def __init__(self, m, opset, static, shapes, name) -> None:
        self.m = m
        self.opset = opset
        self.static = {k: np.asarray(v) for k, v in static.items()}
        self.shapes = shapes
        self.g = Graph(name or m.graph.name or "onnx")
        self.env: dict[str, Value] = {}
        self.known: dict[str, np.ndarray] = {}
        self.input_names: set[str] = set()

    def run(self) -> Graph:
        graph = self.m.graph
        inits = {i.name for i in graph.initializer}
        for init in graph.initializer:
            caramba_dtype(init.data_type, f"initializer '{init.name}'")
            self.known[init.name] = numpy_helper.to_array(init)
        with self.g:
            for vi in graph.input:
                if vi.name in inits:
                    continue
                self.input_names.add(vi.name)
                if vi.name in self.static:
                    d = self._input_type(vi)[1]
                    self.known[vi.name] = self.static[vi.name].astype(d.numpy)
                    continue
                shape, d = self._input_type(vi)
                self.env[vi.name] = self.g.input(vi.name, shape, d)
            for node in graph.node:
                Cx(self, node).lower()
            for vi in graph.output:
                v = self.value(vi.name)
                want = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
                if want and caramba_dtype(want, f"output '{vi.name}'") is not v.dtype:
                    raise ImportUnsupported(f"output '{vi.name}' is {v.dtype} but the model declares {caramba_dtype(want, '')}")
                self.g.output(vi.name, v)
        return self.g

    def _input_type(self, vi) -> tuple[tuple[int, ...], DType]:
        t = vi.type
        if not t.HasField("tensor_type"):
            raise ImportUnsupported(f"input '{vi.name}' is a {t.WhichOneof('value')}, not a tensor", kind="dtype")
        d = caramba_dtype(t.tensor_type.elem_type, f"input '{vi.name}'")
        if vi.name in self.shapes:
            return tuple(self.shapes[vi.name]), d
        if vi.name in self.static:
            return self.static[vi.name].shape, d
        if not t.tensor_type.HasField("shape"):
            raise ImportUnsupported(f"input '{vi.name}' has no shape; give it in input_shapes")
        dims = []
        for dim in t.tensor_type.shape.dim:
            if not dim.HasField("dim_value"):
                raise ImportUnsupported(
                    f"input '{vi.name}' has the symbolic dimension {dim.dim_param or '?'}; caramba graphs are "
                    "statically shaped: give the shape in input_shapes"
                )
            dims.append(dim.dim_value)
        return tuple(dims), d

    def value(self, name: str) -> Value:
        v = self.env.get(name)
        if v is None:
            if name in self.known:
                arr = self.known[name]
                caramba_dtype(helper.np_dtype_to_tensor_dtype(arr.dtype), f"value '{name}'")
                v = self.g.constant(arr)
                self.env[name] = v
            else:
                raise ImportUnsupported(f"value '{name}' is used before it is defined")
        return v


# ONNX ops folded at import when all their inputs are known (shape arithmetic and constants).
FOLDABLE = frozenset({
    "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Cast", "CastLike", "Concat", "Gather", "Slice", "Squeeze",
    "Unsqueeze", "Reshape", "Equal", "Less", "Greater", "Where", "Not", "And", "Or", "Max", "Min", "Range",
    "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "Identity", "ConstantOfShape", "Expand", "Sqrt",
    "Floor", "Ceil", "Size", "Shape", "Transpose", "Flatten", "Sign", "Mod", "Pow", "Trilu", "Tile", "Sum",
    "GreaterOrEqual", "LessOrEqual", "Reciprocal", "Exp", "Log", "Softmax", "LogSoftmax", "Constant",
    "EyeLike", "OneHot", "CumSum", "Split",
})


class Cx:
    """One ONNX node being imported: its inputs as values or known arrays, its attributes."""

    def __init__(self, imp: _Importer, node) -> None:
        self.imp = imp
        self.node = node
        self.op = node.op_type
        self.attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self.origin = Origin(note=f"onnx {self.op} '{node.name or node.output[0]}'")

    @property
    def opset(self) -> int:
        return self.imp.opset

    def fail(self, message: str, kind: str = "feature") -> ImportUnsupported:
        return ImportUnsupported(f"ONNX {self.op}: {message}", kind=kind, node=self.node.name or self.node.output[0], op=f"onnx.{self.op}")

    # ---- inputs and attributes -------------------------------------------------------------
    def n_in(self) -> int:
        return len(self.node.input)

    def has(self, i: int) -> bool:
        return i < len(self.node.input) and self.node.input[i] != ""

    def is_known(self, i: int) -> bool:
        return self.has(i) and self.node.input[i] in self.imp.known

    def v(self, i: int) -> Value:
        return self.imp.value(self.node.input[i])

    def t(self, i: int):
        n = self.node.input[i]
        if n in self.imp.known and n not in self.imp.env:
            arr = self.imp.known[n]
            from caramba.ir.types import ValueType

            return ValueType(arr.shape, caramba_dtype(helper.np_dtype_to_tensor_dtype(arr.dtype), n))
        return self.v(i).type

    def static(self, i: int) -> np.ndarray:
        n = self.node.input[i]
        if n in self.imp.known:
            return self.imp.known[n]
        if n in self.imp.input_names:
            raise StaticInputRequired(n, node=self.node.name or self.node.output[0], op=f"onnx.{self.op}")
        raise self.fail(f"input '{n}' decides a shape but is computed at run time")

    def ints(self, i: int) -> list[int]:
        return [int(v) for v in np.asarray(self.static(i)).reshape(-1)]

    def attr(self, name: str, default: Any = None) -> Any:
        v = self.attrs.get(name, default)
        return v.decode() if isinstance(v, bytes) else v

    # ---- building ----------------------------------------------------------------------
    def call(self, op: str, *inputs: Any, **attrs: Any) -> Any:
        return self.imp.g.call(op, inputs, attrs, origin=self.origin)

    def const(self, value: Any, dtype: DType | None = None) -> Value:
        arr = np.asarray(value)
        return self.imp.g.constant(arr.astype(dtype.numpy) if dtype is not None else arr)

    def k(self, value: float, like: Value) -> Value:
        return self.imp.g.constant(np.asarray(value, dtype=like.dtype.numpy))

    # ---- the node ----------------------------------------------------------------------
    def lower(self) -> None:
        node = self.node
        if node.domain not in DEFAULT_DOMAINS:
            raise self.fail(f"domain '{node.domain}' is not supported", kind="op")
        handler = HANDLERS.get(self.op)
        if handler is None:
            raise self.fail("caramba has no importer for this op", kind="op")
        ins = [n for n in node.input if n]
        if self.op == "CastLike" and self.is_known(0):  # only the dtype of the second input matters
            self.imp.known[node.output[0]] = self.imp.known[node.input[0]].astype(self.t(1).dtype.numpy)
            return
        if self.op in FOLDABLE and all(n in self.imp.known for n in ins) and (ins or self.op in ("Constant",)):
            if self._fold():
                return
        outs = handler(self)
        wanted = [o for o in node.output]
        if len([o for o in wanted if o]) > len(outs) and any(o for o in wanted[len(outs):]):
            raise self.fail(f"output {len(outs)} ('{wanted[len(outs)]}') is not supported")
        for name, out in zip(wanted, outs, strict=False):
            if not name:
                continue
            if isinstance(out, np.ndarray):
                self.imp.known[name] = out
            else:
                self.imp.env[name] = out

    def _fold(self) -> bool:
        """Evaluate the node with ONNX's reference evaluator on its known inputs."""
        from onnx.reference import ReferenceEvaluator

        node = self.node
        feeds = {n: self.imp.known[n] for n in node.input if n}
        inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()]
        outputs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
        g = helper.make_graph([node], "fold", inputs, outputs)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            res = ReferenceEvaluator(m).run(None, feeds)
        except Exception:  # leave it to the handler
            return False
        for name, arr in zip([o for o in node.output if o], res, strict=True):
            self.imp.known[name] = np.asarray(arr)
        return True


def _norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# ---- elementwise ----------------------------------------------------------------------------
_UNARY = {
    "Neg": "math.neg", "Exp": "math.exp", "Log": "math.log", "Sqrt": "math.sqrt", "Reciprocal": "math.reciprocal",
    "Sin": "math.sin", "Cos": "math.cos", "Tanh": "math.tanh", "Erf": "math.erf", "Floor": "math.floor",
    "Ceil": "math.ceil", "Round": "math.round", "Sign": "math.sign", "Sigmoid": "activation.sigmoid",
    "Not": "math.logical_not",
}


@handles(*_UNARY)
def _unary(cx: Cx):
    return [cx.call(_UNARY[cx.op], cx.v(0))]


@handles("Identity")
def _identity(cx: Cx):
    if cx.is_known(0):
        return [cx.imp.known[cx.node.input[0]]]
    return [cx.v(0)]


@handles("Abs")
def _abs(cx: Cx):
    x = cx.v(0)
    return [x if x.dtype is DType.uint8 else cx.call("math.abs", x)]


@handles("Relu")
def _relu(cx: Cx):
    x = cx.v(0)
    if x.dtype.is_float:
        return [cx.call("activation.relu", x)]
    return [cx.call("math.maximum", x, cx.k(0, x))]


@handles("Tan")
def _tan(cx: Cx):
    x = cx.v(0)
    return [cx.call("math.div", cx.call("math.sin", x), cx.call("math.cos", x))]


@handles("Sinh", "Cosh")
def _sinh_cosh(cx: Cx):
    x = cx.v(0)
    a, b = cx.call("math.exp", x), cx.call("math.exp", cx.call("math.neg", x))
    s = cx.call("math.sub", a, b) if cx.op == "Sinh" else cx.call("math.add", a, b)
    return [cx.call("math.mul", s, cx.k(0.5, x))]


@handles("Asinh", "Acosh", "Atanh")
def _inverse_hyperbolic(cx: Cx):
    x = cx.v(0)
    one = cx.k(1.0, x)
    if cx.op == "Asinh":
        return [cx.call("math.log", cx.call("math.add", x, cx.call("math.sqrt", cx.call("math.add", cx.call("math.mul", x, x), one))))]
    if cx.op == "Acosh":
        return [cx.call("math.log", cx.call("math.add", x, cx.call("math.sqrt", cx.call("math.sub", cx.call("math.mul", x, x), one))))]
    ratio = cx.call("math.div", cx.call("math.mul", x, cx.k(2.0, x)), cx.call("math.sub", one, x))
    return [cx.call("math.mul", cx.call("math.log1p", ratio), cx.k(0.5, x))]


@handles("IsNaN")
def _isnan(cx: Cx):
    x = cx.v(0)
    return [cx.call("math.not_equal", x, x)]


@handles("IsInf")
def _isinf(cx: Cx):
    x = cx.v(0)
    pos, neg = cx.attr("detect_positive", 1), cx.attr("detect_negative", 1)
    outs = []
    if pos:
        outs.append(cx.call("math.equal", x, cx.k(np.inf, x)))
    if neg:
        outs.append(cx.call("math.equal", x, cx.k(-np.inf, x)))
    if not outs:
        return [np.zeros(x.shape, dtype=bool)]
    return [outs[0] if len(outs) == 1 else cx.call("math.logical_or", *outs)]


_BINARY = {"Add": "math.add", "Sub": "math.sub", "Mul": "math.mul", "Equal": "math.equal", "Less": "math.less",
           "LessOrEqual": "math.less_equal", "Greater": "math.greater", "GreaterOrEqual": "math.greater_equal",
           "And": "math.logical_and", "Or": "math.logical_or", "Xor": "math.not_equal"}


@handles(*_BINARY)
def _binary(cx: Cx):
    return [cx.call(_BINARY[cx.op], cx.v(0), cx.v(1))]


@handles("Div")
def _div(cx: Cx):
    a, b = cx.v(0), cx.v(1)
    if not a.dtype.is_float:
        raise cx.fail(f"integer division ({a.dtype}) is not a caramba op")
    return [cx.call("math.div", a, b)]


@handles("Pow")
def _pow(cx: Cx):
    a, b = cx.v(0), cx.v(1)
    if not a.dtype.is_float:
        raise cx.fail(f"integer power ({a.dtype}) is not a caramba op")
    if b.dtype is not a.dtype:
        b = cx.call("math.cast", b, dtype=a.dtype)
    return [cx.call("math.pow", a, b)]


@handles("Max", "Min", "Sum", "Mean")
def _variadic(cx: Cx):
    op = {"Max": "math.maximum", "Min": "math.minimum", "Sum": "math.add", "Mean": "math.add"}[cx.op]
    vals = [cx.v(i) for i in range(cx.n_in()) if cx.has(i)]
    acc = vals[0]
    for v in vals[1:]:
        acc = cx.call(op, acc, v)
    if len(vals) == 1:
        acc = cx.call("shape.reshape", acc, shape=acc.shape)  # a fresh value, not the input itself
    if cx.op == "Mean":
        acc = cx.call("math.div", acc, cx.k(len(vals), acc))
    return [acc]


@handles("Where")
def _where(cx: Cx):
    return [cx.call("math.where", cx.v(0), cx.v(1), cx.v(2))]


@handles("Clip")
def _clip(cx: Cx):
    x = cx.v(0)
    if cx.opset < 11:
        lo, hi = cx.attr("min"), cx.attr("max")
        if lo is not None:
            x = cx.call("math.maximum", x, cx.k(lo, x))
        if hi is not None:
            x = cx.call("math.minimum", x, cx.k(hi, x))
        return [x]
    out = x
    if cx.has(1):
        out = cx.call("math.maximum", out, cx.v(1))
    if cx.has(2):
        out = cx.call("math.minimum", out, cx.v(2))
    if out is x:
        out = cx.call("shape.reshape", x, shape=x.shape)
    return [out]


@handles("Cast", "CastLike")
def _cast(cx: Cx):
    x = cx.v(0)
    if cx.op == "Cast":
        d = caramba_dtype(cx.attr("to"), "Cast target")
    else:
        d = cx.t(1).dtype
    return [cx.call("math.cast", x, dtype=d)]  # float -> int truncates toward zero, as in ONNX


# ---- activations ----------------------------------------------------------------------------
@handles("Softplus")
def _softplus(cx: Cx):
    return [cx.call("activation.softplus", cx.v(0))]


@handles("Softsign")
def _softsign(cx: Cx):
    x = cx.v(0)
    return [cx.call("math.div", x, cx.call("math.add", cx.k(1.0, x), cx.call("math.abs", x)))]


@handles("Elu")
def _elu(cx: Cx):
    return [cx.call("activation.elu", cx.v(0), alpha=float(cx.attr("alpha", 1.0)))]


@handles("Selu")
def _selu(cx: Cx):
    x = cx.v(0)
    alpha = float(cx.attr("alpha", 1.67326319217681884765625))
    gamma = float(cx.attr("gamma", 1.05070102214813232421875))
    return [cx.call("math.mul", cx.k(gamma, x), cx.call("activation.elu", x, alpha=alpha))]


@handles("Celu")
def _celu(cx: Cx):
    x = cx.v(0)
    alpha = float(cx.attr("alpha", 1.0))
    neg = cx.call("math.mul", cx.k(alpha, x), cx.call("math.expm1", cx.call("math.div", cx.call("math.minimum", x, cx.k(0, x)), cx.k(alpha, x))))
    return [cx.call("math.add", cx.call("math.maximum", x, cx.k(0, x)), neg)]


@handles("LeakyRelu")
def _leaky(cx: Cx):
    return [cx.call("activation.leaky_relu", cx.v(0), alpha=float(cx.attr("alpha", 0.01)))]


@handles("PRelu")
def _prelu(cx: Cx):
    x, s = cx.v(0), cx.v(1)
    return [cx.call("math.where", cx.call("math.less", x, cx.k(0, x)), cx.call("math.mul", s, x), x)]


@handles("ThresholdedRelu")
def _thresholded(cx: Cx):
    x = cx.v(0)
    return [cx.call("math.where", cx.call("math.greater", x, cx.k(cx.attr("alpha", 1.0), x)), x, cx.k(0, x))]


def _hard_sigmoid(cx: Cx, x: Value, alpha: float, beta: float) -> Value:
    y = cx.call("math.add", cx.call("math.mul", cx.k(alpha, x), x), cx.k(beta, x))
    return cx.call("math.minimum", cx.call("math.maximum", y, cx.k(0, x)), cx.k(1, x))


@handles("HardSigmoid")
def _hardsigmoid(cx: Cx):
    return [_hard_sigmoid(cx, cx.v(0), float(cx.attr("alpha", 0.2)), float(cx.attr("beta", 0.5)))]


@handles("HardSwish")
def _hardswish(cx: Cx):
    x = cx.v(0)
    return [cx.call("math.mul", x, _hard_sigmoid(cx, x, 1.0 / 6.0, 0.5))]


@handles("Mish")
def _mish(cx: Cx):
    x = cx.v(0)
    return [cx.call("math.mul", x, cx.call("math.tanh", cx.call("activation.softplus", x)))]


@handles("Gelu")
def _gelu(cx: Cx):
    return [cx.call("activation.gelu", cx.v(0), approximate=cx.attr("approximate", "none"))]


def _swish(cx: Cx, x: Value, alpha: float) -> Value:
    if alpha == 1.0:
        return cx.call("activation.silu", x)
    return cx.call("math.mul", x, cx.call("activation.sigmoid", cx.call("math.mul", cx.k(alpha, x), x)))


@handles("Swish")
def _swish_op(cx: Cx):
    return [_swish(cx, cx.v(0), float(cx.attr("alpha", 1.0)))]


@handles("SwiGLU")
def _swiglu(cx: Cx):
    alpha = float(cx.attr("alpha", 1.0))
    if alpha == 1.0:
        return [cx.call("activation.swiglu", cx.v(0), cx.v(1))]
    return [cx.call("math.mul", _swish(cx, cx.v(0), alpha), cx.v(1))]


@handles("Shrink")
def _shrink(cx: Cx):
    x = cx.v(0)
    lambd, bias = float(cx.attr("lambd", 0.5)), float(cx.attr("bias", 0.0))
    low = cx.call("math.less", x, cx.k(-lambd, x))
    high = cx.call("math.greater", x, cx.k(lambd, x))
    return [cx.call("math.where", low, cx.call("math.add", x, cx.k(bias, x)),
                    cx.call("math.where", high, cx.call("math.sub", x, cx.k(bias, x)), cx.k(0, x)))]


# ---- softmax family ---------------------------------------------------------------------
def _coerced_2d(cx: Cx, x: Value, axis: int, fn) -> Value:
    shape = x.shape
    axis = _norm_axis(axis, len(shape))
    flat = cx.call("shape.reshape", x, shape=(int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))))
    return cx.call("shape.reshape", fn(flat, -1), shape=shape)


@handles("Softmax", "LogSoftmax", "Hardmax")
def _softmax(cx: Cx):
    x = cx.v(0)
    if x.ndim == 0:
        raise cx.fail("a scalar input")

    def apply(v: Value, axis: int) -> Value:
        if cx.op == "Softmax":
            return cx.call("nn.softmax", v, axis=axis)
        if cx.op == "LogSoftmax":
            return cx.call("nn.log_softmax", v, axis=axis)
        a = _norm_axis(axis, v.ndim)
        arg = cx.call("reduce.argmax", v, axis=a, keepdims=True)
        idx = cx.call("shape.iota", shape=v.shape, axis=a, dtype=DType.int64)
        return cx.call("math.cast", cx.call("math.equal", idx, arg), dtype=v.dtype)

    if cx.opset < 13:
        return [_coerced_2d(cx, x, cx.attr("axis", 1), apply)]
    return [apply(x, cx.attr("axis", -1))]


# ---- reductions ---------------------------------------------------------------------------
_REDUCE = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18, "ReduceProd": 18,
           "ReduceLogSumExp": 18, "ReduceSumSquare": 18, "ReduceL1": 18, "ReduceL2": 18, "ReduceLogSum": 18}


def _reduce_axes(cx: Cx, rank: int) -> list[int] | None:
    """The axes to reduce, or None for 'reduce nothing' (noop_with_empty_axes)."""
    if cx.opset >= _REDUCE[cx.op]:
        axes = cx.ints(1) if cx.has(1) else []
    else:
        axes = list(cx.attr("axes", []))
    if not axes:
        return None if cx.attr("noop_with_empty_axes", 0) else list(range(rank))
    return sorted(_norm_axis(a, rank) for a in axes)


@handles(*_REDUCE)
def _reduce(cx: Cx):
    x = cx.v(0)
    axes = _reduce_axes(cx, x.ndim)
    keep = bool(cx.attr("keepdims", 1))
    if axes is None:
        if cx.op in ("ReduceSumSquare",):
            return [cx.call("math.mul", x, x)]
        if cx.op == "ReduceL1":
            return [cx.call("math.abs", x)]
        if cx.op == "ReduceL2":
            return [cx.call("math.sqrt", cx.call("math.mul", x, x))]
        if cx.op == "ReduceLogSum":
            return [cx.call("math.log", x)]
        if cx.op == "ReduceLogSumExp":
            return [cx.call("math.log", cx.call("math.exp", x))]
        return [cx.call("shape.reshape", x, shape=x.shape)]
    simple = {"ReduceSum": "reduce.sum", "ReduceMean": "reduce.mean", "ReduceMax": "reduce.max",
              "ReduceMin": "reduce.min", "ReduceProd": "reduce.prod", "ReduceLogSumExp": "reduce.logsumexp"}
    if cx.op in simple:
        if x.dtype is DType.bool and cx.op in ("ReduceMax", "ReduceMin"):  # any / all
            u8 = cx.call("math.cast", x, dtype=DType.uint8)
            return [cx.call("math.cast", cx.call(simple[cx.op], u8, axes=axes, keepdims=keep), dtype=DType.bool)]
        return [cx.call(simple[cx.op], x, axes=axes, keepdims=keep)]
    if cx.op in ("ReduceL2", "ReduceLogSum") and not x.dtype.is_float:
        raise cx.fail(f"{cx.op} of {x.dtype}")
    src = {"ReduceSumSquare": lambda: cx.call("math.mul", x, x), "ReduceL1": lambda: cx.call("math.abs", x),
           "ReduceL2": lambda: cx.call("math.mul", x, x), "ReduceLogSum": lambda: x}[cx.op]()
    s = cx.call("reduce.sum", src, axes=axes, keepdims=keep)
    if cx.op == "ReduceL2":
        s = cx.call("math.sqrt", s)
    elif cx.op == "ReduceLogSum":
        s = cx.call("math.log", s)
    return [s]


@handles("ArgMax", "ArgMin")
def _argmax(cx: Cx):
    x = cx.v(0)
    axis = _norm_axis(cx.attr("axis", 0), x.ndim)
    keep = bool(cx.attr("keepdims", 1))
    op = "reduce.argmax" if cx.op == "ArgMax" else "reduce.argmin"
    if cx.attr("select_last_index", 0):
        flipped = cx.call(op, cx.call("shape.flip", x, axes=[axis]), axis=axis, keepdims=keep)
        return [cx.call("math.sub", cx.const(np.int64(x.shape[axis] - 1)), flipped)]
    return [cx.call(op, x, axis=axis, keepdims=keep)]


# ---- linear algebra -------------------------------------------------------------------------
@handles("MatMul")
def _matmul(cx: Cx):
    return [cx.call("linalg.matmul", cx.v(0), cx.v(1))]


@handles("Gemm")
def _gemm(cx: Cx):
    a, b = cx.v(0), cx.v(1)
    if cx.attr("transA", 0):
        a = cx.call("shape.transpose", a)
    if cx.attr("transB", 0):
        b = cx.call("shape.transpose", b)
    y = cx.call("linalg.matmul", a, b)
    alpha, beta = float(cx.attr("alpha", 1.0)), float(cx.attr("beta", 1.0))
    if alpha != 1.0:
        y = cx.call("math.mul", cx.k(alpha, y), y)
    if cx.has(2):
        c = cx.v(2)
        if beta != 1.0:
            c = cx.call("math.mul", cx.k(beta, c), c)
        y = cx.call("math.add", y, c)
    return [y]


@handles("Einsum")
def _einsum(cx: Cx):
    """Any einsum without broadcasting ellipses of unequal rank: diagonals by an identity mask,
    then one broadcast product over all indices and a sum over the contracted ones."""
    eq = cx.attr("equation").replace(" ", "")
    vals = [cx.v(i) for i in range(cx.n_in()) if cx.has(i)]
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(vals):
        raise cx.fail(f"equation {eq!r} names {len(terms)} operands, got {len(vals)}")
    spare = iter("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    ell: list[str] | None = None
    parsed = []
    for term, v in zip(terms, vals, strict=True):
        if "..." in term:
            n = v.ndim - (len(term) - 3)
            if ell is None:
                ell = [next(spare) for _ in range(n)]
            elif len(ell) != n:
                raise cx.fail("ellipses of different ranks")
            term = term.replace("...", "".join(ell[len(ell) - n:]))
        parsed.append(term)
    if not arrow:
        counts = {c: sum(t.count(c) for t in parsed) for c in "".join(parsed)}
        rhs = "".join(ell or []) + "".join(sorted(c for c, k in counts.items() if k == 1 and c.islower()))
    elif "..." in rhs:
        rhs = rhs.replace("...", "".join(ell or []))
    order: list[str] = []
    for t in parsed:
        for c in t:
            if c not in order:
                order.append(c)
    aligned = []
    for term, v in zip(parsed, vals, strict=True):
        letters = list(term)
        while len(set(letters)) < len(letters):  # a repeated index: take the diagonal
            c = next(c for c in letters if letters.count(c) > 1)
            i, j = [k for k, ch in enumerate(letters) if ch == c][:2]
            eye_shape = [1] * len(letters)
            eye_shape[i] = eye_shape[j] = v.shape[i]
            eye = np.eye(v.shape[i], dtype=v.dtype.numpy).reshape(eye_shape)
            v = cx.call("reduce.sum", cx.call("math.mul", v, cx.const(eye)), axes=[j])
            letters.pop(j)
        perm = sorted(range(len(letters)), key=lambda k: order.index(letters[k]))
        if perm != list(range(len(letters))):
            v = cx.call("shape.transpose", v, perm=perm)
        present = set(letters)
        it = iter(v.shape)
        full = [next(it) if c in present else 1 for c in order]
        aligned.append(cx.call("shape.reshape", v, shape=full))
    prod = aligned[0]
    for v in aligned[1:]:
        prod = cx.call("math.mul", prod, v)
    summed = [k for k, c in enumerate(order) if c not in rhs]
    if summed:
        prod = cx.call("reduce.sum", prod, axes=summed)
    kept = [c for c in order if c in rhs]
    perm = [kept.index(c) for c in rhs]
    if perm != list(range(len(perm))):
        prod = cx.call("shape.transpose", prod, perm=perm)
    return [prod]


@handles("CumProd")
def _cumprod(cx: Cx):
    x = cx.v(0)
    axis = _norm_axis(int(np.asarray(cx.static(1)).reshape(-1)[0]), x.ndim)
    n = x.shape[axis]
    if n > 256:
        raise cx.fail(f"an axis of {n} elements (unrolled up to 256)")
    exclusive, reverse = cx.attr("exclusive", 0), cx.attr("reverse", 0)
    parts = cx.call("shape.split", x, axis=axis, sizes=[1] * n) if n > 1 else (x,)
    parts = list(parts) if isinstance(parts, tuple) else [parts]
    if reverse:
        parts = parts[::-1]
    one = cx.const(np.ones(parts[0].shape, x.dtype.numpy)) if n else None
    outs, acc = [], None
    for p in parts:
        if exclusive:
            outs.append(one if acc is None else acc)
            acc = p if acc is None else cx.call("math.mul", acc, p)
        else:
            acc = p if acc is None else cx.call("math.mul", acc, p)
            outs.append(acc)
    if reverse:
        outs = outs[::-1]
    if not outs:
        return [cx.call("shape.reshape", x, shape=x.shape)]
    return [cx.call("shape.concat", *outs, axis=axis) if len(outs) > 1 else cx.call("shape.reshape", outs[0], shape=x.shape)]


@handles("Compress")
def _compress(cx: Cx):
    x = cx.v(0)
    cond = np.asarray(cx.static(1)).astype(bool).reshape(-1)
    axis = cx.attr("axis")
    if axis is None:
        x = cx.call("shape.reshape", x, shape=(int(np.prod(x.shape, dtype=np.int64)),))
        axis = 0
    axis = _norm_axis(axis, x.ndim)
    idx = np.nonzero(cond[: x.shape[axis]])[0].astype(np.int64)
    return [cx.call("shape.gather", x, cx.const(idx), axis=axis)]


@handles("CenterCropPad")
def _center_crop_pad(cx: Cx):
    x = cx.v(0)
    target = cx.ints(1)
    axes = [_norm_axis(a, x.ndim) for a in cx.attr("axes", list(range(x.ndim)))]
    for a, t in zip(axes, target, strict=True):
        d = x.shape[a]
        if t < d:
            start = (d - t) // 2
            x = cx.call("shape.slice", x, starts=[start], ends=[start + t], axes=[a])
        elif t > d:
            pads = [0] * (2 * x.ndim)
            pads[2 * a] = (t - d) // 2
            pads[2 * a + 1] = t - d - (t - d) // 2
            x = cx.call("shape.pad", x, pads=pads)
    return [cx.call("shape.reshape", x, shape=x.shape)]


@handles("ReverseSequence")
def _reverse_sequence(cx: Cx):
    x, lens = cx.v(0), cx.v(1)
    bax, tax = cx.attr("batch_axis", 1), cx.attr("time_axis", 0)
    t = cx.call("shape.iota", shape=x.shape, axis=tax, dtype=DType.int64)
    lshape = [1] * x.ndim
    lshape[bax] = x.shape[bax]
    n = cx.call("shape.reshape", cx.call("math.cast", lens, dtype=DType.int64), shape=lshape)
    src = cx.call("math.where", cx.call("math.less", t, n), cx.call("math.sub", cx.call("math.sub", n, cx.const(np.int64(1))), t), t)
    flat = _flat_index_elements(cx, x.shape, src, tax)
    return [cx.call("shape.gather", cx.call("shape.reshape", x, shape=(int(np.prod(x.shape, dtype=np.int64)),)), flat, axis=0)]


@handles("RotaryEmbedding")
def _rotary(cx: Cx):
    """ONNX RotaryEmbedding (opset 23): rotate the first rotary_embedding_dim features of each
    head by cos/sin taken from the caches at position_ids (or positions 0..S-1)."""
    x, cos, sin = cx.v(0), cx.v(1), cx.v(2)
    interleaved = cx.attr("interleaved", 0)
    four_d = x.ndim == 4
    if four_d:  # [B, H, S, D] -> [B, S, H, D]
        x = cx.call("shape.transpose", x, perm=[0, 2, 1, 3])
    else:
        h = cx.attr("num_heads", 0)
        if not h:
            raise cx.fail("3-D input without num_heads")
        b_, s_, hidden = x.shape
        x = cx.call("shape.reshape", x, shape=(b_, s_, h, hidden // h))
    b, s, h, d = x.shape
    rd = cx.attr("rotary_embedding_dim", 0) or d
    if cx.has(3):  # position_ids [B, S] gathered from the caches [max_pos, rd/2]
        pos = cx.v(3)
        cos, sin = cx.call("shape.gather", cos, pos, axis=0), cx.call("shape.gather", sin, pos, axis=0)
    # cos, sin: [B, S, rd/2] -> [B, S, 1, rd/2]
    cos, sin = cx.call("shape.expand_dims", cos, axes=[2]), cx.call("shape.expand_dims", sin, axes=[2])
    rot = cx.call("shape.slice", x, starts=[0], ends=[rd], axes=[3])
    half = rd // 2
    if interleaved:
        pairs = cx.call("shape.reshape", rot, shape=(b, s, h, half, 2))
        x1 = cx.call("shape.reshape", cx.call("shape.slice", pairs, starts=[0], ends=[1], axes=[4]), shape=(b, s, h, half))
        x2 = cx.call("shape.reshape", cx.call("shape.slice", pairs, starts=[1], ends=[2], axes=[4]), shape=(b, s, h, half))
    else:
        x1 = cx.call("shape.slice", rot, starts=[0], ends=[half], axes=[3])
        x2 = cx.call("shape.slice", rot, starts=[half], ends=[rd], axes=[3])
    r1 = cx.call("math.sub", cx.call("math.mul", x1, cos), cx.call("math.mul", x2, sin))
    r2 = cx.call("math.add", cx.call("math.mul", x2, cos), cx.call("math.mul", x1, sin))
    if interleaved:
        out = cx.call("shape.reshape", cx.call("shape.concat", cx.call("shape.expand_dims", r1, axes=[4]),
                                               cx.call("shape.expand_dims", r2, axes=[4]), axis=4), shape=(b, s, h, rd))
    else:
        out = cx.call("shape.concat", r1, r2, axis=3)
    if rd < d:
        out = cx.call("shape.concat", out, cx.call("shape.slice", x, starts=[rd], ends=[d], axes=[3]), axis=3)
    if four_d:
        return [cx.call("shape.transpose", out, perm=[0, 2, 1, 3])]
    return [cx.call("shape.reshape", out, shape=(b, s, h * d))]


# ---- shape and indexing ---------------------------------------------------------------------
@handles("Shape")
def _shape(cx: Cx):
    shape = cx.t(0).shape
    start, end = cx.attr("start", 0), cx.attr("end", None)
    return [np.asarray(shape[slice(start, end)], dtype=np.int64)]


@handles("Size")
def _size(cx: Cx):
    return [np.asarray(int(np.prod(cx.t(0).shape, dtype=np.int64)), dtype=np.int64)]


@handles("Constant")
def _constant(cx: Cx):
    if "value" in cx.attrs:
        t = cx.attrs["value"]
        caramba_dtype(t.data_type, "Constant")
        return [numpy_helper.to_array(t)]
    for key, d in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64), ("value_ints", np.int64)):
        if key in cx.attrs:
            return [np.asarray(cx.attrs[key], d)]
    raise cx.fail("sparse or string constants", kind="dtype")


@handles("ConstantOfShape")
def _constant_of_shape(cx: Cx):
    shape = cx.ints(0)
    t = cx.attrs.get("value")
    value = numpy_helper.to_array(t) if t is not None else np.zeros(1, np.float32)
    caramba_dtype(helper.np_dtype_to_tensor_dtype(value.dtype), "ConstantOfShape value")
    return [np.full(shape, value.reshape(-1)[0], dtype=value.dtype)]


@handles("Range")
def _range(cx: Cx):
    start, limit, delta = (cx.static(i) for i in range(3))
    return [np.arange(start, limit, delta).astype(start.dtype)]


@handles("EyeLike")
def _eyelike(cx: Cx):
    t = cx.t(0)
    d = caramba_dtype(cx.attr("dtype"), "EyeLike dtype") if "dtype" in cx.attrs else t.dtype
    return [np.eye(t.shape[0], t.shape[1], k=cx.attr("k", 0)).astype(d.numpy)]


@handles("Reshape")
def _reshape(cx: Cx):
    x = cx.v(0)
    shape = cx.ints(1)
    if not cx.attr("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [cx.call("shape.reshape", x, shape=shape)]


@handles("Flatten")
def _flatten(cx: Cx):
    x = cx.v(0)
    axis = _norm_axis(cx.attr("axis", 1), x.ndim)
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    return [cx.call("shape.reshape", x, shape=(outer, int(np.prod(x.shape[axis:], dtype=np.int64))))]


@handles("Squeeze")
def _squeeze(cx: Cx):
    x = cx.v(0)
    axes = cx.ints(1) if cx.opset >= 13 and cx.has(1) else cx.attr("axes")
    return [cx.call("shape.squeeze", x, axes=None if axes is None else list(axes))]


@handles("Unsqueeze")
def _unsqueeze(cx: Cx):
    x = cx.v(0)
    axes = cx.ints(1) if cx.opset >= 13 else list(cx.attr("axes"))
    return [cx.call("shape.expand_dims", x, axes=axes)]


@handles("Transpose")
def _transpose(cx: Cx):
    perm = cx.attr("perm")
    return [cx.call("shape.transpose", cx.v(0), perm=None if perm is None else list(perm))]


@handles("Concat")
def _concat(cx: Cx):
    vals = [cx.v(i) for i in range(cx.n_in()) if cx.has(i)]
    return [cx.call("shape.concat", *vals, axis=cx.attr("axis"))]


@handles("Split")
def _split(cx: Cx):
    x = cx.v(0)
    axis = _norm_axis(cx.attr("axis", 0), x.ndim)
    n_out = len(cx.node.output)
    if cx.opset >= 13 and cx.has(1):
        sizes = cx.ints(1)
    elif cx.opset < 13 and "split" in cx.attrs:
        sizes = list(cx.attr("split"))
    else:
        dim = x.shape[axis]
        n = cx.attr("num_outputs", n_out)
        chunk = -(-dim // n)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    outs = cx.call("shape.split", x, axis=axis, sizes=sizes)
    return list(outs) if isinstance(outs, tuple) else [outs]


@handles("Slice")
def _slice(cx: Cx):
    x = cx.v(0)
    if cx.opset < 10:
        starts, ends = list(cx.attr("starts")), list(cx.attr("ends"))
        axes = list(cx.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = cx.ints(1), cx.ints(2)
        axes = cx.ints(3) if cx.has(3) else list(range(len(starts)))
        steps = cx.ints(4) if cx.has(4) else [1] * len(starts)
    return [cx.call("shape.slice", x, starts=starts, ends=ends, axes=[_norm_axis(a, x.ndim) for a in axes], steps=steps)]


@handles("Pad")
def _pad(cx: Cx):
    x = cx.v(0)
    mode = cx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        raise cx.fail(f"mode '{mode}'")
    r = x.ndim
    if cx.opset < 11:
        pads, value = list(cx.attr("pads")), float(cx.attr("value", 0.0))
        axes = list(range(r))
    else:
        pads = cx.ints(1)
        value = float(cx.static(2).reshape(-1)[0]) if cx.has(2) else 0.0
        axes = [_norm_axis(a, r) for a in cx.ints(3)] if cx.has(3) else list(range(r))
    k = len(axes)
    full = [0] * (2 * r)
    for i, a in enumerate(axes):
        full[2 * a], full[2 * a + 1] = pads[i], pads[k + i]
    if any(p < 0 for p in full):  # negative pads crop
        starts = [max(-full[2 * a], 0) for a in range(r)]
        ends = [x.shape[a] - max(-full[2 * a + 1], 0) for a in range(r)]
        x = cx.call("shape.slice", x, starts=starts, ends=ends, axes=list(range(r)))
        full = [max(p, 0) for p in full]
    return [cx.call("shape.pad", x, pads=full, mode=mode, value=value)]


@handles("Expand")
def _expand(cx: Cx):
    x = cx.v(0)
    shape = cx.ints(1)
    from caramba.ops._define import broadcast_shapes

    return [cx.call("shape.broadcast_to", x, shape=broadcast_shapes(x.shape, tuple(shape)))]


@handles("Tile")
def _tile(cx: Cx):
    x = cx.v(0)
    reps = cx.ints(1)
    inter = []
    target = []
    for d, rp in zip(x.shape, reps, strict=True):
        inter += [1, d]
        target += [rp, d]
    y = cx.call("shape.broadcast_to", cx.call("shape.reshape", x, shape=inter), shape=target)
    return [cx.call("shape.reshape", y, shape=[d * rp for d, rp in zip(x.shape, reps, strict=True)])]


@handles("Gather")
def _gather(cx: Cx):
    x, idx = cx.v(0), cx.v(1)
    return [cx.call("shape.gather", x, idx, axis=cx.attr("axis", 0))]


def _strides(shape) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return list(reversed(out))


def _wrap(cx: Cx, idx: Value, n: int) -> Value:
    idx = cx.call("math.cast", idx, dtype=DType.int64) if idx.dtype is not DType.int64 else idx
    return cx.call("math.where", cx.call("math.less", idx, cx.const(np.int64(0))), cx.call("math.add", idx, cx.const(np.int64(n))), idx)


def _flat_index_elements(cx: Cx, xshape, idx: Value, axis: int) -> Value:
    """Flat indices into x for take_along_axis(x, idx, axis)."""
    strides = _strides(xshape)
    flat = cx.call("math.mul", _wrap(cx, idx, xshape[axis]), cx.const(np.int64(strides[axis])))
    for d in range(len(xshape)):
        if d == axis or idx.shape[d] == 1:  # a size-1 axis contributes index 0
            continue
        io = cx.call("shape.iota", shape=idx.shape, axis=d, dtype=DType.int64)
        flat = cx.call("math.add", flat, cx.call("math.mul", io, cx.const(np.int64(strides[d]))))
    return flat


@handles("GatherElements")
def _gather_elements(cx: Cx):
    x, idx = cx.v(0), cx.v(1)
    axis = _norm_axis(cx.attr("axis", 0), x.ndim)
    flat = _flat_index_elements(cx, x.shape, idx, axis)
    return [cx.call("shape.gather", cx.call("shape.reshape", x, shape=(int(np.prod(x.shape, dtype=np.int64)),)), flat, axis=0)]


def _flat_index_nd(cx: Cx, xshape, idx: Value, batch_dims: int) -> tuple[Value, tuple[int, ...]]:
    """For GatherND/ScatterND: flat indices into x reshaped to [prod(B + D_k), *rest]."""
    k = idx.shape[-1]
    block = xshape[: batch_dims + k]
    strides = _strides(block)
    outer = idx.shape[:-1]
    flat = None
    for j in range(k):
        comp = cx.call("shape.squeeze", cx.call("shape.slice", idx, starts=[j], ends=[j + 1], axes=[idx.ndim - 1]), axes=[idx.ndim - 1])
        term = cx.call("math.mul", _wrap(cx, comp, xshape[batch_dims + j]), cx.const(np.int64(strides[batch_dims + j])))
        flat = term if flat is None else cx.call("math.add", flat, term)
    for b in range(batch_dims):
        io = cx.call("shape.iota", shape=outer, axis=b, dtype=DType.int64)
        term = cx.call("math.mul", io, cx.const(np.int64(strides[b])))
        flat = term if flat is None else cx.call("math.add", flat, term)
    if flat is None:
        flat = cx.const(np.zeros(outer, np.int64))
    rest = tuple(xshape[batch_dims + k:])
    return flat, (int(np.prod(block, dtype=np.int64)),) + rest


@handles("GatherND")
def _gather_nd(cx: Cx):
    x, idx = cx.v(0), cx.v(1)
    b = cx.attr("batch_dims", 0)
    flat, shape2 = _flat_index_nd(cx, x.shape, idx, b)
    return [cx.call("shape.gather", cx.call("shape.reshape", x, shape=shape2), flat, axis=0)]


def _scatter(cx: Cx, x: Value, flat: Value, upd: Value, x2shape, reduction: str) -> Value:
    x2 = cx.call("shape.reshape", x, shape=x2shape)
    if reduction == "add":
        out = cx.call("shape.scatter_add", x2, flat, upd)
    elif reduction == "none":
        zeros = cx.const(np.zeros(x2shape, x.dtype.numpy))
        ones = cx.const(np.ones(upd.shape, x.dtype.numpy))
        hit = cx.call("math.greater", cx.call("shape.scatter_add", zeros, flat, ones), cx.const(np.zeros((), x.dtype.numpy)))
        out = cx.call("math.where", hit, cx.call("shape.scatter_add", zeros, flat, upd), x2)
    else:
        raise cx.fail(f"reduction '{reduction}'")
    return cx.call("shape.reshape", out, shape=x.shape)


@handles("ScatterElements", "Scatter")
def _scatter_elements(cx: Cx):
    x, idx, upd = cx.v(0), cx.v(1), cx.v(2)
    if x.dtype is DType.bool:
        raise cx.fail("scatter into bool")
    axis = _norm_axis(cx.attr("axis", 0), x.ndim)
    flat = _flat_index_elements(cx, x.shape, idx, axis)
    upd_flat = cx.call("shape.reshape", upd, shape=flat.shape)
    return [_scatter(cx, x, flat, upd_flat, (int(np.prod(x.shape, dtype=np.int64)),), cx.attr("reduction", "none"))]


@handles("ScatterND")
def _scatter_nd(cx: Cx):
    x, idx, upd = cx.v(0), cx.v(1), cx.v(2)
    if x.dtype is DType.bool:
        raise cx.fail("scatter into bool")
    flat, shape2 = _flat_index_nd(cx, x.shape, idx, 0)
    return [_scatter(cx, x, flat, upd, shape2, cx.attr("reduction", "none"))]


@handles("Trilu")
def _trilu(cx: Cx):
    x = cx.v(0)
    k = int(cx.static(1).reshape(-1)[0]) if cx.has(1) else 0
    n, m = x.shape[-2:]
    mask = np.triu(np.ones((n, m), bool), k) if cx.attr("upper", 1) else np.tril(np.ones((n, m), bool), k)
    return [cx.call("math.where", cx.const(mask), x, cx.const(np.zeros((), x.dtype.numpy)))]


@handles("OneHot")
def _onehot(cx: Cx):
    idx, values = cx.v(0), cx.v(2)
    depth = int(np.asarray(cx.static(1)).reshape(-1)[0])
    axis = cx.attr("axis", -1)
    out_rank = idx.ndim + 1
    axis = _norm_axis(axis, out_rank)
    ind = idx if idx.dtype.is_int else cx.call("math.cast", idx, dtype=DType.int64)
    if ind.dtype.is_float:
        ind = cx.call("math.cast", ind, dtype=DType.int64)
    ind = cx.call("math.cast", ind, dtype=DType.int64)
    ind = cx.call("math.where", cx.call("math.less", ind, cx.const(np.int64(0))), cx.call("math.add", ind, cx.const(np.int64(depth))), ind)
    shape = [1] * out_rank
    shape[axis] = depth
    classes = cx.const(np.arange(depth, dtype=np.int64).reshape(shape))
    hit = cx.call("math.equal", cx.call("shape.expand_dims", ind, axes=[axis]), classes)
    off = cx.call("shape.slice", values, starts=[0], ends=[1], axes=[0])
    on = cx.call("shape.slice", values, starts=[1], ends=[2], axes=[0])
    off, on = cx.call("shape.reshape", off, shape=()), cx.call("shape.reshape", on, shape=())
    return [cx.call("math.where", hit, on, off)]


@handles("CumSum")
def _cumsum(cx: Cx):
    x = cx.v(0)
    if not (x.dtype.is_float or x.dtype in (DType.int64, DType.int32)):
        raise cx.fail(f"CumSum of {x.dtype}")
    axis = _norm_axis(int(np.asarray(cx.static(1)).reshape(-1)[0]), x.ndim)
    n = x.shape[axis]
    i, j = np.indices((n, n))
    exclusive, reverse = cx.attr("exclusive", 0), cx.attr("reverse", 0)
    # out[..., j] = sum_i x[..., i] * T[i, j]
    if reverse:
        tri = (i > j) if exclusive else (i >= j)
    else:
        tri = (i < j) if exclusive else (i <= j)
    perm = [d for d in range(x.ndim) if d != axis] + [axis]
    inv = list(np.argsort(perm))
    xt = cx.call("shape.transpose", x, perm=perm)
    y = cx.call("linalg.matmul", xt, cx.const(tri.astype(x.dtype.numpy)))
    return [cx.call("shape.transpose", y, perm=[int(v) for v in inv])]


@handles("DepthToSpace")
def _depth_to_space(cx: Cx):
    x = cx.v(0)
    n, c, h, w = x.shape
    b = cx.attr("blocksize")
    if cx.attr("mode", "DCR") == "DCR":
        y = cx.call("shape.reshape", x, shape=(n, b, b, c // (b * b), h, w))
        y = cx.call("shape.transpose", y, perm=[0, 3, 4, 1, 5, 2])
    else:
        y = cx.call("shape.reshape", x, shape=(n, c // (b * b), b, b, h, w))
        y = cx.call("shape.transpose", y, perm=[0, 1, 4, 2, 5, 3])
    return [cx.call("shape.reshape", y, shape=(n, c // (b * b), h * b, w * b))]


@handles("SpaceToDepth")
def _space_to_depth(cx: Cx):
    x = cx.v(0)
    n, c, h, w = x.shape
    b = cx.attr("blocksize")
    y = cx.call("shape.reshape", x, shape=(n, c, h // b, b, w // b, b))
    perm = [0, 3, 5, 1, 2, 4] if cx.attr("mode", "DCR") == "DCR" else [0, 1, 3, 5, 2, 4]
    y = cx.call("shape.transpose", y, perm=perm)
    return [cx.call("shape.reshape", y, shape=(n, c * b * b, h // b, w // b))]


def _resize_matrix(cx: Cx, n_in: int, scale: float | None, size: int | None, attrs: dict) -> np.ndarray:
    """The [n_in, n_out] matrix of ONNX Resize along one axis (float64): the reference Resize
    of the identity, resizing only that axis (an axis kept at scale 1 maps to itself in every
    coordinate mode used here)."""
    from onnx.reference import ReferenceEvaluator

    eye = np.eye(n_in, dtype=np.float64)
    ins = ["x", "", "scales"] if size is None else ["x", "", "", "sizes"]
    node = helper.make_node("Resize", ins, ["y"], **attrs)
    g = helper.make_graph([node], "axis", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [n_in, n_in])],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
                          initializer=[numpy_helper.from_array(np.asarray([1.0, scale], np.float32), "scales")] if size is None
                          else [numpy_helper.from_array(np.asarray([n_in, size], np.int64), "sizes")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", max(cx.opset, 13))])
    return np.asarray(ReferenceEvaluator(m).run(None, {"x": eye})[0])


@handles("Upsample", "Resize")
def _resize(cx: Cx):
    """Nearest, linear and cubic resizing in any coordinate mode but tf_crop_and_resize: one
    interpolation matrix per resized axis (computed at import), applied with a matmul (nearest:
    a gather, so every dtype works)."""
    x = cx.v(0)
    mode = cx.attr("mode", "nearest")
    if cx.op == "Upsample":
        scales = [float(s) for s in (cx.static(1).reshape(-1) if cx.opset >= 9 else cx.attr("scales"))]
        sizes = None
        attrs = {"mode": "linear" if mode in ("linear", "bilinear") else mode,
                 "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
        axes = list(range(x.ndim))
    else:
        ctm = cx.attr("coordinate_transformation_mode", "half_pixel")
        if ctm == "tf_crop_and_resize":
            raise cx.fail("coordinate_transformation_mode 'tf_crop_and_resize'")
        if cx.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
            raise cx.fail("keep_aspect_ratio_policy")
        axes = [_norm_axis(a, x.ndim) for a in cx.attr("axes", list(range(x.ndim)))]
        attrs = {k: cx.attrs[k] for k in ("mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
                                          "exclude_outside", "antialias") if k in cx.attrs}
        if cx.has(2) and cx.static(2).size:
            scales, sizes = [float(v) for v in cx.static(2).reshape(-1)], None
        elif cx.has(3):
            scales, sizes = None, cx.ints(3)
        else:
            raise cx.fail("neither scales nor sizes")
    for i, a in enumerate(axes):
        n_in = x.shape[a]
        scale = None if scales is None else scales[i]
        size = None if sizes is None else sizes[i]
        if (scale is not None and scale == 1.0) or (size is not None and size == n_in):
            continue
        m = _resize_matrix(cx, n_in, scale, size, attrs)
        if attrs.get("mode", "nearest") == "nearest":
            x = cx.call("shape.gather", x, cx.const(np.argmax(m, axis=0).astype(np.int64)), axis=a)
            continue
        if not x.dtype.is_float:
            raise cx.fail(f"{attrs['mode']} resizing of {x.dtype}")
        perm = [d for d in range(x.ndim) if d != a] + [a]
        y = cx.call("linalg.matmul", cx.call("shape.transpose", x, perm=perm), cx.const(m.astype(x.dtype.numpy)))
        x = cx.call("shape.transpose", y, perm=[int(v) for v in np.argsort(perm)])
    return [cx.call("shape.reshape", x, shape=x.shape)]


@handles("Dropout")
def _dropout(cx: Cx):
    x = cx.v(0)
    training = bool(cx.static(2).reshape(-1)[0]) if cx.has(2) else False
    if training or (cx.opset < 7 and not cx.attr("is_test", 0)):
        raise cx.fail("training mode (random masks are not comparable)")
    y = cx.call("shape.reshape", x, shape=x.shape)
    mask = np.ones(x.shape, dtype=bool)
    return [y, mask]


# ---- normalization ----------------------------------------------------------------------
def _stash(cx: Cx, x: Value) -> tuple[Value, DType]:
    """stash_type=1 (the default): compute in float32 at least, as the ONNX reference does."""
    if cx.attr("stash_type", 1) == 1 and x.dtype in (DType.float16, DType.bfloat16):
        return cx.call("math.cast", x, dtype=DType.float32), x.dtype
    return x, x.dtype


def _back(cx: Cx, y: Value, d: DType) -> Value:
    return cx.call("math.cast", y, dtype=d) if y.dtype is not d else y


@handles("LayerNormalization")
def _layer_norm(cx: Cx):
    x0 = cx.v(0)
    x, d = _stash(cx, x0)
    axis = _norm_axis(cx.attr("axis", -1), x.ndim)
    eps = float(cx.attr("epsilon", 1e-5))
    axes = list(range(axis, x.ndim))
    mean = cx.call("reduce.mean", x, axes=axes, keepdims=True)
    cen = cx.call("math.sub", x, mean)
    var = cx.call("reduce.mean", cx.call("math.mul", cen, cen), axes=axes, keepdims=True)
    inv = cx.call("math.rsqrt", cx.call("math.add", var, cx.k(eps, var)))
    y = _back(cx, cx.call("math.mul", cen, inv), d)
    y = cx.call("math.mul", y, cx.v(1))
    if cx.has(2):
        y = cx.call("math.add", y, cx.v(2))
    return [y, mean, inv]


@handles("RMSNormalization")
def _rms_norm(cx: Cx):
    x0 = cx.v(0)
    x, d = _stash(cx, x0)
    axis = _norm_axis(cx.attr("axis", -1), x.ndim)
    eps = float(cx.attr("epsilon", 1e-5))
    ms = cx.call("reduce.mean", cx.call("math.mul", x, x), axes=list(range(axis, x.ndim)), keepdims=True)
    y = cx.call("math.mul", x, cx.call("math.reciprocal", cx.call("math.sqrt", cx.call("math.add", ms, cx.k(eps, ms)))))
    return [cx.call("math.mul", _back(cx, y, d), cx.v(1))]


@handles("GroupNormalization")
def _group_norm(cx: Cx):
    x0 = cx.v(0)
    x, d = _stash(cx, x0)
    g = cx.attr("num_groups")
    eps = float(cx.attr("epsilon", 1e-5))
    c = x.shape[1]
    scale, bias = cx.v(1), cx.v(2)
    if cx.opset < 21 and scale.shape == (g,) and g != c:  # opset 18: one scale per group
        scale = cx.call("shape.reshape", cx.call("shape.broadcast_to", cx.call("shape.reshape", scale, shape=(g, 1)), shape=(g, c // g)), shape=(c,))
        bias = cx.call("shape.reshape", cx.call("shape.broadcast_to", cx.call("shape.reshape", bias, shape=(g, 1)), shape=(g, c // g)), shape=(c,))
    y = _back(cx, cx.call("nn.group_norm", x, num_groups=g, eps=eps), d)
    bshape = (1, c) + (1,) * (x.ndim - 2)
    return [cx.call("math.add", cx.call("math.mul", y, cx.call("shape.reshape", scale, shape=bshape)), cx.call("shape.reshape", bias, shape=bshape))]


@handles("BatchNormalization")
def _batch_norm(cx: Cx):
    if cx.attr("training_mode", 0) or len([o for o in cx.node.output if o]) > 1:
        raise cx.fail("training mode")
    x = cx.v(0)
    eps = float(cx.attr("epsilon", 1e-5))
    bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    scale, b, mean, var = (cx.call("shape.reshape", cx.v(i), shape=bshape) for i in range(1, 5))
    y = cx.call("math.div", cx.call("math.sub", x, mean), cx.call("math.sqrt", cx.call("math.add", var, cx.k(eps, var))))
    return [cx.call("math.add", cx.call("math.mul", y, scale), b)]


@handles("InstanceNormalization")
def _instance_norm(cx: Cx):
    x = cx.v(0)
    eps = float(cx.attr("epsilon", 1e-5))
    axes = list(range(2, x.ndim))
    mean = cx.call("reduce.mean", x, axes=axes, keepdims=True)
    cen = cx.call("math.sub", x, mean)
    var = cx.call("reduce.mean", cx.call("math.mul", cen, cen), axes=axes, keepdims=True)
    y = cx.call("math.div", cen, cx.call("math.sqrt", cx.call("math.add", var, cx.k(eps, var))))
    bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    return [cx.call("math.add", cx.call("math.mul", y, cx.call("shape.reshape", cx.v(1), shape=bshape)), cx.call("shape.reshape", cx.v(2), shape=bshape))]


@handles("LpNormalization")
def _lp_norm(cx: Cx):
    x = cx.v(0)
    axis = _norm_axis(cx.attr("axis", -1), x.ndim)
    p = cx.attr("p", 2)
    if p == 1:
        norm = cx.call("reduce.sum", cx.call("math.abs", x), axes=[axis], keepdims=True)
    elif p == 2:
        norm = cx.call("math.sqrt", cx.call("reduce.sum", cx.call("math.mul", x, x), axes=[axis], keepdims=True))
    else:
        raise cx.fail(f"p={p}")
    zero = cx.k(0, x)
    return [cx.call("math.where", cx.call("math.equal", norm, zero), zero, cx.call("math.div", x, norm))]


@handles("MeanVarianceNormalization")
def _mvn(cx: Cx):
    x = cx.v(0)
    axes = [_norm_axis(a, x.ndim) for a in cx.attr("axes", [0, 2, 3])]
    mean = cx.call("reduce.mean", x, axes=axes, keepdims=True)
    ex2 = cx.call("reduce.mean", cx.call("math.mul", x, x), axes=axes, keepdims=True)
    std = cx.call("math.sqrt", cx.call("math.sub", ex2, cx.call("math.mul", mean, mean)))
    return [cx.call("math.div", cx.call("math.sub", x, mean), cx.call("math.add", std, cx.k(1e-9, std)))]


# ---- convolution and pooling ----------------------------------------------------------------
def _spatial_pads(cx: Cx, in_sp, kernel, strides, dilations) -> list[int]:
    """ONNX pads [begin..., end...] for the node's auto_pad / pads."""
    nd = len(in_sp)
    auto = cx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for i in range(nd):
            out = -(-in_sp[i] // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_sp[i], 0)
            small = total // 2
            begins.append(small if auto == "SAME_UPPER" else total - small)
            ends.append(total - begins[-1])
        return begins + ends
    if auto == "VALID":
        return [0] * (2 * nd)
    return list(cx.attr("pads", [0] * (2 * nd)))


def _pad_spatial(cx: Cx, x: Value, pads: list[int], value: float) -> Value:
    nd = len(pads) // 2
    full = [0, 0, 0, 0]
    for i in range(nd):
        full += [pads[i], pads[nd + i]]
    return cx.call("shape.pad", x, pads=full, value=value)


@handles("Conv")
def _conv(cx: Cx):
    x, w = cx.v(0), cx.v(1)
    nd = x.ndim - 2
    if nd not in (1, 2):
        raise cx.fail(f"{nd}-D convolution")
    kernel = list(w.shape[2:])
    strides = list(cx.attr("strides", [1] * nd))
    dil = list(cx.attr("dilations", [1] * nd))
    pads = _spatial_pads(cx, x.shape[2:], kernel, strides, dil)
    if pads[:nd] != pads[nd:]:
        x = _pad_spatial(cx, x, pads, 0.0)
        pads = [0] * (2 * nd)
    op = "nn.conv1d" if nd == 1 else "nn.conv2d"
    args = [x, w] + ([cx.v(2)] if cx.has(2) else [])
    return [cx.call(op, *args, stride=strides, padding=pads[:nd], dilation=dil, groups=cx.attr("group", 1))]


@handles("ConvTranspose")
def _conv_transpose(cx: Cx):
    """The adjoint of convolution, as a convolution: dilate the input by the stride, pad it by
    (effective kernel - 1 - pads), convolve with the spatially flipped kernel whose in/out
    channels are swapped per group."""
    x, w = cx.v(0), cx.v(1)
    nd = x.ndim - 2
    if nd not in (1, 2):
        raise cx.fail(f"{nd}-D transposed convolution")
    c_in = x.shape[1]
    g = cx.attr("group", 1)
    kernel = list(w.shape[2:])
    o = w.shape[1] * g
    strides = list(cx.attr("strides", [1] * nd))
    dil = list(cx.attr("dilations", [1] * nd))
    out_pad = list(cx.attr("output_padding", [0] * nd))
    k_eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil, strict=True)]
    in_sp = x.shape[2:]
    auto = cx.attr("auto_pad", "NOTSET")
    out_shape = cx.attr("output_shape")
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = list(out_shape)[-nd:] if out_shape is not None else [i * s for i, s in zip(in_sp, strides, strict=True)]
        begins, ends = [], []
        for i in range(nd):
            total = strides[i] * (in_sp[i] - 1) + out_pad[i] + k_eff[i] - target[i]
            if auto == "SAME_UPPER":
                begins.append(total // 2)
                ends.append(total - total // 2)
            else:
                begins.append(total - total // 2)
                ends.append(total // 2)
        pads = begins + ends
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    else:
        pads = list(cx.attr("pads", [0] * (2 * nd)))
    # 1. dilate the input by the stride (zeros between elements)
    for i, s in enumerate(strides):
        if s == 1:
            continue
        ax = 2 + i
        shp = list(x.shape)
        y = cx.call("shape.expand_dims", x, axes=[ax + 1])
        widths = [0] * (2 * y.ndim)
        widths[2 * (ax + 1) + 1] = s - 1
        y = cx.call("shape.pad", y, pads=widths)
        shp[ax] = shp[ax] * s
        y = cx.call("shape.reshape", y, shape=shp)
        x = cx.call("shape.slice", y, starts=[0], ends=[(in_sp[i] - 1) * s + 1], axes=[ax])
    # 2. pad (or crop) each side by k_eff - 1 - pad (+ output_padding at the end)
    lo = [k_eff[i] - 1 - pads[i] for i in range(nd)]
    hi = [k_eff[i] - 1 - pads[nd + i] + out_pad[i] for i in range(nd)]
    if any(v < 0 for v in lo + hi):
        starts = [max(-v, 0) for v in lo]
        ends = [x.shape[2 + i] - max(-hi[i], 0) for i in range(nd)]
        x = cx.call("shape.slice", x, starts=starts, ends=ends, axes=list(range(2, 2 + nd)))
        lo, hi = [max(v, 0) for v in lo], [max(v, 0) for v in hi]
    if any(lo + hi):
        x = _pad_spatial(cx, x, lo + hi, 0.0)
    # 3. the flipped, channel-swapped kernel [O, C/g, *K]
    wg = cx.call("shape.reshape", w, shape=(g, c_in // g, o // g, *kernel))
    wg = cx.call("shape.transpose", wg, perm=[0, 2, 1] + list(range(3, 3 + nd)))
    wf = cx.call("shape.flip", cx.call("shape.reshape", wg, shape=(o, c_in // g, *kernel)), axes=list(range(2, 2 + nd)))
    op = "nn.conv1d" if nd == 1 else "nn.conv2d"
    args = [x, wf] + ([cx.v(2)] if cx.has(2) else [])
    return [cx.call(op, *args, stride=[1] * nd, padding=[0] * nd, dilation=dil, groups=g)]


def _pool_setup(cx: Cx, x: Value):
    nd = x.ndim - 2
    if nd not in (1, 2):
        raise cx.fail(f"{nd}-D pooling")
    kernel = list(cx.attr("kernel_shape"))
    strides = list(cx.attr("strides", [1] * nd))
    dil = list(cx.attr("dilations", [1] * nd))
    if any(d != 1 for d in dil):
        raise cx.fail("dilated pooling")
    pads = _spatial_pads(cx, x.shape[2:], kernel, strides, dil)
    if cx.attr("ceil_mode", 0):
        for i in range(nd):
            span = x.shape[2 + i] + pads[i] + pads[nd + i] - kernel[i]
            if span % strides[i]:
                raise cx.fail("ceil_mode changing the output size")
    return nd, kernel, strides, pads


def _as_2d(cx: Cx, x: Value, nd: int, kernel, strides, pads):
    if nd == 2:
        return x, kernel, strides, pads
    n, c, length = x.shape
    return (cx.call("shape.reshape", x, shape=(n, c, 1, length)), [1] + kernel, [1] + strides, [0, pads[0], 0, pads[1]])


def _from_2d(cx: Cx, y: Value, nd: int) -> Value:
    if nd == 2:
        return y
    n, c, _, length = y.shape
    return cx.call("shape.reshape", y, shape=(n, c, length))


@handles("MaxPool")
def _max_pool(cx: Cx):
    x = cx.v(0)
    if len([o for o in cx.node.output if o]) > 1:
        raise cx.fail("the Indices output")
    nd, kernel, strides, pads = _pool_setup(cx, x)
    x2, k2, s2, p2 = _as_2d(cx, x, nd, kernel, strides, pads)
    if p2[:2] != p2[2:] or any(p * 2 > k for p, k in zip(p2[:2], k2, strict=True)):
        x2 = _pad_spatial(cx, x2, p2, -math.inf)
        p2 = [0, 0, 0, 0]
    y = cx.call("nn.max_pool2d", x2, kernel=k2, stride=s2, padding=p2[:2])
    return [_from_2d(cx, y, nd)]


@handles("AveragePool")
def _avg_pool(cx: Cx):
    x = cx.v(0)
    nd, kernel, strides, pads = _pool_setup(cx, x)
    x2, k2, s2, p2 = _as_2d(cx, x, nd, kernel, strides, pads)
    include = cx.attr("count_include_pad", 0)
    if any(p2):
        padded = _pad_spatial(cx, x2, p2, 0.0)
        total = cx.call("nn.avg_pool2d", padded, kernel=k2, stride=s2)
        if not include:
            ones = _pad_spatial(cx, cx.const(np.ones(x2.shape, x.dtype.numpy)), p2, 0.0)
            total = cx.call("math.div", total, cx.call("nn.avg_pool2d", ones, kernel=k2, stride=s2))
    else:
        total = cx.call("nn.avg_pool2d", x2, kernel=k2, stride=s2)
    return [_from_2d(cx, total, nd)]


@handles("LpPool")
def _lp_pool(cx: Cx):
    x = cx.v(0)
    p = cx.attr("p", 2)
    nd, kernel, strides, pads = _pool_setup(cx, x)
    x2, k2, s2, p2 = _as_2d(cx, x, nd, kernel, strides, pads)
    powered = cx.call("math.pow", cx.call("math.abs", x2), cx.k(p, x2))
    if any(p2):
        powered = _pad_spatial(cx, powered, p2, 0.0)
    total = cx.call("math.mul", cx.call("nn.avg_pool2d", powered, kernel=k2, stride=s2), cx.k(k2[0] * k2[1], x2))
    return [_from_2d(cx, cx.call("math.pow", total, cx.k(1.0 / p, x2)), nd)]


@handles("Mod")
def _mod(cx: Cx):
    # Folded when both operands are known (shape arithmetic); caramba has no remainder op.
    raise cx.fail("remainder of values computed at run time (caramba has no remainder op)")


@handles("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(cx: Cx):
    x = cx.v(0)
    op = "reduce.mean" if cx.op == "GlobalAveragePool" else "reduce.max"
    return [cx.call(op, x, axes=list(range(2, x.ndim)), keepdims=True)]


# ---- attention ------------------------------------------------------------------------------
def _neg_inf_where(cx: Cx, allowed: Value, like: Value) -> Value:
    return cx.call("math.where", allowed, cx.k(0.0, like), cx.k(-np.inf, like))


def _guarded_softmax(cx: Cx, x: Value) -> Value:
    """Softmax over the last axis that gives 0 (not NaN) on rows that are all -inf."""
    m = cx.call("reduce.max", x, axes=[-1], keepdims=True)
    safe = cx.call("math.where", cx.call("math.equal", m, cx.k(-np.inf, m)), cx.k(0.0, m), m)
    e = cx.call("math.exp", cx.call("math.sub", x, safe))
    total = cx.call("reduce.sum", e, axes=[-1], keepdims=True)
    total = cx.call("math.where", cx.call("math.equal", total, cx.k(0.0, total)), cx.k(1.0, total), total)
    return cx.call("math.div", e, total)


@handles("Attention")
def _attention(cx: Cx):
    """ONNX Attention (opset 23+), as its reference: scaled QK^T, softcap, causal/mask bias,
    GQA head repetition, past key/value concatenation, fully-masked rows giving 0."""
    q, k, v = cx.v(0), cx.v(1), cx.v(2)
    if cx.has(6):
        raise cx.fail("nonpad_kv_seqlen (per-batch cache lengths)")
    if cx.attr("left_window_size", -1) >= 0 or cx.attr("right_window_size", -1) >= 0:
        raise cx.fail("sliding windows")
    d = q.dtype
    three_d = q.ndim == 3
    if three_d:
        hq, hk = cx.attr("q_num_heads"), cx.attr("kv_num_heads")
        if hq is None or hk is None:
            raise cx.fail("3-D inputs without q_num_heads/kv_num_heads")

        def heads(x: Value, h: int) -> Value:
            b, s, hidden = x.shape
            return cx.call("shape.transpose", cx.call("shape.reshape", x, shape=(b, s, h, hidden // h)), perm=[0, 2, 1, 3])

        q, k, v = heads(q, hq), heads(k, hk), heads(v, hk)
    scale = cx.attr("scale")
    scale = 1.0 / math.sqrt(q.shape[3]) if scale is None else float(scale)
    root = np.asarray(math.sqrt(scale)).astype(d.numpy)  # sqrt(scale) on both Q and K, as the reference
    past = 0
    if cx.has(4):
        past = cx.t(4).shape[2]
        k = cx.call("shape.concat", cx.v(4), k, axis=2)
    if cx.has(5):
        v = cx.call("shape.concat", cx.v(5), v, axis=2)
    present_k, present_v = k, v
    sq, skv = q.shape[2], k.shape[2]
    bias: Value | None = None
    if cx.has(3):
        mask = cx.v(3)
        pad = skv - mask.shape[-1]
        if pad > 0:
            pads = [0] * (2 * mask.ndim)
            pads[-1] = pad
            mask = cx.call("shape.pad", mask, pads=pads, value=0.0 if mask.dtype is DType.bool else -math.inf)
        bias = _neg_inf_where(cx, mask, q) if mask.dtype is DType.bool else mask
    if cx.attr("is_causal", 0):
        i = np.arange(sq).reshape(sq, 1)
        j = np.arange(skv).reshape(1, skv)
        causal = cx.const(np.where(j <= i + past, 0.0, -np.inf).astype(d.numpy))
        bias = causal if bias is None else cx.call("math.add", bias, causal)
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk and hq % hk == 0:
        reps = hq // hk

        def repeat(x: Value) -> Value:
            b, h, s, e = x.shape
            x = cx.call("shape.broadcast_to", cx.call("shape.expand_dims", x, axes=[2]), shape=(b, h, reps, s, e))
            return cx.call("shape.reshape", x, shape=(b, h * reps, s, e))

        k, v = repeat(k), repeat(v)
    rk = cx.const(root)
    qk = cx.call("linalg.matmul", cx.call("math.mul", q, rk), cx.call("shape.transpose", cx.call("math.mul", k, rk), perm=[0, 1, 3, 2]))
    softcap = float(cx.attr("softcap", 0.0))
    if softcap > 0:
        qk = cx.call("math.mul", cx.call("math.tanh", cx.call("math.div", qk, cx.k(softcap, qk))), cx.k(softcap, qk))
    with_bias = qk if bias is None else cx.call("math.add", qk, bias)
    mode = cx.attr("qk_matmul_output_mode", 0)
    scores = with_bias
    sp = cx.attr("softmax_precision")
    if sp is not None and caramba_dtype(sp, "softmax_precision") is not d:
        scores = cx.call("math.cast", scores, dtype=caramba_dtype(sp, "softmax_precision"))
    probs = _guarded_softmax(cx, scores)
    if bias is not None:
        dead = cx.call("math.equal", cx.call("reduce.max", bias, axes=[-1], keepdims=True), cx.k(-np.inf, bias))
        probs = cx.call("math.where", dead, cx.k(0.0, probs), probs)
    if probs.dtype is not d:
        probs = cx.call("math.cast", probs, dtype=d)
    y = cx.call("linalg.matmul", probs, v)
    if three_d:
        b, h, s, e = y.shape
        y = cx.call("shape.reshape", cx.call("shape.transpose", y, perm=[0, 2, 1, 3]), shape=(b, s, h * e))
    qk_out = {2: with_bias, 3: probs}.get(mode, qk)
    return [y, present_k, present_v, qk_out]


# ---- losses ---------------------------------------------------------------------------------
def _nll(cx: Cx, logp: Value, labels: Value, weights: Value | None) -> Value:
    """The NegativeLogLikelihoodLoss of log-probabilities logp [N, C, d...] and labels [N, d...]."""
    c = logp.shape[1]
    ignore = cx.attr("ignore_index")
    lab = cx.call("math.cast", labels, dtype=DType.int64) if labels.dtype is not DType.int64 else labels
    mask = None
    if ignore is not None:
        mask = cx.call("math.not_equal", lab, cx.const(np.int64(ignore)))
        lab = cx.call("math.where", mask, lab, cx.const(np.int64(0)))
    shape = [1] * logp.ndim
    shape[1] = c
    hit = cx.call("math.equal", cx.call("shape.expand_dims", lab, axes=[1]), cx.const(np.arange(c, dtype=np.int64).reshape(shape)))
    zero = cx.k(0, logp)
    picked = cx.call("reduce.sum", cx.call("math.where", hit, logp, zero), axes=[1])
    loss = cx.call("math.neg", picked)
    w = None
    if weights is not None:
        w = cx.call("shape.gather", weights, lab, axis=0)
    if mask is not None:
        m = cx.call("math.cast", mask, dtype=logp.dtype)
        w = m if w is None else cx.call("math.mul", w, m)
    if w is not None:
        loss = cx.call("math.mul", loss, w)
    how = cx.attr("reduction", "mean")
    if how == "none":
        return loss
    total = cx.call("reduce.sum", loss)
    if how == "sum":
        return total
    if w is None:
        return cx.call("math.div", total, cx.k(int(np.prod(loss.shape, dtype=np.int64)), total))
    return cx.call("math.div", total, cx.call("reduce.sum", w))


@handles("NegativeLogLikelihoodLoss")
def _nll_loss(cx: Cx):
    return [_nll(cx, cx.v(0), cx.v(1), cx.v(2) if cx.has(2) else None)]


@handles("SoftmaxCrossEntropyLoss")
def _sce(cx: Cx):
    scores = cx.v(0)
    logp = cx.call("nn.log_softmax", scores, axis=1)
    loss = _nll(cx, logp, cx.v(1), cx.v(2) if cx.has(2) else None)
    return [loss, logp]


__all__ = ["HANDLERS", "ImportUnsupported", "StaticInputRequired", "coverage", "import_model"]
