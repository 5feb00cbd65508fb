"""nn.* kernels: softmax / log_softmax and the norms run one workgroup per row (workgroup
reductions, then a write pass); embedding is a checked gather; convolution and pooling compute
one output element per thread."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod

from caramba.backends.codegen.cstyle import INDEX, KernelWriter, contiguous_strides, offset, unravel
from caramba.backends.codegen.kernels import (
    INT,
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
    workgroup_reduce,
)
from caramba.backends.codegen.kernels.reduce import count
from caramba.backends.codegen.kernels.shape import gather_kernel
from caramba.backends.codegen.program import Kernel
from caramba.ir.graph import Node
from caramba.ir.types import ValueType
from caramba.ops._define import norm_axis


def softmax_kernel(
    e, name: str, x: ValueType, axis: int, log: bool,
    ins: Sequence[ValueType] | None = None, element: Callable[[KernelWriter, list[str], str], str] | None = None,
) -> Kernel:
    """Softmax along ``axis`` of values shaped like ``x``: one workgroup per row (rows may be
    strided). The values are input 0, or ``element(w, inputs, flat)`` (a fused prologue)."""
    d = x.dtype
    n = x.shape[axis]
    st = contiguous_strides(x.shape)
    kept = [i for i in range(x.rank) if i != axis]
    rows = prod(x.shape[i] for i in kept)
    w = row_writer(e, name, rows, row_size(n))
    names, (out,) = bind(w, ins if ins is not None else [x], [x])
    if element is None:
        element = lambda w, names, flat: w.load(names[0], flat, d)
    base = w.let(INDEX, offset(w, unravel(w, "group", [x.shape[i] for i in kept], "k"), [st[i] for i in kept]), "base")
    s = w.num(st[axis]) if st[axis] != 1 else None

    def at(j: str) -> str:
        return w.let(INDEX, f"{base} + {j} * {s}" if s is not None else f"{base} + {j}", "at")

    def value(j: str) -> str:
        return w.let(d, element(w, names, at(j)), "x")

    m = workgroup_reduce(w, d, n, value, e.lowest(d), lambda a, b: w.max(d, a, b))
    total = workgroup_reduce(w, d, n, lambda j: w.fn("exp", d, f"({value(j)} - {m})"), e.lit(0, d), lambda a, b: f"({a} + {b})")
    with w.loop("lid", w.num(n), str(w.workgroup), "j") as j:
        sh = w.let(d, f"({value(j)} - {m})", "s")
        result = f"({sh} - {w.fn('log', d, total)})" if log else f"({w.fn('exp', d, sh)} / {total})"
        w.store(out, at(j), result, d)
    return row_finish(w)


@builder("nn.softmax", F)
def _softmax(node: Node, ins, e):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    return single(softmax_kernel(e, kernel_name(node), ins[0], axis, False), 1)


@builder("nn.log_softmax", F)
def _log_softmax(node: Node, ins, e):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    return single(softmax_kernel(e, kernel_name(node), ins[0], axis, True), 1)


def _norm_kernel(node: Node, ins: Sequence[ValueType], e, rows: int, n: int, rms: bool, param_index) -> Kernel:
    """Normalize contiguous rows of ``n`` elements; ``param_index(w, j)`` indexes gamma/beta."""
    x = ins[0]
    d = x.dtype
    eps = node.attrs["eps"]
    w = row_writer(e, kernel_name(node), rows, row_size(n))
    names, (out,) = bind(w, ins, [x])
    xb = names[0]
    base = w.let(INDEX, f"group * {w.num(n)}", "base")
    load = lambda j: w.load(xb, f"{base} + {j}", d)
    add = lambda a, b: f"({a} + {b})"
    nl = w.let(d, count(w, n, d), "n")
    if rms:
        ms = workgroup_reduce(w, d, n, lambda j: f"({load(j)} * {load(j)})", e.lit(0, d), add)
        mu = None
        inv = w.let(d, w.fn("sqrt", d, f"({ms} / {nl} + {e.lit(eps, d)})"), "den")
    else:
        total = workgroup_reduce(w, d, n, load, e.lit(0, d), add)
        mu = w.let(d, f"({total} / {nl})", "mu")

        def sq(j: str) -> str:
            c = w.let(d, f"({load(j)} - {mu})", "c")
            return f"({c} * {c})"

        var = workgroup_reduce(w, d, n, sq, e.lit(0, d), add)
        inv = w.let(d, w.fn("sqrt", d, f"({var} / {nl} + {e.lit(eps, d)})"), "den")
    with w.loop("lid", w.num(n), str(w.workgroup), "j") as j:
        y = f"({load(j)} - {mu})" if mu is not None else load(j)
        value = f"({y} / {inv})"
        if len(names) >= 2:
            value = f"({value} * {w.load(names[1], param_index(w, j), d)})"
        if len(names) >= 3:
            value = f"({value} + {w.load(names[2], param_index(w, j), d)})"
        w.store(out, f"{base} + {j}", value, d)
    return row_finish(w)


def _trailing(node: Node, ins, e, rms: bool):
    x = ins[0]
    axis = norm_axis(node.attrs["axis"], x.rank)
    n = prod(x.shape[axis:])
    rows = prod(x.shape[:axis])
    return single(_norm_kernel(node, ins, e, rows, n, rms, lambda w, j: j), len(ins))


builder("nn.layer_norm", F)(lambda node, ins, e: _trailing(node, ins, e, False))
builder("nn.rms_norm", F)(lambda node, ins, e: _trailing(node, ins, e, True))


@builder("nn.group_norm", F)
def _group_norm(node: Node, ins, e):
    x = ins[0]
    n, c = x.shape[:2]
    g = node.attrs["num_groups"]
    spatial = prod(x.shape[2:])
    per = (c // g) * spatial

    def channel(w: KernelWriter, j: str) -> str:
        first = f"(group % {w.num(g)}) * {w.num(c // g)}"
        return f"{first} + {j} / {w.num(spatial)}" if spatial != 1 else f"{first} + {j}"

    return single(_norm_kernel(node, ins, e, n * g, per, False, channel), len(ins))


@builder("nn.embedding", F | INT)
def _embedding(node: Node, ins, e):
    ids, table = ins
    prog = gather_kernel(e, kernel_name(node), table, ids, node.types[0], 0)
    launch = prog.steps[0]
    # slots: the gather kernel binds (table, ids); the node's inputs are (ids, table)
    args = tuple({0: launch.args[1], 1: launch.args[0]}.get(i, a) for i, a in enumerate(launch.args))
    prog.steps[0] = type(launch)(launch.kernel, args)
    return prog


def _per_dim(v: Sequence[int], nd: int) -> tuple[int, ...]:
    return tuple(v) * nd if len(v) == 1 else tuple(v)


def _conv(nd: int):
    def build(node: Node, ins, e):
        x, wt = ins[0], ins[1]
        out_t = node.types[0]
        d = out_t.dtype
        stride, pad, dil = (_per_dim(node.attrs[k], nd) for k in ("stride", "padding", "dilation"))
        groups = node.attrs["groups"]
        cin, cout = x.shape[1], wt.shape[0]
        cg, og = cin // groups, cout // groups
        ks = wt.shape[2:]
        w = map_writer(e, kernel_name(node), prod(out_t.shape))
        names, (out,) = bind(w, ins, [out_t])
        coords = unravel(w, "gid", out_t.shape)
        nn_, o, sp = coords[0], coords[1], coords[2:]
        xs, ws = contiguous_strides(x.shape), contiguous_strides(wt.shape)
        acc = w.var(d, e.lit(0, d), "acc")
        c0 = w.let(INDEX, f"({o} / {w.num(og)}) * {w.num(cg)}", "c0")
        with w.loop("0", w.num(cg), "1", "ci") as ci:
            loops = []
            pos = []
            for i in range(nd):
                cm = w.loop("0", w.num(ks[i]), "1", "kk")
                kk = cm.__enter__()
                loops.append(cm)
                p = w.let(INDEX, f"{sp[i]} * {w.num(stride[i])} - {w.num(pad[i])} + {kk} * {w.num(dil[i])}", "pos")
                pos.append((kk, p))
            inside = " && ".join(f"{p} >= 0 && {p} < {w.num(x.shape[2 + i])}" for i, (_, p) in enumerate(pos))
            with w.if_(inside):
                xi = offset(w, [nn_, f"({c0} + {ci})"] + [p for _, p in pos], xs)
                wi = offset(w, [o, ci] + [kk for kk, _ in pos], ws)
                w.set(acc, f"{acc} + {w.load(names[0], xi, d)} * {w.load(names[1], wi, d)}")
            for cm in reversed(loops):
                cm.__exit__(None, None, None)
        value = acc if len(names) < 3 else f"({acc} + {w.load(names[2], o, d)})"
        w.store(out, "gid", value, d)
        return single(map_finish(w), len(ins))

    return build


builder("nn.conv1d", F)(_conv(1))
builder("nn.conv2d", F)(_conv(2))


def _pool(is_max: bool):
    def build(node: Node, ins, e):
        x, out_t = ins[0], node.types[0]
        d = out_t.dtype
        k = _per_dim(node.attrs["kernel"], 2)
        s = k if node.attrs["stride"] is None else _per_dim(node.attrs["stride"], 2)
        p = _per_dim(node.attrs["padding"], 2)
        w = map_writer(e, kernel_name(node), prod(out_t.shape))
        (xb,), (out,) = bind(w, ins, [out_t])
        nb, c, oh, ow = unravel(w, "gid", out_t.shape)
        acc = w.var(d, e.lowest(d) if is_max else e.lit(0, d), "acc")
        xs = contiguous_strides(x.shape)
        with w.loop("0", w.num(k[0]), "1", "kh") as kh:
            ih = w.let(INDEX, f"{oh} * {w.num(s[0])} - {w.num(p[0])} + {kh}", "ih")
            with w.loop("0", w.num(k[1]), "1", "kw") as kw:
                iw = w.let(INDEX, f"{ow} * {w.num(s[1])} - {w.num(p[1])} + {kw}", "iw")
                with w.if_(f"{ih} >= 0 && {ih} < {w.num(x.shape[2])} && {iw} >= 0 && {iw} < {w.num(x.shape[3])}"):
                    v = w.load(xb, offset(w, [nb, c, ih, iw], xs), d)
                    w.set(acc, w.max(d, acc, v) if is_max else f"{acc} + {v}")
        value = acc if is_max else f"({acc} / {count(w, k[0] * k[1], d)})"
        w.store(out, "gid", value, d)
        return single(map_finish(w), 1)

    return build


builder("nn.max_pool2d", F)(_pool(True))
builder("nn.avg_pool2d", F)(_pool(False))

__all__ = ["softmax_kernel"]
