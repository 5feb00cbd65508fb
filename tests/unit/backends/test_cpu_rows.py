"""The cpu backend's row kernels: softmax (the generated fused.softmax with no prologue) and the
softmax cross-entropy (one Numba pass per row for float64), against the NumPy forms they replace."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import compute, ops
from caramba.backends.cpu.kernels.nn import softmax as numpy_softmax
from caramba.backends.cpu.kernels.train import LabelOutOfRange, cross_entropy_rows
from caramba.errors import CarambaError
from caramba.train import cross_entropy

from ..compiler._util import run


@pytest.fixture(scope="module")
def cpu():
    r = compute.new("cpu")
    yield r
    r.close()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_matches_numpy_with_infinite_rows(cpu, dtype, axis):
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(dtype)
    x[1] = -np.inf  # all -inf: NaN, as NumPy gives
    x[2, 3] = np.inf
    g = caramba.trace(lambda x: ops.softmax(x, axis=axis), ((5, 7), dtype))
    got = run(cpu, g, {"x": x})["out"]
    with np.errstate(invalid="ignore"):
        want = numpy_softmax(x, axis)
    np.testing.assert_allclose(got, want, rtol=1e-15 if dtype == "float64" else 1e-6, equal_nan=True)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(32, 128), (3, 5, 16), (0, 8), (64, 1)])
def test_row_softmax_kernel_makes_or_fills_its_output_for_any_layout(log, shape):
    # the kernel makes its own output when given none (the common call) and fills a given one;
    # transposed or sliced inputs and outputs take the copying path; every way gives the same bits
    pytest.importorskip("numba")
    from caramba.backends.cpu.fused import rows
    from caramba.ir.types import ValueType

    k = rows.softmax_rows(ValueType(shape, caramba.DType.float64), log=log)
    x = np.random.default_rng(1).standard_normal(shape) * 4
    with np.errstate(all="ignore"):
        m = x - x.max(axis=-1, keepdims=True) if x.size else x
        want = m - np.log(np.exp(m).sum(axis=-1, keepdims=True)) if log else numpy_softmax(x, -1)
    fresh = k(x)
    assert fresh.shape == shape and fresh.flags.c_contiguous and fresh is not x
    np.testing.assert_allclose(fresh, want, rtol=1e-14, atol=1e-300)
    strided_x = np.asfortranarray(x)  # the same values, another layout
    given = np.empty(shape)
    assert k(strided_x, given) is given
    np.testing.assert_array_equal(given, fresh)
    wide = np.zeros(shape[:-1] + (2 * shape[-1],))
    view = wide[..., ::2]  # a strided output view
    assert k(x, view) is view
    np.testing.assert_array_equal(view, fresh)
    assert not wide[..., 1::2].any()  # nothing written between its elements


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_rows_match_numpy(cpu, smoothing):
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((6, 5)) * 10
    logits[4] = -np.inf  # a row of -inf gives -inf, not NaN
    labels = rng.integers(0, 5, 6)
    g = caramba.trace(lambda x, y: cross_entropy(x, y, label_smoothing=smoothing, reduction="none"),
                      ((6, 5), "float64"), ((6,), "int64"))
    got = run(cpu, g, {"x": logits, "y": labels})["out"]
    with np.errstate(invalid="ignore", divide="ignore"):
        want = cross_entropy_rows(logits, labels, smoothing, "labels")
    np.testing.assert_allclose(got, want, rtol=1e-14)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cross_entropy_names_labels_out_of_range(cpu, dtype):
    g = caramba.trace(lambda x, y: cross_entropy(x, y), ((3, 4), dtype), ((3,), "int64"))
    with pytest.raises(CarambaError, match=r"labels \[4\] are outside \[0, 4\)") as err:
        run(cpu, g, {"x": np.zeros((3, 4), dtype), "y": np.array([0, 4, 1])})
    assert isinstance(err.value, LabelOutOfRange) or isinstance(err.value.__cause__, LabelOutOfRange)
