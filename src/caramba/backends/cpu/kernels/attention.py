"""cpu kernels for attention.*: sdpa (BLAS + stable softmax) and rope."""

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
