"""Numba helpers of the row kernels (``rows.py``): sums and maxima of one contiguous row that
allocate nothing (imports numba: load only when fusing).

``row_sum`` is NumPy's pairwise leaf over blocks of 128, the block sums added in order:
exactly ``np.sum`` for rows of up to 128, and about as accurate beyond (``runtime.pairwise_sum``
walks NumPy's whole tree with explicit stacks, ~8x slower per row of 768). ``row_max`` is
the row's maximum in eight lanes of plain compares, so LLVM vectorizes it (a maximum does not
depend on the order it is taken in).
"""

from __future__ import annotations

from numba import njit

from caramba.backends.cpu.fused.runtime import _block

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy"}


@njit(inline="always", **_OPTS)
def row_sum(a, s, n, zero):
    """Sum of ``a[s:s+n]`` (1-D, contiguous): NumPy's pairwise leaf (eight lanes) over each
    block of 128, the block sums added in order. Rows of up to 128 round exactly as ``np.sum``;
    longer ones within (16 + n/128) ulps of the exact sum, as pairwise summation's
    (16 + log2(n/128)) is of the same order for any row a norm sees."""
    if n <= 128:
        return _block(a, s, n, zero)
    acc = zero
    i = 0
    while i + 128 <= n:
        acc += _block(a, s + i, 128, zero)
        i += 128
    if i < n:
        acc += _block(a, s + i, n - i, zero)
    return acc


@njit(inline="always", **_OPTS)
def _gt(a, b):
    return a if a > b else b


@njit(inline="always", **_OPTS)
def row_max(a, s, n, init):
    """``max(init, a[s:s+n])`` in eight lanes of plain compares (vectorizes). A NaN in the row
    may or may not come out (the lanes skip it): only for the softmax's shift, where a NaN
    element makes its row's sum, and so the whole row, NaN either way (as ``np.max``'s would)."""
    if n < 16:
        m = init
        for i in range(s, s + n):
            m = _gt(a[i], m)
        return m
    r0 = a[s]
    r1 = a[s + 1]
    r2 = a[s + 2]
    r3 = a[s + 3]
    r4 = a[s + 4]
    r5 = a[s + 5]
    r6 = a[s + 6]
    r7 = a[s + 7]
    m8 = n - n % 8
    i = 8
    while i < m8:
        r0 = _gt(a[s + i], r0)
        r1 = _gt(a[s + i + 1], r1)
        r2 = _gt(a[s + i + 2], r2)
        r3 = _gt(a[s + i + 3], r3)
        r4 = _gt(a[s + i + 4], r4)
        r5 = _gt(a[s + i + 5], r5)
        r6 = _gt(a[s + i + 6], r6)
        r7 = _gt(a[s + i + 7], r7)
        i += 8
    m = _gt(_gt(_gt(r0, r1), _gt(r2, r3)), _gt(_gt(r4, r5), _gt(r6, r7)))
    while i < n:
        m = _gt(a[s + i], m)
        i += 1
    return _gt(m, init)


@njit(inline="always", **_OPTS)
def _sq_block(a, s, n, mu, zero):
    """``sum((a[i] - mu) ** 2)`` over ``a[s:s+n]`` (n <= 128) in ``_block``'s order."""
    if n < 8:
        res = zero
        for i in range(s, s + n):
            c = a[i] - mu
            res += c * c
        return res
    c0 = a[s] - mu
    c1 = a[s + 1] - mu
    c2 = a[s + 2] - mu
    c3 = a[s + 3] - mu
    c4 = a[s + 4] - mu
    c5 = a[s + 5] - mu
    c6 = a[s + 6] - mu
    c7 = a[s + 7] - mu
    r0 = c0 * c0
    r1 = c1 * c1
    r2 = c2 * c2
    r3 = c3 * c3
    r4 = c4 * c4
    r5 = c5 * c5
    r6 = c6 * c6
    r7 = c7 * c7
    m = n - n % 8
    i = 8
    while i < m:
        c0 = a[s + i] - mu
        c1 = a[s + i + 1] - mu
        c2 = a[s + i + 2] - mu
        c3 = a[s + i + 3] - mu
        c4 = a[s + i + 4] - mu
        c5 = a[s + i + 5] - mu
        c6 = a[s + i + 6] - mu
        c7 = a[s + i + 7] - mu
        r0 += c0 * c0
        r1 += c1 * c1
        r2 += c2 * c2
        r3 += c3 * c3
        r4 += c4 * c4
        r5 += c5 * c5
        r6 += c6 * c6
        r7 += c7 * c7
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        c = a[s + i] - mu
        res += c * c
        i += 1
    return res


@njit(inline="always", **_OPTS)
def row_sq_sum(a, s, n, mu, zero):
    """``row_sum`` of ``(a[i] - mu) ** 2`` without storing the squares (mu = 0 for a plain sum
    of squares): the same blocks, the same order, each square rounded as ``c * c``."""
    if n <= 128:
        return _sq_block(a, s, n, mu, zero)
    acc = zero
    i = 0
    while i + 128 <= n:
        acc += _sq_block(a, s + i, 128, mu, zero)
        i += 128
    if i < n:
        acc += _sq_block(a, s + i, n - i, mu, zero)
    return acc

