"""The fused attention forward in compiled code, split over the native helpers.

Per (batch x head) slice: ``q @ k^T`` by one single-thread ``cblas_?gemm`` call (``k`` read
transposed in place) into the slice's scores, the scale / causal mask / softmax pass
(``_attention_loops.scores_to_probs_*``), then ``p @ v`` by a second call into the output. The
slices run in blocks on the native helpers (``backends/cpu/native.py``): no Python and no GIL
between slices, where ``attention.py``'s NumPy path ran batched ``np.matmul`` calls from Python
threads. Operands are read through their strides, so the heads of a [B, T, H, D] projection
seen as [B, H, T, D] (``shape.view_as_heads``) are not copied first.

The scores of a slice are kept (``fused.attention_probs`` / ``fused.sdpa_probs``: the VJP's
probabilities) or written to a scratch row of the block that runs it (``attention.sdpa``), a
block's scratch row found from its first slice as ``fused/rows_grad.py`` finds its partial row.

Needs Numba and NumPy's OpenBLAS as an ILP64 build with ``cblas_?gemm64_`` (``blas.cblas_gemm``);
``runner(...)`` returns None otherwise and ``attention.py`` keeps its NumPy path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import carray, cfunc, njit

from caramba.backends.cpu.kernels._attention_loops import scores_to_probs_f32, scores_to_probs_f64
from caramba.backends.cpu.native import (
    BLOCK_SIG,
    NO_TRANS,
    ROW_MAJOR,
    TRANS,
    _dgemm,
    _sgemm,
    ptr_float32,
    ptr_float64,
)

# words of the argument block (strides in elements)
(A_FN, A_F32, A_Q, A_K, A_V, A_OUT, A_P, A_KEEP, A_N, A_N1, A_QS0, A_QS1, A_QLD, A_KS0, A_KS1, A_KLD,
 A_VS0, A_VS1, A_VLD, A_TQ, A_TK, A_D, A_DV, A_SCALE, A_OFFSET, A_CAUSAL, A_PARTS, A_WORDS) = range(28)

# From this many flops (2 * slices * Tq * Tk * (D + Dv)) the slices are split over the helpers
# (a split call costs a few µs; the char-GPT's [16,4,64,16] is 1.7e7).
SPLIT_FLOPS = 1.0e6


@njit(nogil=True, cache=True, error_model="numpy")  # IEEE: a fully masked row is NaN
def _slices(a, lo, hi):
    """Slices lo..hi of the call described by the argument block ``a`` (module doc)."""
    if hi <= lo:
        return
    f32 = a[A_F32] != 0
    size = 4 if f32 else 8
    tq, tk, d, dv, n1 = a[A_TQ], a[A_TK], a[A_D], a[A_DV], a[A_N1]
    scale = np.int64(a[A_SCALE]).view(np.float64)
    offset, causal = a[A_OFFSET], a[A_CAUSAL] != 0
    scratch = a[A_P]
    if a[A_KEEP] == 0:  # this block's scratch row: block i of P starts at slice n * i // P
        slot = (lo * a[A_PARTS] + a[A_N] - 1) // a[A_N]
        scratch = a[A_P] + slot * tq * tk * size
    for b in range(lo, hi):
        b0 = b // n1
        b1 = b - b0 * n1
        qa = a[A_Q] + (b0 * a[A_QS0] + b1 * a[A_QS1]) * size
        ka = a[A_K] + (b0 * a[A_KS0] + b1 * a[A_KS1]) * size
        sa = a[A_P] + b * tq * tk * size if a[A_KEEP] != 0 else scratch
        if f32:
            _sgemm(a[A_FN], ROW_MAJOR, NO_TRANS, TRANS, tq, tk, d, 1.0, qa, a[A_QLD], ka, a[A_KLD], 0.0, sa, tk)
            scores_to_probs_f32(carray(ptr_float32(sa), (tq, tk)), scale, offset, causal)
        else:
            _dgemm(a[A_FN], ROW_MAJOR, NO_TRANS, TRANS, tq, tk, d, 1.0, qa, a[A_QLD], ka, a[A_KLD], 0.0, sa, tk)
            scores_to_probs_f64(carray(ptr_float64(sa), (tq, tk)), scale, offset, causal)
        if a[A_V] != 0:
            va = a[A_V] + (b0 * a[A_VS0] + b1 * a[A_VS1]) * size
            oa = a[A_OUT] + b * tq * dv * size
            if f32:
                _sgemm(a[A_FN], ROW_MAJOR, NO_TRANS, NO_TRANS, tq, dv, tk, 1.0, sa, tk, va, a[A_VLD], 0.0, oa, dv)
            else:
                _dgemm(a[A_FN], ROW_MAJOR, NO_TRANS, NO_TRANS, tq, dv, tk, 1.0, sa, tk, va, a[A_VLD], 0.0, oa, dv)


def _block(a, lo, hi):
    _slices(a, lo, hi)


_BLOCK: list[Any] = []


def _block_address() -> int:
    """The slices as a C function of ``BLOCK_SIG`` (compiled, or loaded from the disk cache, on first use)."""
    if not _BLOCK:
        _BLOCK.append(cfunc(BLOCK_SIG, cache=True, error_model="numpy")(_block))
    return _BLOCK[0].address


@njit(nogil=True, cache=True)
def _operand(x, a, at, s0, s1, ld):
    """Address and element strides of a [B0, B1, rows, cols] operand with unit column stride."""
    size = x.itemsize
    a[at] = x.ctypes.data
    a[s0], a[s1], a[ld] = x.strides[0] // size, x.strides[1] // size, x.strides[2] // size


@njit(nogil=True, cache=True)
def _pack(q, k, v, out, p, a):
    _operand(q, a, A_Q, A_QS0, A_QS1, A_QLD)
    _operand(k, a, A_K, A_KS0, A_KS1, A_KLD)
    if v.shape[2] > 0:
        _operand(v, a, A_V, A_VS0, A_VS1, A_VLD)
    a[A_OUT] = out.ctypes.data
    a[A_P] = p.ctypes.data


def _as4(x: np.ndarray, lead: tuple[int, int]) -> np.ndarray:
    """``x`` [..., r, c] as [B0, B1, r, c] with a unit column stride and a BLAS row stride (a view
    where the strides allow, else a copy)."""
    x4 = x.reshape(*lead, *x.shape[-2:])
    size, c = x4.itemsize, x4.shape[-1]
    if x4.strides[3] != size or x4.strides[2] < max(1, c) * size or any(s % size for s in x4.strides):
        x4 = np.ascontiguousarray(x4)
    return x4


def runner(batch: tuple[int, ...], tq: int, tk: int, d: int, dv: int | None, dtype: np.dtype, scale: float,
           causal: bool) -> Callable[..., None] | None:
    """``run(q, k, v, out, probs)`` over arrays of these shapes (``v``, ``out`` None without
    ``dv``: the probabilities only; ``probs`` [n, tq, tk] C-contiguous, or None: not kept), or
    None where the native path does not apply (no ILP64 cblas, an empty shape)."""
    from caramba.backends.cpu import workers
    from caramba.backends.cpu.blas import cblas_gemm, one_thread

    gemm = cblas_gemm()
    n = math.prod(batch)
    if gemm is None or not (n and tq and tk and d and (dv is None or dv)):
        return None
    f32 = np.dtype(dtype) == np.float32
    lead = (math.prod(batch[:-1]), batch[-1]) if batch else (1, 1)
    flops = 2.0 * n * tq * tk * (d + (dv or 0))
    ranges = workers.blocks(n, workers.count() if flops >= SPLIT_FLOPS else 1)
    parts = len(ranges)
    pool = workers.native_pool(parts) if parts > 1 else None
    if pool is None:
        ranges, parts = [(0, n)], 1
    table, block = np.array(ranges, np.int64), _block_address() if pool is not None else 0
    template = np.zeros(A_WORDS, np.int64)
    template[A_FN] = gemm[1] if f32 else gemm[0]
    template[A_F32], template[A_N], template[A_N1] = int(f32), n, lead[1]
    template[A_TQ], template[A_TK], template[A_D], template[A_DV] = tq, tk, d, dv or 0
    template[A_SCALE] = np.array(float(scale), np.float64).view(np.int64)
    template[A_OFFSET], template[A_CAUSAL], template[A_PARTS] = tk - tq, int(causal), parts
    no_v = np.zeros((1, 1, 0, 0), dtype)

    def in_turn(a: np.ndarray) -> None:
        for lo, hi in ranges:
            _slices(a, lo, hi)

    def run(q, k, v, out, probs):
        a = template.copy()
        a[A_KEEP] = probs is not None
        scores = probs if probs is not None else np.empty((parts, tq, tk), dtype)
        # locals: a copy _as4 makes must live until the blocks have run (``a`` holds addresses only)
        q4, k4, v4 = _as4(q, lead), _as4(k, lead), _as4(v, lead) if v is not None else no_v
        _pack(q4, k4, v4, out if out is not None else scores, scores, a)
        one_thread()  # small products: one BLAS thread each, on every helper
        if pool is None:
            _slices(a, 0, n)
            return
        workers.run_native_call(lambda: _split(pool, table, block, a), lambda: in_turn(a))

    return run


def _split(pool: Any, table: np.ndarray, block: int, a: np.ndarray) -> None:
    from caramba.backends.cpu.native import run_now

    run_now(pool.boxes, table, block, a, pool.ctl)
