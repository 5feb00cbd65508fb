"""Vector lane sums of the row kernels (``rows.py``), as LLVM vector code.

NumPy's pairwise leaf (``rows_runtime._block``) keeps eight running sums, lane ``j`` adding
the elements ``j, j + 8, j + 16, ...`` of a block in order. Those eight lanes are one vector
of eight: ``lanes8(a, s, m)`` is the eight sums over ``a[s : s + 8 * m]`` computed with vector
adds (``<8 x T>``: two AVX registers of float64, one of float32), each lane in the same order
with the same roundings as the scalar code, which LLVM does not vectorize by itself (its SLP
pass leaves the eight loop-carried chains scalar: ~4x slower). ``max8`` is ``row_max``'s
eight lane maxima the same way. ``sq_lanes8(a, s, m, mu)`` is
the same for ``(a[i] - mu) * (a[i] - mu)``, a subtract, a multiply and an add per element
(no fused multiply-add: the IR carries no ``contract`` flag).

The callers combine the lanes as ``_block`` does (``((r0 + r1) + (r2 + r3)) + ((r4 + r5) +
(r6 + r7))``, then the tail), so the sums are bitwise ``row_sum``'s / ``row_sq_sum``'s
(tests/unit/backends/cpu/test_rows_simd.py checks). Imports numba: load only when fusing.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _lanes(context, builder, sig, args, square: bool | None):
    """The eight lanes of ``a[s : s + 8 * m]``: sums (``square``: of squared deviations from
    ``args[3]``), or with ``square=None`` maxima."""
    aryty = sig.args[0]
    arr = context.make_array(aryty)(context, builder, args[0])
    elt = context.get_data_type(aryty.dtype)
    vec = ir.VectorType(elt, 8)
    ptr = arr.data
    s = args[1]
    m = args[2]
    if square:
        mu = context.cast(builder, args[3], sig.args[3], aryty.dtype)
        splat = cgutils.get_null_value(vec)
        for j in range(8):
            splat = builder.insert_element(splat, mu, ir.Constant(ir.IntType(32), j))

    def load(q):
        off = builder.add(s, builder.mul(q, ir.Constant(q.type, 8)))
        p = builder.bitcast(builder.gep(ptr, [off]), vec.as_pointer())
        v = builder.load(p, align=context.get_abi_alignment(elt))
        if square:
            c = builder.fsub(v, splat)
            v = builder.fmul(c, c)
        return v

    acc = cgutils.alloca_once(builder, vec)
    builder.store(load(ir.Constant(s.type, 0)), acc)
    one = ir.Constant(m.type, 1)
    with cgutils.for_range(builder, builder.sub(m, one)) as loop:
        q = builder.add(loop.index, one)
        cur, v = builder.load(acc), load(q)
        if square is None:  # the maximum: _gt(v, cur) = v if v > cur else cur, lane by lane
            builder.store(builder.select(builder.fcmp_ordered(">", v, cur), v, cur), acc)
        else:
            builder.store(builder.fadd(cur, v), acc)
    v = builder.load(acc)
    items = [builder.extract_element(v, ir.Constant(ir.IntType(32), j)) for j in range(8)]
    return context.make_tuple(builder, sig.return_type, items)


@intrinsic
def lanes8(typingctx, a, s, m):
    """The eight lane sums ``r_j = a[s + j] + a[s + 8 + j] + ...`` over ``m >= 1`` groups of
    eight (a: 1-D C-contiguous float array; ``s + 8 * m`` within it, unchecked)."""
    if not (isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and isinstance(a.dtype, types.Float)):
        return None
    sig = types.UniTuple(a.dtype, 8)(a, types.intp, types.intp)
    return sig, lambda context, builder, sig, args: _lanes(context, builder, sig, args, False)


@intrinsic
def max8(typingctx, a, s, m):
    """The eight lane maxima of ``rows_runtime.row_max``: ``r_j = _gt(a[s + 8 q + j], r_j)`` over
    ``q = 1 .. m - 1`` from ``r_j = a[s + j]`` (a compare and a select per element, so NaNs
    are skipped or kept exactly as the scalar lanes do)."""
    if not (isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and isinstance(a.dtype, types.Float)):
        return None
    sig = types.UniTuple(a.dtype, 8)(a, types.intp, types.intp)
    return sig, lambda context, builder, sig, args: _lanes(context, builder, sig, args, None)


@intrinsic
def sq_lanes8(typingctx, a, s, m, mu):
    """``lanes8`` of ``(a[i] - mu) * (a[i] - mu)`` (mu of the array's dtype)."""
    if not (isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and isinstance(a.dtype, types.Float)):
        return None
    sig = types.UniTuple(a.dtype, 8)(a, types.intp, types.intp, a.dtype)
    return sig, lambda context, builder, sig, args: _lanes(context, builder, sig, args, True)


# ---- the row reductions of rows_runtime, on these lanes (for the cpu backend's static loops) ----
#
# ``row_sum`` and ``row_max`` spell their eight lanes as eight scalar chains, which Numba types
# and lowers statement by statement and inlines again at every call: a loop calling them took
# seconds to compile (the char-GPT's cross-entropy rows ~5-16 s). These take the lanes as one
# vector intrinsic each: the same bits, a fraction of the compile.

_JIT = {"inline": "always", "cache": True, "nogil": True, "error_model": "numpy"}


def _jit(fn):
    from numba import njit

    return njit(**_JIT)(fn)


@_jit
def lane_sum(row, n, zero):
    """``rows_runtime.row_sum(row, 0, n, zero)`` of a C-contiguous 1-D ``row``, bitwise: the same
    blocks of 128, each block's eight lanes one vector (``lanes8``), then its tail."""
    acc = zero
    for b0 in range(0, n, 128):
        bn = min(n - b0, 128)
        bm = bn // 8
        bs = zero
        if bm:
            r0, r1, r2, r3, r4, r5, r6, r7 = lanes8(row, b0, bm)
            bs = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for i in range(b0 + 8 * bm, b0 + bn):
            bs += row[i]
        acc += bs
    return acc


@_jit
def lane_max(row, n, init):
    """``rows_runtime.row_max(row, 0, n, init)`` of a C-contiguous 1-D ``row``, bitwise: rows of
    16 or more as its eight lanes (``max8``) reduced in its tree, then the tail, then ``init``."""
    if n < 16:
        m = init
        for i in range(n):
            m = row[i] if row[i] > m else m
        return m
    r0, r1, r2, r3, r4, r5, r6, r7 = max8(row, 0, n // 8)
    t0 = r0 if r0 > r1 else r1
    t1 = r2 if r2 > r3 else r3
    t2 = r4 if r4 > r5 else r5
    t3 = r6 if r6 > r7 else r7
    t0 = t0 if t0 > t1 else t1
    t2 = t2 if t2 > t3 else t3
    m = t0 if t0 > t2 else t2
    for i in range(8 * (n // 8), n):
        m = row[i] if row[i] > m else m
    return m if m > init else init
