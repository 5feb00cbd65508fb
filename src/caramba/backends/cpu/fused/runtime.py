"""Numba helpers the generated kernels call (imports numba: load only when fusing).

Each mirrors the NumPy / SciPy semantics of the cpu reference kernels exactly:
``fmax``/``fmin`` are ``np.maximum``/``np.minimum`` (NaN-propagating, first operand on ties),
``expit`` is ``scipy.special.expit`` (``1 / (1 + exp(-x))``), and
``pairwise_sum`` is NumPy's pairwise summation, so a fused sum over a contiguous row rounds
exactly like ``np.sum`` over it.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy"}


@njit(inline="always", **_OPTS)
def fmax(a, b):
    return a if (a >= b or a != a) else b


@njit(inline="always", **_OPTS)
def fmin(a, b):
    return a if (a <= b or a != a) else b


@njit(inline="always", **_OPTS)
def expit(x):
    return 1.0 / (1.0 + math.exp(-x))


@njit(inline="always", **_OPTS)
def _block(a, s, n, zero):
    """NumPy's pairwise-sum leaf (n <= 128): eight accumulators, then the tail."""
    if n < 8:
        res = zero
        for i in range(s, s + n):
            res += a[i]
        return res
    r0 = a[s]
    r1 = a[s + 1]
    r2 = a[s + 2]
    r3 = a[s + 3]
    r4 = a[s + 4]
    r5 = a[s + 5]
    r6 = a[s + 6]
    r7 = a[s + 7]
    m = n - n % 8
    i = 8
    while i < m:
        r0 += a[s + i]
        r1 += a[s + i + 1]
        r2 += a[s + i + 2]
        r3 += a[s + i + 3]
        r4 += a[s + i + 4]
        r5 += a[s + i + 5]
        r6 += a[s + i + 6]
        r7 += a[s + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[s + i]
        i += 1
    return res


@njit(**_OPTS)
def pairwise_sum(a, s, n, zero):
    """Sum of ``a[s:s+n]`` (1-D) in NumPy's pairwise order; ``zero`` fixes the accumulator type.

    NumPy recurses: halves (rounded to multiples of 8) down to blocks of at most 128. This is
    the same tree walked with explicit stacks (Numba's on-disk cache cannot link recursion).
    """
    if n <= 128:
        return _block(a, s, n, zero)
    starts = np.empty(64, np.int64)
    sizes = np.empty(64, np.int64)
    state = np.zeros(64, np.int64)
    vals = np.full(64, zero)
    sp = 0
    vp = 0
    starts[0] = s
    sizes[0] = n
    state[0] = 0
    sp = 1
    while sp > 0:
        t = sp - 1
        m = sizes[t]
        if m <= 128:
            vals[vp] = _block(a, starts[t], m, zero)
            vp += 1
            sp -= 1
            continue
        half = m // 2
        half -= half % 8
        if state[t] == 0:
            state[t] = 1
            starts[sp] = starts[t]
            sizes[sp] = half
            state[sp] = 0
            sp += 1
        elif state[t] == 1:
            state[t] = 2
            starts[sp] = starts[t] + half
            sizes[sp] = m - half
            state[sp] = 0
            sp += 1
        else:
            vals[vp - 2] = vals[vp - 2] + vals[vp - 1]
            vp -= 1
            sp -= 1
    return vals[0]
