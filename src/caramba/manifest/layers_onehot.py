"""``nn.one_hot``: int64 labels ``[...]`` -> ``[..., classes]`` with 1 at the label and 0
elsewhere (a label outside ``[0, classes)`` gives a row of zeros). Built from ``shape.iota``,
``math.equal`` and ``math.cast``; the labels carry no gradient, so neither does the output."""

from __future__ import annotations

from typing import Any

from caramba.errors import CarambaError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Value
from caramba.manifest.lower import LayerContext, layer


@layer("one_hot")
def one_hot(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """labels [...] int -> [..., classes] in the model's dtype."""
    if len(ins) != 1:
        raise CarambaError(f"nn.one_hot takes one input (labels), got {len(ins)}")
    (labels,) = ins
    if labels.dtype not in (DType.int64, DType.int32):
        raise CarambaError(f"nn.one_hot needs integer labels, got {labels.type}")
    classes = int(c["classes"])
    ar = ctx.op("shape.iota", (), {"shape": (classes,), "axis": 0, "dtype": labels.dtype}, name="classes")
    lab = ctx.op("shape.expand_dims", (labels,), {"axes": (-1,)}, name="label_item")
    hit = ctx.op("math.equal", (lab, ar), name="is_label")
    return ctx.op("math.cast", (hit,), {"dtype": ctx.dtype}, name=None)
