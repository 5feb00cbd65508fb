"""Batched products on the native helpers (``blas._native_batched``, ``native.bgemm_*``): stacks of
matrices of one batch shape, each matrix one single-thread BLAS call read in place through its
strides, the matrices split over the helpers; NumPy's product wherever BLAS cannot read them."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from caramba.backends.cpu import blas, native, workers

pytestmark = pytest.mark.skipif(native.pool(1) is None or blas.cblas_gemm() is None or blas._policy() is None,
                                reason="needs the native helpers and NumPy's ILP64 OpenBLAS")


@pytest.fixture
def two_workers(monkeypatch):
    monkeypatch.setattr(workers, "count", lambda: 2)
    monkeypatch.setattr(blas, "BLOCK_FLOPS", 1e5)  # the small shapes below count as large


def _operands(layout: str, dtype, rng):
    """(x, w) stacks of [.., M, K] and [.., K, N] in several memory layouts."""
    if layout == "contiguous_3d":
        return rng.standard_normal((6, 40, 24)).astype(dtype), rng.standard_normal((6, 24, 32)).astype(dtype)
    if layout == "heads_view":  # [B, T, H, D] seen as [B, H, T, D], times its transpose
        x = rng.standard_normal((3, 40, 4, 24)).astype(dtype).transpose(0, 2, 1, 3)
        w = rng.standard_normal((3, 32, 4, 24)).astype(dtype).transpose(0, 2, 3, 1)
        return x, w
    if layout == "swapped":  # P^T @ dO: transposed matrices (F-order slices)
        p = rng.standard_normal((2, 3, 24, 40)).astype(dtype)
        return np.swapaxes(p, -1, -2), rng.standard_normal((2, 3, 24, 32)).astype(dtype)
    if layout == "five_d":
        return rng.standard_normal((2, 2, 3, 40, 24)).astype(dtype), rng.standard_normal((2, 2, 3, 24, 32)).astype(dtype)
    assert layout == "no_unit_stride"  # every other column: BLAS cannot read it, NumPy computes it
    return rng.standard_normal((6, 40, 48)).astype(dtype)[..., ::2], rng.standard_normal((6, 24, 32)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("layout", ["contiguous_3d", "heads_view", "swapped", "five_d", "no_unit_stride"])
@pytest.mark.parametrize("into", [None, "buffer", "strided_buffer"])
def test_batched_products_match_numpy_in_every_layout(two_workers, dtype, layout, into):
    rng = np.random.default_rng(7)
    x, w = _operands(layout, dtype, rng)
    out_shape = np.matmul(x, w).shape
    f = blas.matmul_for(x.shape, w.shape, out_shape)
    assert f.__name__ == "batched_matmul"
    o = None
    if into == "buffer":
        o = np.full(out_shape, np.nan, dtype)
    elif into == "strided_buffer":
        o = np.full(out_shape[:-1] + (2 * out_shape[-1],), np.nan, dtype)[..., ::2]
    got = f(x, w, o) if o is not None else f(x, w)
    if o is not None:
        assert got is o
    want = np.matmul(x.astype(np.float64), w.astype(np.float64))
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert got.dtype == dtype and got.shape == out_shape


def test_small_broadcast_and_integer_products_keep_numpys_path(two_workers):
    assert blas.matmul_for((4, 8, 8), (4, 8, 8), (4, 8, 8)).__name__ == "policed_matmul"  # under BLOCK_FLOPS
    assert blas.matmul_for((4, 64, 64), (4, 64, 64), (4, 64, 64)).__name__ == "batched_matmul"
    assert blas.matmul_for((4, 64, 64), (64, 64), (4, 64, 64)).__name__ != "batched_matmul"  # a shared b
    assert blas.matmul_for((4, 64, 64), (1, 64, 64), (4, 64, 64)).__name__ == "policed_matmul"  # broadcast
    from caramba.ir.dtypes import DType

    assert blas.matmul_for((4, 64, 64), (4, 64, 64), (4, 64, 64), DType.int64).__name__ == "policed_matmul"


def test_one_worker_keeps_numpys_path(monkeypatch):
    monkeypatch.setattr(workers, "count", lambda: 1)
    assert blas.matmul_for((8, 64, 64), (8, 64, 64), (8, 64, 64)).__name__ == "policed_matmul"


def test_busy_helpers_run_the_same_blocks_in_turn(two_workers):
    """Another split call holding the helpers: the matrices run on the calling thread, same bits."""
    rng = np.random.default_rng(2)
    x, w = _operands("heads_view", np.float32, rng)
    f = blas.matmul_for(x.shape, w.shape, np.matmul(x, w).shape)
    split = f(x, w)
    assert workers._RUNNING.acquire(blocking=False)
    try:
        in_turn = f(x, w)
    finally:
        workers._RUNNING.release()
    assert np.array_equal(split, in_turn)
