"""The cpu backend's generated row kernels for normalization and softmax (``fused/rows.py``):
layer_norm, rms_norm, softmax and log_softmax as one Numba kernel per row block, checked against
float64 NumPy formulas written here (not caramba's kernels), in float64 and float32, on rows
shorter and longer than the 128-element summation blocks, split over the workers or not,
with and without gamma/beta, on views, and on empty and non-finite input."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import compute, ops

from ..compiler._util import run

pytest.importorskip("numba")


@pytest.fixture(scope="module")
def cpu():
    r = compute.new("cpu")
    yield r
    r.close()


def _layer_norm(x, axis, eps, g=None, b=None):
    axes = tuple(range(axis % x.ndim, x.ndim))
    x = x.astype(np.float64)
    mu = x.mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + eps)
    return y * (1 if g is None else g) + (0 if b is None else b)


def _rms_norm(x, axis, eps, g=None):
    axes = tuple(range(axis % x.ndim, x.ndim))
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps) * (1 if g is None else g)


def _log_softmax(x):
    x = x.astype(np.float64)
    s = x - x.max(-1, keepdims=True)
    return s - np.log(np.exp(s).sum(-1, keepdims=True))


# (shape, axis): rows of 7 (one short block), 300 and 130 (blocks of 128 plus a tail that is not
# a multiple of 8), two trailing axes, and [64, 1100] (enough work to split over the workers)
SHAPES = [((5, 7), -1), ((3, 300), -1), ((2, 3, 130), -1), ((4, 6, 10), -2), ((64, 1100), -1), ((9,), -1)]
TOL = {"float64": 1e-13, "float32": 2e-6}


def _close(got, want, dtype):
    # relative to each output's row scale (a normalized value near 0 has no relative accuracy)
    scale = np.maximum(np.abs(want), 1.0)
    err = np.max(np.abs(got.astype(np.float64) - want) / scale) if want.size else 0.0
    assert err <= TOL[dtype], f"max error {err:.3g} > {TOL[dtype]:g}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape,axis", SHAPES)
@pytest.mark.parametrize("affine", [0, 1, 2])
def test_layer_norm_rows_match_numpy(cpu, dtype, shape, axis, affine):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    ts = shape[axis % len(shape):]
    aff = [rng.uniform(0.5, 2, ts).astype(dtype), rng.uniform(-1, 1, ts).astype(dtype)][:affine]
    names = ["x", "gamma", "beta"][: 1 + affine]
    fn = [lambda x: ops.layer_norm(x, axis=axis, eps=1e-5), lambda x, gamma: ops.layer_norm(x, gamma, axis=axis, eps=1e-5),
          lambda x, gamma, beta: ops.layer_norm(x, gamma, beta, axis=axis, eps=1e-5)][affine]
    g = caramba.trace(fn, *[(x.shape, dtype)] + [(t.shape, dtype) for t in aff])
    got = run(cpu, g, dict(zip(names, [x, *aff], strict=True)))["out"]
    assert got.dtype == np.dtype(dtype) and got.shape == shape
    _close(got, _layer_norm(x, axis, 1e-5, *aff), dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape,axis", SHAPES)
@pytest.mark.parametrize("affine", [0, 1])
def test_rms_norm_rows_match_numpy(cpu, dtype, shape, axis, affine):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    ts = shape[axis % len(shape):]
    aff = [rng.uniform(0.5, 2, ts).astype(dtype)][:affine]
    fn = [lambda x: ops.rms_norm(x, axis=axis, eps=1e-6), lambda x, gamma: ops.rms_norm(x, gamma, axis=axis, eps=1e-6)][affine]
    g = caramba.trace(fn, *[(x.shape, dtype)] + [(t.shape, dtype) for t in aff])
    got = run(cpu, g, dict(zip(["x", "gamma"][: 1 + affine], [x, *aff], strict=True)))["out"]
    assert got.dtype == np.dtype(dtype)
    _close(got, _rms_norm(x, axis, 1e-6, *aff), dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", [(5, 7), (3, 300), (2, 3, 130), (64, 1100), (1,)])
def test_softmax_and_log_softmax_rows_match_numpy(cpu, dtype, shape):
    x = (np.random.default_rng(2).standard_normal(shape) * 4).astype(dtype)
    want = _log_softmax(x)
    g = caramba.trace(lambda x: (ops.softmax(x, axis=-1), ops.log_softmax(x, axis=-1)), (shape, dtype))
    got = run(cpu, g, {"x": x})
    assert got["out0"].dtype == got["out1"].dtype == np.dtype(dtype)
    np.testing.assert_allclose(got["out0"], np.exp(want), rtol=4 * TOL[dtype], atol=0)
    _close(got["out1"], want, dtype)


def test_non_finite_rows_follow_numpy(cpu):
    x = np.array([[-np.inf] * 4, [0.0, np.inf, 1.0, 2.0], [0.0, np.nan, 1.0, 2.0], [1000.0, -1000.0, 0.0, 999.0]])
    g = caramba.trace(lambda x: (ops.softmax(x), ops.log_softmax(x), ops.layer_norm(x), ops.rms_norm(x)), (x.shape, "float64"))
    got = run(cpu, g, {"x": x})
    with np.errstate(invalid="ignore", over="ignore"):
        want = [np.exp(_log_softmax(x)), _log_softmax(x), _layer_norm(x, -1, 1e-5), _rms_norm(x, -1, 1e-6)]
    for k, w in enumerate(want):
        np.testing.assert_allclose(got[f"out{k}"], w, rtol=1e-13, equal_nan=True)


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (2, 0, 4)])
def test_empty_inputs(cpu, shape):
    x = np.zeros(shape)
    g = caramba.trace(lambda x: (ops.softmax(x), ops.log_softmax(x), ops.layer_norm(x), ops.rms_norm(x)), (shape, "float64"))
    got = run(cpu, g, {"x": x})
    assert all(v.shape == shape for v in got.values())


def test_a_transposed_view_is_normalized_as_its_values(cpu):
    # the kernel reads [L, D] rows: an input that is a strided view (here the transpose of a
    # graph input) is copied to contiguous rows first, never read with the wrong strides
    x = np.random.default_rng(3).standard_normal((40, 33))
    g = caramba.trace(lambda x: (ops.layer_norm(ops.transpose(x)), ops.softmax(ops.transpose(x))), (x.shape, "float64"))
    got = run(cpu, g, {"x": x}, disable=("fuse",))
    _close(got["out0"], _layer_norm(x.T, -1, 1e-5), "float64")
    np.testing.assert_allclose(got["out1"], np.exp(_log_softmax(x.T)), rtol=1e-13)


def test_kernels_write_into_planned_buffers(cpu):
    # out-capable: inside a larger graph the memory planner places the results in its arena
    x = np.random.default_rng(4).standard_normal((8, 64))
    g = caramba.trace(lambda x: ops.log_softmax(ops.layer_norm(ops.rms_norm(x * 2.0) + 1.0)) * 3.0, (x.shape, "float64"))
    got = run(cpu, g, {"x": x})["out"]
    want = _log_softmax(_layer_norm(_rms_norm(x * 2.0, -1, 1e-6) + 1.0, -1, 1e-5)) * 3.0
    _close(got, want, "float64")


@pytest.mark.parametrize("shape", [(6, 40), (2, 3, 40)])
def test_row_kernels_write_into_strided_outputs(shape):
    # the kernels' own API takes any output array: a strided one gets the values, not a copy
    from caramba.backends.cpu.fused import rows
    from caramba.ir.types import ValueType

    x = np.random.default_rng(5).standard_normal(shape)
    t = ValueType(shape, caramba.ir.dtypes.DType.float64)
    for k, want in ((rows.norm_rows(t, 0, 1e-5, len(shape) - 1, True), _layer_norm(x, -1, 1e-5)),
                    (rows.softmax_rows(t, log=True), _log_softmax(x))):
        out = np.zeros(shape[::-1]).T  # not C-contiguous
        k(x, out)
        _close(out, want, "float64")


def test_numpy_fallback_writes_planned_buffers_too(monkeypatch):
    # without Numba the same out-capable kernels run NumPy: results returned or written into
    # the planner's buffers agree with the formulas
    import caramba.backends.cpu.kernels.nn as knn

    monkeypatch.setattr(knn, "_rows_ok", lambda x: False)
    x = np.random.default_rng(6).standard_normal((8, 64))
    fns = {"ln": lambda v: ops.layer_norm(v), "rms": lambda v: ops.rms_norm(v), "lsm": lambda v: ops.log_softmax(v)}
    refs = {"ln": lambda v: _layer_norm(v, -1, 1e-5), "rms": lambda v: _rms_norm(v, -1, 1e-6), "lsm": _log_softmax}
    with compute.new("cpu") as r:
        for name, fn in fns.items():
            g = caramba.trace(lambda x, fn=fn: (fn(x), fn(x * 2.0) * 3.0), (x.shape, "float64"))
            got = run(r, g, {"x": x})
            _close(got["out0"], refs[name](x), "float64")
            _close(got["out1"], refs[name](x * 2.0) * 3.0, "float64")
