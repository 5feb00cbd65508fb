"""attention.*: scaled dot-product attention and rotary position embedding."""

from __future__ import annotations

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS, DType
from caramba.ir.types import ValueType
from caramba.ops._define import broadcast_shapes, define, require_dtype, same_dtype


def _sdpa(ins, a):
    q, k, v = ins[:3]
    same_dtype("attention.sdpa", ins[:3])
    require_dtype("attention.sdpa", q, FLOATS)
    if q.rank < 2 or k.rank != q.rank or v.rank != q.rank:
        raise GraphError(f"attention.sdpa needs q, k, v of one rank >= 2, got {q}, {k}, {v}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise GraphError(
            f"attention.sdpa: q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] disagree: {list(q.shape)}, {list(k.shape)}, {list(v.shape)}"
        )
    batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    tq, tk = q.shape[-2], k.shape[-2]
    if a["causal"] and tq > tk:
        raise GraphError(f"attention.sdpa causal needs Tq <= Tk, got {tq} > {tk}")
    if len(ins) == 4:
        m = ins[3]
        if m.dtype is not DType.bool and m.dtype != q.dtype:
            raise GraphError(f"attention.sdpa mask must be bool (True keeps) or {q.dtype} (added), got {m.dtype}")
        broadcast_shapes(m.shape, batch + (tq, tk))
    return (ValueType(batch + (tq, v.shape[-1]), q.dtype),)


sdpa = define(
    "attention.sdpa", _sdpa, (3, 4), (Attr("scale", "float?", None), Attr("causal", "bool", False)),
    doc="softmax(q @ k^T * scale + mask) @ v; scale defaults to 1/sqrt(D); causal aligns the last"
    " query with the last key; a bool mask keeps True positions, a float mask is added.",
)


def _rope(ins, a):
    x = ins[0]
    require_dtype("attention.rope", x, FLOATS)
    if x.rank < 2 or x.shape[-1] % 2:
        raise GraphError(f"attention.rope needs [..., seq, dim] with even dim, got {list(x.shape)}")
    return (x,)


rope = define(
    "attention.rope", _rope, 1, (Attr("base", "float", 10000.0), Attr("offset", "int", 0)),
    doc="rotary position embedding (rotate-half form) over [..., seq, dim]; position = offset + t",
)
