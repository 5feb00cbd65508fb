"""cpu kernels for attention.*: sdpa (BLAS + stable softmax) and rope.

Without a mask input, float sdpa is one fused kernel where Numba is installed: per block of
(batch x head) slices, ``q @ k^T`` on BLAS into a scratch buffer that stays in cache, the
scale, causal mask and softmax in one Numba pass over it (``_attention_loops``: masked
entries are never exponentiated), then ``p @ v`` on BLAS into the output. Blocks are split
over the cpu workers from ``SPLIT_FLOPS``.
"""

from __future__ import annotations

import math

import numpy as np

from caramba.backends.cpu.kernels import FLOAT, kernel
from caramba.backends.cpu.kernels.nn import softmax
from caramba.ir.dtypes import DType
from caramba.ops.attention import rope_tables


@kernel("attention.sdpa", FLOAT | {DType.bool})  # bool: a keep-mask
def _sdpa(node, ins):
    q_t, k_t = ins[0], ins[1]
    d = q_t.shape[-1]
    scale = node.attrs["scale"] if node.attrs["scale"] is not None else 1.0 / math.sqrt(d)
    tq, tk = q_t.shape[-2], k_t.shape[-2]
    causal = None
    if node.attrs["causal"]:
        causal = np.tril(np.ones((tq, tk), dtype=bool), k=tk - tq)

    if len(ins) == 3 and q_t.shape[:-2] == k_t.shape[:-2] == ins[2].shape[:-2]:
        fused = _fused_sdpa(q_t, k_t, ins[2], scale, bool(node.attrs["causal"]))
        if fused is not None:
            return fused
    rows = _softmax_rows(q_t, k_t)

    def sdpa(q, k, v, mask=None):
        s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
        if mask is not None:
            s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask
        if causal is not None:
            s = np.where(causal, s, -np.inf)
        if rows is not None and s.shape == rows[1] and s.dtype == rows[2]:
            p = np.empty_like(s)
            rows[0](s, p)
            return np.matmul(p, v)
        return np.matmul(softmax(s, -1), v)

    return sdpa


# Scores per block: (batch x head) slices are taken together up to this many score elements,
# so a block's scores stay in the L2 cache between its two products.
BLOCK_SCORES = 1 << 15
# From this many flops (2 * slices * Tq * Tk * (D + Dv)) a kernel's blocks are split over the
# cpu workers. The transformer block's [8,8,128,32] (1.3e8) float64 on 2 threads, paired: 65 ->
# 60 ms a forward. Not the char-GPT's [16,4,64,16] (1.7e7): with its kernels split, two
# `caramba bench` runs of the step had slow stretches (medians 5x their minimum; not seen with
# them unsplit), its many small products on the main thread meanwhile.
SPLIT_FLOPS = 5.0e7


def _fused_sdpa(q_t, k_t, v_t, scale: float, causal: bool):
    """``sdpa(q, k, v)`` as one fused kernel (module doc), or None where it does not apply
    (not float, no Numba)."""
    from caramba.backends.cpu import fused

    if q_t.dtype not in (DType.float32, DType.float64) or not fused.available():
        return None
    from caramba.backends.cpu import workers
    from caramba.backends.cpu.blas import one_thread
    from caramba.backends.cpu.kernels._attention_loops import softmax_rows_scaled

    batch, (tq, d), tk, dv = q_t.shape[:-2], q_t.shape[-2:], k_t.shape[-2], v_t.shape[-1]
    n = math.prod(batch)
    dt = q_t.dtype.numpy
    out_shape = (*batch, tq, dv)
    native = _native(batch, tq, tk, d, dv, dt, scale, causal)
    if native is not None:
        def native_sdpa(q, k, v):
            out = np.empty(out_shape, dt)
            native(q, k, v, out, None)
            return out

        return native_sdpa
    chunk = max(1, min(n, BLOCK_SCORES // max(1, tq * tk)))
    flops = 2.0 * n * tq * tk * (d + dv)
    parts = workers.count() if flops >= SPLIT_FLOPS else 1
    ranges = workers.blocks(n, parts) if n else [(0, 0)]
    offset = tk - tq
    scale = float(scale)

    def sdpa(q, k, v):
        q3 = q.reshape(n, tq, d)
        kt = np.ascontiguousarray(np.swapaxes(k, -1, -2)).reshape(n, d, tk)  # BLAS: 2x faster than a strided k^T
        v3 = v.reshape(n, tk, dv)
        out = np.empty((n, tq, dv), dt)

        def block(lo: int, hi: int) -> None:
            s = np.empty((min(chunk, hi - lo), tq, tk), dt)
            for a in range(lo, hi, chunk):
                b = min(a + chunk, hi)
                sb = s[: b - a]
                np.matmul(q3[a:b], kt[a:b], out=sb)
                softmax_rows_scaled(sb, scale, offset, causal)
                np.matmul(sb, v3[a:b], out=out[a:b])

        if n and tq:
            one_thread()  # small products, one BLAS thread each (blas.py)
            workers.run(block, ranges)
        return out.reshape(out_shape)

    return sdpa


@kernel("fused.attention_probs", frozenset({DType.float32, DType.float64}))
def _attention_probs(node, ins):
    """softmax(where(causal, (q @ k^T) * scale, -inf)): the probabilities sdpa's VJP recomputes
    (``compiler/fuse.py``), per block of slices (``BLOCK_SCORES``): ``q @ k^T`` on BLAS into the
    output, then the scale, mask and softmax in one Numba pass while the block is in cache
    (NumPy's passes without Numba)."""
    q_t, k_t = ins
    scale, causal = float(node.attrs["scale"]), bool(node.attrs["causal"])
    batch, (tq, d), tk = q_t.shape[:-2], q_t.shape[-2:], k_t.shape[-2]
    n, dt, offset = math.prod(batch), q_t.dtype.numpy, tk - tq
    keep = np.tril(np.ones((tq, tk), dtype=bool), k=offset) if causal else None
    from caramba.backends.cpu import fused

    if not fused.available():
        def probs(q, k):
            s = np.matmul(q, np.swapaxes(k, -1, -2)) * dt.type(scale)
            return softmax(np.where(keep, s, -np.inf) if keep is not None else s, -1)

        return probs
    from caramba.backends.cpu import workers
    from caramba.backends.cpu.blas import one_thread
    from caramba.backends.cpu.kernels._attention_loops import softmax_rows_scaled

    native = _native(batch, tq, tk, d, None, dt, scale, causal)
    if native is not None:
        def native_probs(q, k):
            out = np.empty((*batch, tq, tk), dt)
            native(q, k, None, None, out)
            return out

        return native_probs
    parts = workers.count() if 2.0 * n * tq * tk * d >= SPLIT_FLOPS else 1
    ranges = workers.blocks(n, parts) if n else [(0, 0)]
    chunk = max(1, min(n, BLOCK_SCORES // max(1, tq * tk)))

    def probs(q, k):
        q3 = q.reshape(n, tq, d)
        kt = np.ascontiguousarray(np.swapaxes(k, -1, -2)).reshape(n, d, tk)
        out = np.empty((n, tq, tk), dt)

        def block(lo: int, hi: int) -> None:
            for a in range(lo, hi, chunk):  # a chunk's scores are still in cache for the softmax
                b = min(a + chunk, hi)
                np.matmul(q3[a:b], kt[a:b], out=out[a:b])
                softmax_rows_scaled(out[a:b], scale, offset, causal)

        if n and tq and tk:
            one_thread()
            workers.run(block, ranges)
        return out.reshape((*batch, tq, tk))

    return probs


@kernel("fused.sdpa_probs", frozenset({DType.float32, DType.float64}))
def _sdpa_probs(node, ins):
    """(sdpa(q, k, v), its probabilities) of a training graph (``compiler/fuse.py``): the
    probabilities by ``fused.attention_probs``'s kernel, kept as the second output, then
    ``p @ v`` on BLAS."""
    q_t, k_t, v_t = ins
    batch, (tq, d), tk, dv = q_t.shape[:-2], q_t.shape[-2:], k_t.shape[-2], v_t.shape[-1]
    dt = q_t.dtype.numpy
    native = None
    if q_t.shape[:-2] == k_t.shape[:-2] == v_t.shape[:-2]:
        native = _native(batch, tq, tk, d, dv, dt, float(node.attrs["scale"]), bool(node.attrs["causal"]))
    if native is not None:
        def native_sdpa_probs(q, k, v):
            out, p = np.empty((*batch, tq, dv), dt), np.empty((*batch, tq, tk), dt)
            native(q, k, v, out, p)
            return out, p

        return native_sdpa_probs
    probs = _attention_probs(node, list(ins[:2]))
    matmul = np.matmul

    def sdpa_probs(q, k, v):
        p = probs(q, k)
        return matmul(p, v), p

    return sdpa_probs


def _native(batch, tq, tk, d, dv, dt, scale: float, causal: bool):
    """The native fused forward (``_attention_native.runner``), or None where Numba, the native
    helpers or an ILP64 ``cblas_?gemm64_`` are missing (the NumPy paths here then run)."""
    from caramba.backends.cpu import fused

    if np.dtype(dt) not in (np.float32, np.float64) or not fused.available():
        return None
    from caramba.backends.cpu.kernels import _attention_native

    return _attention_native.runner(tuple(batch), tq, tk, d, dv, np.dtype(dt), scale, causal)


def _softmax_rows(q_t, k_t):
    """(the generated row softmax of ``nn.softmax`` (``fused/rows.py``: one pass per row, in the
    scores' dtype, float32 included), the scores' shape, dtype) where Numba is installed and
    the scores are float, else None (NumPy's five passes)."""
    from caramba.backends.cpu.kernels.nn import _rows_ok, fused_rows
    from caramba.ir.types import ValueType

    shape = tuple(np.broadcast_shapes(q_t.shape[:-2], k_t.shape[:-2])) + (q_t.shape[-2], k_t.shape[-2])
    scores = ValueType(shape, q_t.dtype)
    if q_t.dtype not in (DType.float32, DType.float64) or not _rows_ok(scores):
        return None
    return fused_rows().softmax_rows(scores, log=False), shape, q_t.dtype.numpy


@kernel("attention.rope", FLOAT)
def _rope(node, ins):
    t_len, dim = ins[0].shape[-2], ins[0].shape[-1]
    half = dim // 2
    d = ins[0].dtype.numpy
    cos, sin = (table.astype(d) for table in rope_tables(node.attrs, t_len, dim))

    def rope(x):
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    return rope
