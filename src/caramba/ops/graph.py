"""graph.input and graph.constant: how values enter a graph."""

from __future__ import annotations

from caramba.ir.attrs import Attr
from caramba.ir.dtypes import dtype as as_dtype
from caramba.ir.types import Effect, ValueType
from caramba.ops._define import define

define(
    "graph.input",
    lambda ins, a: (ValueType(a["shape"], a["dtype"]),),
    0,
    (Attr("shape", "ints"), Attr("dtype", "dtype", "float64")),
    effect=Effect.external_io,
    differentiable=False,
    doc="A value fed at execute time (graph input).",
)

define(
    "graph.constant",
    lambda ins, a: (ValueType(a["value"].shape, as_dtype(a["value"].dtype)),),
    0,
    (Attr("value", "array"),),
    differentiable=False,
    doc="A host constant embedded in the graph.",
)
