"""fft.rfft / fft.irfft: numpy.fft's values (the independent reference), the (real, imaginary)
trailing-axis layout, float32, type errors, and VJPs against finite differences in float64."""

from __future__ import annotations

import numpy as np
import pytest

from caramba import ir
from caramba.errors import GraphError
from caramba.ops import fft

from .research_helpers import WITH_ONNX as BACKENDS
from .research_helpers import check_vjp, run

SIZES = (1, 2, 7, 8, 64, 1024)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", SIZES)
def test_rfft_and_irfft_equal_numpy_fft(backend, n):
    rng = np.random.default_rng(n)
    x = rng.normal(size=(3, n))
    spec = np.fft.rfft(x, axis=-1)
    z = np.stack([spec.real, spec.imag], axis=-1)
    zr = rng.normal(size=(2, n // 2 + 1, 2))
    out = run(backend, lambda g, v: (g.output("X", fft.rfft(v["x"])), g.output("y", fft.irfft(v["z"], n=n)),
                                     g.output("back", fft.irfft(fft.rfft(v["x"]), n=n))), {"x": x, "z": zr})
    assert out["X"].shape == (3, n // 2 + 1, 2)
    np.testing.assert_allclose(out["X"], z, rtol=0, atol=1e-12 * np.sqrt(n) * 4)
    want = np.fft.irfft(zr[..., 0] + 1j * zr[..., 1], n=n, axis=-1)
    np.testing.assert_allclose(out["y"], want, rtol=0, atol=1e-13 * 8)
    np.testing.assert_allclose(out["back"], x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_stays_float32(backend):
    x = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    out = run(backend, lambda g, v: g.output("X", fft.rfft(v["x"])), {"x": x})
    assert out["X"].dtype == np.float32
    spec = np.fft.rfft(x.astype(np.float64))
    np.testing.assert_allclose(out["X"], np.stack([spec.real, spec.imag], -1), rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", (1, 5, 6))
def test_vjps_match_finite_differences(backend, n):
    rng = np.random.default_rng(3)
    check_vjp(backend, lambda v: fft.rfft(v["x"]), {"x": rng.normal(size=(2, n))}, ("x",))
    check_vjp(backend, lambda v: fft.irfft(v["z"], n=n), {"z": rng.normal(size=(2, n // 2 + 1, 2))}, ("z",))


def test_type_rules_refuse_bad_shapes_and_dtypes():
    with ir.Graph() as g:
        with pytest.raises(GraphError, match="does not accept input of dtype int64"):
            fft.rfft(g.input("i", (4,), dtype="int64"))
        with pytest.raises(GraphError, match=r"needs \[\.\.\., n//2 \+ 1, 2\] = \[\.\.\., 3, 2\]"):
            fft.irfft(g.input("z", (4, 2)), n=4)
        with pytest.raises(GraphError, match="n >= 1"):
            fft.irfft(g.input("z2", (1, 2)), n=0)
        with pytest.raises(GraphError, match="n >= 1"):
            fft.rfft(g.input("e", (3, 0)))
