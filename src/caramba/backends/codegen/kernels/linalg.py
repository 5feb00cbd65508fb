"""linalg.*: a tiled GEMM (16x16 tiles in workgroup memory, batched, broadcast batch dims,
NumPy's rank-1 rules) and outer. An emitter with a BLAS (cuda) takes float GEMM to the library."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod

from caramba.backends.codegen.cstyle import INDEX, KernelWriter, broadcast_strides, offset, unravel
from caramba.backends.codegen.kernels import NUM, bind, builder, kernel_name, map_finish, map_writer, single
from caramba.backends.codegen.program import Kernel, LibraryCall, Program, Slot
from caramba.ir.dtypes import DType
from caramba.ir.graph import Node
from caramba.ir.types import ValueType
from caramba.ops._define import broadcast_shapes

TILE = 16


def gemm_dims(a: tuple[int, ...], b: tuple[int, ...]):
    """(batch shape, a batch shape, b batch shape, M, K, N) after NumPy's rank-1 promotion."""
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    return batch, a2[:-2], b2[:-2], a2[-2], a2[-1], b2[-1]


def gemm_kernel(
    e, name: str, d: DType, batch, a_batch, b_batch, m: int, k: int, n: int,
    *, b_transposed: bool = False, scale: float | None = None, extra: Sequence[ValueType] = (),
    epilogue: Callable[[KernelWriter, str, str, list[str]], str] | None = None,
) -> Kernel:
    """``C[bt] = A[bt] @ B[bt]`` (``B[bt]^T`` if ``b_transposed``; times ``scale`` if given) with
    16x16 tiles; one workgroup per output tile. A is [*a_batch, M, K], B [*b_batch, K, N] (or
    [*b_batch, N, K]), C [*batch, M, N], all contiguous. ``extra`` inputs (bound after A and B)
    feed ``epilogue(w, value, flat output index, extra names)``, which maps each result."""
    tm, tn = -(-m // TILE), -(-n // TILE)
    groups = prod(batch) * tm * tn
    w = KernelWriter(e, name, TILE * TILE)
    ab = w.param("in0", d, "read")
    bb = w.param("in1", d, "read")
    extras = [w.param(f"in{2 + i}", t.dtype, "read") for i, t in enumerate(extra)]
    cb = w.param("out0", d, "write")
    w.line(f"if (group >= {w.num(groups)}) {{ return; }}")
    mm, kk_, nn = w.let(INDEX, w.num(m), "m"), w.let(INDEX, w.num(k), "k"), w.let(INDEX, w.num(n), "n")
    ty = w.let(INDEX, f"lid / {TILE}", "ty")
    tx = w.let(INDEX, f"lid % {TILE}", "tx")
    tiles = w.let(INDEX, w.num(tm * tn), "tiles")
    tile = w.let(INDEX, f"group % {tiles}", "tile")
    bt = w.let(INDEX, f"group / {tiles}", "bt")
    row = w.let(INDEX, f"({tile} / {w.num(tn)}) * {TILE} + {ty}", "row")
    col = w.let(INDEX, f"({tile} % {w.num(tn)}) * {TILE} + {tx}", "col")
    bc = unravel(w, bt, batch, "b")
    a_off = w.let(INDEX, offset(w, bc, [s * m * k for s in broadcast_strides(a_batch, batch)]), "aoff")
    b_off = w.let(INDEX, offset(w, bc, [s * k * n for s in broadcast_strides(b_batch, batch)]), "boff")
    m, k, n = mm, kk_, nn  # from here on the sizes are names (literals or params)
    sa = w.shared_array(d, TILE * TILE, "sa")
    sb = w.shared_array(d, TILE * TILE, "sb")
    acc = w.var(d, e.lit(0, d), "acc")
    zero = e.lit(0, d)
    with w.loop("0", f"({k} + {TILE - 1}) / {TILE}", "1", "t") as t:
        ka = w.let(INDEX, f"{t} * {TILE} + {tx}", "ka")
        kb = w.let(INDEX, f"{t} * {TILE} + {ty}", "kb")
        # clamp indices so no thread reads out of bounds, then zero what lies outside
        ra = w.let(INDEX, e.select(f"{row} < {m} && {ka} < {k}", f"{a_off} + {row} * {k} + {ka}", "0"), "ia")
        va = w.load(ab, ra, d)
        w.set(f"{sa}[lid]", e.select(f"{row} < {m} && {ka} < {k}", va, zero))
        bidx = f"{b_off} + {col} * {k} + {kb}" if b_transposed else f"{b_off} + {kb} * {n} + {col}"
        rb = w.let(INDEX, e.select(f"{kb} < {k} && {col} < {n}", bidx, "0"), "ib")
        vb = w.load(bb, rb, d)
        w.set(f"{sb}[lid]", e.select(f"{kb} < {k} && {col} < {n}", vb, zero))
        w.barrier()
        with w.loop("0", str(TILE), "1", "kk") as kk:
            w.set(acc, f"{acc} + {sa}[{ty} * {TILE} + {kk}] * {sb}[{kk} * {TILE} + {tx}]")
        w.barrier()
    value = acc if scale is None else f"({acc} * {e.lit(scale, d)})"
    with w.if_(f"{row} < {m} && {col} < {n}"):
        flat = w.let(INDEX, f"{bt} * {m} * {n} + {row} * {n} + {col}", "at")
        if epilogue is not None:
            value = epilogue(w, value, flat, extras)
        w.store(cb, flat, value, d)
    return w.finish(groups)


@builder("linalg.matmul", NUM)
def _matmul(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    a, b = ins
    d = node.types[0].dtype
    batch, ab, bb, m, k, n = gemm_dims(a.shape, b.shape)
    if getattr(e, "blas", False) and d.is_float:
        attrs = (("batch", batch), ("a_batch", ab), ("b_batch", bb), ("m", m), ("k", k), ("n", n))
        return Program(steps=[LibraryCall("gemm", (Slot("in", 0), Slot("in", 1), Slot("out", 0)), attrs)])
    return single(gemm_kernel(e, kernel_name(node), d, batch, ab, bb, m, k, n), 2)


@builder("linalg.outer", NUM)
def _outer(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    out_t = node.types[0]
    d = out_t.dtype
    w = map_writer(e, kernel_name(node), prod(out_t.shape))
    (x, y), (out,) = bind(w, ins, [out_t])
    n = w.num(out_t.shape[1])
    i = w.let(INDEX, f"gid / {n}", "i")
    j = w.let(INDEX, f"gid - {i} * {n}", "j")
    w.store(out, "gid", f"({w.load(x, i, d)} * {w.load(y, j, d)})", d)
    return single(map_finish(w), 2)
