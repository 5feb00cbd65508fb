"""shape.*: reshape, transpose, concat, split, slice, pad, broadcast, gather/scatter, ...

Shape ops move data; they never change values, so every one of them takes any dtype (except
scatter_add, which adds, and iota, which counts: numbers only).
"""

from __future__ import annotations

import builtins
from math import prod

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import ALL, NUMERIC, DType
from caramba.ir.types import ValueType
from caramba.ops._define import broadcast_shapes, define, norm_axes, norm_axis, require_dtype, same_dtype


def _reshape(ins, a):
    t = ins[0]
    shape = list(a["shape"])
    if shape.count(-1) > 1:
        raise GraphError(f"shape.reshape: at most one -1 in {shape}")
    if any(s < -1 for s in shape):
        raise GraphError(f"shape.reshape: bad dimension in {shape}")
    if -1 in shape:
        known = prod(s for s in shape if s != -1)
        if known == 0 or t.size % known:
            raise GraphError(f"shape.reshape: cannot infer -1 reshaping {list(t.shape)} to {shape}")
        shape[shape.index(-1)] = t.size // known
    if prod(shape) != t.size:
        raise GraphError(f"shape.reshape: {list(t.shape)} ({t.size} elements) cannot become {shape}")
    return (t.with_shape(shape),)


reshape = define(
    "shape.reshape", _reshape, 1, (Attr("shape", "ints"),), aliases=((0, 0),),
    doc="Same elements, new shape (row-major); one dimension may be -1.",
)


def _transpose(ins, a):
    t = ins[0]
    perm = a["perm"]
    if perm is None:
        perm = tuple(reversed(range(t.rank)))
    if sorted(norm_axis(p, t.rank) for p in perm) != list(range(t.rank)):
        raise GraphError(f"shape.transpose: {list(perm)} is not a permutation of {t.rank} axes")
    return (t.with_shape(tuple(t.shape[p] for p in perm)),)


transpose = define(
    "shape.transpose", _transpose, 1, (Attr("perm", "ints?", None),),
    doc="Permute axes (None: reverse them).",
)


def _concat(ins, a):
    d = same_dtype("shape.concat", ins)
    r = ins[0].rank
    if r == 0:
        raise GraphError("shape.concat: cannot concatenate scalars")
    axis = norm_axis(a["axis"], r)
    for t in ins[1:]:
        if t.rank != r or any(t.shape[i] != ins[0].shape[i] for i in range(r) if i != axis):
            raise GraphError(
                f"shape.concat along axis {a['axis']}: shapes {[list(x.shape) for x in ins]} differ off-axis"
            )
    shape = list(ins[0].shape)
    shape[axis] = sum(t.shape[axis] for t in ins)
    return (ValueType(tuple(shape), d),)


concat = define("shape.concat", _concat, (1, None), (Attr("axis", "int", 0),), doc="Join along axis.")


def split_sizes(t: ValueType, a) -> tuple[int, list[int]]:
    axis = norm_axis(a["axis"], t.rank)
    dim = t.shape[axis]
    if (a["sizes"] is None) == (a["num"] is None):
        raise GraphError("shape.split takes exactly one of sizes= or num=")
    if a["sizes"] is not None:
        sizes = list(a["sizes"])
        if sum(sizes) != dim or any(s < 0 for s in sizes):
            raise GraphError(f"shape.split sizes {sizes} do not add up to axis size {dim}")
    else:
        n = a["num"]
        if n <= 0 or dim % n:
            raise GraphError(f"shape.split: axis of size {dim} does not split into {n} equal parts")
        sizes = [dim // n] * n
    return axis, sizes


def _split(ins, a):
    t = ins[0]
    if t.rank == 0:
        raise GraphError("shape.split: cannot split a scalar")
    axis, sizes = split_sizes(t, a)
    return tuple(t.with_shape(t.shape[:axis] + (s,) + t.shape[axis + 1 :]) for s in sizes)


split = define(
    "shape.split", _split, 1,
    (Attr("axis", "int", 0), Attr("sizes", "ints?", None), Attr("num", "int?", None)),
    doc="Split along axis into parts of the given sizes (or num equal parts); one output per part.",
)


def slice_plan(t: ValueType, a) -> list[tuple[int, int, int]]:
    """Per-axis (start, stop, step) in Python slice semantics for every axis of ``t``."""
    starts, ends = a["starts"], a["ends"]
    axes = a["axes"] if a["axes"] is not None else tuple(range(len(starts)))
    steps = a["steps"] if a["steps"] is not None else (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise GraphError("shape.slice: starts, ends, axes and steps must have one entry per sliced axis")
    plan = [(0, d, 1) for d in t.shape]
    seen = set()
    for s, e, ax, st in zip(starts, ends, axes, steps, strict=True):
        ax = norm_axis(ax, t.rank)
        if ax in seen:
            raise GraphError(f"shape.slice: axis {ax} sliced twice")
        seen.add(ax)
        if st == 0:
            raise GraphError("shape.slice: step must not be 0")
        plan[ax] = builtins.slice(s, e, st).indices(t.shape[ax])
    return plan


def _slice(ins, a):
    t = ins[0]
    plan = slice_plan(t, a)
    return (t.with_shape(tuple(len(range(*p)) for p in plan)),)


slice = define(
    "shape.slice", _slice, 1,
    (Attr("starts", "ints"), Attr("ends", "ints"), Attr("axes", "ints?", None), Attr("steps", "ints?", None)),
    aliases=((0, 0),),
    doc="x[start:end:step] per listed axis, Python slice semantics (negative indices wrap, clamped).",
)


def _pad(ins, a):
    t = ins[0]
    pads = a["pads"]
    if len(pads) != 2 * t.rank or any(p < 0 for p in pads):
        raise GraphError(f"shape.pad needs 2*rank={2 * t.rank} non-negative pads (before, after per axis), got {list(pads)}")
    if a["mode"] != "constant":
        for i, d in enumerate(t.shape):
            lo, hi = pads[2 * i], pads[2 * i + 1]
            if (lo or hi) and (d == 0 or (a["mode"] == "reflect" and (lo >= d or hi >= d))):
                raise GraphError(f"shape.pad mode {a['mode']}: pad ({lo}, {hi}) too large for axis {i} of size {d}")
    return (t.with_shape(tuple(d + pads[2 * i] + pads[2 * i + 1] for i, d in enumerate(t.shape))),)


pad = define(
    "shape.pad", _pad, 1,
    (Attr("pads", "ints"), Attr("mode", "str", "constant", choices=("constant", "reflect", "edge")), Attr("value", "float", 0.0)),
    doc="Pad each axis by (before, after) = pads[2i], pads[2i+1]; modes constant/reflect/edge.",
)


def _broadcast_to(ins, a):
    t = ins[0]
    shape = tuple(a["shape"])
    try:
        ok = len(shape) >= t.rank and broadcast_shapes(t.shape, shape) == shape
    except GraphError:
        ok = False
    if not ok:
        raise GraphError(f"shape.broadcast_to: {list(t.shape)} does not broadcast to {list(shape)}")
    return (t.with_shape(shape),)


broadcast_to = define("shape.broadcast_to", _broadcast_to, 1, (Attr("shape", "ints"),), doc="Broadcast to shape.")


def _expand_dims(ins, a):
    t = ins[0]
    out_rank = t.rank + len(a["axes"])
    axes = norm_axes(a["axes"], out_rank)
    it = iter(t.shape)
    return (t.with_shape(tuple(1 if i in axes else next(it) for i in range(out_rank))),)


expand_dims = define(
    "shape.expand_dims", _expand_dims, 1, (Attr("axes", "ints"),), aliases=((0, 0),),
    doc="Insert size-1 axes at the given positions of the output.",
)


def _squeeze(ins, a):
    t = ins[0]
    if a["axes"] is None:
        return (t.with_shape(tuple(d for d in t.shape if d != 1)),)
    axes = norm_axes(a["axes"], t.rank)
    bad = [ax for ax in axes if t.shape[ax] != 1]
    if bad:
        raise GraphError(f"shape.squeeze: axes {bad} of {list(t.shape)} do not have size 1")
    return (t.with_shape(tuple(d for i, d in enumerate(t.shape) if i not in axes)),)


squeeze = define(
    "shape.squeeze", _squeeze, 1, (Attr("axes", "ints?", None),), aliases=((0, 0),),
    doc="Remove size-1 axes (None: all of them).",
)


def _gather(ins, a):
    t, idx = ins
    require_dtype("shape.gather", idx, frozenset({DType.int64, DType.int32}), "indices")
    if t.rank == 0:
        raise GraphError("shape.gather from a scalar")
    axis = norm_axis(a["axis"], t.rank)
    return (t.with_shape(t.shape[:axis] + idx.shape + t.shape[axis + 1 :]),)


gather = define(
    "shape.gather", _gather, 2, (Attr("axis", "int", 0),),
    doc="take(x, indices, axis): out[..., i.., ...] = x[..., indices[i..], ...]; negative indices wrap,"
    " out-of-range indices are an error at run time.",
)


def _scatter_add(ins, a):
    t, idx, upd = ins
    require_dtype("shape.scatter_add", t, NUMERIC)  # it adds: bool has no addition
    require_dtype("shape.scatter_add", idx, frozenset({DType.int64, DType.int32}), "indices")
    if t.rank == 0:
        raise GraphError("shape.scatter_add into a scalar")
    axis = norm_axis(a["axis"], t.rank)
    want = t.shape[:axis] + idx.shape + t.shape[axis + 1 :]
    if upd.shape != want or upd.dtype != t.dtype:
        raise GraphError(
            f"shape.scatter_add updates must be {t.dtype.value}{list(want)} (x.shape with axis {axis} "
            f"replaced by indices.shape), got {upd}"
        )
    return (t,)


scatter_add = define(
    "shape.scatter_add", _scatter_add, 3, (Attr("axis", "int", 0),),
    doc="x with updates added at indices along axis (the transpose of gather; repeats accumulate).",
)


def _rows_axis(op_id: str, t: ValueType, starts: ValueType, a) -> int:
    """The sliced axis of a per-row op (never the row axis 0) after checking ``starts`` [B]."""
    if t.rank < 2:
        raise GraphError(f"{op_id} needs rows: an input of rank >= 2, got {t}")
    axis = norm_axis(a["axis"], t.rank)
    if axis == 0:
        raise GraphError(f"{op_id}: axis 0 holds the rows; slice along another axis")
    require_dtype(op_id, starts, frozenset({DType.int64, DType.int32}), "starts")
    if starts.shape != t.shape[:1]:
        raise GraphError(f"{op_id}: starts must be [{t.shape[0]}] (one start per row of axis 0), got {starts}")
    return axis


def _slice_rows(ins, a):
    t, starts = ins
    axis = _rows_axis("shape.slice_rows", t, starts, a)
    size = a["size"]
    if not 0 < size <= t.shape[axis]:
        raise GraphError(f"shape.slice_rows: size {size} must be in [1, {t.shape[axis]}] (axis {axis} of {t})")
    return (t.with_shape(t.shape[:axis] + (size,) + t.shape[axis + 1 :]),)


slice_rows = define(
    "shape.slice_rows", _slice_rows, 2, (Attr("axis", "int", 1), Attr("size", "int")),
    doc="Per-row dynamic slice: out[b, .., j, ..] = x[b, .., starts[b] + j, ..] for j < size along axis"
    " (>= 1). Every start must lie in [0, x.shape[axis] - size]: another is an error at run time."
    " The transpose of update_rows.",
)


def _update_rows(ins, a):
    t, upd, starts = ins
    axis = _rows_axis("shape.update_rows", t, starts, a)
    u = upd.shape[axis] if upd.rank == t.rank else -1
    if upd.dtype != t.dtype or upd.rank != t.rank or not 0 < u <= t.shape[axis] or any(
            d != e for i, (d, e) in enumerate(zip(upd.shape, t.shape, strict=True)) if i != axis):
        raise GraphError(f"shape.update_rows: update must be {t.dtype.value}{list(t.shape)} with axis {axis} of size "
                         f"1..{t.shape[axis]}, got {upd}")
    return (t,)


update_rows = define(
    "shape.update_rows", _update_rows, 3, (Attr("axis", "int", 1),),
    doc="Per-row dynamic update slice: x with x[b, .., starts[b] + j, ..] = update[b, .., j, ..] for"
    " j < update.shape[axis] along axis (>= 1); update has x's shape elsewhere. Every start must lie"
    " in [0, x.shape[axis] - update.shape[axis]]: another is an error at run time. Backends update"
    " resident state in place when x is read from the state this result replaces (the KV cache"
    " append of decoding).",
)


def _iota(ins, a):
    shape = tuple(a["shape"])
    norm_axis(a["axis"], len(shape))
    require_dtype("shape.iota", ValueType((), a["dtype"]), ALL - {DType.bool}, "dtype")
    return (ValueType(shape, a["dtype"]),)


iota = define(
    "shape.iota", _iota, 0,
    (Attr("shape", "ints"), Attr("axis", "int", 0), Attr("dtype", "dtype", "int64")),
    differentiable=False, doc="0, 1, 2, ... along axis, broadcast over the other axes.",
)


def _upsample(ins, a):
    t = ins[0]
    scales = a["scales"]
    if t.rank < len(scales) or any(s < 1 for s in scales):
        raise GraphError(f"shape.upsample_nearest: scales {list(scales)} for a rank-{t.rank} input")
    k = t.rank - len(scales)
    return (t.with_shape(t.shape[:k] + tuple(d * s for d, s in zip(t.shape[k:], scales, strict=True))),)


upsample_nearest = define(
    "shape.upsample_nearest", _upsample, 1, (Attr("scales", "ints"),),
    doc="Repeat each element `scale` times along each trailing axis (nearest-neighbour upsampling).",
)


def _view_as_heads(ins, a):
    t = ins[0]
    h = a["num_heads"]
    if t.rank != 3 or h <= 0 or t.shape[2] % h:
        raise GraphError(f"shape.view_as_heads needs [batch, seq, d_model] with d_model divisible by {h}, got {list(t.shape)}")
    b, s, d = t.shape
    return (t.with_shape((b, h, s, d // h)),)


view_as_heads = define(
    "shape.view_as_heads", _view_as_heads, 1, (Attr("num_heads", "int"),),
    doc="[B, T, H*D] -> [B, H, T, D]",
)


def _merge_heads(ins, a):
    t = ins[0]
    if t.rank != 4:
        raise GraphError(f"shape.merge_heads needs [batch, heads, seq, head_dim], got {list(t.shape)}")
    b, h, s, d = t.shape
    return (t.with_shape((b, s, h * d)),)


merge_heads = define("shape.merge_heads", _merge_heads, 1, doc="[B, H, T, D] -> [B, T, H*D]")


def _last_token(ins, a):
    t = ins[0]
    if t.rank < 2 or t.shape[-2] == 0:
        raise GraphError(f"shape.last_token needs [..., seq, features] with seq >= 1, got {list(t.shape)}")
    return (t.with_shape(t.shape[:-2] + t.shape[-1:]),)


last_token = define("shape.last_token", _last_token, 1, aliases=((0, 0),), doc="x[..., -1, :]")


def _flip(ins, a):
    norm_axes(a["axes"], ins[0].rank)
    return (ins[0],)


flip = define("shape.flip", _flip, 1, (Attr("axes", "ints?", None),), doc="Reverse the order along axes (None: all).")

