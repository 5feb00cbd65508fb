"""Float64 sin/cos on the onnx backend (ORT's own float64 Sin/Cos are ~1e5 ulps off): fdlibm's
Cody-Waite reduction, Payne-Hanek past |x| ~ 1.6e6, and msun's kernels from plain ONNX ops
(``special.sin``/``special.cos``), checked in ulps against mpmath, including arguments next to
multiples of pi/2 (the hard cases for a reduction) up to the largest double."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
mpmath = pytest.importorskip("mpmath")

import caramba  # noqa: E402
from caramba import ops  # noqa: E402
from caramba.onnx import special  # noqa: E402

from .test_onnx_special import compiled  # noqa: E402  (one ONNX Runtime session per decomposition)

SIN, COS = compiled(special.sin), compiled(special.cos)


def ulps(got: np.ndarray, xs: np.ndarray, ref) -> np.ndarray:
    """|got - ref(x)| in units of the last place of the float64 nearest ref(x). 1300 bits:
    reducing x < 2**1024 next to a multiple of pi/2 exactly needs ~1024 + 53 + 62."""
    out = []
    with mpmath.workprec(1300):
        for g, x in zip(got, xs, strict=True):
            r = ref(mpmath.mpf(float(x)))
            spacing = np.spacing(max(abs(float(r)), np.finfo(np.float64).smallest_normal))
            out.append(float(abs(mpmath.mpf(float(g)) - r) / spacing))
    return np.array(out)


RNG = np.random.default_rng(21)
_K = np.concatenate([np.arange(-64, 65), RNG.integers(-(2**20) + 2, 2**20 - 1, 400)]).astype(np.float64)
_NEAR = _K * (np.pi / 2)  # the float64 next to k*pi/2: the hard cases for the reduction
NEAR_PIO2 = np.concatenate([_NEAR, np.nextafter(_NEAR, np.inf), np.nextafter(_NEAR, -np.inf)])
NEAR_PIO2 = NEAR_PIO2[NEAR_PIO2 != 0.0]
# From the continued fraction of pi/2 scaled to each binade up to 2**21: doubles within
# 2**-60.5 (45.55...), 2**-59.5 (91.1...) and 2**-54 of a multiple of pi/2; and the double
# closest to one of all, 6381956970095103 * 2**797 (2**-60.9; J.-M. Muller, "Elementary
# Functions", table 11.1), a Payne-Hanek case.
CLOSEST = np.array([45.553093477052, 91.106186954104, 1.5707963267948966, 46066.74387591393,
                    321307.9594422229, 642615.9188844458, 1698673.2849629424, 6381956970095103 * 2.0**797])
_BIG_K = np.concatenate([2.0**20 + np.arange(0, 64), RNG.uniform(2**20, 2**52, 200).round()])
_NEAR_BIG = _BIG_K * (np.pi / 2)
NEAR_PIO2_BIG = np.concatenate([_NEAR_BIG, np.nextafter(_NEAR_BIG, np.inf), np.nextafter(_NEAR_BIG, -np.inf)])
TINY = RNG.uniform(-1, 1, 300) * 10.0 ** RNG.integers(-300, 0, 300)
CASES = {
    "[-10, 10]": RNG.uniform(-10, 10, 1500),
    "[-1e5, 1e5]": RNG.uniform(-1e5, 1e5, 1000),
    "near k*pi/2": np.concatenate([NEAR_PIO2, CLOSEST, -CLOSEST]),
    "near k*pi/2, k >= 2**20": np.concatenate([NEAR_PIO2_BIG, -NEAR_PIO2_BIG]),
    "[-2e6, 2e6] (both reductions)": RNG.uniform(-2e6, 2e6, 600),
    "every binade to 1.8e308": RNG.choice([-1.0, 1.0], 800) * 10.0 ** RNG.uniform(6, 308.25, 800),
    "tiny": TINY,
}


@pytest.mark.parametrize("name, fn, ref", [("sin", SIN, mpmath.sin), ("cos", COS, mpmath.cos)])
@pytest.mark.parametrize("case", list(CASES))
def test_within_one_ulp_of_mpmath(name, fn, ref, case):
    xs = CASES[case]
    err = ulps(fn(xs), xs, ref)
    # measured: max 0.75 ulp (sin, cos) over ~300,000 arguments like these; fdlibm's bound is < 1 ulp
    assert err.max() <= 1.0, f"{name} on {case}: {err.max():.3f} ulps at x={xs[err.argmax()]!r}"


def test_sin_is_odd_and_cos_even_exactly():
    xs = np.concatenate([RNG.uniform(-1e5, 1e5, 1000), 10.0 ** RNG.uniform(6, 308, 1000)])
    np.testing.assert_array_equal(SIN(-xs), -SIN(xs))
    np.testing.assert_array_equal(COS(-xs), COS(xs))


def test_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, -5e-324, 2.0**-30])
    s, c = SIN(x), COS(x)
    assert np.isnan(s[:3]).all() and np.isnan(c[:3]).all()
    assert s[3] == 0.0 and not np.signbit(s[3]) and s[4] == 0.0 and np.signbit(s[4])
    assert s[5] == 5e-324 and s[6] == -5e-324 and s[7] == 2.0**-30  # sin(x) = x below ~1e-8
    assert c[3:].tolist() == [1.0] * 5
    # where the reduction switches from Cody-Waite (k < 2**20) to Payne-Hanek, both sides
    k = 2.0**20 - 0.5
    edge = np.array([np.nextafter(k * (math.pi / 2), 0.0), k * (math.pi / 2), np.nextafter(k * (math.pi / 2), np.inf)])
    edge = np.concatenate([edge, -edge, [np.finfo(np.float64).max, -np.finfo(np.float64).max]])
    for fn, ref in ((SIN, mpmath.sin), (COS, mpmath.cos)):
        assert ulps(fn(edge), edge, ref).max() <= 1.0


def test_shapes_with_and_without_payne_hanek_elements():
    # the Payne-Hanek elements are gathered, reduced and scattered back (none, some, all; any rank)
    x = np.array([[1.0, 3e6, -2.5], [-7e100, 0.5, 4e15]])
    for fn in (SIN, COS):
        flat = fn(x.ravel())
        np.testing.assert_array_equal(fn(x), flat.reshape(2, 3))
        np.testing.assert_array_equal([fn(np.float64(v)) for v in x.ravel()], flat)
        assert fn(np.float64(3e6)).shape == () and fn(np.zeros((0, 3))).shape == (0, 3)
        np.testing.assert_array_equal(fn(x[:, [0, 2]]), flat.reshape(2, 3)[:, [0, 2]])


def test_any_float64_bit_pattern_gives_an_accurate_value_or_nan():
    """Random bit patterns (every exponent, subnormals, NaN payloads, infinities): finite x
    within 1 ulp of mpmath, inf and NaN give NaN, never anything else."""
    bits = np.random.default_rng(5).integers(0, 2**64, 3000, dtype=np.uint64, endpoint=False)
    xs = bits.view(np.float64)
    xs = np.concatenate([xs, [np.inf, -np.inf]])
    finite = np.isfinite(xs)
    for fn, ref in ((SIN, mpmath.sin), (COS, mpmath.cos)):
        got = fn(xs)
        assert np.isnan(got[~finite]).all()
        err = ulps(got[finite], xs[finite], ref)
        assert err.max() <= 1.0, f"{err.max():.3f} ulps at x={xs[finite][err.argmax()]!r}"


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_float64_sin_cos_lower_to_the_port_on_the_onnx_backend(backends, op):
    ox, cpu = backends
    g = caramba.trace(lambda x: getattr(ops, op)(x) * 2.0, ((64,), "float64"))
    assert {"Sin", "Cos"}.isdisjoint(n.op_type for n in ox.compile(g).model.graph.node)
    # through the backend's own session options too: the TwoSum steps survive ORT's optimizer
    x = np.concatenate([np.random.default_rng(3).uniform(-20, 20, 36), CLOSEST, NEAR_PIO2[-10:], NEAR_PIO2_BIG[-10:]])

    def run(r):
        (out,) = r.execute(g, None, {"x": r.upload(x)}).values()
        return out.download()

    got, ref = run(ox), run(cpu)
    err = ulps(got / 2, x, getattr(mpmath, op))  # (* 2.0 is exact)
    assert err.max() <= 1.0, f"{op}: {err.max():.3f} ulps at x={x[err.argmax()]!r}"
    # and the cpu backend agrees where its own sin/cos are within 1 ulp (its float64 cos is ~8 ulps
    # off at 6381956970095103 * 2**797, the hardest reduction of all: not compared there)
    near = np.abs(x) < 1e6
    assert (np.abs(got - ref) <= 2 * np.spacing(np.abs(ref)))[near].all()


@pytest.mark.slow
def test_digits_example_trains_on_onnx(tmp_path):
    """The flagship example's cosine schedule (float64 cos) runs on the onnx backend."""
    pytest.importorskip("sklearn")
    from pathlib import Path

    from caramba.manifest.experiment import run_experiment
    from caramba.store import RunStore

    path = Path(__file__).resolve().parents[4] / "examples" / "digits_mlp.yml"
    res = run_experiment(path, ["trainer.steps=20"], backend="onnx", store=RunStore(tmp_path))
    assert res.ok, [r.error for r in res.runs]
    (run,) = res.runs
    assert run.status == "finished" and math.isfinite(run.summary["train.loss"]), run.summary
