"""The onnx lowerings of the research ops (caramba.onnx.export_research): DFT twiddles
against mpmath, lengths the compliance suite does not cover against numpy.fft, 2SLS against
linearmodels, Hawkes log-likelihoods against tick, and what is refused or fails (and how)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from caramba import compute
from caramba.errors import CarambaError, UnsupportedOperation

from .onnx_helpers import call_graph as graph
from .onnx_helpers import run


@pytest.mark.parametrize("n", [7, 12, 30])
def test_dft_twiddles_are_correctly_rounded(n):
    mpmath = pytest.importorskip("mpmath")
    from caramba.onnx.export_research import dft_matrices

    f, g = dft_matrices(n, "<f8")
    mpmath.mp.prec = 120
    for t in range(n):
        for k in range(n // 2 + 1):
            turns = mpmath.mpf(2 * ((k * t) % n)) / n  # the angle in units of pi
            assert f[t, 2 * k] == float(mpmath.cospi(turns))  # correctly rounded (exact at quarter turns)
            assert f[t, 2 * k + 1] == float(-mpmath.sinpi(turns))
    assert np.all(g[1] == 0) and (n % 2 or np.all(g[-1] == 0))  # imaginary DC / Nyquist are ignored


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("n", [1500])  # ORT's own DFT is ~100 ulps off at 1500
def test_rfft_irfft_match_numpy_at_lengths_that_are_not_covered(ox, dtype, n):
    x = np.random.default_rng(n).normal(size=(2, n)).astype(dtype)
    eps = np.finfo(dtype).eps
    z = run(ox, graph("fft.rfft", [((2, n), dtype)]), x0=x)["o0"]
    ref = np.fft.rfft(x.astype(np.float64), axis=-1)
    scale = np.abs(x.astype(np.float64)).sum(-1)[:, None]
    assert np.max(np.abs(z[..., 0] - ref.real) / scale) < 2 * eps
    assert np.max(np.abs(z[..., 1] - ref.imag) / scale) < 2 * eps
    zin = np.stack([ref.real, ref.imag], -1).astype(dtype)
    y = run(ox, graph("fft.irfft", [((2, n // 2 + 1, 2), dtype)], {"n": n}), x0=zin)["o0"]
    back = np.fft.irfft(zin[..., 0].astype(np.float64) + 1j * zin[..., 1], n=n, axis=-1)
    assert np.max(np.abs(y - back) / np.abs(zin).sum(axis=(-2, -1))[:, None]) < 2 * eps


def test_hrr_bind_unbind_round_trip(ox):
    d = 1000
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, d**-0.5, (2, d))
    g = graph("vsa.bind", [((d,), "float64"), ((d,), "float64")])
    ab = run(ox, g, x0=a, x1=b)["o0"]
    direct = np.array([sum(a[j] * b[(i - j) % d] for j in range(d)) for i in range(0, d, 97)])
    np.testing.assert_allclose(ab[::97], direct, rtol=0, atol=1e-15)
    un = run(ox, graph("vsa.bind", [((d,), "float64"), ((d,), "float64")], {"unbind": True}), x0=a, x1=ab)["o0"]
    assert un @ b / np.linalg.norm(un) / np.linalg.norm(b) > 0.6  # Plate's approximate inverse


def test_fft_longer_than_the_dft_limit_is_refused_at_lowering(ox):
    from caramba.onnx.export_research import MAX_DFT

    n = MAX_DFT + 2
    with pytest.raises(UnsupportedOperation, match=f"fft.rfft of length {n} has no exact ONNX lowering") as info:
        ox.compile(graph("fft.rfft", [((n,), "float64")]))
    assert "subject" in str(info.value) and "cpu or xla" in str(info.value)
    with pytest.raises(UnsupportedOperation, match="fft.rfft of length"):
        ox.compile(graph("vsa.bind", [((n,), "float32"), ((n,), "float32")]))


def test_float16_research_ops_are_refused(ox):
    with pytest.raises(UnsupportedOperation, match="vsa.similarity on onnx:cpu does not take float16"):
        ox.compile(graph("vsa.similarity", [((4,), "float16"), ((4,), "float16")]))


def _iv_data(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    z1, z2, u, w = rng.normal(size=(4, n))
    t = 0.8 * z1 + 0.5 * z2 + 0.3 * w + u + rng.normal(size=n)
    y = 1 + 2 * t + 0.5 * w + 1.5 * u + rng.normal(size=n)
    return np.stack([z1, z2, u, w, t, y], axis=1)


@pytest.mark.slow  # importing linearmodels takes a few seconds
def test_iv_estimate_matches_linearmodels_2sls(ox):
    iv = pytest.importorskip("linearmodels.iv")
    data = _iv_data()
    attrs = {"treatment": 4, "outcome": 5, "instruments": [0, 1], "covariates": [3]}
    for dtype, tol in (("float64", 1e-10), ("float32", 1e-4)):
        got = run(ox, graph("causal.iv_estimate", [(data.shape, dtype)], attrs), x0=data.astype(dtype))["o0"]
        d = data.astype(dtype).astype(np.float64)
        exog = np.stack([np.ones(len(d)), d[:, 3]], axis=1)
        res = iv.IV2SLS(d[:, 5], exog, d[:, [4]], d[:, [0, 1]]).fit(cov_type="unadjusted")
        want = np.asarray(res.params)[[0, 2, 1]]  # linearmodels: exog (1, w) then endog t
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_backdoor_matches_statsmodels_ols(ox):
    sm = pytest.importorskip("statsmodels.api")
    data = _iv_data(seed=1)
    got = run(ox, graph("causal.backdoor_adjustment", [(data.shape, "float64")],
                        {"treatment": 4, "outcome": 5, "adjust": [3]}), x0=data)["o0"]
    want = sm.OLS(data[:, 5], sm.add_constant(data[:, [4, 3]])).fit().params[1]
    assert abs(float(got) - want) < 1e-12 * abs(want)


def test_estimator_needs_more_rows_than_regressors(ox):
    from caramba.ops.causal import EstimationError

    with pytest.raises(EstimationError, match="more rows than its 3 regressors"):
        ox.compile(graph("causal.backdoor_adjustment", [((3, 4), "float64")],
                         {"treatment": 0, "outcome": 1, "adjust": [2]}))


def _hawkes_args(b, n, m=1, k=1, dtype="float64"):
    return [((m,), dtype), ((m, m, k), dtype), ((m, m, k), dtype), ((b, n), dtype), ((b, n), "int64"), ((b,), dtype)]


def test_hawkes_log_likelihood_matches_tick(ox):
    pytest.importorskip("tick", reason="tick is not installed (pip install tick)")
    from tick.hawkes.model.build import hawkes_model

    from caramba.ops.hawkes import simulate_numpy

    mu, alpha, beta = np.array([0.5, 0.3]), np.array([[[0.3], [0.1]], [[0.2], [0.4]]]), np.full((2, 2, 1), 1.5)
    times, marks = simulate_numpy(mu, alpha, beta, 300, seed=5)
    end = times[-1] + 0.5
    ll = run(ox, graph("hawkes.log_likelihood", _hawkes_args(1, 300, 2)), x0=mu, x1=alpha, x2=beta,
             x3=times[None], x4=marks[None], x5=np.array([end]))["o0"]
    model = hawkes_model.ModelHawkesExpKernLogLik(1.5, 1)
    model.set_data([[np.ascontiguousarray(times[marks == i]) for i in range(2)]], np.array([end]))
    # tick's loss is minus the log-likelihood per event, up to the constant 2 T of its
    # compensator convention for two dimensions (as in tests/unit/ops/test_hawkes.py)
    want = -model.loss(np.concatenate([mu, alpha.reshape(-1)])) * model.get_n_total_jumps() - 2 * end
    assert abs(float(ll[0]) - want) <= 1e-10 * abs(want)


def test_hawkes_marks_out_of_range_fail_at_run_time_naming_the_node(ox):
    g = graph("hawkes.log_likelihood", _hawkes_args(1, 3, 2, 1))
    args = dict(x0=np.ones(2), x1=np.full((2, 2, 1), 0.2), x2=np.ones((2, 2, 1)), x3=np.array([[0.5, 1.0, 2.0]]),
                x5=np.array([3.0]))
    assert np.isfinite(run(ox, g, x4=np.array([[0, 1, 1]]), **args)["o0"]).all()
    for bad in ([[0, 2, 1]], [[0, -1, 1]]):  # a negative mark must not wrap around
        with pytest.raises(CarambaError) as info:
            run(ox, g, x4=np.array(bad), **args)
        assert "subject" in str(info.value)


def test_hawkes_without_events_is_minus_t_sum_mu(ox):
    g = graph("hawkes.log_likelihood", _hawkes_args(2, 0, 2, 1))
    out = run(ox, g, x0=np.array([0.5, 0.25]), x1=np.full((2, 2, 1), 0.2), x2=np.ones((2, 2, 1)),
              x3=np.zeros((2, 0)), x4=np.zeros((2, 0), np.int64), x5=np.array([2.0, 4.0]))["o0"]
    assert out.tolist() == [-1.5, -3.0]


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-310, 1e300])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_vsa_ops_agree_with_cpu_on_random_shapes_and_special_values(ox, dtype):
    """Differential fuzz: random broadcast shapes, values drawn from IEEE specials and normals;
    onnx and cpu must agree on where NaN/inf appear and (elsewhere) to a few ulps."""
    cpu = compute.new("cpu")
    rng = np.random.default_rng(7)
    eps = np.finfo(dtype).eps
    for trial in range(12):
        d = int(rng.integers(1, 9))
        la = tuple(int(v) for v in rng.integers(1, 4, size=int(rng.integers(0, 3))))
        lb = tuple(1 if rng.random() < 0.3 else v for v in la)  # broadcast against a

        def draw(shape, special=bool(trial % 2)):
            x = rng.normal(size=shape)
            if special:  # half the trials sprinkle special values
                mask = rng.random(shape) < 0.3
                x[mask] = rng.choice(SPECIAL, size=int(mask.sum()))
            return x.astype(dtype)

        a, b = draw(la + (d,)), draw(lb + (d,))
        cases = [("vsa.similarity", [a, b], {}), ("vsa.bind", [a, b], {"model": "map"}),
                 ("vsa.permute", [a], {"shift": int(rng.integers(-9, 9))})]
        if la:
            cases.append(("vsa.bundle", [a], {"model": "map", "axis": 0}))
            cases.append(("vsa.bundle", [a], {"axis": 0}))
        if trial % 2 == 0:  # finite values only: the transforms spread a NaN over a whole vector
            cases += [("vsa.bind", [a, b], {}), ("vsa.bind", [a, b], {"unbind": True}), ("fft.rfft", [a], {})]
        for op, args, attrs in cases:
            g = graph(op, [(x.shape, dtype) for x in args], attrs)
            feed = {f"x{i}": x for i, x in enumerate(args)}
            want = run(cpu, g, **feed)["o0"].astype(np.float64)
            got = run(ox, g, **feed)["o0"].astype(np.float64)
            assert got.shape == want.shape, (op, attrs)
            assert (np.isnan(got) == np.isnan(want)).all(), (op, attrs, args, got, want)
            fin = np.isfinite(want)
            assert (got[~fin & ~np.isnan(want)] == want[~fin & ~np.isnan(want)]).all(), (op, attrs)
            scale = max(1.0, float(np.max(np.abs(np.concatenate([x[np.isfinite(x)].ravel() for x in args] + [[0]])))))
            assert np.all(np.abs(got[fin] - want[fin]) <= 64 * eps * scale * d), (op, attrs, got, want)
    cpu.close()
