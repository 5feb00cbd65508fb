"""math.*: elementwise arithmetic, transcendental functions, comparisons, logic, cast.

Every op here is elementwise with NumPy broadcasting; binary ops need one shared dtype.
"""

from __future__ import annotations

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import ALL, FLOATS, NUMERIC, SIGNED_INTS, DType
from caramba.ir.types import ValueType
from caramba.ops._define import binary, broadcast_shapes, define, require_dtype, unary

SIGNED = FLOATS | SIGNED_INTS
BOOL = frozenset({DType.bool})

add = binary("math.add", NUMERIC, traits={"commutative", "associative"}, doc="x + y")
sub = binary("math.sub", NUMERIC, doc="x - y")
mul = binary("math.mul", NUMERIC, traits={"commutative", "associative"}, doc="x * y")
div = binary("math.div", FLOATS, doc="x / y (true division; floats only)")
pow = binary("math.pow", FLOATS, doc="x ** y")
maximum = binary("math.maximum", NUMERIC, traits={"commutative", "associative", "idempotent"}, doc="max(x, y), NaN-propagating")
minimum = binary("math.minimum", NUMERIC, traits={"commutative", "associative", "idempotent"}, doc="min(x, y), NaN-propagating")

neg = unary("math.neg", SIGNED, traits={"involution"}, doc="-x")
abs = unary("math.abs", SIGNED, traits={"idempotent"}, doc="|x|")
sign = unary("math.sign", SIGNED, differentiable=False, doc="-1, 0 or 1 (0 for 0 and NaN keeps NaN)")
exp = unary("math.exp", doc="e**x")
log = unary("math.log", doc="natural log")
log1p = unary("math.log1p", doc="log(1 + x), accurate near 0")
expm1 = unary("math.expm1", doc="exp(x) - 1, accurate near 0")
sqrt = unary("math.sqrt", doc="square root")
rsqrt = unary("math.rsqrt", doc="1 / sqrt(x)")
square = unary("math.square", SIGNED, doc="x * x")
reciprocal = unary("math.reciprocal", doc="1 / x")
sin = unary("math.sin", doc="sine")
cos = unary("math.cos", doc="cosine")
tanh = unary("math.tanh", doc="hyperbolic tangent")
erf = unary("math.erf", doc="error function (exact)")
floor = unary("math.floor", differentiable=False, traits={"idempotent"}, doc="round down")
ceil = unary("math.ceil", differentiable=False, traits={"idempotent"}, doc="round up")
round = unary("math.round", differentiable=False, traits={"idempotent"}, doc="round half to even")

clamp = unary(
    "math.clamp",
    NUMERIC,
    (Attr("min", "float?", None), Attr("max", "float?", None)),
    doc="min(max(x, min), max); either bound may be omitted; NaN stays NaN. For integer x the"
    " bounds round inward (ceil(min), floor(max)), so the result is the nearest integer in range.",
)

equal = binary("math.equal", ALL, out_dtype=DType.bool, traits={"commutative"}, differentiable=False, doc="x == y")
not_equal = binary("math.not_equal", ALL, out_dtype=DType.bool, traits={"commutative"}, differentiable=False, doc="x != y")
less = binary("math.less", NUMERIC, out_dtype=DType.bool, differentiable=False, doc="x < y")
less_equal = binary("math.less_equal", NUMERIC, out_dtype=DType.bool, differentiable=False, doc="x <= y")
greater = binary("math.greater", NUMERIC, out_dtype=DType.bool, differentiable=False, doc="x > y")
greater_equal = binary("math.greater_equal", NUMERIC, out_dtype=DType.bool, differentiable=False, doc="x >= y")
logical_and = binary("math.logical_and", BOOL, traits={"commutative", "associative", "idempotent"}, differentiable=False, doc="x and y")
logical_or = binary("math.logical_or", BOOL, traits={"commutative", "associative", "idempotent"}, differentiable=False, doc="x or y")
logical_not = unary("math.logical_not", BOOL, traits={"involution"}, differentiable=False, doc="not x")


def _where(ins: tuple[ValueType, ...], a) -> tuple[ValueType, ...]:
    cond, x, y = ins
    if cond.dtype is not DType.bool:
        raise GraphError(f"math.where condition must be bool, got {cond.dtype}")
    if x.dtype != y.dtype:
        raise GraphError(f"math.where branches differ in dtype: {x} vs {y}")
    return (ValueType(broadcast_shapes(cond.shape, x.shape, y.shape), x.dtype),)


where = define("math.where", _where, 3, traits={"elementwise"}, scalars_like=(1, 2),
               doc="cond ? x : y, broadcast; a Python scalar branch takes the other branch's dtype")


def _cast(ins: tuple[ValueType, ...], a) -> tuple[ValueType, ...]:
    require_dtype("math.cast", ins[0], ALL)
    return (ins[0].with_dtype(a["dtype"]),)


cast = define(
    "math.cast",
    _cast,
    1,
    (Attr("dtype", "dtype"),),
    traits={"elementwise"},
    doc="Convert to ``dtype`` (float->int truncates toward zero; ->bool is x != 0; float->float"
    " rounds to nearest even, overflowing to inf). Values outside an integer target's range, and"
    " NaN to integer, are undefined.",
)
