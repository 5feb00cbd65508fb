"""Numba loops of the fused attention kernels in ``attention.py`` (imported only when Numba is
present; compiled at first call, cached on disk by ``jitcache.py``).

``softmax_rows_scaled(s, scale, offset, causal)`` turns the raw scores ``s`` ([n, tq, tk],
C-contiguous, float64 or float32) into attention probabilities in place (``scores_to_probs_*``
per [tq, tk] slice, also called by the native kernels of ``_attention_native.py``): each row
``i`` is ``softmax(scale * s[i])`` over its first ``lim = i + offset + 1`` entries under a
causal mask (``tk`` without), the entries past ``lim`` zero, as the unfused graph's
``where(mask, s, -inf)`` gives them. For ``scale > 0`` the scale is applied inside the exp pass
(the row's maximum of the scaled scores is ``scale`` times the maximum of the raw ones:
rounding is monotonic), so the values are those of scaling first. The exp pass runs over the
whole row and selects zeros past ``lim`` (a fixed trip count: LLVM vectorizes it; a masked
score never reaches the result, NaN included). The arithmetic is the row softmax of
``fused/rows.py`` (max subtracted, NumPy's pairwise sum over the row, masked zeros included,
one reciprocal): float64 through ``exp_fast``; float32 in float32 through ``exp_f32`` (within
1 ulp of expf, full SIMD width), its sum accumulated the same way. A row whose kept scores are
all -inf or hold a NaN gives NaN, as the unfused graph does.
"""

from __future__ import annotations

from caramba.backends.cpu import jitcache

jitcache.setup()  # before any cached function below is defined

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

from caramba.backends.cpu.fused.rows_simd import lane_max, lane_sum  # noqa: E402
from caramba.backends.cpu.fused.runtime import exp_f32, exp_fast  # noqa: E402

_OPTS = dict(cache=True, nogil=True, error_model="numpy")


@njit(**_OPTS)
def scores_to_probs_f64(s, scale, offset, causal):
    """One slice ``s`` [tq, tk] (C-contiguous) in place, float64 (module doc)."""
    tq, tk = s.shape
    zero = -0.0
    for i in range(tq):
        row = s[i]
        lim = min(i + offset + 1, tk) if causal else tk
        lim = max(lim, 0)
        k = scale  # max(scale * s) == scale * max(s) for scale > 0: rounding is monotonic
        if not scale > 0.0:  # scaled first, then k = 1 (x * 1.0 is x): one exp loop to compile
            for j in range(tk):
                row[j] = row[j] * scale
            k = 1.0
        m = lane_max(row, lim, -np.inf) * k
        for j in range(tk):  # the whole row (a fixed trip count vectorizes); masked -> 0
            e = exp_fast(row[j] * k - m)
            row[j] = e if j < lim else 0.0
        r = 1.0 / lane_sum(row, tk, zero)
        for j in range(tk):
            row[j] = row[j] * r


@njit(**_OPTS)
def scores_to_probs_f32(s, scale, offset, causal):
    """One slice ``s`` [tq, tk] (C-contiguous) in place, float32 (module doc)."""
    tq, tk = s.shape
    zero = np.float32(-0.0)
    sc = np.float32(scale)
    nil = np.float32(0.0)
    for i in range(tq):
        row = s[i]
        lim = min(i + offset + 1, tk) if causal else tk
        lim = max(lim, 0)
        k = sc
        if not sc > nil:
            for j in range(tk):
                row[j] = row[j] * sc
            k = np.float32(1.0)
        m = lane_max(row, lim, np.float32(-np.inf)) * k
        for j in range(tk):
            e = exp_f32(row[j] * k - m)
            row[j] = e if j < lim else nil
        r = np.float32(1.0) / lane_sum(row, tk, zero)
        for j in range(tk):
            row[j] = row[j] * r


@njit(**_OPTS)
def softmax_rows_scaled_f64(s, scale, offset, causal):
    for b in range(s.shape[0]):
        scores_to_probs_f64(s[b], scale, offset, causal)


@njit(**_OPTS)
def softmax_rows_scaled_f32(s, scale, offset, causal):
    for b in range(s.shape[0]):
        scores_to_probs_f32(s[b], scale, offset, causal)


def softmax_rows_scaled(s: np.ndarray, scale: float, offset: int, causal: bool) -> None:
    """In place: ``s`` [n, tq, tk] (C-contiguous) from scores to probabilities (module doc)."""
    if s.dtype == np.float32:
        softmax_rows_scaled_f32(s, scale, offset, causal)
    else:
        softmax_rows_scaled_f64(s, scale, offset, causal)
