"""Numba loops of the softmax cross-entropy in ``train.py`` for wide rows (imported only when
Numba is present; compiled at first call, cached on disk by ``jitcache.py``).

``_loss_loops.cross_entropy_rows`` calls libm's ``exp`` per element and adds serially: right for
narrow rows (a [128, 10] batch), but ~2x slower than NumPy's passes on a [1024, 128] one (the
char-GPT head). These loops take each row in vectorized passes, with the helpers of the
generated row kernels (``rows_simd``'s vector lanes: ``row_max``'s and ``row_sum``'s bits): the row's maximum, ``exp`` of the shifted row into a scratch row
(``exp_fast`` in float64; ``exp_f32`` in float32, within 1 ulp), and NumPy's pairwise sum of
it. float32 rows are computed in float32 as NumPy's float32 path computes them; the loss is
``log(sum) + max - (1 - s) * x[label] - (s / C) * sum(x)`` per row.
"""

from __future__ import annotations

import math

import numpy as np

from caramba.backends.cpu import jitcache

jitcache.setup()  # before any cached function below is defined

from numba import njit  # noqa: E402

from caramba.backends.cpu.fused.rows_simd import lane_max, lane_sum  # noqa: E402
from caramba.backends.cpu.fused.runtime import exp_f32, exp_fast  # noqa: E402

_OPTS = dict(cache=True, nogil=True, error_model="numpy")


@njit(**_OPTS)
def cross_entropy_rows_f64(x, labels, smoothing, out, tmp):
    """out[i] = the loss of row x[i] ([n, C] C-contiguous); -1, or the first row whose label is
    outside [0, C) (nothing after it is written)."""
    n, c = x.shape
    for i in range(n):
        label = labels[i]
        if label < 0 or label >= c:
            return i
        row = x[i]
        m = lane_max(row, c, -np.inf)
        if not np.isfinite(m):  # rows of -inf give -inf (not NaN); +inf rows stay inf/NaN
            m = 0.0
        for j in range(c):
            tmp[j] = exp_fast(row[j] - m)
        loss = math.log(lane_sum(tmp, c, -0.0)) + m - (1.0 - smoothing) * row[label]
        if smoothing != 0.0:
            loss -= (smoothing / c) * lane_sum(row, c, -0.0)
        out[i] = loss
    return -1


@njit(**_OPTS)
def cross_entropy_rows_f32(x, labels, smoothing, out, tmp):
    """``cross_entropy_rows_f64`` in float32 arithmetic (NumPy's float32 path: the same steps)."""
    n, c = x.shape
    keep = np.float32(1.0 - smoothing)
    per = np.float32(smoothing / c)
    zero = np.float32(-0.0)
    for i in range(n):
        label = labels[i]
        if label < 0 or label >= c:
            return i
        row = x[i]
        m = lane_max(row, c, np.float32(-np.inf))
        if not np.isfinite(m):
            m = np.float32(0.0)
        for j in range(c):
            tmp[j] = exp_f32(row[j] - m)
        lse = np.float32(math.log(lane_sum(tmp, c, zero))) + m
        loss = lse - row[label] if smoothing == 0.0 else lse - keep * row[label] - per * lane_sum(row, c, zero)
        out[i] = loss
    return -1
