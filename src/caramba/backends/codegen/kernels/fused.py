"""fused.* kernels (what the compiler's ``fuse`` pass produces) and the fusions a GPU backend
declares. A fused program is evaluated per element with the same expression table as the
unfused ops (``elementwise.EXPR``), so fused and unfused results round alike."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from types import SimpleNamespace

from caramba.backends.codegen.cstyle import Emitter, KernelWriter, broadcast_strides, offset, unravel
from caramba.backends.codegen.kernels import (
    ANY,
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
from caramba.backends.codegen.kernels.elementwise import EXPR, EXPR_DTYPES, coords_once, input_index
from caramba.backends.codegen.kernels.linalg import gemm_dims, gemm_kernel
from caramba.backends.codegen.kernels.nn import softmax_kernel
from caramba.backends.codegen.kernels.reduce import REDUCE_KINDS, count, emit_reduction, layout, reduction_passes
from caramba.backends.codegen.program import Launch, LibraryCall, Program, Slot
from caramba.ir.dtypes import DType
from caramba.ir.graph import Node
from caramba.ir.types import ValueType
from caramba.ops import fused as F_ops
from caramba.ops._define import norm_axes, norm_axis

BROADCASTS = F_ops.BROADCASTS


def evaluate(
    w: KernelWriter, expr: F_ops.Expr, ins: Sequence[ValueType], types: dict[str, ValueType],
    load: Callable[[int], str], stop: str | None = None,
) -> str:
    """Emit the program's steps (up to, not including, step ``stop``); returns the value of
    ``expr.out`` (or of the argument of ``stop``). ``load(k)`` reads input k at this element."""
    e = w.e
    vals: dict[object, str] = {}

    def get(a: F_ops.Arg) -> str:
        if a not in vals:
            if not isinstance(a, int):
                raise KeyError(a)
            vals[a] = w.let(ins[a].dtype, load(a), "in")
        return vals[a]

    def dtype_of(a: F_ops.Arg) -> DType:
        return ins[a].dtype if isinstance(a, int) else types[a].dtype

    for s in expr.steps:
        if s.id == stop:
            return get(s.args[0])
        t = types[s.id]
        if s.op == "graph.constant":
            vals[s.id] = e.lit(s.attrs["value"].item(), t.dtype)
        elif s.op in BROADCASTS:
            vals[s.id] = get(s.args[0])
        else:
            args = [get(a) for a in s.args]
            d_in = dtype_of(s.args[1] if s.op == "math.where" else s.args[0])
            vals[s.id] = w.let(t.dtype, EXPR[s.op](w, s, d_in, args), "f")
    return get(expr.out)


def _loader(w: KernelWriter, names: list[str], ins: Sequence[ValueType], shape: Sequence[int], flat: str):
    """Inputs broadcast (right-aligned) against ``shape``, read at the element ``flat`` of it."""
    coords: list[list[str]] = []

    def load(k: int) -> str:
        t = ins[k]
        if tuple(t.shape) == tuple(shape):
            return w.load(names[k], flat, t.dtype)
        if not coords:
            coords.append(unravel(w, flat, shape, "c"))
        return w.load(names[k], offset(w, coords[0], broadcast_strides(t.shape, shape)), t.dtype)

    return load


@builder("fused.elementwise", ANY)
def _fused_elementwise(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    expr = F_ops.decode_expr(node.attrs["expr"])
    types = F_ops.expr_types("fused.elementwise", ins, expr)
    red = expr.reduction
    out_t = node.types[0]
    if red is None:
        w = map_writer(e, kernel_name(node), prod(out_t.shape))
        names, (out,) = bind(w, ins, [out_t])
        coords = coords_once(w, out_t.shape)

        def load(k: int) -> str:
            return w.load(names[k], input_index(w, coords, ins[k].shape, out_t.shape), ins[k].dtype)

        w.store(out, "gid", evaluate(w, expr, ins, types, load), out_t.dtype)
        return single(map_finish(w), len(ins))
    src = red.args[0]
    src_t = ins[src] if isinstance(src, int) else types[src]
    lay = layout(src_t.shape, norm_axes(red.attrs["axes"], src_t.rank))
    passes, final = reduction_passes(red.op, red.attrs, e, src_t.dtype, lay.extent)

    def element(w: KernelWriter, names: list[str], flat: str) -> str:
        return evaluate(w, expr, ins, types, _loader(w, names, ins, src_t.shape, flat), stop=red.id)

    return emit_reduction(node, src_t, lay, e, out_t.dtype, passes, final, ins, element)


@builder("fused.softmax", ANY)
def _fused_softmax(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    expr = F_ops.decode_expr(node.attrs["expr"])
    types = F_ops.expr_types("fused.softmax", ins, expr, allow_reduction=False)
    out_t = node.types[0]
    axis = norm_axis(node.attrs["axis"], out_t.rank)

    def element(w: KernelWriter, names: list[str], flat: str) -> str:
        return evaluate(w, expr, ins, types, _loader(w, names, ins, out_t.shape, flat))

    return single(softmax_kernel(e, kernel_name(node), out_t, axis, False, ins, element), len(ins))


ACTIVATION = {
    "relu": ("activation.relu", {}),
    "gelu": ("activation.gelu", {"approximate": "none"}),
    "gelu_tanh": ("activation.gelu", {"approximate": "tanh"}),
    "silu": ("activation.silu", {}),
    "tanh": ("math.tanh", {}),
}


def _epilogue(node: Node, ins: tuple[ValueType, ...]):
    """value -> activation(value + bias[...]) at the flat output index."""
    out_t = node.types[0]
    d = out_t.dtype
    act = node.attrs["activation"]

    def epi(w: KernelWriter, value: str, flat: str, extra: list[str]) -> str:
        if len(ins) == 3:
            b = ins[2]
            idx = flat if b.shape == out_t.shape else offset(w, unravel(w, flat, out_t.shape, "c"), broadcast_strides(b.shape, out_t.shape))
            value = w.let(d, f"({value} + {w.load(extra[0], idx, d)})", "y")
        if act != "none":
            op, attrs = ACTIVATION[act]
            value = EXPR[op](w, SimpleNamespace(attrs=attrs, op=op), d, [w.let(d, value, "y")])
        return value

    return epi


@builder("fused.linear", F | INT)
def _fused_linear(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    a, b = ins[0], ins[1]
    out_t = node.types[0]
    d = out_t.dtype
    batch, ab, bb, m, k, n = gemm_dims(a.shape, b.shape)
    epi = _epilogue(node, ins)
    extra = list(ins[2:])
    if getattr(e, "blas", False) and d.is_float:
        # vendor GEMM into a temporary, then the epilogue as one elementwise kernel
        prog = Program()
        tmp = prog.temp(d, out_t.size)
        attrs = (("batch", batch), ("a_batch", ab), ("b_batch", bb), ("m", m), ("k", k), ("n", n))
        prog.steps.append(LibraryCall("gemm", (Slot("in", 0), Slot("in", 1), tmp), attrs))
        w = map_writer(e, kernel_name(node, "epilogue"), out_t.size)
        names, (out,) = bind(w, [out_t, *extra], [out_t])
        w.store(out, "gid", epi(w, w.load(names[0], "gid", d), "gid", names[1:]), d)
        args = (tmp,) + tuple(Slot("in", 2 + i) for i in range(len(extra))) + (Slot("out", 0),)
        prog.steps.append(Launch(map_finish(w), args))
        return prog
    kern = gemm_kernel(e, kernel_name(node), d, batch, ab, bb, m, k, n, extra=extra, epilogue=epi)
    return single(kern, len(ins))


@builder("fused.layer_norm_residual", F)
def _fused_ln_residual(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    x = ins[0]
    d = x.dtype
    axis = norm_axis(node.attrs["axis"], x.rank)
    n = prod(x.shape[axis:])
    rows = prod(x.shape[:axis])
    eps = node.attrs["eps"]
    w = row_writer(e, kernel_name(node), rows, row_size(n))
    names, outs = bind(w, ins, node.types)
    base = w.let("index", f"group * {w.num(n)}", "base")

    def s(j: str) -> str:
        return w.let(d, f"({w.load(names[0], f'{base} + {j}', d)} + {w.load(names[1], f'{base} + {j}', d)})", "s")

    add = lambda a, b: f"({a} + {b})"
    nl = w.let(d, count(w, n, d), "n")
    mu = w.let(d, f"({workgroup_reduce(w, d, n, s, e.lit(0, d), add)} / {nl})", "mu")

    def sq(j: str) -> str:
        c = w.let(d, f"({s(j)} - {mu})", "c")
        return f"({c} * {c})"

    var = workgroup_reduce(w, d, n, sq, e.lit(0, d), add)
    den = w.let(d, w.fn("sqrt", d, f"({var} / {nl} + {e.lit(eps, d)})"), "den")
    with w.loop("lid", w.num(n), str(w.workgroup), "j") as j:
        sv = s(j)
        value = f"(({sv} - {mu}) / {den})"
        if len(names) >= 3:
            value = f"({value} * {w.load(names[2], j, d)})"
        if len(names) >= 4:
            value = f"({value} + {w.load(names[3], j, d)})"
        w.store(outs[0], f"{base} + {j}", value, d)
        if len(outs) == 2:
            w.store(outs[1], f"{base} + {j}", sv, d)
    return single(row_finish(w), len(ins), len(outs))


def fusions(e: Emitter) -> frozenset[tuple[str, DType]]:
    """Every (pattern, dtype) this emitter has fused kernels for."""
    have = e.dtypes
    out: set[tuple[str, DType]] = set()
    for op, ds in EXPR_DTYPES.items():
        if op in e.unfused:
            continue
        out.update((F_ops.elementwise_pattern(op), d) for d in ds & have)
    out.update((F_ops.elementwise_pattern(op), d) for op in BROADCASTS for d in ANY & have)
    for op in REDUCE_KINDS:
        ds = F if op in ("reduce.mean", "reduce.variance", "reduce.logsumexp") else F | INT
        out.update((F_ops.elementwise_pattern(op), d) for d in ds & have)
    for act in F_ops.ACTIVATIONS:
        ds = (F | INT) if act == "none" else F
        out.update((F_ops.linear_pattern(act), d) for d in ds & have)
    out.update((F_ops.SOFTMAX, d) for d in F & have)
    out.update((F_ops.LAYER_NORM_RESIDUAL, d) for d in F & have)
    return frozenset(out)

