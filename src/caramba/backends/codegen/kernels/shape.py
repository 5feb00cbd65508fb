"""shape.* kernels. Every shape op is an index map: reshape/squeeze/expand_dims reuse the input
buffer (views); transpose, any slice (negative and non-unit steps), flip, broadcast, the head
views and last_token are strided copies; concat/split/pad/upsample/gather/scatter/iota compute
their source index per output element."""

from __future__ import annotations

from math import prod

from caramba.backends.codegen.cstyle import INDEX, KernelWriter, broadcast_strides, contiguous_strides, offset, unravel
from caramba.backends.codegen.kernels import (
    ANY,
    NUM,
    bind,
    builder,
    kernel_name,
    map_finish,
    map_writer,
    single,
    strided_copy,
)
from caramba.backends.codegen.program import Launch, Program, Slot
from caramba.ir.dtypes import DType
from caramba.ir.graph import Node
from caramba.ir.types import ValueType
from caramba.ops._define import norm_axes, norm_axis
from caramba.ops.shape import slice_plan, split_sizes

INDEX_ERROR = 1  # error flag code: an index out of range


def _view(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    return Program(views={0: 0})


for _op in ("shape.reshape", "shape.expand_dims", "shape.squeeze"):
    builder(_op, ANY)(_view)


def _copy(node: Node, ins, e, strides, base=0, out_shape=None) -> Program:
    out_t = node.types[0]
    shape = out_t.shape if out_shape is None else out_shape
    return single(strided_copy(e, kernel_name(node), shape, out_t.dtype, strides, base), 1)


@builder("shape.transpose", ANY)
def _transpose(node: Node, ins, e) -> Program:
    t = ins[0]
    perm = node.attrs["perm"]
    perm = tuple(norm_axis(p, t.rank) for p in perm) if perm is not None else tuple(reversed(range(t.rank)))
    st = contiguous_strides(t.shape)
    return _copy(node, ins, e, [st[p] for p in perm])


@builder("shape.slice", ANY)
def _slice(node: Node, ins, e) -> Program:
    t = ins[0]
    st = contiguous_strides(t.shape)
    plan = slice_plan(t, node.attrs)
    base = sum(p[0] * s for p, s in zip(plan, st, strict=True) if len(range(*p)))
    return _copy(node, ins, e, [p[2] * s for p, s in zip(plan, st, strict=True)], base)


@builder("shape.flip", ANY)
def _flip(node: Node, ins, e) -> Program:
    t = ins[0]
    axes = norm_axes(node.attrs["axes"], t.rank)
    st = contiguous_strides(t.shape)
    base = sum((t.shape[a] - 1) * st[a] for a in axes if t.shape[a])
    return _copy(node, ins, e, [-s if i in axes else s for i, s in enumerate(st)], base)


@builder("shape.broadcast_to", ANY)
def _broadcast_to(node: Node, ins, e) -> Program:
    return _copy(node, ins, e, broadcast_strides(ins[0].shape, node.types[0].shape))


@builder("shape.view_as_heads", ANY)
def _view_as_heads(node: Node, ins, e) -> Program:
    _, h, t, d = node.types[0].shape
    return _copy(node, ins, e, [t * h * d, d, h * d, 1])


@builder("shape.merge_heads", ANY)
def _merge_heads(node: Node, ins, e) -> Program:
    b, h, t, d = ins[0].shape
    return _copy(node, ins, e, [h * t * d, d, t * d, 1], out_shape=(b, t, h, d))


@builder("shape.last_token", ANY)
def _last_token(node: Node, ins, e) -> Program:
    x = ins[0]
    st = contiguous_strides(x.shape)
    strides = list(st[:-2]) + [1]
    return _copy(node, ins, e, strides, base=(x.shape[-2] - 1) * st[-2])


@builder("shape.concat", ANY)
def _concat(node: Node, ins, e) -> Program:
    out_t = node.types[0]
    d = out_t.dtype
    axis = norm_axis(node.attrs["axis"], out_t.rank)
    w = map_writer(e, kernel_name(node), prod(out_t.shape))
    names, (out,) = bind(w, ins, [out_t])
    coords = unravel(w, "gid", out_t.shape)
    c = coords[axis]
    v = w.var(d, w.e.zero(d), "v")
    start = 0
    live = [(n, t) for n, t in zip(names, ins, strict=True) if t.shape[axis]]
    for k, (name, t) in enumerate(live):
        cs = list(coords)
        cs[axis] = f"({c} - {w.num(start)})" if start else c
        load = w.load(name, offset(w, cs, contiguous_strides(t.shape)), d)
        if k == len(live) - 1:
            w.set(v, load)
        else:
            w.line(f"if ({c} < {w.num(start + t.shape[axis])}) {{ {v} = {load}; }} else {{")
            w._depth += 1
        start += t.shape[axis]
    for _ in range(max(len(live) - 1, 0)):
        w._depth -= 1
        w.line("}")
    w.store(out, "gid", v, d)
    return single(map_finish(w), len(ins))


@builder("shape.split", ANY)
def _split(node: Node, ins, e) -> Program:
    x = ins[0]
    axis, sizes = split_sizes(x, node.attrs)
    st = contiguous_strides(x.shape)
    prog = Program()
    start = 0
    for j, (size, t) in enumerate(zip(sizes, node.types, strict=True)):
        k = strided_copy(e, kernel_name(node, str(j)), t.shape, t.dtype, st, start * st[axis])
        prog.steps.append(Launch(k, (Slot("in", 0), Slot("out", j))))
        start += size
    return prog


@builder("shape.pad", ANY)
def _pad(node: Node, ins, e) -> Program:
    x, out_t = ins[0], node.types[0]
    d = out_t.dtype
    pads, mode = node.attrs["pads"], node.attrs["mode"]
    w = map_writer(e, kernel_name(node, mode), prod(out_t.shape))
    (xb,), (out,) = bind(w, ins, [out_t])
    coords = unravel(w, "gid", out_t.shape)
    src, inside = [], []
    for i, n in enumerate(x.shape):
        lo = pads[2 * i]
        c = coords[i] if not lo else w.let(INDEX, f"{coords[i]} - {w.num(lo)}", "p")
        if not lo and not pads[2 * i + 1]:
            src.append(c)
            continue
        nn = w.num(n)
        if mode == "constant":
            inside.append(f"({c} >= 0 && {c} < {nn})")
            src.append(w.e.select(inside[-1], c, "0"))
        elif mode == "reflect":
            r = w.let(INDEX, w.e.select(f"{c} < 0", f"(-{c})", c), "p")
            src.append(w.let(INDEX, w.e.select(f"{r} >= {nn}", f"({w.num(2 * (n - 1))} - {r})", r), "p"))
        else:  # edge
            src.append(w.let(INDEX, w.e.select(f"{c} < 0", "0", w.e.select(f"{c} >= {nn}", w.num(n - 1), c)), "p"))
    value = w.load(xb, offset(w, src, contiguous_strides(x.shape)), d)
    if mode == "constant" and inside:
        value = w.e.select(" && ".join(inside), value, w.e.lit(node.attrs["value"], d))
    w.store(out, "gid", value, d)
    return single(map_finish(w), 1)


@builder("shape.upsample_nearest", ANY)
def _upsample(node: Node, ins, e) -> Program:
    x, out_t = ins[0], node.types[0]
    scales = node.attrs["scales"]
    k = x.rank - len(scales)
    w = map_writer(e, kernel_name(node), prod(out_t.shape))
    (xb,), (out,) = bind(w, ins, [out_t])
    coords = unravel(w, "gid", out_t.shape)
    src = [c if i < k or scales[i - k] == 1 else f"({c} / {w.num(scales[i - k])})" for i, c in enumerate(coords)]
    w.store(out, "gid", w.load(xb, offset(w, src, contiguous_strides(x.shape)), out_t.dtype), out_t.dtype)
    return single(map_finish(w), 1)


def checked_index(w: KernelWriter, idx_buf: str, idx_pos: str, idx_dtype: DType, n: int) -> str:
    """Load an index, wrap negatives, flag (and clamp) out-of-range ones."""
    raw = w.let(idx_dtype, w.load(idx_buf, idx_pos, idx_dtype), "ix")
    nn = w.let(idx_dtype, w.e.lit(n, idx_dtype) if w.e.specialize else w.e.cast(w.num(n), idx_dtype, INDEX), "n")
    with w.if_(f"{raw} < -{nn} || {raw} >= {nn}"):
        w.error_flag()
        w.line(w.e.flag_error(INDEX_ERROR))
    wrapped = w.e.select(f"{raw} < {w.e.lit(0, idx_dtype)}", f"({raw} + {nn})", raw)
    k = w.let(INDEX, w.e.cast(wrapped, INDEX, idx_dtype), "k")
    return w.let(INDEX, w.e.select(f"{k} >= 0 && {k} < {w.num(n)}", k, "0"), "k")


def gather_kernel(e, name: str, x: ValueType, idx: ValueType, out_t: ValueType, axis: int):
    w = map_writer(e, name, prod(out_t.shape))
    (xb, ib), (out,) = bind(w, [x, idx], [out_t])
    w.error_flag()
    coords = unravel(w, "gid", out_t.shape)
    pre, mid, post = coords[:axis], coords[axis : axis + idx.rank], coords[axis + idx.rank :]
    k = checked_index(w, ib, offset(w, mid, contiguous_strides(idx.shape)), idx.dtype, x.shape[axis])
    src = offset(w, pre + [k] + post, contiguous_strides(x.shape))
    w.store(out, "gid", w.load(xb, src, out_t.dtype), out_t.dtype)
    return single(map_finish(w), 2)


@builder("shape.gather", ANY)
def _gather(node: Node, ins, e) -> Program:
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    return gather_kernel(e, kernel_name(node), ins[0], ins[1], node.types[0], axis)


@builder("shape.scatter_add", NUM)
def _scatter_add(node: Node, ins, e) -> Program:
    # out[pre, j, post] = x[pre, j, post] + sum over index positions p with idx[p] == j of
    # upd[pre, p, post], added in index order (as numpy.add.at does): deterministic, no atomics
    x, idx, upd = ins
    out_t = node.types[0]
    d = out_t.dtype
    axis = norm_axis(node.attrs["axis"], x.rank)
    n = x.shape[axis]
    w = map_writer(e, kernel_name(node), prod(out_t.shape))
    (xb, ib, ub), (out,) = bind(w, ins, [out_t])
    w.error_flag()
    coords = unravel(w, "gid", out_t.shape)
    acc = w.var(d, w.load(xb, "gid", d), "acc")
    ust = contiguous_strides(upd.shape)
    pre_off = offset(w, coords[:axis], ust[:axis])
    post_off = offset(w, coords[axis + 1 :], ust[axis + idx.rank :])
    inner = prod(upd.shape[axis + idx.rank :])  # elements per index position in upd
    with w.loop("0", w.num(idx.size), "1", "p") as p:
        k = checked_index(w, ib, p, idx.dtype, n)
        with w.if_(f"{k} == {coords[axis]}"):
            parts = [s for s in (pre_off, f"{p} * {w.num(inner)}" if inner != 1 else p, post_off) if s != "0"]
            w.set(acc, f"{acc} + {w.load(ub, ' + '.join(parts) or '0', d)}")
    w.store(out, "gid", acc, d)
    return single(map_finish(w), 3)


@builder("shape.iota", NUM)
def _iota(node: Node, ins, e) -> Program:
    out_t = node.types[0]
    axis = norm_axis(node.attrs["axis"], out_t.rank)
    w = map_writer(e, kernel_name(node), prod(out_t.shape))
    _, (out,) = bind(w, [], [out_t])
    c = unravel(w, "gid", out_t.shape)[axis] if out_t.rank else "0"
    w.store(out, "gid", w.e.cast(c, out_t.dtype, INDEX), out_t.dtype)
    return single(map_finish(w), 0)


def _row_start(w: KernelWriter, sb: str, row: str, sdt: DType, hi: int) -> str:
    """Row ``row``'s start from ``starts``: flagged (and clamped) outside [0, hi]."""
    raw = w.let(sdt, w.load(sb, row, sdt), "s")
    with w.if_(f"{raw} < {w.e.lit(0, sdt)} || {raw} > {w.e.lit(hi, sdt)}"):
        w.error_flag()
        w.line(w.e.flag_error(INDEX_ERROR))
    k = w.let(INDEX, w.e.cast(raw, INDEX, sdt), "s")
    return w.let(INDEX, w.e.select(f"{k} >= 0 && {k} <= {w.num(hi)}", k, "0"), "s")


@builder("shape.slice_rows", ANY)
def _slice_rows(node: Node, ins, e) -> Program:
    # out[b, .., j, ..] = x[b, .., starts[b] + j, ..]
    x, starts = ins
    out_t = node.types[0]
    axis, size = norm_axis(node.attrs["axis"], x.rank), node.attrs["size"]
    w = map_writer(e, kernel_name(node), prod(out_t.shape))
    (xb, sb), (out,) = bind(w, ins, [out_t])
    w.error_flag()
    coords = unravel(w, "gid", out_t.shape)
    s = _row_start(w, sb, coords[0], starts.dtype, x.shape[axis] - size)
    src = coords[:axis] + [f"({s} + {coords[axis]})"] + coords[axis + 1 :]
    w.store(out, "gid", w.load(xb, offset(w, src, contiguous_strides(x.shape)), out_t.dtype), out_t.dtype)
    return single(map_finish(w), 2)


@builder("shape.update_rows", ANY)
def _update_rows(node: Node, ins, e) -> Program:
    # out[b, .., c, ..] = upd[b, .., c - starts[b], ..] where 0 <= c - starts[b] < u, else x
    x, upd, starts = ins
    out_t, d = node.types[0], node.types[0].dtype
    axis = norm_axis(node.attrs["axis"], x.rank)
    u = upd.shape[axis]
    w = map_writer(e, kernel_name(node), prod(out_t.shape))
    (xb, ub, sb), (out,) = bind(w, ins, [out_t])
    w.error_flag()
    coords = unravel(w, "gid", out_t.shape)
    s = _row_start(w, sb, coords[0], starts.dtype, x.shape[axis] - u)
    rel = w.let(INDEX, f"({coords[axis]} - {s})", "r")
    inside = w.let(DType.bool, f"{rel} >= 0 && {rel} < {w.num(u)}", "in")
    rc = w.let(INDEX, w.e.select(inside, rel, "0"), "r")  # never load outside upd
    src = coords[:axis] + [rc] + coords[axis + 1 :]
    new = w.load(ub, offset(w, src, contiguous_strides(upd.shape)), d)
    w.store(out, "gid", w.e.select(inside, new, w.load(xb, "gid", d)), d)
    return single(map_finish(w), 3)
