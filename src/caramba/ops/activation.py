"""activation.*: elementwise nonlinearities (float inputs)."""

from __future__ import annotations

import math

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS
from caramba.ir.types import ValueType
from caramba.ops._define import broadcast_shapes, define, require_dtype, same_dtype, unary

relu = unary("activation.relu", traits={"idempotent"}, doc="max(x, 0)")
leaky_relu = unary("activation.leaky_relu", attrs=(Attr("alpha", "float", 0.01),), doc="x if x > 0 else alpha * x")
gelu = unary(
    "activation.gelu",
    attrs=(Attr("approximate", "str", "none", choices=("none", "tanh")),),
    doc="x * Phi(x). ``approximate='none'`` is the exact erf form; 'tanh' the tanh approximation."
    " The two are different ops to the compiler: one never replaces the other.",
)
# Exact GELU as the backends and its gradient spell it: x * erfc(x * GELU_ERFC_SCALE) / 2.
GELU_ERFC_SCALE = -math.sqrt(0.5)
silu = unary("activation.silu", doc="x * sigmoid(x) (swish)")
sigmoid = unary("activation.sigmoid", doc="1 / (1 + exp(-x))")
selu = unary("activation.selu", doc="scale * (x if x > 0 else alpha * (exp(x) - 1)), the SNN constants")
elu = unary("activation.elu", attrs=(Attr("alpha", "float", 1.0),), doc="x if x > 0 else alpha * (exp(x) - 1)")
softplus = unary(
    "activation.softplus",
    attrs=(Attr("beta", "float", 1.0),),
    doc="log(1 + exp(beta * x)) / beta, computed without overflow",
)


def _swiglu(ins: tuple[ValueType, ...], a) -> tuple[ValueType, ...]:
    for t in ins:
        require_dtype("activation.swiglu", t, FLOATS)
    if len(ins) == 2:
        d = same_dtype("activation.swiglu", ins)
        return (ValueType(broadcast_shapes(ins[0].shape, ins[1].shape), d),)
    t = ins[0]
    if t.rank == 0 or t.shape[-1] % 2:
        raise GraphError(f"activation.swiglu of one input splits its last axis in two; got shape {list(t.shape)}")
    return (t.with_shape(t.shape[:-1] + (t.shape[-1] // 2,)),)


swiglu = define(
    "activation.swiglu",
    _swiglu,
    (1, 2),
    doc="silu(gate) * up. With one input [..., 2n], gate is the first half of the last axis.",
)
