"""Elementwise kernels (math.*, activation.*): one thread per output element, broadcasting by
strides. ``EXPR`` maps an op ID to the expression that computes one element; fused elementwise
groups reuse it node by node inside one kernel."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from math import prod

import numpy as np

from caramba.backends.codegen.cstyle import KernelWriter, broadcast_strides, offset, unravel
from caramba.backends.codegen.kernels import ANY, NUM, B, F, bind, builder, kernel_name, map_finish, map_writer, single
from caramba.ir.dtypes import DType
from caramba.ir.graph import Node
from caramba.ir.types import ValueType

# (writer, node, input dtype, argument expressions) -> expression of the output dtype
Expr = Callable[[KernelWriter, Node, DType, Sequence[str]], str]
EXPR: dict[str, Expr] = {}
EXPR_DTYPES: dict[str, frozenset[DType]] = {}

SQRT1_2 = math.sqrt(0.5)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
SIGNED = F | frozenset({DType.int64, DType.int32})


def expr(op_id: str, dtypes: frozenset[DType]) -> Callable[[Expr], Expr]:
    def deco(fn: Expr) -> Expr:
        EXPR[op_id] = fn
        EXPR_DTYPES[op_id] = dtypes
        builder(op_id, dtypes)(lambda node, ins, e: _elementwise(node, ins, e))
        return fn

    return deco


def _lit(w: KernelWriter, v: float, d: DType) -> str:
    return w.e.lit(v, d)


def _infix(op: str) -> Expr:
    return lambda w, n, d, a: f"({a[0]} {op} {a[1]})"


for _op, _sym, _dt in (
    ("math.add", "+", NUM), ("math.sub", "-", NUM), ("math.mul", "*", NUM), ("math.div", "/", F),
    ("math.equal", "==", ANY),
):
    expr(_op, _dt)(_infix(_sym))


@expr("math.not_equal", ANY)
def _not_equal(w, n, d, a):
    # NaN != anything; spelled out because WGSL's != on floats is an ordered comparison
    if d.is_float:
        return f"(({a[0]} != {a[1]}) || {w.e.isnan(a[0], d)} || {w.e.isnan(a[1], d)})"
    return f"({a[0]} != {a[1]})"


def _compare(op: str) -> Expr:
    # bool has no ordering in WGSL: spell false < true out
    on_bool = {"<": "(!{0} && {1})", "<=": "(!{0} || {1})", ">": "({0} && !{1})", ">=": "({0} || !{1})"}[op]

    def fn(w: KernelWriter, n: Node, d: DType, a: Sequence[str]) -> str:
        return on_bool.format(*a) if d is DType.bool else f"({a[0]} {op} {a[1]})"

    return fn


for _op, _sym in (("math.less", "<"), ("math.less_equal", "<="), ("math.greater", ">"), ("math.greater_equal", ">=")):
    expr(_op, ANY)(_compare(_sym))

expr("math.logical_and", B)(_infix("&&"))
expr("math.logical_or", B)(_infix("||"))
expr("math.logical_not", B)(lambda w, n, d, a: f"(!{a[0]})")
expr("math.maximum", NUM)(lambda w, n, d, a: w.max(d, a[0], a[1]))
expr("math.minimum", NUM)(lambda w, n, d, a: w.min(d, a[0], a[1]))
expr("math.pow", F)(lambda w, n, d, a: w.fn("pow", d, a[0], a[1]))
expr("math.neg", SIGNED)(lambda w, n, d, a: f"(-{a[0]})")
expr("math.abs", SIGNED)(lambda w, n, d, a: w.fn("abs", d, a[0]))
expr("math.square", SIGNED)(lambda w, n, d, a: f"({a[0]} * {a[0]})")
expr("math.reciprocal", F)(lambda w, n, d, a: f"({_lit(w, 1, d)} / {a[0]})")
expr("math.rsqrt", F)(lambda w, n, d, a: f"({_lit(w, 1, d)} / {w.fn('sqrt', d, a[0])})")
for _name in ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tanh", "erf", "floor", "ceil"):
    expr(f"math.{_name}", F)(lambda w, n, d, a, _f=_name: w.fn(_f, d, a[0]))
expr("math.round", F)(lambda w, n, d, a: w.fn("rint", d, a[0]))


@expr("math.sign", SIGNED)
def _sign(w, n, d, a):
    x = w.let(d, a[0], "x")
    # NaN and zero keep their value
    rest = x if d.is_float else _lit(w, 0, d)
    return w.e.select(f"{x} > {_lit(w, 0, d)}", _lit(w, 1, d), w.e.select(f"{x} < {_lit(w, 0, d)}", _lit(w, -1, d), rest))


@expr("math.where", ANY)
def _where(w, n, d, a):
    return w.e.select(a[0], a[1], a[2])


@expr("math.clamp", NUM)
def _clamp(w, n, d, a):
    lo, hi = n.attrs["min"], n.attrs["max"]
    if d.is_int:  # the cpu kernel's rule: bounds rounded inward and clipped to the type's range
        info = np.iinfo(d.numpy)
        lo = None if lo is None else int(min(max(np.ceil(lo), info.min), info.max))
        hi = None if hi is None else int(max(min(np.floor(hi), info.max), info.min))
    x = a[0]
    if lo is not None:
        x = w.max(d, x, _lit(w, lo, d))
    if hi is not None:
        x = w.min(d, x, _lit(w, hi, d))
    return x


@expr("math.cast", ANY)
def _cast(w, n, d, a):
    return w.e.cast(a[0], n.attrs["dtype"], d)


# ---- activations -------------------------------------------------------------------------


def sigmoid(w: KernelWriter, d: DType, x: str) -> str:
    # exp(-|x|) never overflows; both branches keep full relative accuracy
    e = w.let(d, w.fn("exp", d, f"(-{w.fn('abs', d, x)})"), "e")
    one = _lit(w, 1, d)
    return w.e.select(f"{x} >= {_lit(w, 0, d)}", f"({one} / ({one} + {e}))", f"({e} / ({one} + {e}))")


expr("activation.relu", F)(lambda w, n, d, a: w.max(d, a[0], _lit(w, 0, d)))
expr("activation.sigmoid", F)(lambda w, n, d, a: sigmoid(w, d, w.let(d, a[0], "x")))


@expr("activation.silu", F)
def _silu(w, n, d, a):
    x = w.let(d, a[0], "x")
    return f"({x} * {sigmoid(w, d, x)})"


@expr("activation.leaky_relu", F)
def _leaky(w, n, d, a):
    x = w.let(d, a[0], "x")
    return w.e.select(f"{x} > {_lit(w, 0, d)}", x, f"({_lit(w, n.attrs['alpha'], d)} * {x})")


def _elu_like(w: KernelWriter, d: DType, x: str, alpha: float) -> str:
    neg = f"({_lit(w, alpha, d)} * {w.fn('expm1', d, w.min(d, x, _lit(w, 0, d)))})"
    return w.e.select(f"{x} > {_lit(w, 0, d)}", x, neg)


expr("activation.elu", F)(lambda w, n, d, a: _elu_like(w, d, w.let(d, a[0], "x"), n.attrs["alpha"]))
expr("activation.selu", F)(
    lambda w, n, d, a: f"({_lit(w, SELU_SCALE, d)} * {_elu_like(w, d, w.let(d, a[0], 'x'), SELU_ALPHA)})"
)


@expr("activation.softplus", F)
def _softplus(w, n, d, a):
    beta = n.attrs["beta"]
    bx = w.let(d, f"({_lit(w, beta, d)} * {a[0]})", "bx")
    tail = w.fn("log1p", d, w.fn("exp", d, f"(-{w.fn('abs', d, bx)})"))
    return f"(({w.max(d, bx, _lit(w, 0, d))} + {tail}) / {_lit(w, beta, d)})"


@expr("activation.gelu", F)
def _gelu(w, n, d, a):
    x = w.let(d, a[0], "x")
    if n.attrs["approximate"] == "tanh":
        # 0.5 (1 + tanh z) == sigmoid(2 z): full relative accuracy in the negative tail
        z = w.let(d, f"({_lit(w, 2.0 * SQRT_2_OVER_PI, d)} * ({x} + {_lit(w, 0.044715, d)} * {x} * {x} * {x}))", "z")
        return f"({x} * {sigmoid(w, d, z)})"
    # exact: 0.5 x erfc(-x / sqrt 2), full relative accuracy in the negative tail
    return f"({_lit(w, 0.5, d)} * {x} * {w.fn('erfc', d, f'(-{x} * {_lit(w, SQRT1_2, d)})')})"


def _silu_of(w: KernelWriter, d: DType, g: str) -> str:
    x = w.let(d, g, "x")
    return f"({x} * {sigmoid(w, d, x)})"


EXPR["activation.swiglu"] = lambda w, n, d, a: f"({_silu_of(w, d, a[0])} * {a[1]})"


# ---- the kernel --------------------------------------------------------------------------


def input_index(w: KernelWriter, coords: Callable[[], list[str]], in_shape, out_shape) -> str:
    if tuple(in_shape) == tuple(out_shape):
        return "gid"
    return offset(w, coords(), broadcast_strides(in_shape, out_shape))


def coords_once(w: KernelWriter, shape: Sequence[int]) -> Callable[[], list[str]]:
    cache: list[list[str]] = []

    def get() -> list[str]:
        if not cache:
            cache.append(unravel(w, "gid", shape))
        return cache[0]

    return get


def _elementwise(node: Node, ins: tuple[ValueType, ...], e) -> object:
    out_t = node.types[0]
    w = map_writer(e, kernel_name(node), prod(out_t.shape))
    names, (out,) = bind(w, ins, [out_t])
    coords = coords_once(w, out_t.shape)
    args = []
    for name, t in zip(names, ins, strict=True):
        args.append(w.let(t.dtype, w.load(name, input_index(w, coords, t.shape, out_t.shape), t.dtype), "a"))
    d_in = ins[-1].dtype if node.op == "math.where" else ins[0].dtype
    value = EXPR[node.op](w, node, d_in, args)
    w.store(out, "gid", value, out_t.dtype)
    return single(map_finish(w), len(ins))


@builder("activation.swiglu", F)
def _swiglu(node: Node, ins: tuple[ValueType, ...], e) -> object:
    if len(ins) == 2:
        return _elementwise(node, ins, e)
    # one input [..., 2h]: gate = x[..., :h], up = x[..., h:]
    out_t = node.types[0]
    h = out_t.shape[-1]
    d = out_t.dtype
    w = map_writer(e, kernel_name(node, "split"), prod(out_t.shape))
    (x,), (out,) = bind(w, ins, [out_t])
    row = w.let("index", f"gid / {w.num(h)}", "row")
    col = w.let("index", f"gid - {row} * {w.num(h)}", "col")
    at = w.let("index", f"{row} * {w.num(2 * h)} + {col}", "at")
    gate = w.let(d, w.load(x, at, d), "g")
    up = w.let(d, w.load(x, f"{at} + {w.num(h)}", d), "u")
    w.store(out, "gid", f"({_silu_of(w, d, gate)} * {up})", d)
    return single(map_finish(w), 1)
