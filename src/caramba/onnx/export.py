"""Export: caramba ``ir.Graph`` -> ONNX model (opset 18), shared by the onnx backend.

ONNX graphs are pure, so resident state becomes graph inputs (the values read) and graph
outputs (the values written); whoever runs the model stores the written values back.

Each rule emits ONNX nodes for one caramba op. Rules follow the cpu reference formulas
(operation order included) so both backends round alike. Where a runtime lacks an accurate
kernel for a dtype, a ``Profile`` says so and the rule emits a decomposition into ops it
does have (``special.py``); it never computes in a narrower type. Float16 values taking a
decomposition are computed in float32 and rounded once at the end (more precise, never less).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import helper

from caramba.errors import UnsupportedOperation
from caramba.ir.dtypes import DType
from caramba.ir.graph import Graph, Node, Ref
from caramba.ir.types import ValueType
from caramba.onnx import special
from caramba.onnx.emitter import IR_VERSION, OPSET, TO_ONNX, Emitter
from caramba.ops._define import norm_axes, norm_axis
from caramba.ops.attention import rope_tables
from caramba.ops.shape import slice_plan, split_sizes


@dataclass(frozen=True)
class Profile:
    """What a target runtime computes natively and accurately: ``missing`` lists (ONNX op,
    dtype) pairs it has no kernel for (or only an inaccurate one), which rules decompose."""

    name: str
    missing: frozenset[tuple[str, DType]] = frozenset()

    def native(self, onnx_op: str, d: DType) -> bool:
        return (onnx_op, d) not in self.missing


STANDARD = Profile("onnx")
# ONNX Runtime's CPU execution provider: no float64 Erf, Conv or AveragePool kernels; its
# float64 Sin/Cos are off by up to ~1e5 ulps in [-10, 10] (measured, onnxruntime 1.32).
ORT_CPU = Profile(
    "onnxruntime-cpu",
    frozenset({
        ("Erf", DType.float64), ("Conv", DType.float64), ("AveragePool", DType.float64),
        ("Sin", DType.float64), ("Cos", DType.float64),
    }),
)


@dataclass
class Exported:
    """An exported graph: the model and how caramba names map to its ONNX value names."""

    model: Any
    inputs: dict[str, str] = field(default_factory=dict)  # graph input id -> onnx input
    state_inputs: dict[str, str] = field(default_factory=dict)  # state read -> onnx input
    outputs: dict[str, str] = field(default_factory=dict)  # graph output -> onnx output
    state_outputs: dict[str, str] = field(default_factory=dict)  # state written -> onnx output


Rule = Callable[["Ctx", Node, list[str], tuple[ValueType, ...]], "str | list[str]"]
RULES: dict[str, Rule] = {}


def rule(*op_ids: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for op_id in op_ids:
            RULES[op_id] = fn
        return fn

    return deco


class Ctx:
    """What rules use: the emitter, the target profile, and small helpers."""

    def __init__(self, e: Emitter, profile: Profile) -> None:
        self.e = e
        self.profile = profile

    def op(self, *args: Any, **kw: Any) -> Any:
        return self.e.op(*args, **kw)

    def k(self, v: Any, d: DType) -> str:
        return self.e.scalar(v, d)

    def ints(self, v: Sequence[int]) -> str:
        return self.e.ints(v)

    def cast(self, x: str, d: DType) -> str:
        return self.e.cast(x, d)

    def upcast(self, x: str, d: DType) -> tuple[str, DType]:
        """float16 -> float32 for decompositions (IsInf and friends have no float16 kernels)."""
        if d is DType.float16:
            return self.cast(x, DType.float32), DType.float32
        return x, d

    def downcast(self, x: str, d: DType, was: DType) -> str:
        return self.cast(x, was) if d is not was else x

    def reduce(self, op: str, x: str, axes: Sequence[int], keepdims: bool) -> str:
        if not axes:  # reducing over no axes is the identity (rank-0 inputs)
            return self.op("Identity", x)
        return self.op(op, x, self.ints(axes), keepdims=int(keepdims))


def export_graph(graph: Graph, profile: Profile = STANDARD, name: str | None = None) -> Exported:
    """Lower ``graph`` to an ONNX ModelProto for ``profile``; raises UnsupportedOperation for ops
    without a rule."""
    e = Emitter()
    ctx = Ctx(e, profile)
    out = Exported(None)
    env: dict[Ref, str] = {}
    current: dict[str, str] = {}
    g_inputs, g_outputs = [], []

    def value_info(n: str, t: ValueType):
        return helper.make_tensor_value_info(n, TO_ONNX[t.dtype], list(t.shape))

    for node in graph.nodes:
        e.origin = node.id
        if node.op == "graph.input":
            n = e.fresh(node.id)
            out.inputs[node.id] = n
            g_inputs.append(value_info(n, node.types[0]))
            env[Ref(node.id)] = n
        elif node.op == "graph.constant":
            env[Ref(node.id)] = e.const(node.attrs["value"], hint="const")
        elif node.op == "state.read":
            sname = node.attrs["name"]
            if sname not in current:
                n = e.fresh(f"state.{sname}")
                out.state_inputs[sname] = n
                g_inputs.append(value_info(n, graph.state[sname].type))
                current[sname] = n
            env[Ref(node.id)] = current[sname]
        elif node.op == "state.write":
            current[node.attrs["name"]] = env[node.inputs[0]]
        else:
            fn = RULES.get(node.op)
            if fn is None:
                raise UnsupportedOperation(f"no ONNX export rule for {node.op}", node=node.id, op=node.op)
            ins = tuple(graph.type_of(r) for r in node.inputs)
            res = fn(ctx, node, [env[r] for r in node.inputs], ins)
            res = [res] if isinstance(res, str) else list(res)
            for i, n in enumerate(res):
                env[Ref(node.id, i)] = n
    e.origin = None
    for oname, ref in graph.outputs.items():
        n = e.op("Identity", env[ref], hint=f"out.{oname}")
        out.outputs[oname] = n
        g_outputs.append(value_info(n, graph.type_of(ref)))
    for sname in dict.fromkeys(n.attrs["name"] for n in graph.nodes if n.op == "state.write"):
        n = e.op("Identity", current[sname], hint=f"state_out.{sname}")
        out.state_outputs[sname] = n
        g_outputs.append(value_info(n, graph.state[sname].type))
    g = helper.make_graph(e.nodes, name or graph.name, g_inputs, g_outputs, initializer=e.initializers)
    out.model = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION, producer_name="caramba"
    )
    return out


# ---- math ---------------------------------------------------------------------------------
_BINARY = {
    "math.add": "Add", "math.sub": "Sub", "math.mul": "Mul", "math.div": "Div", "math.pow": "Pow",
    "math.maximum": "Max", "math.minimum": "Min", "math.equal": "Equal",
    "math.logical_and": "And", "math.logical_or": "Or",
}
_UNARY = {
    "math.neg": "Neg", "math.abs": "Abs", "math.exp": "Exp", "math.log": "Log",
    "math.sqrt": "Sqrt", "math.reciprocal": "Reciprocal",
    "math.tanh": "Tanh", "math.floor": "Floor", "math.ceil": "Ceil", "math.round": "Round",
    "math.logical_not": "Not", "activation.relu": "Relu",
}
_COMPARE = {"math.less": "Less", "math.less_equal": "LessOrEqual", "math.greater": "Greater", "math.greater_equal": "GreaterOrEqual"}


@rule(*_BINARY)
def _binary(c: Ctx, node, xs, ins):
    return c.op(_BINARY[node.op], *xs)


@rule(*_UNARY)
def _unary(c: Ctx, node, xs, ins):
    return c.op(_UNARY[node.op], xs[0])


@rule("math.sign")
def _sign(c: Ctx, node, xs, ins):
    y = c.op("Sign", xs[0])
    if ins[0].dtype is DType.float16:  # ORT's float16 Sign maps NaN to 0
        y = c.op("Where", c.op("IsNaN", xs[0]), xs[0], y)
    return y


@rule("math.not_equal")
def _not_equal(c: Ctx, node, xs, ins):
    return c.op("Not", c.op("Equal", *xs))


@rule(*_COMPARE)
def _compare(c: Ctx, node, xs, ins):
    if ins[0].dtype is DType.bool:  # ONNX orders numbers only: False < True as 0 < 1
        xs = [c.cast(x, DType.uint8) for x in xs]
    return c.op(_COMPARE[node.op], *xs)


@rule("math.where")
def _where(c: Ctx, node, xs, ins):
    cond, x, y = xs
    if ins[1].dtype is DType.bool:  # Where has no bool kernel: (c and x) or (not c and y)
        return c.op("Or", c.op("And", cond, x), c.op("And", c.op("Not", cond), y))
    if ins[1].dtype.is_float:
        return special.where_signed(c.e, cond, x, y, ins[1].dtype)
    return c.op("Where", cond, x, y)


@rule("math.square")
def _square(c: Ctx, node, xs, ins):
    return c.op("Mul", xs[0], xs[0])


@rule("math.rsqrt")
def _rsqrt(c: Ctx, node, xs, ins):
    return c.op("Reciprocal", c.op("Sqrt", xs[0]))


@rule("math.erf")
def _erf(c: Ctx, node, xs, ins):
    d = ins[0].dtype
    if c.profile.native("Erf", d):
        return c.op("Erf", xs[0])
    return special.erf(c.e, xs[0], d)


@rule("math.sin", "math.cos")
def _sin_cos(c: Ctx, node, xs, ins):
    op, port = ("Sin", special.sin) if node.op == "math.sin" else ("Cos", special.cos)
    d = ins[0].dtype
    if c.profile.native(op, d):
        return c.op(op, xs[0])
    # Profiles mark only float64 Sin/Cos missing: fdlibm's Cody-Waite / Payne-Hanek reduction
    # and kernels (special.py), within 1 ulp for every finite x.
    return port(c.e, xs[0], d)


@rule("math.log1p")
def _log1p(c: Ctx, node, xs, ins):
    x, d = c.upcast(xs[0], ins[0].dtype)
    return c.downcast(special.log1p(c.e, x, d), d, ins[0].dtype)


@rule("math.expm1")
def _expm1(c: Ctx, node, xs, ins):
    x, d = c.upcast(xs[0], ins[0].dtype)
    return c.downcast(special.expm1(c.e, x, d), d, ins[0].dtype)


@rule("math.clamp")
def _clamp(c: Ctx, node, xs, ins):
    d = ins[0].dtype
    npd = d.numpy
    lo, hi = node.attrs["min"], node.attrs["max"]
    if d.is_int:
        info = np.iinfo(npd)
        lo = None if lo is None else min(max(np.ceil(lo), info.min), info.max)
        hi = None if hi is None else max(min(np.floor(hi), info.max), info.min)
    x = xs[0]
    if lo is None and hi is None:
        return c.op("Identity", x)
    if lo is not None:
        x = c.op("Max", x, c.k(lo, d))
    if hi is not None:
        x = c.op("Min", x, c.k(hi, d))
    return x


@rule("math.cast")
def _cast(c: Ctx, node, xs, ins):
    return c.cast(xs[0], node.attrs["dtype"])


# ---- activation ---------------------------------------------------------------------------
SQRT1_2 = math.sqrt(0.5)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def sigmoid(c: Ctx, x0: str, d0: DType) -> str:
    # ORT's Sigmoid is a few ulps off in float64 and flushes float32 tails below ~1e-30 to 0.
    x, d = c.upcast(x0, d0)
    return c.downcast(special.sigmoid(c.e, x, d), d, d0)


def silu(c: Ctx, x: str, d: DType) -> str:
    return c.op("Mul", x, sigmoid(c, x, d))


@rule("activation.sigmoid")
def _sigmoid(c: Ctx, node, xs, ins):
    return sigmoid(c, xs[0], ins[0].dtype)


@rule("activation.silu")
def _silu(c: Ctx, node, xs, ins):
    return silu(c, xs[0], ins[0].dtype)


@rule("activation.gelu")
def _gelu(c: Ctx, node, xs, ins):
    d0 = ins[0].dtype
    if node.attrs["approximate"] == "tanh":
        # x * sigmoid(2z) == 0.5 x (1 + tanh(z)) without the cancellation in the negative tail.
        x, d = xs[0], d0
        cube = c.op("Mul", c.op("Mul", c.op("Mul", c.k(0.044715, d), x), x), x)
        z2 = c.op("Mul", c.k(2.0 * SQRT_2_OVER_PI, d), c.op("Add", x, cube))
        return c.op("Mul", x, sigmoid(c, z2, d))
    # 0.5 * x * erfc(-x / sqrt 2), evaluated in float64 (Cody's erfc) and rounded once: the
    # erfc form keeps full relative accuracy in the negative tail, where 1 + erf cancels.
    x = xs[0] if d0 is DType.float64 else c.cast(xs[0], DType.float64)
    d = DType.float64
    z = c.op("Mul", c.op("Neg", x), c.k(SQRT1_2, d))
    y = c.op("Mul", c.op("Mul", c.k(0.5, d), x), special.erfc(c.e, z, d))
    return y if d0 is DType.float64 else c.cast(y, d0)


@rule("activation.leaky_relu")
def _leaky(c: Ctx, node, xs, ins):
    d = ins[0].dtype
    x = xs[0]
    return c.op("Where", c.op("Greater", x, c.k(0, d)), x, c.op("Mul", c.k(node.attrs["alpha"], d), x))


def _elu_like(c: Ctx, x0: str, d0: DType, alpha: float, scale: float | None) -> str:
    x, d = c.upcast(x0, d0)
    neg = c.op("Mul", c.k(alpha, d), special.expm1(c.e, c.op("Min", x, c.k(0, d)), d))
    y = c.op("Where", c.op("Greater", x, c.k(0, d)), x, neg)
    if scale is not None:
        y = c.op("Mul", c.k(scale, d), y)
    return c.downcast(y, d, d0)


@rule("activation.elu")
def _elu(c: Ctx, node, xs, ins):
    return _elu_like(c, xs[0], ins[0].dtype, node.attrs["alpha"], None)


@rule("activation.selu")
def _selu(c: Ctx, node, xs, ins):
    return _elu_like(c, xs[0], ins[0].dtype, SELU_ALPHA, SELU_SCALE)


@rule("activation.softplus")
def _softplus(c: Ctx, node, xs, ins):
    x, d = c.upcast(xs[0], ins[0].dtype)
    beta = node.attrs["beta"]
    bx = c.op("Mul", c.k(beta, d), x)
    tail = special.log1p(c.e, c.op("Exp", c.op("Neg", c.op("Abs", bx))), d)
    y = c.op("Div", c.op("Add", c.op("Max", bx, c.k(0, d)), tail), c.k(beta, d))
    return c.downcast(y, d, ins[0].dtype)


@rule("activation.swiglu")
def _swiglu(c: Ctx, node, xs, ins):
    d = ins[0].dtype
    if len(xs) == 2:
        return c.op("Mul", silu(c, xs[0], d), xs[1])
    half = ins[0].shape[-1] // 2
    gate, up = c.op("Split", xs[0], c.ints([half, half]), axis=-1, outputs=2)
    return c.op("Mul", silu(c, gate, d), up)


# What a lowering checks at run time, by op (ONNX has no assert: a check is a Gather whose index
# goes out of range when it fails, and the onnx runner adds this text to ORT's bare message).
RUNTIME_CHECKS: dict[str, str] = {}


# ---- linalg -------------------------------------------------------------------------------
@rule("linalg.matmul")
def _matmul(c: Ctx, node, xs, ins):
    if ins[1].rank == 1 and ins[0].rank >= 2:
        # a matrix times a vector as [.., n] @ [n, 1], then the 1 dropped: ONNX Runtime (1.32, at
        # its default optimization level) fuses MatMul(Transpose(A), v) with a 1-D v into wrong
        # values; with a 2-D right operand it is right
        column = c.op("Unsqueeze", xs[1], c.ints([1]))
        return c.op("Squeeze", c.op("MatMul", xs[0], column), c.ints([-1]))
    return c.op("MatMul", *xs)


@rule("linalg.outer")
def _outer(c: Ctx, node, xs, ins):
    return c.op("Mul", c.op("Unsqueeze", xs[0], c.ints([1])), c.op("Unsqueeze", xs[1], c.ints([0])))


# ---- reduce -------------------------------------------------------------------------------
def _axes(node, ins):
    return norm_axes(node.attrs["axes"], ins[0].rank), node.attrs["keepdims"]


def _count(ins, axes) -> int:
    return int(np.prod([ins[0].shape[a] for a in axes], dtype=np.int64))


@rule("reduce.sum", "reduce.prod")
def _sum_prod(c: Ctx, node, xs, ins):
    axes, keep = _axes(node, ins)
    op = "ReduceSum" if node.op == "reduce.sum" else "ReduceProd"
    d = ins[0].dtype
    if d in (DType.int8, DType.uint8):  # no 8-bit kernels: exact modular arithmetic in int64
        return c.cast(c.reduce(op, c.cast(xs[0], DType.int64), axes, keep), d)
    return c.reduce(op, xs[0], axes, keep)


@rule("reduce.mean")
def _mean(c: Ctx, node, xs, ins):
    axes, keep = _axes(node, ins)
    d = ins[0].dtype
    # sum / n like NumPy: the mean of an empty axis is 0/0 = NaN (ORT's ReduceMean gives 0)
    return c.op("Div", c.reduce("ReduceSum", xs[0], axes, keep), c.k(_count(ins, axes), d))


def _any_nan(c: Ctx, x: str, axes, keep) -> str:
    flags = c.cast(c.op("IsNaN", x), DType.uint8)
    return c.cast(c.reduce("ReduceMax", flags, axes, keep), DType.bool)


@rule("reduce.max", "reduce.min")
def _max_min(c: Ctx, node, xs, ins):
    axes, keep = _axes(node, ins)
    op = "ReduceMax" if node.op == "reduce.max" else "ReduceMin"
    d = ins[0].dtype
    r = c.reduce(op, xs[0], axes, keep)
    if d.is_float:  # ORT's ReduceMax/Min skip NaN; NumPy's (and caramba's) propagate it
        r = c.op("Where", _any_nan(c, xs[0], axes, keep), c.k(np.nan, d), r)
    return r


@rule("reduce.variance")
def _variance(c: Ctx, node, xs, ins):
    axes, keep = _axes(node, ins)
    d = ins[0].dtype
    n = _count(ins, axes)
    mu = c.op("Div", c.reduce("ReduceSum", xs[0], axes, True), c.k(n, d))
    cen = c.op("Sub", xs[0], mu)
    ss = c.reduce("ReduceSum", c.op("Mul", cen, cen), axes, keep)
    return c.op("Div", ss, c.k(max(n - node.attrs["correction"], 0), d))


def logsumexp(c: Ctx, x0: str, t: ValueType, axes, keep) -> str:
    x, d = c.upcast(x0, t.dtype)
    if t.size == 0:
        m = c.k(np.zeros((1,) * t.rank), d)
    else:
        m = c.reduce("ReduceMax", x, axes, True)
        finite = c.op("Not", c.op("Or", c.op("IsInf", m), c.op("IsNaN", m)))
        m = c.op("Where", finite, m, c.k(0, d))  # all -inf rows give -inf, not NaN
    out = c.op("Add", c.op("Log", c.reduce("ReduceSum", c.op("Exp", c.op("Sub", x, m)), axes, True)), m)
    if not keep and axes:
        out = c.op("Squeeze", out, c.ints(axes))
    return c.downcast(out, d, t.dtype)


@rule("reduce.logsumexp")
def _lse(c: Ctx, node, xs, ins):
    axes, keep = _axes(node, ins)
    return logsumexp(c, xs[0], ins[0], axes, keep)


@rule("reduce.argmax", "reduce.argmin")
def _arg(c: Ctx, node, xs, ins):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    keep = int(node.attrs["keepdims"])
    op = "ArgMax" if node.op == "reduce.argmax" else "ArgMin"
    r = c.op(op, xs[0], axis=axis, keepdims=keep)
    if ins[0].dtype.is_float:  # NumPy returns the first NaN; ORT skips NaN
        flags = c.cast(c.op("IsNaN", xs[0]), DType.uint8)
        first_nan = c.op("ArgMax", flags, axis=axis, keepdims=keep)
        r = c.op("Where", _any_nan(c, xs[0], [axis], bool(keep)), first_nan, r)
    return r


# ---- shape --------------------------------------------------------------------------------
def reshape(c: Ctx, x: str, shape: Sequence[int]) -> str:
    # allowzero: a 0 in the shape is a zero-size dimension, not "copy the input's dimension"
    return c.op("Reshape", x, c.ints(shape), allowzero=1)


@rule("shape.reshape", "shape.expand_dims", "shape.squeeze")
def _reshape(c: Ctx, node, xs, ins):
    return reshape(c, xs[0], node.types[0].shape)


@rule("shape.transpose")
def _transpose(c: Ctx, node, xs, ins):
    perm = node.attrs["perm"]
    perm = [norm_axis(p, ins[0].rank) for p in perm] if perm is not None else list(reversed(range(ins[0].rank)))
    return c.op("Transpose", xs[0], perm=perm)


@rule("shape.concat")
def _concat(c: Ctx, node, xs, ins):
    return c.op("Concat", *xs, axis=norm_axis(node.attrs["axis"], ins[0].rank))


@rule("shape.split")
def _split(c: Ctx, node, xs, ins):
    axis, sizes = split_sizes(ins[0], node.attrs)
    if len(sizes) == 1:
        return [c.op("Identity", xs[0])]
    return c.op("Split", xs[0], c.ints(sizes), axis=axis, outputs=len(sizes))


def slice_(c: Ctx, x: str, t: ValueType, plan: list[tuple[int, int, int]]) -> str:
    starts, ends, axes, steps = [], [], [], []
    for ax, ((s, e, st), dim) in enumerate(zip(plan, t.shape, strict=True)):
        if (s, e, st) == (0, dim, 1):
            continue
        if st < 0 and e < 0:  # "run past index 0": ONNX spells it below -dim
            e = -dim - 1
        starts.append(s), ends.append(e), axes.append(ax), steps.append(st)
    if not axes:
        return c.op("Identity", x)
    return c.op("Slice", x, c.ints(starts), c.ints(ends), c.ints(axes), c.ints(steps))


@rule("shape.slice")
def _slice(c: Ctx, node, xs, ins):
    return slice_(c, xs[0], ins[0], slice_plan(ins[0], node.attrs))


@rule("shape.pad")
def _pad(c: Ctx, node, xs, ins):
    p = node.attrs["pads"]
    r = ins[0].rank
    pads = [p[2 * i] for i in range(r)] + [p[2 * i + 1] for i in range(r)]
    mode = node.attrs["mode"]
    if r == 0:
        return c.op("Identity", xs[0])
    if mode == "constant":
        value = np.array(node.attrs["value"]).astype(ins[0].dtype.numpy)
        return c.op("Pad", xs[0], c.ints(pads), c.e.const(value, hint="padv"), mode="constant")
    return c.op("Pad", xs[0], c.ints(pads), mode=mode)


@rule("shape.broadcast_to")
def _broadcast_to(c: Ctx, node, xs, ins):
    return c.op("Expand", xs[0], c.ints(node.types[0].shape))


@rule("shape.gather")
def _gather(c: Ctx, node, xs, ins):
    # ONNX Gather wraps negative indices and rejects out-of-range ones at run time, as caramba does.
    return c.op("Gather", xs[0], xs[1], axis=norm_axis(node.attrs["axis"], ins[0].rank))


@rule("shape.scatter_add")
def _scatter_add(c: Ctx, node, xs, ins):
    x_t, idx_t = ins[0], ins[1]
    axis = norm_axis(node.attrs["axis"], x_t.rank)
    k = idx_t.rank
    n = x_t.shape[axis]
    # ScatterND on x with `axis` moved to the front; updates with the index dims in front.
    perm_x = [axis] + [i for i in range(x_t.rank) if i != axis]
    perm_u = list(range(axis, axis + k)) + list(range(axis)) + list(range(axis + k, x_t.rank - 1 + k))
    idx = c.cast(xs[1], DType.int64)
    idx = c.op("Where", c.op("Less", idx, c.k(0, DType.int64)), c.op("Add", idx, c.k(n, DType.int64)), idx)
    idx = c.op("Unsqueeze", idx, c.ints([-1]))
    d0 = x_t.dtype
    data, d = c.upcast(_transpose(c, xs[0], perm_x), d0)  # no float16 ScatterND add kernel
    upd, _ = c.upcast(_transpose(c, xs[2], perm_u), d0)  # a 0-d index into a vector: a 0-d update
    out = c.op("ScatterND", data, idx, upd, reduction="add")
    inv = list(np.argsort(perm_x))
    return c.downcast(_transpose(c, out, [int(i) for i in inv]), d, d0)


def _transpose(c: Ctx, x: str, perm: list[int]) -> str:
    """Transpose, or nothing for the identity (ONNX cannot type an empty ``perm``: a scalar)."""
    return x if perm == sorted(perm) else c.op("Transpose", x, perm=perm)


@rule("shape.iota")
def _iota(c: Ctx, node, xs, ins):
    t = node.types[0]
    if t.rank == 0:
        return c.op("Identity", c.e.const(np.zeros((), t.dtype.numpy), hint="iota"))
    axis = norm_axis(node.attrs["axis"], t.rank)
    view = [1] * t.rank
    view[axis] = t.shape[axis]
    value = np.broadcast_to(np.arange(t.shape[axis]).reshape(view), t.shape).astype(t.dtype.numpy)
    return c.op("Identity", c.e.const(value, hint="iota"))


@rule("shape.upsample_nearest")
def _upsample(c: Ctx, node, xs, ins):
    scales = node.attrs["scales"]
    shape = ins[0].shape
    k = len(shape) - len(scales)
    inter = list(shape[:k])
    expanded = list(shape[:k])
    for d, s in zip(shape[k:], scales, strict=True):
        inter += [d, 1]
        expanded += [d, s]
    y = c.op("Expand", reshape(c, xs[0], inter), c.ints(expanded))
    return reshape(c, y, node.types[0].shape)


@rule("shape.view_as_heads")
def _view_as_heads(c: Ctx, node, xs, ins):
    b, s, d = ins[0].shape
    h = node.attrs["num_heads"]
    return c.op("Transpose", reshape(c, xs[0], [b, s, h, d // h]), perm=[0, 2, 1, 3])


@rule("shape.merge_heads")
def _merge_heads(c: Ctx, node, xs, ins):
    b, h, s, d = ins[0].shape
    return reshape(c, c.op("Transpose", xs[0], perm=[0, 2, 1, 3]), [b, s, h * d])


@rule("shape.last_token")
def _last_token(c: Ctx, node, xs, ins):
    return c.op("Gather", xs[0], c.k(-1, DType.int64), axis=ins[0].rank - 2)


@rule("shape.flip")
def _flip(c: Ctx, node, xs, ins):
    axes = norm_axes(node.attrs["axes"], ins[0].rank)
    plan = [(d - 1, -1, -1) if i in axes else (0, d, 1) for i, d in enumerate(ins[0].shape)]
    return slice_(c, xs[0], ins[0], plan)


# ---- nn -----------------------------------------------------------------------------------
def softmax(c: Ctx, x: str, axis: int, log: bool = False) -> str:
    s = c.op("Sub", x, c.op("ReduceMax", x, c.ints([axis]), keepdims=1))
    if log:
        return c.op("Sub", s, c.op("Log", c.op("ReduceSum", c.op("Exp", s), c.ints([axis]), keepdims=1)))
    ex = c.op("Exp", s)
    return c.op("Div", ex, c.op("ReduceSum", ex, c.ints([axis]), keepdims=1))


@rule("nn.softmax", "nn.log_softmax")
def _softmax(c: Ctx, node, xs, ins):
    return softmax(c, xs[0], norm_axis(node.attrs["axis"], ins[0].rank), log=node.op == "nn.log_softmax")


def _affine(c: Ctx, y: str, rest: list[str]) -> str:
    if len(rest) >= 1:
        y = c.op("Mul", y, rest[0])
    if len(rest) >= 2:
        y = c.op("Add", y, rest[1])
    return y


def _mean_over(c: Ctx, x: str, t: ValueType, axes: list[int]) -> str:
    n = int(np.prod([t.shape[a] for a in axes], dtype=np.int64))
    return c.op("Div", c.op("ReduceSum", x, c.ints(axes), keepdims=1), c.k(n, t.dtype))


@rule("nn.layer_norm")
def _layer_norm(c: Ctx, node, xs, ins):
    t = ins[0]
    axes = list(range(norm_axis(node.attrs["axis"], t.rank), t.rank))
    cen = c.op("Sub", xs[0], _mean_over(c, xs[0], t, axes))
    var = _mean_over(c, c.op("Mul", cen, cen), t, axes)
    y = c.op("Div", cen, c.op("Sqrt", c.op("Add", var, c.k(node.attrs["eps"], t.dtype))))
    return _affine(c, y, xs[1:])


@rule("nn.rms_norm")
def _rms_norm(c: Ctx, node, xs, ins):
    t = ins[0]
    axes = list(range(norm_axis(node.attrs["axis"], t.rank), t.rank))
    ms = _mean_over(c, c.op("Mul", xs[0], xs[0]), t, axes)
    y = c.op("Div", xs[0], c.op("Sqrt", c.op("Add", ms, c.k(node.attrs["eps"], t.dtype))))
    return _affine(c, y, xs[1:])


@rule("nn.group_norm")
def _group_norm(c: Ctx, node, xs, ins):
    t = ins[0]
    n, ch = t.shape[:2]
    g = node.attrs["num_groups"]
    gt = ValueType((n, g, (ch // g) * int(np.prod(t.shape[2:], dtype=np.int64))), t.dtype)
    y = reshape(c, xs[0], gt.shape)
    cen = c.op("Sub", y, _mean_over(c, y, gt, [2]))
    var = _mean_over(c, c.op("Mul", cen, cen), gt, [2])
    out = reshape(c, c.op("Div", cen, c.op("Sqrt", c.op("Add", var, c.k(node.attrs["eps"], t.dtype)))), t.shape)
    bshape = [1, ch] + [1] * (t.rank - 2)
    return _affine(c, out, [reshape(c, r, bshape) for r in xs[1:]])


@rule("nn.embedding")
def _embedding(c: Ctx, node, xs, ins):
    return c.op("Gather", xs[1], xs[0], axis=0)


def _per(node, key, nd):
    v = node.attrs[key]
    return list(v) * nd if len(v) == 1 else list(v)


def _windows(c: Ctx, x: str, kernel, stride, dilation, out_sp) -> list[str]:
    """Strided windows of the (already padded) x [N, C, *S]: one [N, C, *out] slice per kernel offset."""
    nd = len(kernel)
    slices = []
    for offs in np.ndindex(*kernel):
        starts = [o * dl for o, dl in zip(offs, dilation, strict=True)]
        ends = [s + (n - 1) * st + 1 for s, n, st in zip(starts, out_sp, stride, strict=True)]
        slices.append(c.op("Slice", x, c.ints(starts), c.ints(ends), c.ints(list(range(2, 2 + nd))), c.ints(stride)))
    return slices


@rule("nn.conv1d", "nn.conv2d")
def _conv(c: Ctx, node, xs, ins):
    nd = 1 if node.op == "nn.conv1d" else 2
    xt, wt = ins[0], ins[1]
    d = xt.dtype
    stride, padding, dilation = (_per(node, k, nd) for k in ("stride", "padding", "dilation"))
    groups = node.attrs["groups"]
    if c.profile.native("Conv", d):
        return c.op(
            "Conv", *xs, strides=stride, pads=padding + padding, dilations=dilation, group=groups,
            kernel_shape=list(wt.shape[2:]),
        )
    # im2col: one strided slice per kernel offset, then a batched matmul per group. Every
    # product and sum is a float64 MatMul, so nothing is computed in a narrower type.
    n, ch = xt.shape[:2]
    o = wt.shape[0]
    kernel = list(wt.shape[2:])
    out_sp = list(node.types[0].shape[2:])
    x = xs[0]
    if any(padding):
        x = c.op("Pad", x, c.ints([0, 0] + padding + [0, 0] + padding), c.k(0, d), mode="constant")
    cols = [c.op("Unsqueeze", s, c.ints([2])) for s in _windows(c, x, kernel, stride, dilation, out_sp)]
    patches = cols[0] if len(cols) == 1 else c.op("Concat", *cols, axis=2)  # [N, C, K, *out]
    kk = int(np.prod(kernel))
    npix = int(np.prod(out_sp))
    patches = reshape(c, patches, [n, groups, (ch // groups) * kk, npix])
    w = reshape(c, xs[1], [1, groups, o // groups, (ch // groups) * kk])
    y = reshape(c, c.op("MatMul", w, patches), [n, o] + out_sp)
    if len(xs) == 3:
        y = c.op("Add", y, reshape(c, xs[2], [1, o] + [1] * nd))
    return y


def _pool_params(node):
    k = node.attrs["kernel"]
    k = list(k) * 2 if len(k) == 1 else list(k)
    s = node.attrs["stride"]
    s = k if s is None else (list(s) * 2 if len(s) == 1 else list(s))
    p = node.attrs["padding"]
    p = list(p) * 2 if len(p) == 1 else list(p)
    return k, s, p


@rule("nn.max_pool2d")
def _max_pool(c: Ctx, node, xs, ins):
    k, s, p = _pool_params(node)
    return c.op("MaxPool", xs[0], kernel_shape=k, strides=s, pads=p + p)


@rule("nn.avg_pool2d")
def _avg_pool(c: Ctx, node, xs, ins):
    k, s, p = _pool_params(node)
    d = ins[0].dtype
    if c.profile.native("AveragePool", d):
        return c.op("AveragePool", xs[0], kernel_shape=k, strides=s, pads=p + p, count_include_pad=1)
    x = xs[0]
    if any(p):
        x = c.op("Pad", x, c.ints([0, 0] + p + [0, 0] + p), c.k(0, d), mode="constant")
    wins = _windows(c, x, k, s, [1, 1], list(node.types[0].shape[2:]))
    total = wins[0] if len(wins) == 1 else c.op("Sum", *wins)
    return c.op("Div", total, c.k(k[0] * k[1], d))


# ---- random -------------------------------------------------------------------------------
@rule("random.uniform")
def _uniform(c: Ctx, node, xs, ins):
    a = node.attrs
    u = special.uniform01(c.e, special.stream_seed(c.e, a["seed"], xs[0] if xs else None), tuple(a["shape"]))
    f64 = DType.float64
    y = c.op("Add", c.k(a["low"], f64), c.op("Mul", c.k(a["high"] - a["low"], f64), u))
    d = a["dtype"]
    y = c.cast(y, d) if d is not f64 else y
    # Rounding (to the dtype, or lo + (hi - lo) * u itself) can reach `high`: the interval is
    # half-open, so clamp to the largest value below it, as the cpu kernel does.
    top = np.nextafter(d.numpy.type(a["high"]), d.numpy.type(-np.inf))
    return c.op("Min", y, c.k(top, d))


@rule("random.normal")
def _normal(c: Ctx, node, xs, ins):
    a = node.attrs
    z = special.normal01(c.e, special.stream_seed(c.e, a["seed"], xs[0] if xs else None), tuple(a["shape"]))
    f64 = DType.float64
    y = c.op("Add", c.k(a["mean"], f64), c.op("Mul", c.k(a["std"], f64), z))
    return c.cast(y, a["dtype"]) if a["dtype"] is not f64 else y


@rule("random.bernoulli")
def _bernoulli(c: Ctx, node, xs, ins):
    a = node.attrs
    u = special.uniform01(c.e, special.stream_seed(c.e, a["seed"], xs[0] if xs else None), tuple(a["shape"]))
    return c.op("Less", u, c.k(a["p"], DType.float64))


@rule("nn.dropout")
def _dropout(c: Ctx, node, xs, ins):
    rate, seed = node.attrs["rate"], node.attrs["seed"]
    if rate == 0.0:
        return c.op("Identity", xs[0])
    d = ins[0].dtype
    u = special.uniform01(c.e, special.stream_seed(c.e, seed, xs[1] if len(xs) > 1 else None), ins[0].shape)
    drop = c.op("Less", u, c.k(rate, DType.float64))  # the scaled x in Where's exact branch (-0.0)
    return c.op("Where", drop, c.k(0, d), c.op("Mul", xs[0], c.k(1.0 / (1.0 - rate), d)))


# ---- attention ----------------------------------------------------------------------------
@rule("attention.sdpa")
def _sdpa(c: Ctx, node, xs, ins):
    qt, kt = ins[0], ins[1]
    d = qt.dtype
    scale = node.attrs["scale"] if node.attrs["scale"] is not None else 1.0 / math.sqrt(qt.shape[-1])
    r = kt.rank
    perm = list(range(r - 2)) + [r - 1, r - 2]
    s = c.op("Mul", c.op("MatMul", xs[0], c.op("Transpose", xs[1], perm=perm)), c.k(scale, d))
    ninf = c.k(-np.inf, d)
    if len(xs) == 4:
        s = c.op("Where", xs[3], s, ninf) if ins[3].dtype is DType.bool else c.op("Add", s, xs[3])
    if node.attrs["causal"]:
        tq, tk = qt.shape[-2], kt.shape[-2]
        s = c.op("Where", c.e.const(np.tril(np.ones((tq, tk), dtype=bool), k=tk - tq), hint="causal"), s, ninf)
    return c.op("MatMul", softmax(c, s, -1), xs[2])


@rule("attention.rope")
def _rope(c: Ctx, node, xs, ins):
    t_len, dim = ins[0].shape[-2], ins[0].shape[-1]
    half = dim // 2
    d = ins[0].dtype.numpy
    cos_t, sin_t = rope_tables(node.attrs, t_len, dim)
    cos, sin = c.e.const(cos_t.astype(d), hint="cos"), c.e.const(sin_t.astype(d), hint="sin")
    x1, x2 = c.op("Split", xs[0], c.ints([half, half]), axis=-1, outputs=2)
    a = c.op("Sub", c.op("Mul", x1, cos), c.op("Mul", x2, sin))
    b = c.op("Add", c.op("Mul", x2, cos), c.op("Mul", x1, sin))
    return c.op("Concat", a, b, axis=-1)


__all__ = ["ORT_CPU", "RULES", "RUNTIME_CHECKS", "STANDARD", "Exported", "Profile", "export_graph", "rule"]

from caramba.onnx import export_active_inference as _active_inference  # noqa: E402,F401  (active_inference.*, markov_blanket.mutual_information rules)
from caramba.onnx import export_predictive_coding as _predictive_coding  # noqa: E402,F401  (predictive_coding.* rules)
from caramba.onnx import export_research as _research  # noqa: E402,F401  (fft, vsa, causal, hawkes rules)
from caramba.onnx import export_train as _train  # noqa: E402,F401  (registers the train.* rules)
