"""cpu kernels for math.* (NumPy ufuncs; scipy.special for erf)."""

from __future__ import annotations

import numpy as np

from caramba.backends.cpu.kernels import ANY, FLOAT, NUM, kernel, simple, special
from caramba.ir.dtypes import SIGNED_INTS, DType

SIGNED = FLOAT | SIGNED_INTS
BOOL = frozenset({DType.bool})
CMP = NUM | BOOL  # comparisons take numbers and produce bool

for op_id, fn, dtypes in (
    ("math.add", np.add, NUM),
    ("math.sub", np.subtract, NUM),
    ("math.mul", np.multiply, NUM),
    ("math.div", np.true_divide, FLOAT),
    ("math.pow", np.power, FLOAT),
    ("math.maximum", np.maximum, NUM),
    ("math.minimum", np.minimum, NUM),
    ("math.neg", np.negative, SIGNED),
    ("math.abs", np.absolute, SIGNED),
    ("math.sign", np.sign, SIGNED),
    ("math.exp", np.exp, FLOAT),
    ("math.log", np.log, FLOAT),
    ("math.log1p", np.log1p, FLOAT),
    ("math.expm1", np.expm1, FLOAT),
    ("math.sqrt", np.sqrt, FLOAT),
    ("math.square", np.square, SIGNED),
    ("math.reciprocal", np.reciprocal, FLOAT),
    ("math.sin", np.sin, FLOAT),
    ("math.cos", np.cos, FLOAT),
    ("math.tanh", np.tanh, FLOAT),
    ("math.floor", np.floor, FLOAT),
    ("math.ceil", np.ceil, FLOAT),
    ("math.round", np.round, FLOAT),
    ("math.equal", np.equal, ANY),
    ("math.not_equal", np.not_equal, ANY),
    ("math.less", np.less, CMP),
    ("math.less_equal", np.less_equal, CMP),
    ("math.greater", np.greater, CMP),
    ("math.greater_equal", np.greater_equal, CMP),
    ("math.logical_and", np.logical_and, BOOL),
    ("math.logical_or", np.logical_or, BOOL),
    ("math.logical_not", np.logical_not, BOOL),
    ("math.where", np.where, ANY),
):
    simple(op_id, dtypes, fn)


def _rsqrt(x):
    return np.reciprocal(np.sqrt(x))


simple("math.rsqrt", FLOAT, _rsqrt)


def _erf(x):
    return special().erf(x).astype(x.dtype, copy=False)  # scipy computes float16 in float32


simple("math.erf", FLOAT, _erf)


@kernel("math.clamp", NUM)
def _clamp(node, ins):
    d = ins[0].dtype.numpy
    lo, hi = node.attrs["min"], node.attrs["max"]
    if d.kind in "iu":
        info = np.iinfo(d)
        lo = None if lo is None else d.type(min(max(np.ceil(lo), info.min), info.max))
        hi = None if hi is None else d.type(max(min(np.floor(hi), info.max), info.min))
    if lo is None and hi is None:
        return lambda x: x
    if lo is None:
        return lambda x: np.minimum(x, hi)
    if hi is None:
        return lambda x: np.maximum(x, lo)
    return lambda x: np.minimum(np.maximum(x, lo), hi)


@kernel("math.cast", ANY)
def _cast(node, ins):
    d = node.attrs["dtype"].numpy
    return lambda x: x.astype(d)
