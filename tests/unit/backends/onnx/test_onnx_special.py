"""Float64 decompositions the onnx backend uses where ONNX Runtime has no accurate kernel,
checked in ulps against mpmath (W. J. Cody's erf/erfc, log1p, expm1, sigmoid)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
mpmath = pytest.importorskip("mpmath")

import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from caramba.ir.dtypes import DType  # noqa: E402
from caramba.onnx import special  # noqa: E402
from caramba.onnx.emitter import IR_VERSION, OPSET, Emitter  # noqa: E402


def compiled(fn):
    e = Emitter()
    y = e.op("Identity", fn(e, "x", DType.float64))
    g = helper.make_graph(
        e.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, None)],
        [helper.make_tensor_value_info(y, TensorProto.DOUBLE, None)], initializer=e.initializers,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return lambda v: s.run(None, {"x": np.asarray(v, dtype=np.float64)})[0]


def ulps(got: np.ndarray, xs: np.ndarray, ref) -> np.ndarray:
    out = []
    for g, x in zip(got, xs, strict=True):
        r = ref(mpmath.mpf(float(x)))
        rf = float(r)
        if not np.isfinite(rf) or rf == 0.0:
            out.append(0.0 if g == rf else np.inf)
            continue
        spacing = np.spacing(max(abs(rf), np.finfo(np.float64).smallest_normal))
        out.append(float(abs(mpmath.mpf(float(g)) - r) / spacing))
    return np.array(out)


mpmath.mp.prec = 100
RNG = np.random.default_rng(7)
ERF_X = np.concatenate([
    RNG.uniform(-6, 6, 1500), RNG.uniform(-0.47, 0.47, 300), RNG.uniform(-27, 27, 500),
    [0.0, 0.46875, -0.46875, 4.0, -4.0, 1e-300, -1e-17, 26.0, 27.2],
])


@pytest.mark.parametrize("name, fn, ref, bound", [
    ("erf", special.erf, mpmath.erf, 4.0),
    ("erfc", special.erfc, mpmath.erfc, 8.0),
])
def test_cody_erf_erfc_within_a_few_ulps(name, fn, ref, bound):
    got = compiled(fn)(ERF_X)
    err = ulps(got, ERF_X, ref)
    assert err.max() <= bound, f"{name}: {err.max():.2f} ulps at x={ERF_X[err.argmax()]!r}"


def test_erf_erfc_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 40.0, -40.0])
    erf = compiled(special.erf)(x)
    erfc = compiled(special.erfc)(x)
    assert np.isnan(erf[0]) and np.isnan(erfc[0])
    assert erf[1:].tolist() == [1.0, -1.0, 0.0, -0.0, 1.0, -1.0]
    assert np.signbit(erf[4])
    assert erfc[1:].tolist() == [0.0, 2.0, 1.0, 1.0, 0.0, 2.0]


WIDE = np.concatenate([RNG.uniform(-1, 1, 1500) * 10.0 ** RNG.integers(-20, 3, 1500), RNG.uniform(-700, 700, 300)])


@pytest.mark.parametrize("name, fn, ref, xs, bound", [
    ("log1p", special.log1p, mpmath.log1p, WIDE[WIDE > -1], 2.0),
    ("expm1", special.expm1, mpmath.expm1, WIDE, 3.0),
    ("sigmoid", special.sigmoid, lambda v: 1 / (1 + mpmath.exp(-v)), WIDE, 2.0),
])
def test_elementary_decompositions_within_a_few_ulps(name, fn, ref, xs, bound):
    got = compiled(fn)(xs)
    err = ulps(got, xs, ref)
    assert err.max() <= bound, f"{name}: {err.max():.2f} ulps at x={xs[err.argmax()]!r}"


def test_elementary_special_values():
    log1p = compiled(special.log1p)(np.array([-1.0, np.inf, -np.inf, np.nan, -0.0, -2.0]))
    assert log1p[0] == -np.inf and log1p[1] == np.inf and np.isnan(log1p[2]) and np.isnan(log1p[3])
    assert log1p[4] == 0.0 and np.signbit(log1p[4]) and np.isnan(log1p[5])
    expm1 = compiled(special.expm1)(np.array([np.inf, -np.inf, np.nan, -0.0, 800.0]))
    assert expm1[0] == np.inf and expm1[1] == -1.0 and np.isnan(expm1[2]) and np.signbit(expm1[3]) and expm1[4] == np.inf
    sig = compiled(special.sigmoid)(np.array([np.inf, -np.inf, np.nan, -800.0, -745.0]))
    assert sig[0] == 1.0 and sig[1] == 0.0 and np.isnan(sig[2]) and sig[3] == 0.0 and 0.0 < sig[4] < 1e-320


def test_splitmix_matches_the_reference_sequence():
    # Vigna's splitmix64.c: next() = mix(state += golden); seed 0 gives 0xE220A8397B1DCDAF first.
    assert special.mix64_host(special.GOLDEN) == 0xE220A8397B1DCDAF
