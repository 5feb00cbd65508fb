"""The cpu cross-entropy of wide rows (``kernels/_xent_loops.py``, from ``WIDE_CLASSES``
classes): agrees with PyTorch (float64 reference) in float64 and float32 (kept float32), with
label smoothing and every reduction, handles -inf / +inf / NaN rows as the NumPy path does, and
still names out-of-range labels."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba.backends.cpu.kernels import train as ktrain
from caramba.train import cross_entropy

from ...compiler._util import run

pytest.importorskip("numba")
torch = pytest.importorskip("torch")


def _graph(shape, dtype, **kw):
    return caramba.trace(lambda x, y: cross_entropy(x, y, **kw), (shape, dtype), (shape[:-1], "int64"))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("shape", [(16, 64, 128), (7, 33), (3, 200)])
def test_wide_cross_entropy_matches_torch(cpu, dtype, smoothing, shape):
    rng = np.random.default_rng(shape[-1])
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    y = rng.integers(0, shape[-1], shape[:-1])
    g = _graph(shape, dtype, label_smoothing=smoothing)
    (got,) = run(cpu, g, {g.inputs[0].id: x, g.inputs[1].id: y}).values()
    assert got.dtype == np.dtype(dtype)
    want = torch.nn.functional.cross_entropy(torch.from_numpy(x.astype(np.float64)).reshape(-1, shape[-1]),
                                             torch.from_numpy(y).reshape(-1), label_smoothing=smoothing).item()
    tol = 2e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(got, want, rtol=tol)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_wide_rows_equal_numpy_path_on_special_rows(dtype):
    """Per-row losses against the NumPy path (-inf rows, +inf, NaN, an all -inf row)."""
    from caramba.backends.cpu.kernels import _xent_loops

    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 40)).astype(dtype)
    x[1, 3] = -np.inf
    x[2, :] = -np.inf
    x[3, 5] = np.inf
    x[4, 7] = np.nan
    y = rng.integers(0, 40, 6)
    out, tmp = np.empty(6, dtype), np.empty(40, dtype)
    rows = _xent_loops.cross_entropy_rows_f32 if dtype == "float32" else _xent_loops.cross_entropy_rows_f64
    with np.errstate(all="ignore"):
        assert rows(x, y, 0.0, out, tmp) == -1
        want = ktrain.cross_entropy_rows(x, y, 0.0, "t")
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(want))
    ok = np.isfinite(want)
    np.testing.assert_allclose(out[ok], want[ok], rtol=2e-6 if dtype == "float32" else 1e-14)


def test_wide_rows_bad_label_is_named(cpu):
    g = _graph((4, 50), "float32")
    with pytest.raises(ktrain.LabelOutOfRange, match=r"labels \[50\]"):
        run(cpu, g, {g.inputs[0].id: np.zeros((4, 50), np.float32), g.inputs[1].id: np.array([0, 50, 1, 2])})
