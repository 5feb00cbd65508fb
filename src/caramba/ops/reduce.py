"""reduce.*: reductions over axes (None: all axes) with keepdims."""

from __future__ import annotations

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS, NUMERIC, DType
from caramba.ir.types import ValueType
from caramba.ops._define import KEEPDIMS, define, norm_axis, reduced_shape, reduction, require_dtype

sum = reduction("reduce.sum", NUMERIC, doc="sum over axes")
mean = reduction("reduce.mean", FLOATS, doc="mean over axes (NaN for an empty group)")
max = reduction("reduce.max", NUMERIC, nonempty=True, differentiable=True, doc="maximum over axes")
min = reduction("reduce.min", NUMERIC, nonempty=True, doc="minimum over axes")
prod = reduction("reduce.prod", NUMERIC, doc="product over axes")
logsumexp = reduction("reduce.logsumexp", FLOATS, doc="log(sum(exp(x))) over axes, computed stably")
variance = reduction(
    "reduce.variance",
    FLOATS,
    (Attr("correction", "int", 0, doc="subtract from the count (1: unbiased)"),),
    doc="sum((x - mean(x))**2) / max(n - correction, 0) over axes (n elements per group; a zero"
    " divisor gives inf, or NaN when the sum is 0 or the group is empty)",
)


def _arg(op_id: str):
    def infer(ins: tuple[ValueType, ...], a) -> tuple[ValueType, ...]:
        t = ins[0]
        require_dtype(op_id, t, NUMERIC)
        if t.rank == 0:
            raise GraphError(f"{op_id} needs an input of rank >= 1")
        axis = norm_axis(a["axis"], t.rank)
        if t.shape[axis] == 0:
            raise GraphError(f"{op_id} over an empty axis")
        return (ValueType(reduced_shape(t.shape, (axis,), a["keepdims"]), DType.int64),)

    return infer


argmax = define(
    "reduce.argmax", _arg("reduce.argmax"), 1, (Attr("axis", "int", -1), KEEPDIMS),
    differentiable=False, doc="index (int64) of the first maximum along axis (NaN counts as the maximum)",
)
argmin = define(
    "reduce.argmin", _arg("reduce.argmin"), 1, (Attr("axis", "int", -1), KEEPDIMS),
    differentiable=False, doc="index (int64) of the first minimum along axis (NaN counts as the minimum)",
)
