"""Reductions (reduce.*): one workgroup per output element (strided partial folds, then a tree),
or one thread per output when the reduced extent is small. Any set of axes, any layout: the
output index picks a base offset, the reduced index walks the reduced axes by their strides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

from caramba.backends.codegen.cstyle import INDEX, KernelWriter, contiguous_strides, offset, unravel
from caramba.backends.codegen.kernels import (
    NUM,
    F,
    bind,
    builder,
    kernel_name,
    map_finish,
    map_writer,
    row_finish,
    row_size,
    row_writer,
    single,
    tree_reduce,
)
from caramba.ir.dtypes import DType
from caramba.ir.graph import Node
from caramba.ir.types import ValueType
from caramba.ops._define import norm_axes, norm_axis

SEQUENTIAL_MAX = 32  # reduced extents up to this are folded by one thread per output


@dataclass
class Layout:
    """Where output ``o`` and reduced index ``r`` live in the input."""

    kept_shape: tuple[int, ...]
    kept_strides: tuple[int, ...]
    red_shape: tuple[int, ...]
    red_strides: tuple[int, ...]

    @property
    def outputs(self) -> int:
        return prod(self.kept_shape)

    @property
    def extent(self) -> int:
        return prod(self.red_shape)


def layout(shape: tuple[int, ...], axes: tuple[int, ...]) -> Layout:
    st = contiguous_strides(shape)
    kept = [i for i in range(len(shape)) if i not in axes]
    return Layout(
        tuple(shape[i] for i in kept), tuple(st[i] for i in kept),
        tuple(shape[i] for i in axes), tuple(st[i] for i in axes),
    )


def emit_reduction(
    node: Node,
    x_t: ValueType,
    lay: Layout,
    e,
    out_dtype: DType,
    passes: list[tuple[str, Callable[[KernelWriter, str, list[str]], str], Callable[[KernelWriter, str, str], str]]],
    final: Callable[[KernelWriter, list[str]], str],
    ins: tuple[ValueType, ...] | None = None,
    element: Callable[[KernelWriter, list[str], str], str] | None = None,
):
    """Generic multi-pass reduction of the values of ``x_t``'s shape. Each pass is ``(init,
    step(w, acc, earlier) -> expr of acc and "{x}", merge(w, a, b))``; ``final(w, results)``
    gives the output value. By default the values are input 0; ``element(w, inputs, flat)``
    computes the value at a flat index of ``x_t``'s shape instead (fused prologues)."""
    d = x_t.dtype
    n_out, n_red = lay.outputs, lay.extent
    sequential = n_red <= SEQUENTIAL_MAX
    if sequential:
        w = map_writer(e, kernel_name(node, "seq"), n_out)
        o = "gid"
    else:
        w = row_writer(e, kernel_name(node, "tree"), n_out, row_size(n_red))
        o = "group"
    names, (out,) = bind(w, ins if ins is not None else (x_t,), [node.types[0]])
    if element is None:
        element = lambda w, names, flat: w.load(names[0], flat, d)
    base = w.let(INDEX, offset(w, unravel(w, o, lay.kept_shape, "k"), lay.kept_strides), "base")
    results: list[str] = []
    for init, step, merge in passes:
        acc = w.var(d, init, "acc")
        lo, stride = ("0", "1") if sequential else ("lid", str(w.workgroup))
        with w.loop(lo, w.num(n_red), stride, "r") as r:
            idx = offset(w, unravel(w, r, lay.red_shape, "q"), lay.red_strides)
            flat = w.let(INDEX, f"{base} + {idx}" if idx != "0" else base, "at")
            x = w.let(d, element(w, names, flat), "x")
            w.set(acc, step(w, acc, results).replace("{x}", x))
        if not sequential:
            sh = w.shared_array(d, w.workgroup)
            w.set(f"{sh}[lid]", acc)
            tree_reduce(w, sh, lambda a, b, _m=merge: _m(w, a, b))
            res = w.let(d, f"{sh}[0]", "res")
            w.barrier()
        else:
            res = acc
        results.append(res)
    value = final(w, results)
    if sequential:
        w.store(out, "gid", value, out_dtype)
        kernel = map_finish(w)
    else:
        with w.if_("lid == 0"):
            w.store(out, "group", value, out_dtype)
        kernel = row_finish(w)
    return single(kernel, len(names))


REDUCE_KINDS = ("reduce.sum", "reduce.prod", "reduce.max", "reduce.min", "reduce.mean", "reduce.variance", "reduce.logsumexp")


def reduction_passes(op: str, attrs, e, d: DType, n: int):
    """(passes, final) of a reduce.* op over ``n`` values of dtype ``d`` (see emit_reduction)."""
    add = lambda w, a, b: f"({a} + {b})"
    first = lambda w, res: res[0]
    if op == "reduce.sum":
        return [(e.lit(0, d), lambda w, acc, r: f"({acc} + {{x}})", add)], first
    if op == "reduce.prod":
        mul = lambda w, a, b: f"({a} * {b})"
        return [(e.lit(1, d), lambda w, acc, r: f"({acc} * {{x}})", mul)], first
    if op == "reduce.max":
        mx = lambda w, a, b: w.max(d, a, b)
        return [(e.lowest(d), lambda w, acc, r: w.max(d, acc, "{x}"), mx)], first
    if op == "reduce.min":
        mn = lambda w, a, b: w.min(d, a, b)
        return [(e.highest(d), lambda w, acc, r: w.min(d, acc, "{x}"), mn)], first
    if op == "reduce.mean":
        if n == 0:  # 0 / 0, spelled out: compilers fold a division by a literal zero
            return [(e.lit(0, d), lambda w, acc, r: f"({acc} + {{x}})", add)], lambda w, res: w.e.nan(d)
        return [(e.lit(0, d), lambda w, acc, r: f"({acc} + {{x}})", add)], lambda w, res: f"({res[0]} / {count(w, n, d)})"
    if op == "reduce.variance":

        def second(w, acc, res):
            c = f"({{x}} - {res[0]} / {count(w, n, d)})"
            return f"({acc} + {c} * {c})"

        denom = n - attrs["correction"]
        passes = [(e.lit(0, d), lambda w, acc, res: f"({acc} + {{x}})", add), (e.lit(0, d), second, add)]
        if denom <= 0:  # numpy divides by max(n - correction, 0): inf, or NaN for 0 / 0 and NaN
            return passes, lambda w, res: w.e.select(f"{res[1]} > {w.e.lit(0, d)}", w.e.inf(d), w.e.nan(d))
        return passes, lambda w, res: f"({res[1]} / {count(w, denom, d)})"
    if op == "reduce.logsumexp":

        def shift(w: KernelWriter, m: str) -> str:
            # an infinite (or NaN) maximum shifts by 0: all -inf gives -inf, not NaN
            return w.e.select(w.e.isfinite(m, d), m, w.e.lit(0, d))

        def second(w, acc, res):
            return f"({acc} + {w.fn('exp', d, '({x} - ' + shift(w, res[0]) + ')')})"

        passes = [
            (e.lowest(d), lambda w, acc, res: w.max(d, acc, "{x}"), lambda w, a, b: w.max(d, a, b)),
            (e.lit(0, d), second, add),
        ]
        return passes, lambda w, res: f"({w.fn('log', d, res[1])} + {shift(w, res[0])})"
    raise KeyError(op)


def count(w: KernelWriter, n: int, d: DType) -> str:
    """The integer ``n`` as a value of float type ``d`` (a literal, or a param converted)."""
    return w.e.lit(n, d) if w.e.specialize else w.e.cast(w.num(n), d, INDEX)


def _axes(node: Node, x_t: ValueType) -> tuple[int, ...]:
    return norm_axes(node.attrs["axes"], x_t.rank)


def _reduce(node: Node, ins: tuple[ValueType, ...], e):
    x_t = ins[0]
    lay = layout(x_t.shape, _axes(node, x_t))
    passes, final = reduction_passes(node.op, node.attrs, e, x_t.dtype, lay.extent)
    return emit_reduction(node, x_t, lay, e, x_t.dtype, passes, final)


for _op in REDUCE_KINDS:
    builder(_op, F if _op in ("reduce.mean", "reduce.variance", "reduce.logsumexp") else NUM)(_reduce)


def _arg(largest: bool):
    def build(node: Node, ins: tuple[ValueType, ...], e):
        x_t = ins[0]
        d = x_t.dtype
        axis = norm_axis(node.attrs["axis"], x_t.rank)
        lay = layout(x_t.shape, (axis,))
        n_out, n_red = lay.outputs, lay.extent
        cmp = ">" if largest else "<"

        def better(w: KernelWriter, v: str, i: str, bv: str, bi: str) -> str:
            # first index wins ties; NaN beats everything (numpy returns the first NaN)
            if d.is_float:
                vn, bn = w.e.isnan(v, d), w.e.isnan(bv, d)
                return f"(({vn} && (!{bn} || {i} < {bi})) || (!{vn} && !{bn} && ({v} {cmp} {bv} || ({v} == {bv} && {i} < {bi}))))"
            return f"(({v} {cmp} {bv}) || ({v} == {bv} && {i} < {bi}))"

        sequential = n_red <= SEQUENTIAL_MAX
        if sequential:
            w = map_writer(e, kernel_name(node, "seq"), n_out)
            o = "gid"
        else:
            w = row_writer(e, kernel_name(node, "tree"), n_out, row_size(n_red))
            o = "group"
        (xb,), (out,) = bind(w, [x_t], [node.types[0]])
        base = w.let(INDEX, offset(w, unravel(w, o, lay.kept_shape, "k"), lay.kept_strides), "base")
        stride = w.num(lay.red_strides[0])
        nr = w.num(n_red)
        # the best so far; index n_red means "none yet" (a thread past the row keeps it)
        bv = w.var(d, w.load(xb, base, d), "bv")
        bi = w.var(INDEX, "0" if sequential else nr, "bi")
        lo, step = ("1", "1") if sequential else ("lid", str(w.workgroup))
        with w.loop(lo, nr, step, "r") as r:
            v = w.let(d, w.load(xb, f"{base} + {r} * {stride}", d), "v")
            with w.if_(f"{bi} >= {nr} || {better(w, v, r, bv, bi)}"):
                w.set(bv, v)
                w.set(bi, r)
        if sequential:
            w.store(out, "gid", w.e.cast(bi, DType.int64, INDEX), DType.int64)
            return single(map_finish(w), 1)
        shv = w.shared_array(d, w.workgroup, "shv")
        shi = w.shared_array(INDEX, w.workgroup, "shi")
        w.set(f"{shv}[lid]", bv)
        w.set(f"{shi}[lid]", bi)
        w.barrier()
        s = w.workgroup // 2
        while s >= 1:
            with w.if_(f"lid < {s}"):
                ov, oi = f"{shv}[lid + {s}]", f"{shi}[lid + {s}]"
                with w.if_(f"{oi} < {nr} && ({shi}[lid] >= {nr} || {better(w, ov, oi, f'{shv}[lid]', f'{shi}[lid]')})"):
                    w.set(f"{shv}[lid]", ov)
                    w.set(f"{shi}[lid]", oi)
            w.barrier()
            s //= 2
        with w.if_("lid == 0"):
            w.store(out, "group", w.e.cast(f"{shi}[0]", DType.int64, INDEX), DType.int64)
        return single(row_finish(w), 1)

    return build


builder("reduce.argmax", NUM)(_arg(True))
builder("reduce.argmin", NUM)(_arg(False))
