"""random.*: reproducible random tensors from an explicit seed and an optional key input.

The value is a function of (seed, key): the same seed and key give the same tensor on a given
backend. Feed a changing key (e.g. the step counter) to draw fresh values each execution.
"""

from __future__ import annotations

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS, DType
from caramba.ir.types import Effect, ValueType
from caramba.ops._define import define, require_dtype


def _random(op_id: str, out_dtype: DType | None = None):
    def infer(ins, a):
        if ins and (ins[0].shape != () or ins[0].dtype is not DType.int64):
            raise GraphError(f"{op_id} key must be an int64 scalar, got {ins[0]}")
        d = out_dtype or a["dtype"]
        if out_dtype is None:
            require_dtype(op_id, ValueType((), d), FLOATS, "dtype")
        if "high" in a and not a["low"] < a["high"]:
            raise GraphError(f"{op_id} needs low < high, got [{a['low']}, {a['high']})")
        if "std" in a and not a["std"] >= 0:
            raise GraphError(f"{op_id} needs std >= 0, got {a['std']}")
        if "p" in a and not 0.0 <= a["p"] <= 1.0:
            raise GraphError(f"{op_id} needs 0 <= p <= 1, got {a['p']}")
        return (ValueType(tuple(a["shape"]), d),)

    return infer


_COMMON = (Attr("shape", "ints"), Attr("seed", "int", 0))
uniform = define(
    "random.uniform", _random("random.uniform"), (0, 1),
    (*_COMMON, Attr("dtype", "dtype", "float64"), Attr("low", "float", 0.0), Attr("high", "float", 1.0)),
    effect=Effect.random, differentiable=False, doc="uniform on [low, high)",
)
normal = define(
    "random.normal", _random("random.normal"), (0, 1),
    (*_COMMON, Attr("dtype", "dtype", "float64"), Attr("mean", "float", 0.0), Attr("std", "float", 1.0)),
    effect=Effect.random, differentiable=False, doc="normal(mean, std)",
)
bernoulli = define(
    "random.bernoulli", _random("random.bernoulli", DType.bool), (0, 1),
    (*_COMMON, Attr("p", "float", 0.5)),
    effect=Effect.random, differentiable=False, doc="True with probability p",
)
