"""The row kernels' vector lane sums (``fused/rows_simd.py``) and the cpu runner's per-call path.

The lane sums must round exactly as NumPy's pairwise leaf: for a row of up to 128 elements
``np.sum`` is that leaf, so the generated kernels' sums are checked bitwise against NumPy (an
independent implementation) in float64 and float32, and longer rows against the same leaf over
blocks of 128 written here in plain Python."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import caramba
from caramba import compute, ops

pytest.importorskip("numba")

from numba import njit

from caramba.backends.cpu.fused.rows_simd import lanes8, max8, sq_lanes8


@njit(cache=False)
def _leaf(a, n, mu, square):
    # the generated kernels' block code: eight lanes as one vector, then the tail
    m = n // 8
    if m == 0:
        res = a.dtype.type(-0.0)
    else:
        if square:
            r0, r1, r2, r3, r4, r5, r6, r7 = sq_lanes8(a, 0, m, mu)
        else:
            r0, r1, r2, r3, r4, r5, r6, r7 = lanes8(a, 0, m)
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for i in range(8 * m, n):
        if square:
            c = a[i] - mu
            res += c * c
        else:
            res += a[i]
    return res


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lane_sums_are_numpys_pairwise_leaf_bitwise(dtype):
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 9, 16, 63, 64, 65, 100, 127, 128):
        a = (rng.standard_normal(n) * 10 ** rng.uniform(-3, 3, n)).astype(dtype)
        mu = dtype(rng.standard_normal())
        assert _leaf(a, n, mu, False) == np.sum(a), n  # np.sum of <= 128 elements is the leaf
        c = a - mu
        want = np.sum(c * c) if n else dtype(0)
        assert _leaf(a, n, mu, True) == want, n


@njit(cache=False)
def _max(a):
    r0, r1, r2, r3, r4, r5, r6, r7 = max8(a, 0, a.size // 8)
    m = max(max(max(r0, r1), max(r2, r3)), max(max(r4, r5), max(r6, r7)))
    for i in range(8 * (a.size // 8), a.size):
        m = max(m, a[i])
    return m


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lane_maxima_are_the_row_maximum(dtype):
    rng = np.random.default_rng(4)
    for n in (8, 15, 16, 17, 64, 100, 128, 513, 1000):
        a = rng.standard_normal(n).astype(dtype)
        a[rng.integers(n)] = dtype(7.5)  # the maximum in any lane
        assert _max(a) == np.max(a) == dtype(7.5), n
        assert _max(-np.abs(a) - 1) == np.max(-np.abs(a) - 1), n


@pytest.mark.parametrize("n", [7, 40, 300])
def test_softmax_rows_with_nan_inf_and_huge_values(n):
    # the vector maximum's NaN and infinity handling: a NaN row is NaN, +inf gives NaN (inf - inf),
    # -inf everywhere gives NaN, huge finite values are shifted exactly as NumPy shifts them
    from caramba.backends.cpu.fused import rows
    from caramba.ir.dtypes import DType
    from caramba.ir.types import ValueType

    x = np.random.default_rng(5).standard_normal((5, n))
    x[0, n // 2] = np.nan
    x[1, -1] = np.inf
    x[2, :] = -np.inf
    x[3, 3] = 1e300
    x[4] *= 700.0
    out = np.empty_like(x)
    rows.softmax_rows(ValueType(x.shape, DType.float64), log=False)(x, out)
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(-1, keepdims=True))
        want = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-300, equal_nan=True)


def _ref_norm_stats(x):
    """Per row: (sum, centered sum of squares) in blocks of 128 added in order, each block
    summed by np.sum (the pairwise leaf), as ``rows_runtime.row_sum`` defines them."""
    sums, sqs = [], []
    for row in x:
        s = row.dtype.type(-0.0)
        for b in range(0, row.size, 128):
            s += np.sum(row[b:b + 128])
        mu = row.dtype.type(s / row.dtype.type(row.size))
        q = row.dtype.type(-0.0)
        for b in range(0, row.size, 128):
            c = row[b:b + 128] - mu
            q += np.sum(c * c)
        sums.append(s)
        sqs.append(q)
    return np.array(sums), np.array(sqs)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(8, 64), (4, 300), (3, 7), (2, 768), (2, 4, 130)])
def test_layer_norm_kernel_matches_blockwise_numpy_exactly(dtype, shape):
    # the kernel's output, recomputed from the exact block sums: bitwise equal
    from caramba.backends.cpu.fused import rows
    from caramba.ir.dtypes import DType
    from caramba.ir.types import ValueType

    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 3 + 2).astype(dtype)
    d = DType.float64 if dtype is np.float64 else DType.float32
    k = rows.norm_rows(ValueType(shape, d), 0, 1e-5, len(shape) - 1, True)
    out = np.empty_like(x)
    k(x, out)
    x2 = x.reshape(-1, shape[-1])
    s, q = _ref_norm_stats(x2)
    n = dtype(shape[-1])
    mu = (s / n).astype(dtype)[:, None]
    var = (q / n).astype(dtype)
    rstd = (dtype(1) / np.sqrt(var + dtype(1e-5))).astype(dtype)[:, None]
    want = ((x2 - mu) * rstd).astype(dtype)
    np.testing.assert_array_equal(out.reshape(x2.shape), want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_softmax_row_sums_match_blockwise_numpy_exactly(dtype):
    # softmax rows sum the exps with the lane sums: y * sum == exp(x - max) to the last rounding
    from caramba.backends.cpu.fused import rows
    from caramba.ir.dtypes import DType
    from caramba.ir.types import ValueType

    x = (np.random.default_rng(2).standard_normal((6, 300)) * 3).astype(dtype)
    d = DType.float64 if dtype is np.float64 else DType.float32
    log = np.empty_like(x)
    rows.softmax_rows(ValueType(x.shape, d), log=True)(x, log)
    e = np.exp((x - x.max(-1, keepdims=True)).astype(np.float64))
    ref = np.log(e.sum(-1, keepdims=True))
    tol = 1e-13 if dtype is np.float64 else 2e-6
    np.testing.assert_allclose(log, (x - x.max(-1, keepdims=True)) - ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(8, 16, 64), (2, 3, 4, 40)])
def test_leading_axes_run_without_copies_and_agree_with_numpy(shape):
    # [..., D] inputs reach the kernel as [L, D] views of the same arrays (out written in place)
    from caramba.backends.cpu.fused import rows
    from caramba.ir.dtypes import DType
    from caramba.ir.types import ValueType

    rng = np.random.default_rng(3)
    x, g, b = rng.standard_normal(shape), rng.standard_normal(shape[-1]), rng.standard_normal(shape[-1])
    t = ValueType(shape, DType.float64)
    out = np.empty(shape)
    rows.norm_rows(t, 2, 1e-5, len(shape) - 1, True)(x, g, b, out)
    mu = x.mean(-1, keepdims=True)
    want = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
    sm = np.empty(shape)
    rows.softmax_rows(t, log=False)(x, sm)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(-1, keepdims=True), rtol=1e-13, atol=0)


def test_runs_ignore_fp_errors_and_leave_the_callers_settings():
    # IEEE results without warnings inside a run; the caller's np.seterr state is untouched after
    x = np.array([[1.0, 0.0], [-1.0, 0.0]])
    g = caramba.trace(lambda x: ops.log(x) / x, (x.shape, "float64"))
    with compute.new("cpu") as r:
        exe = r.compile(g)
        before = np.geterr()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = exe.run({"x": r.upload(x)})["out"].download()
        assert np.geterr() == before
    with np.errstate(all="ignore"):
        want = np.log(x) / x
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])
    with pytest.warns(RuntimeWarning):  # outside a run NumPy warns as before
        np.log(np.array([-1.0]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernels_equal_the_scalar_row_helpers_bitwise_for_every_row_length(dtype):
    # the layer norm's vector sums against rows_runtime's scalar definitions (row_sum,
    # row_sq_sum) for row lengths around every boundary: < 8, < 16, multiples of 8, blocks of 128 and tails
    from caramba.backends.cpu.fused import rows
    from caramba.backends.cpu.fused.rows_runtime import row_max, row_sq_sum, row_sum
    from caramba.ir.dtypes import DType
    from caramba.ir.types import ValueType

    @njit(cache=False)
    def scalar(x, mean, sq, mx):
        zero = x.dtype.type(-0.0)
        for i in range(x.shape[0]):
            mean[i] = row_sum(x[i], 0, x.shape[1], zero) / x.dtype.type(x.shape[1])
            sq[i] = row_sq_sum(x[i], 0, x.shape[1], mean[i], zero)
            mx[i] = row_max(x[i], 0, x.shape[1], x.dtype.type(-np.inf))

    d = DType.float64 if dtype is np.float64 else DType.float32
    rng = np.random.default_rng(6)
    for n in (1, 5, 8, 15, 16, 17, 24, 127, 128, 129, 135, 256, 257, 300):
        x = (rng.standard_normal((3, n)) * 5 + 1).astype(dtype)
        mean, sq, mx = (np.empty(3, dtype) for _ in range(3))
        scalar(x, mean, sq, mx)
        out = np.empty_like(x)
        rows.norm_rows(ValueType(x.shape, d), 0, 1e-5, 1, True)(x, out)
        var = (sq / dtype(n)).astype(dtype)
        rstd = (dtype(1) / np.sqrt(var + dtype(1e-5))).astype(dtype)
        np.testing.assert_array_equal(out, ((x - mean[:, None]) * rstd[:, None]).astype(dtype), err_msg=str(n))
        np.testing.assert_array_equal(mx, x.max(axis=1), err_msg=str(n))  # the helpers' own sanity


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lane_sum_and_lane_max_are_row_sum_and_row_max_bitwise(dtype):
    """rows_simd's vector forms of rows_runtime's row reductions (what the static cross-entropy
    and attention loops call) give their bits for every length around the boundaries (< 8,
    < 16, multiples of 8, blocks of 128 and tails), with NaN, infinities, signed zeros and an
    ``init`` above, below and equal to the row."""
    from caramba.backends.cpu.fused.rows_runtime import row_max, row_sum
    from caramba.backends.cpu.fused.rows_simd import lane_max, lane_sum

    @njit(cache=False)
    def both(x, init, out):
        zero = x.dtype.type(-0.0)
        for i in range(x.shape[0]):
            n = x.shape[1]
            out[i, 0] = row_sum(x[i], 0, n, zero)
            out[i, 1] = lane_sum(x[i], n, zero)
            out[i, 2] = row_max(x[i], 0, n, init)
            out[i, 3] = lane_max(x[i], n, init)

    rng = np.random.default_rng(11)
    for n in (1, 5, 7, 8, 15, 16, 17, 24, 127, 128, 129, 135, 256, 257, 300):
        x = (rng.standard_normal((6, n)) * 3).astype(dtype)
        x[1, rng.integers(n)] = np.nan
        x[2, rng.integers(n)] = np.inf
        x[3, :] = -0.0
        x[4, rng.integers(n)] = -np.inf
        for init in (dtype(-np.inf), dtype(0.5), dtype(1e30), dtype(np.nan)):
            out = np.empty((6, 4), dtype)
            both(x, init, out)
            np.testing.assert_array_equal(out[:, 1].tobytes(), out[:, 0].tobytes(), err_msg=f"sum n={n}")
            np.testing.assert_array_equal(out[:, 3].tobytes(), out[:, 2].tobytes(), err_msg=f"max n={n} init={init}")
