"""Fused kernels of the cpu backend: generated Numba code for ``fused.*`` nodes.

The cpu backend declares fused forms legal (``Capabilities.fusions``) only when Numba imports,
and only for the ops and dtypes ``scalar.TABLE`` can generate: whatever the fuse pass is
allowed to produce, this package can compile. There is no other path for a fused node.

``FACTORIES[op](node, input types, hints) -> kernel(*inputs, *outputs)``: the kernel writes the
node's outputs into the arrays it is given (from the memory plan, or fresh). ``hints`` are
``(contiguous, readonly)`` per input, to compile the likely signature eagerly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from caramba.ir.attrs import Attrs
from caramba.ir.dtypes import DType
from caramba.ir.graph import Node
from caramba.ir.opdef import get_op
from caramba.ir.types import ValueType
from caramba.ops import fused as F

from .scalar import KERNEL_DTYPES, REDUCTIONS, TABLE
from .scalar import F as FLOATS

Hint = tuple[bool, bool]  # (contiguous, readonly)


@functools.cache
def numba_status() -> tuple[bool, str]:
    """(available, version or the reason it is not)."""
    try:
        import numba
    except Exception as exc:  # any import failure means: no fused kernels
        return False, f"numba does not import ({type(exc).__name__}: {exc})"
    return True, numba.__version__


def available() -> bool:
    return numba_status()[0]


def fusion_capabilities() -> tuple[dict[str, frozenset[DType]], frozenset[tuple[str, DType]]]:
    """(fused op -> dtypes, fusion patterns) the cpu backend declares; empty without Numba."""
    if not available():
        return {}, frozenset()
    ops = {
        "fused.elementwise": KERNEL_DTYPES,
        "fused.softmax": KERNEL_DTYPES,  # float output; a prologue may take masks and ints
        "fused.linear": FLOATS,
        "fused.layer_norm_residual": FLOATS,
        **{op: FLOATS for op in F.GRAD_OPS},
        **{op: FLOATS for op in F.CONV_GRAD_OPS},  # backends/cpu/conv_grad.py, pool_grad.py
        **{op: FLOATS for op in (F.ATTENTION_PROBS, F.SDPA_PROBS)},  # kernels/attention.py
    }
    patterns = {(F.elementwise_pattern(op), d) for op, s in TABLE.items() for d in s.dtypes}
    patterns |= {(F.elementwise_pattern(op), d) for op, ds in REDUCTIONS.items() for d in ds}
    patterns |= {(F.linear_pattern(a), d) for a in F.ACTIVATIONS for d in FLOATS}
    patterns |= {(F.LAYER_NORM_RESIDUAL, d) for d in FLOATS} | {(F.SOFTMAX, d) for d in FLOATS}
    patterns |= {(op, d) for op in F.GRAD_OPS for d in FLOATS}
    patterns |= {(op, d) for op in F.CONV_GRAD_OPS for d in FLOATS}
    patterns |= {(op, d) for op in (F.ATTENTION_PROBS, F.SDPA_PROBS) for d in FLOATS}
    return ops, frozenset(patterns)


class Native:
    """A split kernel's native-helper entry points (``codegen.native_wrappers``)."""

    def __init__(self, source: str, arrays: list[ValueType]) -> None:
        from . import codegen, jit

        self.split, self.pack = jit.load(source, "split"), jit.load(source, "pack")
        self.block: int = jit.load(source, "block").address
        self.words = codegen.native_words(arrays)

    def args(self, *arrays: np.ndarray) -> np.ndarray | None:
        """The argument block of ``block`` for these arrays; None unless all are C-contiguous."""
        for a in arrays:
            if not a.flags.c_contiguous:
                return None
        block = np.empty(self.words, np.int64)
        self.pack(*arrays, block)
        return block


def _load(kernel, in_types: list[ValueType], out_types: list[ValueType], hints: list[Hint],
          native: bool) -> tuple[Any, Native | None]:
    """(the kernel compiled for the hinted signature, its ``Native`` entry points if asked for)."""
    from . import codegen, jit

    arrays = [*in_types, *out_types]
    source = kernel.source + (codegen.native_wrappers(arrays) if native else "")
    fn = jit.load(source, kernel.name)
    # inputs typed read-only whatever the hint: kernels never write them, and writable arrays
    # run the same code (jit.specialize shares it), so fresh and stepped state compile once
    args = [jit.array_type(t, c, True) for t, (c, _ro) in zip(in_types, hints, strict=True)]
    args += [jit.array_type(t) for t in out_types]
    if kernel.split:
        args += [jit.index_type()] * 2
    jit.specialize(fn, args)
    return fn, (Native(source, arrays) if native else None)


def _compiled(kernel, in_types: list[ValueType], out_types: list[ValueType], hints: list[Hint],
              parts: int | None = None) -> Any:
    """The callable for ``kernel``; a split kernel is run in row blocks on the cpu workers:
    the native helpers where they run (C-contiguous arrays), else the Python ones. ``parts``:
    how many blocks (default: ``workers.BLOCKS_PER_THREAD`` per worker on the native helpers,
    which take blocks as they free up; one per worker on the Python ones). When another split
    call holds the helpers, the same blocks run here in turn, so a kernel that sums per block
    gives the same bits."""
    from caramba.backends.cpu import workers

    ranges = workers.blocks(kernel.split, parts or workers.count()) if kernel.split else []
    pool = workers.native_pool(len(ranges)) if len(ranges) > 1 else None
    fn, native = _load(kernel, in_types, out_types, hints, pool is not None)
    if not ranges:
        return fn
    if len(ranges) == 1:
        lo, hi = ranges[0]
        return lambda *arrays: fn(*arrays, lo, hi)
    run = workers.run
    if native is None:
        return lambda *arrays: run(lambda lo, hi: fn(*arrays, lo, hi), ranges)
    # blocks sized for the workers (``parts``: the kernel sums per block) run in turn when the
    # helpers are busy; otherwise the whole range is one call here
    shared = ranges if parts else workers.blocks(kernel.split, workers.count() * workers.BLOCKS_PER_THREAD)
    alone = ranges if parts else [(0, kernel.split)]
    split, block, table, run_native = native.split, native.block, np.array(shared, np.int64), workers.run_native_call

    def in_turn(arrays):
        for lo, hi in alone:
            fn(*arrays, lo, hi)

    def split_call(*arrays):
        for a in arrays:
            if not a.flags.c_contiguous:  # the native blocks take C-contiguous arrays only
                return run(lambda lo, hi: fn(*arrays, lo, hi), ranges)
        return run_native(lambda: split(*arrays, pool.boxes, table, block, pool.ctl), lambda: in_turn(arrays))

    return split_call


def _elementwise(node: Node, ins: tuple[ValueType, ...], hints: list[Hint]) -> Callable[..., None]:
    from . import codegen

    expr = F.decode_expr(node.attrs["expr"])
    if node.types[0].rank == 0 and all(t.rank == 0 for t in ins):
        stepped = _scalar_steps(expr, ins)
        if stepped is not None:
            return stepped
    k = codegen.elementwise(expr, list(ins), node.types[0])
    return _compiled(k, list(ins), list(node.types), hints)


def _scalar_steps(expr: F.Expr, ins: tuple[ValueType, ...]) -> Callable[..., None] | None:
    """A program over scalars (every value 0-d: a gradient norm's clip factor, a schedule's
    learning rate) run step by step on the cpu reference kernels, as the unfused graph would
    be: the same bits, and no kernel to compile (a Numba compile is ~0.1-0.5 s; these steps
    cost ~1 µs each). None if a step has no reference kernel for its types."""
    from caramba.backends.cpu.kernels import DTYPES, KERNELS
    from caramba.ir.graph import Ref

    types = F.expr_types("fused.elementwise", ins, expr)
    slot = {k: k for k in range(len(ins))}
    plan: list[tuple[Callable[..., Any], tuple[int, ...]]] = []
    for s in expr.steps:
        t = types[s.id]
        args = tuple(slot[a] for a in s.args)
        arg_types = tuple(ins[a] if isinstance(a, int) else types[a] for a in s.args)
        if s.op == "graph.constant":
            value = np.asarray(s.attrs["value"], t.dtype.numpy).reshape(t.shape)
            kern: Callable[..., Any] = lambda value=value: value
        elif s.op in KERNELS and {a.dtype for a in (*arg_types, t)} <= DTYPES[s.op]:  # as lower.py checks a node
            step_node = Node(s.id, s.op, tuple(Ref(f"in{j}", 0) for j in range(len(args))), s.attrs, (t,), s.version)
            kern = KERNELS[s.op](step_node, arg_types)
        else:
            return None
        slot[s.id] = len(ins) + len(plan)
        plan.append((kern, args))
    result = slot[expr.out]

    def run(*arrays: np.ndarray) -> None:
        values = list(arrays[:-1])
        for kern, args in plan:
            values.append(kern(*[values[j] for j in args]))
        arrays[-1][()] = values[result]

    return run


def _softmax(node: Node, ins: tuple[ValueType, ...], hints: list[Hint]) -> Callable[..., None]:
    from . import codegen

    k = codegen.softmax(F.decode_expr(node.attrs["expr"]), list(ins), node.types[0], node.attrs["axis"])
    return _compiled(k, list(ins), list(node.types), hints)


def softmax_kernel(x: ValueType, out: ValueType, axis: int) -> Callable[..., None]:
    """``k(x, out)``: softmax along ``axis`` with no prologue (the cpu ``nn.softmax`` kernel)."""
    from . import codegen

    k = codegen.softmax(F.Expr((), 0), [x], out, axis)
    return _compiled(k, [x], [out], [(True, False)])


def _layer_norm_residual(node: Node, ins: tuple[ValueType, ...], hints: list[Hint]) -> Callable[..., None]:
    from caramba.ops._define import norm_axis

    from . import codegen

    a = node.attrs
    out = node.types[0]
    axis = norm_axis(a["axis"], out.rank)
    if ins[0].shape == ins[1].shape == out.shape and all(t.shape == out.shape[axis:] for t in ins[2:]):
        from .rows import norm_residual_rows  # the row kernel: vector lane sums, one 1/sqrt a row

        return norm_residual_rows(out, len(ins) - 2, a["eps"], axis, a["with_sum"])
    k = codegen.layer_norm_residual(list(ins), node.types[0], a["axis"], a["eps"], a["with_sum"])
    return _compiled(k, list(ins), list(node.types), hints)


_ACTIVATION_STEPS = {
    "relu": ("activation.relu", {}),
    "gelu": ("activation.gelu", {"approximate": "none"}),
    "gelu_tanh": ("activation.gelu", {"approximate": "tanh"}),
    "silu": ("activation.silu", {}),
    "tanh": ("math.tanh", {}),
}


def epilogue(activation: str, bias: ValueType | None) -> F.Expr:
    """The elementwise program applied in place to a matmul result (input 0): + bias, activation."""
    steps: list[F.Step] = []
    cur: F.Arg = 0
    if bias is not None:
        steps.append(F.Step("bias", "math.add", get_op("math.add").version, (0, 1), Attrs()))
        cur = "bias"
    if activation != "none":
        op, attrs = _ACTIVATION_STEPS[activation]
        steps.append(F.Step("act", op, get_op(op).version, (cur,), get_op(op).make_attrs(attrs)))
        cur = "act"
    return F.Expr(tuple(steps), cur)


def _native_after(native: Native, bias: tuple[np.ndarray, ...], out2: np.ndarray) -> tuple[int, np.ndarray] | None:
    args = native.args(*bias, out2)
    return None if args is None else (native.block, args)


def _linear(node: Node, ins: tuple[ValueType, ...], hints: list[Hint]) -> Callable[..., None]:
    """BLAS matmul into the output, then the epilogue (+ bias, activation) in place.

    A large product is run in row blocks on the cpu workers: each block is a one-thread BLAS
    call and then the epilogue on the rows it just wrote, while they are warm in cache, with
    no second thread pool waking up (``workers.py``). Otherwise one BLAS call, then the
    epilogue (itself split in blocks when it is large)."""
    from caramba.backends.cpu import blas

    from . import codegen

    x_t, w_t, out_t = ins[0], ins[1], node.types[0]
    bias = ins[2] if len(ins) == 3 else None
    expr = epilogue(node.attrs["activation"], bias)
    blocked = blas.row_blocked(x_t.shape, w_t.shape, out_t.shape)
    # an addend of more than one axis (a residual fused as the bias) is taken as [rows, N] rows
    # too when it has the output's shape; one that broadcasts over leading axes is not split
    full_bias = bias is not None and bias.rank > 1
    if blocked is not None and full_bias and bias.shape != out_t.shape:
        blocked = None
    if blocked is not None:
        rows, run, native_rows = blocked
        flat = ValueType((rows, out_t.shape[-1]), out_t.dtype)
        epi_ins = [flat] + ([flat if full_bias else bias] if bias is not None else [])
        k = codegen.elementwise(expr, epi_ins, flat, what="fused.linear epilogue", in_place=True, split=True)
        bias_hint = [(True, hints[2][1]) if full_bias else hints[2]] if bias is not None else []
        epi, native = _load(k, epi_ins[1:], [flat], bias_hint, native_rows)

        def linear(x, w, *rest):
            b = rest[:-1]
            if full_bias:
                b = (np.ascontiguousarray(b[0]).reshape(rows, -1),)
            after = None if native is None else lambda out2: _native_after(native, b, out2)
            run(x, w, rest[-1], lambda out2, lo, hi: epi(*b, out2, lo, hi), after)

        return linear
    epi_ins = [out_t] + ([bias] if bias is not None else [])
    k = codegen.elementwise(expr, epi_ins, out_t, what="fused.linear epilogue", in_place=True)
    epi = _compiled(k, epi_ins[1:], [out_t], [hints[2]] if bias is not None else [])
    matmul = blas.matmul_for(x_t.shape, w_t.shape, out_t.shape)
    if bias is None:
        def linear(x, w, out):
            matmul(x, w, out)
            epi(out)
    else:
        def linear(x, w, b, out):
            matmul(x, w, out)
            epi(b, out)

    return linear


def _norm_grad(node: Node, ins: tuple[ValueType, ...], hints: list[Hint]) -> Callable[..., None]:
    from caramba.ops._define import norm_axis

    from .rows_grad import norm_grad

    a = node.attrs
    centered = node.op == F.LAYER_NORM_GRAD
    return norm_grad(ins[0], norm_axis(a["axis"], ins[0].rank), a["eps"], centered, len(ins) == 3,
                     a["with_dgamma"], centered and a["with_dbeta"])


def _softmax_grad(node: Node, ins: tuple[ValueType, ...], hints: list[Hint]) -> Callable[..., None]:
    from caramba.ops._define import norm_axis

    from .rows_grad import softmax_grad

    return softmax_grad(ins[0], norm_axis(node.attrs["axis"], ins[0].rank), node.op == F.LOG_SOFTMAX_GRAD)


def _conv_transpose(node: Node, ins: tuple[ValueType, ...], hints: list[Hint]) -> Callable[..., None]:
    from caramba.backends.cpu.conv_grad import conv_transpose_kernel

    a = node.attrs
    return conv_transpose_kernel(ins[0].shape, ins[1].shape, a["size"], a["stride"], a["padding"], a["dilation"],
                                 a["groups"], ins[0].dtype.numpy)


def _conv_weight_grad(node: Node, ins: tuple[ValueType, ...], hints: list[Hint]) -> Callable[..., None]:
    from caramba.backends.cpu.conv_grad import conv_weight_grad_kernel

    a = node.attrs
    return conv_weight_grad_kernel(ins[0].shape, ins[1].shape, a["kernel"], a["stride"], a["padding"], a["dilation"],
                                   a["groups"], ins[0].dtype.numpy)


def _pool_grad(node: Node, ins: tuple[ValueType, ...], hints: list[Hint]) -> Callable[..., None]:
    from caramba.backends.cpu.pool_grad import pool_grad_kernel

    a = node.attrs
    is_max = node.op == F.MAX_POOL2D_GRAD
    return pool_grad_kernel(is_max, node.types[0].shape, ins[-1].shape, a["kernel"], a["stride"], a["padding"],
                            ins[0].dtype.numpy)


FACTORIES: dict[str, Callable[[Node, tuple[ValueType, ...], list[Hint]], Callable[..., None]]] = {
    "fused.elementwise": _elementwise,
    "fused.softmax": _softmax,
    "fused.linear": _linear,
    "fused.layer_norm_residual": _layer_norm_residual,
    F.LAYER_NORM_GRAD: _norm_grad,
    F.RMS_NORM_GRAD: _norm_grad,
    F.SOFTMAX_GRAD: _softmax_grad,
    F.LOG_SOFTMAX_GRAD: _softmax_grad,
    F.CONV_TRANSPOSE: _conv_transpose,
    F.CONV_WEIGHT_GRAD: _conv_weight_grad,
    F.MAX_POOL2D_GRAD: _pool_grad,
    F.AVG_POOL2D_GRAD: _pool_grad,
}
