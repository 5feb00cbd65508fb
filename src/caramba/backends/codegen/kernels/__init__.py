"""The GPU kernel table: op ID -> builder(node, input types, emitter) -> Program.

Builders are written once against ``KernelWriter`` and render to any emitter (CUDA C, WGSL).
The dtypes registered with a builder are the most it can take; a backend claims those its
emitter (device) has. Attributes, shapes and strides are baked into the kernel text, so a
kernel is specialized to its node and cached by its source.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod

from caramba.backends.codegen.cstyle import INDEX, Emitter, KernelWriter, contiguous_strides, offset, unravel
from caramba.backends.codegen.program import Kernel, Launch, Program, Slot
from caramba.errors import UnsupportedOperation
from caramba.ir.dtypes import DType
from caramba.ir.graph import Node
from caramba.ir.types import ValueType

Builder = Callable[[Node, tuple[ValueType, ...], Emitter], Program]

BUILDERS: dict[str, Builder] = {}
DTYPES: dict[str, frozenset[DType]] = {}

F = frozenset({DType.float64, DType.float32})
INT = frozenset({DType.int64, DType.int32})
B = frozenset({DType.bool})
NUM = F | INT
ANY = NUM | B

MAP_WG = 64  # threads per workgroup for one-thread-per-element kernels
ROW_WG = 256  # threads per workgroup for one-workgroup-per-row kernels (power of two)


def builder(op_id: str, dtypes: frozenset[DType]) -> Callable[[Builder], Builder]:
    def deco(fn: Builder) -> Builder:
        if op_id in BUILDERS:
            raise ValueError(f"GPU kernel for {op_id} registered twice")
        BUILDERS[op_id] = fn
        DTYPES[op_id] = frozenset(dtypes)
        return fn

    return deco


def generate(node: Node, in_types: Sequence[ValueType], e: Emitter) -> Program:
    """The Program running ``node`` in ``e``'s language; UnsupportedOperation if there is no kernel."""
    fn = BUILDERS.get(node.op)
    if fn is None:
        raise UnsupportedOperation(f"no {e.lang} kernel for {node.op}", node=node.id, op=node.op)
    return fn(node, tuple(in_types), e)


def kernel_name(node: Node, suffix: str = "") -> str:
    return node.op.replace(".", "_") + (f"_{suffix}" if suffix else "")


# ---- kernel skeletons -------------------------------------------------------------------


def map_writer(e: Emitter, name: str, n: int, wg: int = MAP_WG) -> KernelWriter:
    """A one-thread-per-element kernel over ``n`` elements; threads past ``n`` return."""
    w = KernelWriter(e, name, wg)
    w._n = n  # type: ignore[attr-defined]
    w.line(f"if (gid >= {w.num(n)}) {{ return; }}")
    return w


def map_finish(w: KernelWriter) -> Kernel:
    n = w._n  # type: ignore[attr-defined]
    return w.finish(-(-n // w.workgroup) if n else 0)


def row_writer(e: Emitter, name: str, rows: int, wg: int = ROW_WG) -> KernelWriter:
    """A one-workgroup-per-row kernel: ``group`` is the row; surplus workgroups return (uniformly)."""
    w = KernelWriter(e, name, wg)
    w._n = rows  # type: ignore[attr-defined]
    w.line(f"if (group >= {w.num(rows)}) {{ return; }}")
    return w


def row_finish(w: KernelWriter) -> Kernel:
    return w.finish(w._n)  # type: ignore[attr-defined]


def row_size(n: int) -> int:
    """Workgroup size for a row of ``n`` elements: a power of two between 32 and ROW_WG."""
    wg = 32
    while wg < n and wg < ROW_WG:
        wg *= 2
    return wg


def tree_reduce(w: KernelWriter, sh: str, combine: Callable[[str, str], str]) -> None:
    """Reduce ``sh[0..wg)`` into ``sh[0]`` (unrolled; every step ends with a barrier)."""
    w.barrier()
    s = w.workgroup // 2
    while s >= 1:
        with w.if_(f"lid < {s}"):
            w.set(f"{sh}[lid]", combine(f"{sh}[lid]", f"{sh}[lid + {s}]"))
        w.barrier()
        s //= 2


def workgroup_reduce(
    w: KernelWriter, d: DType, n: int, load: Callable[[str], str], init: str, combine: Callable[[str, str], str]
) -> str:
    """Every thread folds a strided share of ``load(j)`` for j < n, then the workgroup combines;
    returns a local every thread holds the result in (the shared array is free again after)."""
    acc = w.var(d, init, "acc")
    with w.loop("lid", w.num(n), str(w.workgroup), "j") as j:
        w.set(acc, combine(acc, load(j)))
    sh = w.shared_array(d, w.workgroup)
    w.set(f"{sh}[lid]", acc)
    tree_reduce(w, sh, combine)
    out = w.let(d, f"{sh}[0]", "red")
    w.barrier()
    return out


def single(kernel: Kernel, n_in: int, n_out: int = 1) -> Program:
    args = tuple(Slot("in", i) for i in range(n_in)) + tuple(Slot("out", j) for j in range(n_out))
    if kernel.checks:
        args = args + (Slot("err"),)
    return Program(steps=[Launch(kernel, args)])


def bind(w: KernelWriter, ins: Sequence[ValueType], outs: Sequence[ValueType]) -> tuple[list[str], list[str]]:
    """Declare ``in0..``, ``out0..`` parameters in slot order."""
    a = [w.param(f"in{i}", t.dtype, "read") for i, t in enumerate(ins)]
    b = [w.param(f"out{j}", t.dtype, "write") for j, t in enumerate(outs)]
    return a, b


def strided_copy(
    e: Emitter, name: str, out_shape: Sequence[int], dtype: DType, strides: Sequence[int], base: int = 0
) -> Kernel:
    """``out[i] = in0[base + sum(coord_d(i) * strides[d])]``: transpose, slice, flip, broadcast, ..."""
    n = prod(out_shape)
    w = map_writer(e, name, n)
    (x,), (out,) = bind(w, [ValueType((), dtype)], [ValueType((), dtype)])
    if tuple(strides) == contiguous_strides(out_shape) and base == 0:
        idx = "gid"
    else:
        idx = offset(w, unravel(w, "gid", out_shape), strides, base)
    w.store(out, "gid", w.load(x, idx, dtype), dtype)
    return map_finish(w)


def fill_kernel(e: Emitter, n: int, dtype: DType, value: float) -> Kernel:
    """``out0[i] = value`` for i < n (state initialized on the device, no transfer)."""
    w = map_writer(e, f"fill_{dtype.short}", n)
    w.param("out0", dtype, "write")
    w.store("out0", "gid", e.lit(value, dtype), dtype)
    return map_finish(w)


def _load() -> None:
    from caramba.backends.codegen.kernels import (
        attention,
        elementwise,
        fused,
        linalg,
        nn,
        random,
        reduce,
        shape,
        train,
    )


_load()

__all__ = [
    "ANY", "B", "BUILDERS", "DTYPES", "F", "INDEX", "INT", "MAP_WG", "NUM", "ROW_WG", "bind", "builder", "fill_kernel", "generate",
    "kernel_name", "map_finish", "map_writer", "row_finish", "row_size", "row_writer", "single", "strided_copy",
    "tree_reduce", "workgroup_reduce",
]
