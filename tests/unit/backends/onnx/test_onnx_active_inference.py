"""The onnx lowerings of active_inference.* and markov_blanket.mutual_information
(caramba.onnx.export_active_inference): every op, float64 and float32, with no, one and two
leading batch axes, equal to the cpu backend on random inputs (the values themselves are checked
against pymdp / closed forms in tests/compliance/specs and tests/unit/ops); bad policies fail at
run time; float16 and the VJP ops are refused at compile time."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

import caramba
from caramba.errors import CarambaError, UnsupportedOperation

from .onnx_helpers import run

NO, S, U, P, T = 3, 4, 2, 5, 3
LEADS = ((), (6,), (2, 3))
DTYPES = ("float64", "float32")


def graph(op, inputs, attrs):
    with caramba.Graph(op.replace(".", "_")) as g:
        ins = [g.input(k, v.shape, str(v.dtype)) for k, v in inputs.items()]
        res = g.call(op, ins, attrs, id="subject")
        for i, v in enumerate(res if isinstance(res, tuple) else (res,)):
            g.output(f"o{i}", v)
    return g


def compare(backends, op, inputs, attrs=None, tol=64):
    ox, cpu = backends
    g = graph(op, inputs, attrs or {})
    got, want = run(ox, g, inputs)["o0"], run(cpu, g, inputs)["o0"]
    dtype = next(v.dtype for v in inputs.values() if v.dtype.kind == "f")
    assert got.dtype == want.dtype == dtype and got.shape == want.shape
    assert np.all(np.isfinite(want))
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * np.finfo(dtype).eps * scale, err_msg=f"{op} {attrs}")


def dist(rng, shape, dtype, zeros=False):
    """Random distributions over the last axis (some exact zeros when asked)."""
    x = rng.uniform(0, 1, shape)
    if zeros:
        x = np.where(rng.uniform(0, 1, shape) < 0.25, 0.0, x)
        x[..., 0] += 0.1
    return (x / x.sum(axis=-1, keepdims=True)).astype(dtype)


def model(rng, dtype):
    a = dist(rng, (S, NO), dtype, zeros=True).T.copy()  # columns sum to 1, some zeros
    b = np.moveaxis(dist(rng, (S, U, S), dtype, zeros=True), 2, 0).copy()  # [S', S, U]
    return a, b


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=str)
def test_belief_update_and_free_energy_match_cpu(backends, lead, dtype):
    rng = np.random.default_rng(len(lead))
    a, _ = model(rng, dtype)
    obs, prior = dist(rng, lead + (NO,), dtype), dist(rng, lead + (S,), dtype, zeros=True)
    compare(backends, "active_inference.belief_update", {"a": a, "obs": obs, "prior": prior})
    q = dist(rng, lead + (S,), dtype, zeros=True)
    compare(backends, "active_inference.free_energy", {"q": q, "a": a, "obs": obs, "prior": prior})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=str)
def test_expected_free_energy_matches_cpu(backends, lead, dtype):
    rng = np.random.default_rng(10 + len(lead))
    a, b = model(rng, dtype)
    c = rng.normal(0, 2, NO).astype(dtype)
    q = dist(rng, lead + (S,), dtype)
    pol = rng.integers(0, U, (P, T)).astype(np.int64)
    compare(backends, "active_inference.expected_free_energy", {"q": q, "a": a, "b": b, "c": c, "pol": pol})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=str)
def test_precision_weight_matches_cpu(backends, lead, dtype):
    rng = np.random.default_rng(20 + len(lead))
    g = rng.normal(0, 2, lead + (P,)).astype(dtype)
    gamma = np.asarray(rng.uniform(0.5, 16), dtype)
    compare(backends, "active_inference.precision_weight", {"g": g, "gamma": gamma})
    e = dist(rng, (P,), dtype, zeros=True)
    compare(backends, "active_inference.precision_weight", {"g": g, "gamma": gamma, "e": e})


def spd(rng, lead, n, dtype):
    m = rng.normal(0, 1, lead + (n, n + 2))
    return (m @ np.swapaxes(m, -1, -2) / (n + 2)).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=str)
@pytest.mark.parametrize("sets", [((0,), (1,)), ((2,), (0, 4)), ((2,), (0, 1, 3, 4)), ((4, 1), (3, 0))], ids=str)
def test_gaussian_mutual_information_matches_cpu(backends, lead, dtype, sets):
    rng = np.random.default_rng(30 + len(lead))
    cov = spd(rng, lead, 5, dtype)
    a, b = sets
    compare(backends, "markov_blanket.mutual_information", {"cov": cov},
            {"kind": "gaussian", "a": list(a), "b": list(b)}, tol=256)


def test_gaussian_mutual_information_is_nan_where_not_a_covariance(backends):
    ox, _ = backends
    cov = np.diag([1.0, -1.0, 2.0])  # det of the {0, 1} block < 0; a 0 determinant too
    sing = np.zeros((3, 3))
    sing[2, 2] = 1.0
    x = np.stack([cov, sing])
    g = graph("markov_blanket.mutual_information", {"cov": x}, {"kind": "gaussian", "a": [0], "b": [1]})
    got = run(ox, g, {"cov": x})["o0"]
    assert got.shape == (2,) and np.isnan(got).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", LEADS, ids=str)
def test_discrete_mutual_information_matches_cpu(backends, lead, dtype):
    rng = np.random.default_rng(40 + len(lead))
    p = rng.uniform(0, 3, lead + (3, 4))
    p = np.where(rng.uniform(0, 1, p.shape) < 0.2, 0.0, p).astype(dtype)
    p[..., 0, 0] += 1
    compare(backends, "markov_blanket.mutual_information", {"p": p}, {"kind": "discrete"})


def test_actions_outside_the_range_fail_at_run_time(backends):
    ox, _ = backends
    rng = np.random.default_rng(0)
    a, b = model(rng, "float64")
    for bad in (U, -1):
        inputs = {"q": dist(rng, (S,), "float64"), "a": a, "b": b, "c": np.zeros(NO), "pol": np.full((P, T), bad, np.int64)}
        with pytest.raises(CarambaError):
            run(ox, graph("active_inference.expected_free_energy", inputs, {}), inputs)


def test_float16_and_the_vjp_are_refused_at_compile_time(backends):
    ox, _ = backends
    x = np.ones((3, 3), np.float16)
    with pytest.raises(UnsupportedOperation, match="float16"):
        ox.compile(graph("markov_blanket.mutual_information", {"cov": x}, {"kind": "gaussian", "a": [0], "b": [1]}))
    g = np.ones(P)
    inputs = {"ct": g, "g": g, "gamma": np.asarray(1.0)}
    with pytest.raises(UnsupportedOperation, match="active_inference.vjp"):
        ox.compile(graph("active_inference.vjp", inputs, {"of": "precision_weight"}))
