"""The xla backend's lowering table: op ID -> factory(node, input types, ctx) -> JAX function.

A factory runs once while a graph is traced and returns a function of ``jax.Array`` values
(it reads attributes then, never per call). The dtypes registered with a rule are the xla
capability table. Formulas follow the cpu reference kernels so both backends round alike;
matmul and convolution ask XLA for ``Precision.HIGHEST`` so no accelerator silently
computes float32 products in TF32 or bfloat16.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy import special as jsp

from caramba.ir.dtypes import ALL, FLOATS, INTS, NUMERIC, SIGNED_INTS, DType
from caramba.ir.graph import Node
from caramba.ir.types import ValueType
from caramba.ops._define import norm_axes, norm_axis
from caramba.ops.activation import GELU_ERFC_SCALE
from caramba.ops.attention import rope_tables
from caramba.ops.shape import slice_plan, split_sizes

Factory = Callable[[Node, tuple[ValueType, ...], "TraceContext"], Callable[..., Any]]

RULES: dict[str, Factory] = {}
DTYPES: dict[str, frozenset[DType]] = {}

# bfloat16 is not claimed yet: XLA computes it, but the compliance suite cannot check it yet.
FLOAT = FLOATS - {DType.bfloat16}
NUM = NUMERIC - {DType.bfloat16}
ANY = ALL - {DType.bfloat16}
SIGNED = FLOAT | SIGNED_INTS
BOOL = frozenset({DType.bool})
HIGHEST = lax.Precision.HIGHEST
# A node's table entry lists every dtype it touches: index inputs, int64 keys, bool masks.
IDX = frozenset({DType.int64, DType.int32})
KEY = frozenset({DType.int64})


@dataclass(frozen=True)
class RangeCheck:
    """A runtime check traced into the program: ``bad`` is true when ``value`` leaves [lo, hi)."""

    bad: Any
    value: Any
    lo: int
    hi: int
    node: str
    message: str


class TraceContext:
    """What a rule may use while its graph is traced: runtime checks reported back to the host,
    and quotients a rule already knows (so a later ``math.div`` reuses them)."""

    def __init__(self) -> None:
        self.checks: list[RangeCheck] = []
        self._quotients: dict[tuple[int, int], tuple[Any, Any, Any]] = {}

    def check_range(self, node: Node, value: Any, lo: int, hi: int, message: str) -> None:
        """Every element of the integer ``value`` must lie in [lo, hi), else the run raises."""
        if value.size:
            self.checks.append(RangeCheck(jnp.any((value < lo) | (value >= hi)), value, lo, hi, node.id, message))

    def know_quotient(self, num: Any, den: Any, value: Any) -> None:
        """``num / den`` equals ``value`` (to within the division's own rounding)."""
        self._quotients[id(num), id(den)] = (num, den, value)  # holding them keeps the ids unique

    def quotient(self, num: Any, den: Any) -> Any:
        known = self._quotients.get((id(num), id(den)))
        return known[2] if known is not None and known[0] is num and known[1] is den else None


def rule(op_id: str, dtypes: frozenset[DType]) -> Callable[[Factory], Factory]:
    def deco(factory: Factory) -> Factory:
        if op_id in RULES:
            raise ValueError(f"xla rule for {op_id} registered twice")
        RULES[op_id] = factory
        DTYPES[op_id] = frozenset(dtypes)
        return factory

    return deco


def simple(op_id: str, dtypes: frozenset[DType], fn: Callable[..., Any]) -> None:
    rule(op_id, dtypes)(lambda node, ins, ctx: fn)


def _np(t: ValueType):
    return jnp.dtype(t.dtype.numpy)


# ---- math ---------------------------------------------------------------------------------
for _op, _fn, _dt in (
    ("math.add", jnp.add, NUM),
    ("math.sub", jnp.subtract, NUM),
    ("math.mul", jnp.multiply, NUM),
    ("math.pow", jnp.power, FLOAT),
    ("math.maximum", jnp.maximum, NUM),
    ("math.minimum", jnp.minimum, NUM),
    ("math.neg", jnp.negative, SIGNED),
    ("math.abs", jnp.abs, SIGNED),
    ("math.sign", jnp.sign, SIGNED),
    ("math.exp", jnp.exp, FLOAT),
    ("math.log", jnp.log, FLOAT),
    ("math.expm1", jnp.expm1, FLOAT),
    ("math.sqrt", jnp.sqrt, FLOAT),
    ("math.rsqrt", lambda x: 1 / jnp.sqrt(x), FLOAT),
    ("math.square", lambda x: x * x, SIGNED),
    ("math.reciprocal", lambda x: 1 / x, FLOAT),
    ("math.sin", jnp.sin, FLOAT),
    ("math.cos", jnp.cos, FLOAT),
    ("math.tanh", jnp.tanh, FLOAT),
    ("math.erf", jsp.erf, FLOAT),
    ("math.floor", jnp.floor, FLOAT),
    ("math.ceil", jnp.ceil, FLOAT),
    ("math.round", jnp.round, FLOAT),  # half to even
    ("math.equal", jnp.equal, ANY),
    ("math.not_equal", jnp.not_equal, ANY),
    ("math.less", jnp.less, NUM | BOOL),
    ("math.less_equal", jnp.less_equal, NUM | BOOL),
    ("math.greater", jnp.greater, NUM | BOOL),
    ("math.greater_equal", jnp.greater_equal, NUM | BOOL),
    ("math.logical_and", jnp.logical_and, BOOL),
    ("math.logical_or", jnp.logical_or, BOOL),
    ("math.logical_not", jnp.logical_not, BOOL),
    ("math.where", jnp.where, ANY),
):
    simple(_op, _dt, _fn)


def log1p(x):
    """log(1 + x) to ~1.5 ulps. XLA's own log1p is off by >100 ulps on [-0.6, -0.25], and XLA's
    algebraic simplifier folds the classic correction term (x - ((1 + x) - 1)) to zero, so:
    XLA's log1p where |x| < 1/4 (accurate there), log(1 + x) elsewhere (|log u| >= 0.28 there,
    so the rounding of u costs under 2 ulps). float32/float16 are computed in float64 and
    rounded once."""
    d = x.dtype
    if d != jnp.float64:
        return log1p(x.astype(jnp.float64)).astype(d)
    return jnp.where(jnp.abs(x) < 0.25, jnp.log1p(x), jnp.log(1 + x))


simple("math.log1p", FLOAT, log1p)


@rule("math.clamp", NUM)
def _clamp(node, ins, ctx):
    d = ins[0].dtype.numpy
    lo, hi = node.attrs["min"], node.attrs["max"]
    if d.kind in "iu":
        info = np.iinfo(d)
        lo = None if lo is None else d.type(min(max(np.ceil(lo), info.min), info.max))
        hi = None if hi is None else d.type(max(min(np.floor(hi), info.max), info.min))
    else:
        lo = None if lo is None else d.type(lo)
        hi = None if hi is None else d.type(hi)
    if lo is None and hi is None:
        return lambda x: x
    if lo is None:
        return lambda x: jnp.minimum(x, hi)
    if hi is None:
        return lambda x: jnp.maximum(x, lo)
    return lambda x: jnp.minimum(jnp.maximum(x, lo), hi)


@rule("math.cast", ANY)
def _cast(node, ins, ctx):
    d = jnp.dtype(node.attrs["dtype"].numpy)
    if node.attrs["dtype"] is DType.bool:
        return lambda x: x != 0
    return lambda x: x.astype(d)


# ---- activation ---------------------------------------------------------------------------
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _silu(x):
    return x * jax.nn.sigmoid(x)


simple("activation.relu", FLOAT, lambda x: jnp.maximum(x, 0))
simple("activation.sigmoid", FLOAT, jax.nn.sigmoid)
simple("activation.silu", FLOAT, _silu)
simple("activation.selu", FLOAT, lambda x: SELU_SCALE * jnp.where(x > 0, x, SELU_ALPHA * jnp.expm1(jnp.minimum(x, 0))))


@rule("activation.gelu", FLOAT)
def _gelu(node, ins, ctx):
    if node.attrs["approximate"] == "tanh":
        # 0.5 * (1 + tanh(z)) == sigmoid(2z): keeps relative accuracy in the negative tail.
        return lambda x: x * jax.nn.sigmoid(2.0 * SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))
    # erfc keeps full relative accuracy in the negative tail, as in the cpu kernel.
    def gelu(x):
        if x.size * x.dtype.itemsize > GELU_SHARE_BYTES:
            # spelled unlike the gradient rule's argument: XLA must not share the exp here
            return 0.5 * x * jsp.erfc(-x * -GELU_ERFC_SCALE)
        erfc = jsp.erfc(jnp.multiply(x, jnp.asarray(GELU_ERFC_SCALE, x.dtype)))
        y = 0.5 * x * erfc
        cdf = 0.5 * erfc
        # gelu(x) / x is NaN at 0, at +-inf and for NaN, and Phi(x) to within 2 ulps elsewhere
        ctx.know_quotient(y, x, jnp.where(jnp.isfinite(x) & (x != 0), cdf, jnp.nan))
        return y

    return gelu


# Up to this many bytes an exact GELU's input is small enough to share its intermediates with
# the gradient: erfc's argument u = x * GELU_ERFC_SCALE is spelled as the gradient rule spells
# it, and the rule's gelu(x) / x is answered with the forward's Phi(x) = erfc(u) / 2. XLA then
# computes erfc's exp(-u*u) and Phi once for both passes, as JAX's own GELU gradient does, but
# keeps them (and erfc's branches) as arrays of their own: [128,256] float64 (256 KiB) MLP
# train step ~10% faster; [256,1024] (2 MiB), where each extra array goes through memory, 1.3x
# as slow as recomputing the exp from gelu(x) / x in the backward pass (2 cores).
GELU_SHARE_BYTES = 1 << 20


@rule("math.div", FLOAT)
def _div(node, ins, ctx):
    def div(a, b):
        known = ctx.quotient(a, b)
        return jnp.true_divide(a, b) if known is None else known

    return div


@rule("activation.leaky_relu", FLOAT)
def _leaky(node, ins, ctx):
    alpha = node.attrs["alpha"]
    return lambda x: jnp.where(x > 0, x, alpha * x)


@rule("activation.elu", FLOAT)
def _elu(node, ins, ctx):
    alpha = node.attrs["alpha"]
    return lambda x: jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0)))


@rule("activation.softplus", FLOAT)
def _softplus(node, ins, ctx):
    beta = node.attrs["beta"]

    def softplus(x):
        bx = beta * x
        return (jnp.maximum(bx, 0) + log1p(jnp.exp(-jnp.abs(bx)))) / beta

    return softplus


@rule("activation.swiglu", FLOAT)
def _swiglu(node, ins, ctx):
    if len(ins) == 2:
        return lambda gate, up: _silu(gate) * up
    half = ins[0].shape[-1] // 2
    return lambda x: _silu(x[..., :half]) * x[..., half:]


# ---- linalg -------------------------------------------------------------------------------
MATMUL = FLOAT | {DType.int64, DType.int32}
simple("linalg.matmul", MATMUL, lambda a, b: jnp.matmul(a, b, precision=HIGHEST))
simple("linalg.outer", MATMUL, jnp.outer)


# ---- reduce -------------------------------------------------------------------------------
def _axes(node, ins):
    return norm_axes(node.attrs["axes"], ins[0].rank), node.attrs["keepdims"]


def _reduction(fn, typed: bool = False):
    def factory(node, ins, ctx):
        axes, keep = _axes(node, ins)
        if typed:
            d = _np(ins[0])
            return lambda x: fn(x, axis=axes, keepdims=keep, dtype=d)
        return lambda x: fn(x, axis=axes, keepdims=keep)

    return factory


rule("reduce.sum", NUM)(_reduction(jnp.sum, typed=True))
rule("reduce.prod", NUM)(_reduction(jnp.prod, typed=True))
rule("reduce.mean", FLOAT)(_reduction(jnp.mean))
rule("reduce.max", NUM)(_reduction(jnp.max))
rule("reduce.min", NUM)(_reduction(jnp.min))


@rule("reduce.variance", FLOAT)
def _var(node, ins, ctx):
    axes, keep = _axes(node, ins)
    ddof = node.attrs["correction"]
    return lambda x: jnp.var(x, axis=axes, keepdims=keep, ddof=ddof)


def logsumexp(x, axes, keep):
    m = jnp.max(x, axis=axes, keepdims=True) if x.size else jnp.zeros((1,) * x.ndim, x.dtype)
    m = jnp.where(jnp.isfinite(m), m, jnp.zeros((), x.dtype))  # all -inf rows give -inf, not NaN
    out = jnp.log(jnp.sum(jnp.exp(x - m), axis=axes, keepdims=True)) + m
    return out if keep else jnp.squeeze(out, axis=axes)


@rule("reduce.logsumexp", FLOAT)
def _lse(node, ins, ctx):
    axes, keep = _axes(node, ins)
    return lambda x: logsumexp(x, axes, keep)


def _arg(fn):
    def factory(node, ins, ctx):
        axis = norm_axis(node.attrs["axis"], ins[0].rank)
        keep = node.attrs["keepdims"]
        return lambda x: fn(x, axis=axis, keepdims=keep).astype(jnp.int64)

    return factory


rule("reduce.argmax", NUM)(_arg(jnp.argmax))
rule("reduce.argmin", NUM)(_arg(jnp.argmin))


# ---- shape --------------------------------------------------------------------------------
@rule("shape.reshape", ANY)
def _reshape(node, ins, ctx):
    shape = node.types[0].shape
    return lambda x: jnp.reshape(x, shape)


rule("shape.expand_dims", ANY)(_reshape)
rule("shape.squeeze", ANY)(_reshape)


@rule("shape.transpose", ANY)
def _transpose(node, ins, ctx):
    perm = node.attrs["perm"]
    perm = tuple(norm_axis(p, ins[0].rank) for p in perm) if perm is not None else None
    return lambda x: jnp.transpose(x, perm)


@rule("shape.concat", ANY)
def _concat(node, ins, ctx):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    return lambda *xs: jnp.concatenate(xs, axis=axis)


@rule("shape.split", ANY)
def _split(node, ins, ctx):
    axis, sizes = split_sizes(ins[0], node.attrs)
    bounds = np.cumsum(sizes)[:-1].tolist()
    return lambda x: tuple(jnp.split(x, bounds, axis=axis))


@rule("shape.slice", ANY)
def _slice(node, ins, ctx):
    # slice.indices() spells "run past index 0" as stop -1, which as an index means "the last"
    index = tuple(slice(a, None if (st < 0 and b < 0) else b, st) for a, b, st in slice_plan(ins[0], node.attrs))
    return lambda x: x[index]


@rule("shape.pad", ANY)
def _pad(node, ins, ctx):
    p = node.attrs["pads"]
    widths = [(p[2 * i], p[2 * i + 1]) for i in range(ins[0].rank)]
    mode = node.attrs["mode"]
    if ins[0].rank == 0:
        return lambda x: x
    if mode == "constant":
        value = np.array(node.attrs["value"]).astype(ins[0].dtype.numpy)
        return lambda x: jnp.pad(x, widths, mode="constant", constant_values=value)
    return lambda x: jnp.pad(x, widths, mode=mode)


@rule("shape.broadcast_to", ANY)
def _broadcast_to(node, ins, ctx):
    shape = node.types[0].shape
    return lambda x: jnp.broadcast_to(x, shape)


def _normalized(idx, n):
    return jnp.where(idx < 0, idx + n, idx)


def _index_check(ctx, node, idx, n, what):
    ctx.check_range(node, idx, -n, n, f"{what}: indices out of range for an axis of size {n}")


@rule("shape.gather", ANY)
def _gather(node, ins, ctx):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    n = ins[0].shape[axis]

    def gather(x, idx):
        _index_check(ctx, node, idx, n, "shape.gather")
        return jnp.take(x, _normalized(idx, n), axis=axis, mode="clip")

    return gather


@rule("shape.scatter_add", NUM)
def _scatter_add(node, ins, ctx):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    n = ins[0].shape[axis]
    lead = (slice(None),) * axis

    def scatter_add(x, idx, upd):
        _index_check(ctx, node, idx, n, "shape.scatter_add")
        return x.at[lead + (_normalized(idx, n),)].add(upd, mode="drop")

    return scatter_add


@rule("shape.slice_rows", ANY)
def _slice_rows(node, ins, ctx):
    axis, size = norm_axis(node.attrs["axis"], ins[0].rank), node.attrs["size"]
    n = ins[0].shape[axis]

    def slice_rows(x, starts):
        ctx.check_range(node, starts, 0, n - size + 1, f"shape.slice_rows: starts out of range [0, {n - size}]")
        return jax.vmap(lambda xb, s: lax.dynamic_slice_in_dim(xb, s, size, axis - 1))(x, starts)

    return slice_rows


@rule("shape.update_rows", ANY)
def _update_rows(node, ins, ctx):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    n, u = ins[0].shape[axis], ins[1].shape[axis]

    def update_rows(x, upd, starts):
        ctx.check_range(node, starts, 0, n - u + 1, f"shape.update_rows: starts out of range [0, {n - u}]")
        return jax.vmap(lambda xb, ub, s: lax.dynamic_update_slice_in_dim(xb, ub, s, axis - 1))(x, upd, starts)

    return update_rows


@rule("shape.iota", NUM)
def _iota(node, ins, ctx):
    t = node.types[0]
    if t.rank == 0:
        return lambda: jnp.zeros((), t.dtype.numpy)
    axis = norm_axis(node.attrs["axis"], t.rank)
    view = [1] * t.rank
    view[axis] = t.shape[axis]
    value = np.broadcast_to(np.arange(t.shape[axis]).reshape(view), t.shape).astype(t.dtype.numpy)
    return lambda: jnp.asarray(value)


@rule("shape.upsample_nearest", ANY)
def _upsample(node, ins, ctx):
    scales = node.attrs["scales"]
    k = ins[0].rank - len(scales)

    def upsample(x):
        for i, s in enumerate(scales):
            if s != 1:
                x = jnp.repeat(x, s, axis=k + i)
        return x

    return upsample


@rule("shape.view_as_heads", ANY)
def _view_as_heads(node, ins, ctx):
    b, s, d = ins[0].shape
    h = node.attrs["num_heads"]
    return lambda x: jnp.transpose(jnp.reshape(x, (b, s, h, d // h)), (0, 2, 1, 3))


@rule("shape.merge_heads", ANY)
def _merge_heads(node, ins, ctx):
    b, h, s, d = ins[0].shape
    return lambda x: jnp.reshape(jnp.transpose(x, (0, 2, 1, 3)), (b, s, h * d))


simple("shape.last_token", ANY, lambda x: x[..., -1, :])


@rule("shape.flip", ANY)
def _flip(node, ins, ctx):
    axes = norm_axes(node.attrs["axes"], ins[0].rank)
    return lambda x: jnp.flip(x, axis=axes)


# ---- nn -----------------------------------------------------------------------------------
def shift_of(x, axis):
    """The max along ``axis`` (kept), 0 where it is not finite: what softmax, log_softmax and
    the cross-entropy subtract before exp. Rows of -inf or +inf give NaN softmax either way;
    one spelling everywhere lets XLA's CSE share the forward loss's exp(x - m) with its
    gradient's softmax (one exp instead of two)."""
    m = jnp.max(x, axis=axis, keepdims=True)
    return jnp.where(jnp.isfinite(m), m, jnp.zeros((), x.dtype))


def softmax(x, axis):
    e = jnp.exp(x - shift_of(x, axis))
    return e / jnp.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis):
    s = x - jnp.max(x, axis=axis, keepdims=True)
    return s - jnp.log(jnp.sum(jnp.exp(s), axis=axis, keepdims=True))


@rule("nn.softmax", FLOAT)
def _softmax(node, ins, ctx):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    return lambda x: softmax(x, axis)


@rule("nn.log_softmax", FLOAT)
def _log_softmax(node, ins, ctx):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    return lambda x: log_softmax(x, axis)


def _affine(y, rest):
    if len(rest) >= 1:
        y = y * rest[0]
    if len(rest) >= 2:
        y = y + rest[1]
    return y


@rule("nn.layer_norm", FLOAT)
def _layer_norm(node, ins, ctx):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    axes = tuple(range(axis, ins[0].rank))
    eps = node.attrs["eps"]

    def layer_norm(x, *rest):
        mu = jnp.mean(x, axis=axes, keepdims=True)
        c = x - mu
        var = jnp.mean(c * c, axis=axes, keepdims=True)
        return _affine(c / jnp.sqrt(var + eps), rest)

    return layer_norm


@rule("nn.rms_norm", FLOAT)
def _rms_norm(node, ins, ctx):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    axes = tuple(range(axis, ins[0].rank))
    eps = node.attrs["eps"]
    return lambda x, *rest: _affine(x / jnp.sqrt(jnp.mean(x * x, axis=axes, keepdims=True) + eps), rest)


@rule("nn.group_norm", FLOAT)
def _group_norm(node, ins, ctx):
    shape = ins[0].shape
    n, c = shape[:2]
    g = node.attrs["num_groups"]
    eps = node.attrs["eps"]
    grouped = (n, g, -1)
    bshape = (1, c) + (1,) * (len(shape) - 2)

    def group_norm(x, *rest):
        y = jnp.reshape(x, grouped)
        mu = jnp.mean(y, axis=2, keepdims=True)
        cen = y - mu
        var = jnp.mean(cen * cen, axis=2, keepdims=True)
        out = jnp.reshape(cen / jnp.sqrt(var + eps), shape)
        return _affine(out, [jnp.reshape(r, bshape) for r in rest])

    return group_norm


@rule("nn.embedding", FLOAT | IDX)
def _embedding(node, ins, ctx):
    vocab = ins[1].shape[0]

    def embedding(ids, table):
        _index_check(ctx, node, ids, vocab, "nn.embedding")
        return jnp.take(table, _normalized(ids, vocab), axis=0, mode="clip")

    return embedding


def _per(node, key, nd):
    v = node.attrs[key]
    return tuple(v) * nd if len(v) == 1 else tuple(v)


def _conv(nd):
    def factory(node, ins, ctx):
        stride, padding, dilation = (_per(node, k, nd) for k in ("stride", "padding", "dilation"))
        groups = node.attrs["groups"]
        spatial = "HW"[:nd] if nd == 2 else "H"
        dn = ("NC" + spatial, "OI" + spatial, "NC" + spatial)

        def conv(x, w, b=None):
            out = lax.conv_general_dilated(
                x, w, stride, [(p, p) for p in padding], rhs_dilation=dilation,
                dimension_numbers=dn, feature_group_count=groups, precision=HIGHEST,
            )
            if b is not None:
                out = out + jnp.reshape(b, (1, -1) + (1,) * nd)
            return out

        return conv

    return factory


rule("nn.conv1d", FLOAT)(_conv(1))
rule("nn.conv2d", FLOAT)(_conv(2))


def _pool_params(node):
    k = node.attrs["kernel"]
    k = tuple(k) * 2 if len(k) == 1 else tuple(k)
    s = node.attrs["stride"]
    s = k if s is None else (tuple(s) * 2 if len(s) == 1 else tuple(s))
    p = node.attrs["padding"]
    p = tuple(p) * 2 if len(p) == 1 else tuple(p)
    return k, s, p


@rule("nn.max_pool2d", FLOAT)
def _max_pool(node, ins, ctx):
    k, s, p = _pool_params(node)
    pads = ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1]))
    return lambda x: lax.reduce_window(x, jnp.array(-jnp.inf, x.dtype), lax.max, (1, 1) + k, (1, 1) + s, pads)


@rule("nn.avg_pool2d", FLOAT)
def _avg_pool(node, ins, ctx):
    k, s, p = _pool_params(node)
    pads = ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1]))
    count = k[0] * k[1]
    return lambda x: lax.reduce_window(x, jnp.array(0, x.dtype), lax.add, (1, 1) + k, (1, 1) + s, pads) / count


# ---- random -------------------------------------------------------------------------------
MASK32 = 0xFFFFFFFF


def prng_key(seed: int, key=None):
    """A threefry key from (seed, optional int64 key value): reproducible for a seed and key."""
    s = seed & ((1 << 64) - 1)
    k = jax.random.wrap_key_data(jnp.array([s >> 32, s & MASK32], dtype=jnp.uint32), impl="threefry2x32")
    if key is not None:
        key = key.astype(jnp.int64)
        k = jax.random.fold_in(k, (key & MASK32).astype(jnp.uint32))
        k = jax.random.fold_in(k, ((key >> 32) & MASK32).astype(jnp.uint32))
    return k


@rule("random.uniform", FLOAT | KEY)
def _uniform(node, ins, ctx):
    a = node.attrs
    shape, d, lo, hi = tuple(a["shape"]), jnp.dtype(a["dtype"].numpy), a["low"], a["high"]
    # Rounding can reach `high`; the interval is half-open: clamp below it, as the cpu kernel does.
    top = np.nextafter(a["dtype"].numpy.type(hi), a["dtype"].numpy.type(-np.inf))
    return lambda key=None: jnp.minimum(lo + (hi - lo) * jax.random.uniform(prng_key(a["seed"], key), shape, d), top)


@rule("random.normal", FLOAT | KEY)
def _normal(node, ins, ctx):
    a = node.attrs
    shape, d, mu, sd = tuple(a["shape"]), jnp.dtype(a["dtype"].numpy), a["mean"], a["std"]
    return lambda key=None: mu + sd * jax.random.normal(prng_key(a["seed"], key), shape, d)


@rule("random.bernoulli", BOOL | KEY)
def _bernoulli(node, ins, ctx):
    a = node.attrs
    shape, p = tuple(a["shape"]), a["p"]
    return lambda key=None: jax.random.uniform(prng_key(a["seed"], key), shape, jnp.float64) < p


@rule("nn.dropout", FLOAT | KEY)
def _dropout(node, ins, ctx):
    rate, seed = node.attrs["rate"], node.attrs["seed"]
    shape = ins[0].shape
    scale = 1.0 / (1.0 - rate)

    def dropout(x, key=None):
        if rate == 0.0:
            return x
        keep = jax.random.uniform(prng_key(seed, key), shape, jnp.float64) >= rate
        return jnp.where(keep, x * scale, jnp.zeros((), x.dtype))

    return dropout


# ---- attention ----------------------------------------------------------------------------
@rule("attention.sdpa", FLOAT | BOOL)
def _sdpa(node, ins, ctx):
    q_t, k_t = ins[0], ins[1]
    d = q_t.shape[-1]
    scale = node.attrs["scale"] if node.attrs["scale"] is not None else 1.0 / math.sqrt(d)
    tq, tk = q_t.shape[-2], k_t.shape[-2]
    causal = np.tril(np.ones((tq, tk), dtype=bool), k=tk - tq) if node.attrs["causal"] else None

    def sdpa(q, k, v, mask=None):
        s = jnp.matmul(q, jnp.swapaxes(k, -1, -2), precision=HIGHEST) * scale
        if mask is not None:
            s = jnp.where(mask, s, -jnp.inf) if mask.dtype == jnp.bool_ else s + mask
        if causal is not None:
            s = jnp.where(causal, s, -jnp.inf)
        return jnp.matmul(softmax(s, -1), v, precision=HIGHEST)

    return sdpa


@rule("attention.rope", FLOAT)
def _rope(node, ins, ctx):
    t_len, dim = ins[0].shape[-2], ins[0].shape[-1]
    half = dim // 2
    d = ins[0].dtype.numpy
    cos, sin = (table.astype(d) for table in rope_tables(node.attrs, t_len, dim))

    def rope(x):
        x1, x2 = x[..., :half], x[..., half:]
        return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    return rope


__all__ = ["DTYPES", "INTS", "RULES", "TraceContext", "rule"]

from caramba.backends.xla import active_inference as _active_inference  # noqa: E402,F401  (+ markov_blanket.*)
from caramba.backends.xla import causal as _causal  # noqa: E402,F401  (registers causal.*)
from caramba.backends.xla import predictive_coding as _predictive_coding  # noqa: E402,F401  (registers predictive_coding.*)
from caramba.backends.xla import research as _research  # noqa: E402,F401  (registers fft.*, vsa.*, hawkes.*)
from caramba.backends.xla import sample as _sample  # noqa: E402,F401  (registers sample.token)
from caramba.backends.xla import train as _train  # noqa: E402,F401  (registers the train.* rules)
