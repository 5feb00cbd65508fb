"""Numba loops of the fused attention kernels in ``attention.py`` (imported only when Numba is
present; compiled at first call, cached on disk by ``jitcache.py``).

``softmax_rows_scaled(s, scale, offset, causal)`` turns the raw scores ``s`` ([n, tq, tk],
C-contiguous, float64 or float32) into attention probabilities in place: each row ``i`` is
``softmax(scale * s[i, :lim])`` with ``lim = i + offset + 1`` under a causal mask (``tk`` without),
and zeros past ``lim``. For ``scale > 0`` the scale is applied inside the exp pass (the row's
maximum of the scaled scores is ``scale`` times the maximum of the raw ones: rounding is
monotonic), so the values are those of scaling first. Masked entries are never exponentiated, so a causal row costs half a
full one. The arithmetic is the row softmax of ``fused/rows.py`` (max subtracted, NumPy's
pairwise sum over the row, one reciprocal): float64 through ``exp_fast``; float32 in float32
through ``exp_f32`` (within 1 ulp of expf, full SIMD width), its sum accumulated the same way.
A row whose kept scores are all -inf or hold a NaN gives NaN, as the unfused graph does.
"""

from __future__ import annotations

from caramba.backends.cpu import jitcache

jitcache.setup()  # before any cached function below is defined

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

from caramba.backends.cpu.fused.rows_runtime import row_max, row_sum  # noqa: E402
from caramba.backends.cpu.fused.runtime import exp_f32, exp_fast  # noqa: E402

_OPTS = dict(cache=True, nogil=True, error_model="numpy")


@njit(**_OPTS)
def softmax_rows_scaled_f64(s, scale, offset, causal):
    n, tq, tk = s.shape
    zero = -0.0
    for b in range(n):
        for i in range(tq):
            row = s[b, i]
            lim = min(i + offset + 1, tk) if causal else tk
            if scale > 0.0:  # max(scale * s) == scale * max(s): rounding is monotonic
                m = row_max(row, 0, lim, -np.inf) * scale
                for j in range(lim):
                    row[j] = exp_fast(row[j] * scale - m)
            else:
                for j in range(lim):
                    row[j] = row[j] * scale
                m = row_max(row, 0, lim, -np.inf)
                for j in range(lim):
                    row[j] = exp_fast(row[j] - m)
            r = 1.0 / row_sum(row, 0, lim, zero)
            for j in range(lim):
                row[j] = row[j] * r
            for j in range(lim, tk):
                row[j] = 0.0


@njit(**_OPTS)
def softmax_rows_scaled_f32(s, scale, offset, causal):
    n, tq, tk = s.shape
    zero = np.float32(-0.0)
    sc = np.float32(scale)
    for b in range(n):
        for i in range(tq):
            row = s[b, i]
            lim = min(i + offset + 1, tk) if causal else tk
            if sc > np.float32(0.0):
                m = row_max(row, 0, lim, np.float32(-np.inf)) * sc
                for j in range(lim):
                    row[j] = exp_f32(row[j] * sc - m)
            else:
                for j in range(lim):
                    row[j] = row[j] * sc
                m = row_max(row, 0, lim, np.float32(-np.inf))
                for j in range(lim):
                    row[j] = exp_f32(row[j] - m)
            r = np.float32(1.0) / row_sum(row, 0, lim, zero)
            for j in range(lim):
                row[j] = row[j] * r
            for j in range(lim, tk):
                row[j] = np.float32(0.0)


def softmax_rows_scaled(s: np.ndarray, scale: float, offset: int, causal: bool) -> None:
    """In place: ``s`` [n, tq, tk] (C-contiguous) from scores to probabilities (module doc)."""
    if s.dtype == np.float32:
        softmax_rows_scaled_f32(s, scale, offset, causal)
    else:
        softmax_rows_scaled_f64(s, scale, offset, causal)
