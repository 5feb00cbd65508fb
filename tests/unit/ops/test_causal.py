"""causal.*: every estimator against an independent library on simulated linear-Gaussian data
(2SLS against ``linearmodels.iv.IV2SLS``, back-door and CATE regressions against ``statsmodels``
OLS, the DAG log-likelihood against statsmodels' per-node OLS log-likelihoods and
``scipy.stats.norm``), the interventional distribution and counterfactuals against a direct
NumPy simulation of the SCM and closed forms written here by topological recursion (no matrix
inverse), Pearl's textbook counterfactual, analytic VJPs against finite differences in float64,
and the recovered effects against the generating ones."""

from __future__ import annotations

import numpy as np
import pytest

from caramba import ir
from caramba.errors import CarambaError, GraphError
from caramba.ops import causal

from .research_helpers import WITH_ONNX as BACKENDS
from .research_helpers import check_vjp, run

sm = pytest.importorskip("statsmodels.api")
IV2SLS = pytest.importorskip("linearmodels.iv").IV2SLS
norm = pytest.importorskip("scipy.stats").norm


def estimate(backend, fn, data, **attrs):
    return run(backend, lambda g, v: g.output("y", fn(v["data"], **attrs)), {"data": data})["y"]


def iv_data(n, seed=0):
    """Z1, Z2 instruments, W exogenous, U unobserved confounder; true effect of T on Y is 2."""
    rng = np.random.default_rng(seed)
    z1, z2, w, u = rng.normal(size=(4, n))
    t = 0.8 * z1 + 0.5 * z2 + 0.3 * w + u + rng.normal(size=n)
    y = 1.0 + 2.0 * t + 0.5 * w + 1.5 * u + rng.normal(size=n)
    return np.stack([z1, z2, w, t, y], axis=1)  # columns 0..4


@pytest.mark.parametrize("backend", BACKENDS)
def test_iv_estimate_equals_linearmodels_iv2sls(backend):
    data = iv_data(2000)
    got = estimate(backend, causal.iv_estimate, data, treatment=3, outcome=4, instruments=[0, 1], covariates=[2])
    ref = IV2SLS(data[:, 4], sm.add_constant(data[:, 2]), data[:, 3], data[:, :2]).fit(cov_type="unadjusted").params
    want = np.array([ref.iloc[0], ref.iloc[2], ref.iloc[1]])  # linearmodels: const, exog, endog
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)
    # just identified, no covariates: the Wald/IV ratio cov(z, y) / cov(z, t)
    got1 = estimate(backend, causal.iv_estimate, data, treatment=3, outcome=4, instruments=[0])
    c = np.cov(data[:, 0], data[:, 4])[0, 1] / np.cov(data[:, 0], data[:, 3])[0, 1]
    np.testing.assert_allclose(got1[1], c, rtol=1e-10)


def test_iv_recovers_the_effect_that_ols_misses():
    data = iv_data(20000, seed=1)
    iv = estimate("cpu", causal.iv_estimate, data, treatment=3, outcome=4, instruments=[0, 1], covariates=[2])[1]
    naive = estimate("cpu", causal.backdoor_adjustment, data, treatment=3, outcome=4, adjust=[2])
    assert abs(iv - 2.0) < 0.05, iv
    assert naive > 2.3, naive  # confounded by U


def backdoor_data(n, seed=0):
    """Z1, Z2 -> T, Z1, Z2 -> Y, T -> Y with effect 1.5 (back-door set {Z1, Z2})."""
    rng = np.random.default_rng(seed)
    z1, z2, e = rng.normal(size=(3, n))
    t = 0.7 * z1 - 0.4 * z2 + rng.normal(size=n)
    y = 1.5 * t + 1.2 * z1 + 0.8 * z2 + e
    return np.stack([z1, z2, t, y, rng.normal(size=n)], axis=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backdoor_equals_statsmodels_ols(backend):
    data = backdoor_data(500)
    got = estimate(backend, causal.backdoor_adjustment, data, treatment=2, outcome=3, adjust=[0, 1])
    fit = sm.OLS(data[:, 3], sm.add_constant(data[:, [2, 0, 1]])).fit()
    np.testing.assert_allclose(got, fit.params[1], rtol=0, atol=1e-10)
    big = backdoor_data(50000, seed=2)
    ate = estimate(backend, causal.backdoor_adjustment, big, treatment=2, outcome=3, adjust=[0, 1])
    se = sm.OLS(big[:, 3], sm.add_constant(big[:, [2, 0, 1]])).fit().bse[1]
    assert abs(ate - 1.5) < 4 * se, (ate, se)


@pytest.mark.parametrize("backend", BACKENDS)
def test_frontdoor_equals_the_product_of_statsmodels_coefficients_and_the_truth(backend):
    rng = np.random.default_rng(3)
    n = 100000
    u = rng.normal(size=n)  # unobserved: confounds T and Y
    t = u + rng.normal(size=n)
    m = 0.6 * t + rng.normal(size=n)
    y = 0.9 * m + 2.0 * u + rng.normal(size=n)
    data = np.stack([t, m, y], axis=1)
    got = estimate(backend, causal.frontdoor_adjustment, data, treatment=0, mediator=1, outcome=2)
    a = sm.OLS(m, sm.add_constant(t)).fit().params[1]
    b = sm.OLS(y, sm.add_constant(np.stack([m, t], axis=1))).fit().params[1]
    np.testing.assert_allclose(got, a * b, rtol=1e-10)
    assert abs(got - 0.54) < 0.02, got  # the true effect 0.6 * 0.9; the naive regression is biased
    naive = estimate(backend, causal.backdoor_adjustment, data, treatment=0, outcome=2)
    assert naive > 1.2, naive


def cate_data(n, seed=0):
    """Binary T with propensity depending on C; tau(c) = 1 + 2 c1 - c2 (documented in docs)."""
    rng = np.random.default_rng(seed)
    c1, c2 = rng.normal(size=(2, n))
    t = (rng.random(n) < 1 / (1 + np.exp(-(0.5 * c1 - 0.3 * c2)))).astype(float)
    tau = 1.0 + 2.0 * c1 - c2
    y = 0.5 + 0.8 * c1 + 0.3 * c2 + tau * t + rng.normal(size=n)
    return np.stack([c1, c2, t, y], axis=1), tau


@pytest.mark.parametrize("backend", BACKENDS)
def test_cate_equals_statsmodels_interacted_ols_and_recovers_tau(backend):
    data, _ = cate_data(400)
    got = estimate(backend, causal.cate, data, treatment=2, outcome=3, covariates=[0, 1])
    c, t = data[:, :2], data[:, 2:3]
    p = sm.OLS(data[:, 3], sm.add_constant(np.hstack([t, c, t * c]))).fit().params
    np.testing.assert_allclose(got, p[1] + c @ p[4:6], rtol=0, atol=1e-10)
    big, tau = cate_data(20000, seed=4)
    est = estimate(backend, causal.cate, big, treatment=2, outcome=3, covariates=[0, 1])
    rmse = float(np.sqrt(np.mean((est - tau) ** 2)))
    assert rmse < 0.05, rmse  # docs/research_ops.md: about 0.02 at n = 20,000


PARENTS = {0: [], 1: [0], 2: [0], 3: [1, 2], 4: [3]}


def dag_data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 5))
    for j, pa in PARENTS.items():
        x[:, j] = 0.3 * j + sum((0.8 - 0.3 * k) * x[:, i] for k, i in enumerate(pa)) + rng.normal(size=n) * (0.5 + 0.2 * j)
    return x


@pytest.mark.parametrize("backend", BACKENDS)
def test_dag_log_likelihood_equals_statsmodels_per_node_ols_and_scipy(backend):
    x = dag_data(300)
    w, b, s, total = np.zeros((5, 5)), np.zeros(5), np.zeros(5), 0.0
    for j, pa in PARENTS.items():
        exog = sm.add_constant(x[:, pa]) if pa else np.ones((len(x), 1))
        fit = sm.OLS(x[:, j], exog).fit()
        b[j] = fit.params[0]
        w[pa, j] = fit.params[1:]
        s[j] = fit.ssr / len(x)  # the MLE variance, at which statsmodels' llf is evaluated
        total += fit.llf
    ll = run(backend, lambda g, v: g.output("l", causal.dag_markov_factorization(v["w"], v["b"], v["s"], v["x"])),
             {"w": w, "b": b, "s": s, "x": x})["l"]
    assert ll.shape == (300,)
    np.testing.assert_allclose(ll.sum(), total, rtol=1e-11)
    mean = b + x @ w
    np.testing.assert_allclose(ll, norm.logpdf(x, mean, np.sqrt(s)).sum(axis=1), rtol=1e-12)


def scm(d=4, seed=0):
    rng = np.random.default_rng(seed)
    w = np.triu(rng.uniform(0.3, 1.0, (d, d)) * rng.choice([-1, 1], (d, d)), 1)
    return w, rng.normal(size=d), rng.uniform(0.3, 1.2, d)


def closed_form(w, b, s, mask, v):
    """Mean and covariance of X | do(X_S = v) by recursion in topological order (0..d-1): each
    x_j as a constant plus coefficients on the noise terms."""
    d = len(b)
    const, coef = np.zeros(d), np.zeros((d, d))
    for j in range(d):
        if mask[j]:
            const[j] = v[j]
            continue
        const[j] = b[j] + sum(w[i, j] * const[i] for i in range(j))
        coef[j] = sum(w[i, j] * coef[i] for i in range(j)) + np.eye(d)[j]
    return const, (coef * s) @ coef.T


def simulate(w, b, s, mask, v, n, rng):
    x = np.zeros((n, len(b)))
    for j in range(len(b)):
        x[:, j] = v[j] if mask[j] else b[j] + x[:, :j] @ w[:j, j] + rng.normal(size=n) * np.sqrt(s[j])
    return x


@pytest.mark.parametrize("backend", BACKENDS)
def test_do_calculus_equals_the_closed_form_and_a_simulation(backend):
    w, b, s = scm()
    for mask in ([False] * 4, [False, True, False, False], [True, False, True, False]):
        mask = np.array(mask)
        v = np.array([0.7, -1.3, 2.0, 0.4])
        out = run(backend, lambda g, x: [g.output(k, o) for k, o in zip(("m", "c"), causal.do_calculus(*x.values()))],
                  {"w": w, "b": b, "s": s, "mask": mask, "v": v})
        m_ref, c_ref = closed_form(w, b, s, mask, v)
        np.testing.assert_allclose(out["m"], m_ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out["c"], c_ref, rtol=1e-12, atol=1e-12)
        sim = simulate(w, b, s, mask, v, 200000, np.random.default_rng(5))
        se = np.sqrt(np.diag(out["c"]) / len(sim))
        assert np.all(np.abs(sim.mean(axis=0) - out["m"]) <= 4 * se + 1e-9), (sim.mean(axis=0), out["m"], se)
        np.testing.assert_allclose(np.cov(sim.T), out["c"], atol=0.05)


def test_counterfactual_reproduces_pearls_textbook_example():
    """Pearl, Glymour & Jewell 2016, "Causal Inference in Statistics: A Primer", §4.2.3: X -> H -> Y,
    X -> Y with a = 0.5, b = 0.7, c = 0.4; Joe (X, H, Y) = (0.5, 1, 1.5) had he studied H = 2:
    Y = 1.5 + 0.4 * (2 - 1) = 1.90 (and X stays 0.5)."""
    w = np.array([[0, 0.5, 0.7], [0, 0, 0.4], [0, 0, 0]])
    joe = np.array([[0.5, 1.0, 1.5]])
    for backend in BACKENDS:
        got = run(backend, lambda g, v: g.output("y", causal.counterfactual(v["w"], v["x"], v["m"], v["v"])),
                  {"w": w, "x": joe, "m": np.array([False, True, False]), "v": np.array([0.0, 2.0, 0.0])})["y"]
        np.testing.assert_allclose(got, [[0.5, 2.0, 1.9]], rtol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
def test_counterfactual_equals_the_scm_rerun_with_the_abducted_noise(backend):
    w, b, s = scm(5, seed=1)
    rng = np.random.default_rng(2)
    mask, v = np.array([False, True, False, True, False]), rng.normal(size=5)
    noise = rng.normal(size=(2, 3, 5)) * np.sqrt(s)
    x = np.zeros_like(noise)
    for j in range(5):  # the factual worlds
        x[..., j] = b[j] + x[..., :j] @ w[:j, j] + noise[..., j]
    want = np.zeros_like(x)
    for j in range(5):  # the same noise, equations of S replaced by constants
        want[..., j] = v[j] if mask[j] else b[j] + want[..., :j] @ w[:j, j] + noise[..., j]
    got = run(backend, lambda g, t: g.output("y", causal.counterfactual(t["w"], t["x"], t["m"], t["v"])),
              {"w": w, "x": x, "m": mask, "v": v})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


VJP_CASES = {
    "do_calculus-mean": (lambda v: causal.do_calculus(v["w"], v["b"], v["s"], v["m"], v["v"])[0], ("w", "b", "s", "v")),
    "do_calculus-cov": (lambda v: causal.do_calculus(v["w"], v["b"], v["s"], v["m"], v["v"])[1], ("w", "b", "s", "v")),
    "counterfactual": (lambda v: causal.counterfactual(v["w"], v["x"], v["m"], v["v"]), ("w", "x", "v")),
    "dag": (lambda v: causal.dag_markov_factorization(v["w"], v["b"], v["s"], v["x"]), ("w", "b", "s", "x")),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(VJP_CASES))
def test_scm_vjps_match_finite_differences(backend, case):
    w, b, s = scm(3, seed=3)
    fn, wrt = VJP_CASES[case]
    inputs = {"w": w, "b": b, "s": s, "m": np.array([False, True, False]), "v": np.array([0.3, -0.6, 1.1]),
              "x": np.random.default_rng(4).normal(size=(2, 3))}
    used = {"w", "m", "v", "b", "s"} if case.startswith("do") else {"w", "m", "v", "x"} if case == "counterfactual" \
        else {"w", "b", "s", "x"}
    check_vjp(backend, fn, {k: inputs[k] for k in inputs if k in used}, wrt)


ESTIMATORS = {
    "backdoor": (causal.backdoor_adjustment, {"treatment": 0, "outcome": 4, "adjust": [1, 2]}),
    "frontdoor": (causal.frontdoor_adjustment, {"treatment": 0, "mediator": 1, "outcome": 4}),
    "cate": (causal.cate, {"treatment": 0, "outcome": 4, "covariates": [1, 2]}),
    "iv": (causal.iv_estimate, {"treatment": 0, "outcome": 4, "instruments": [2, 3], "covariates": [1]}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(ESTIMATORS))
def test_estimator_vjps_match_finite_differences(backend, case):
    rng = np.random.default_rng(6)
    data = rng.normal(size=(12, 5))
    data[:, 0] += data[:, 2] + 0.5 * data[:, 3]
    data[:, 4] += data[:, 0] - data[:, 1]
    fn, attrs = ESTIMATORS[case]
    check_vjp(backend, lambda v: fn(v["data"], **attrs), {"data": data}, ("data",))


def test_float32_matches_float64_within_its_precision():
    data = iv_data(500).astype(np.float32)
    for backend in BACKENDS:
        got = estimate(backend, causal.iv_estimate, data, treatment=3, outcome=4, instruments=[0, 1])
        want = estimate("cpu", causal.iv_estimate, data.astype(np.float64), treatment=3, outcome=4, instruments=[0, 1])
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_type_rules_and_bad_columns():
    with ir.Graph() as g:
        data = g.input("data", (10, 4))
        w, vec, mask = g.input("w", (3, 3)), g.input("v", (3,)), g.input("m", (3,), dtype="bool")
        with pytest.raises(GraphError, match=r"outside \[0, 4\)"):
            causal.backdoor_adjustment(data, treatment=0, outcome=4)
        with pytest.raises(GraphError, match="must be distinct"):
            causal.cate(data, treatment=0, outcome=1, covariates=[0])
        with pytest.raises(GraphError, match="at least one instrument"):
            causal.iv_estimate(data, treatment=0, outcome=1, instruments=[])
        with pytest.raises(GraphError, match=r"data must be \[n, d\]"):
            causal.frontdoor_adjustment(g.input("d3", (2, 10, 4)), treatment=0, mediator=1, outcome=2)
        with pytest.raises(GraphError, match=r"W must be \[d, d\]"):
            causal.do_calculus(g.input("w2", (3, 2)), vec, vec, mask, vec)
        with pytest.raises(GraphError, match="mask must be bool"):
            causal.do_calculus(w, vec, vec, vec, vec)
        with pytest.raises(GraphError, match=r"x must be .*\[\.\.\., 3\]"):
            causal.counterfactual(w, g.input("x4", (2, 4)), mask, vec)
        with pytest.raises(GraphError, match=r"s must be float64 \[3\]"):
            causal.dag_markov_factorization(w, vec, g.input("s2", (2,)), g.input("x", (2, 3)))
        with pytest.raises(GraphError, match="does not accept"):
            causal.backdoor_adjustment(g.input("di", (10, 4), dtype="int64"), treatment=0, outcome=1)
    for backend in BACKENDS:  # checked when the op runs: a manifest graph is first built at batch 1
        with pytest.raises(CarambaError, match="more rows than its 6 regressors"):
            estimate(backend, causal.cate, np.ones((5, 4)), treatment=0, outcome=1, covariates=[2, 3])


BAD_DATA = {
    "cycle": ("weights: [[0, 1], [1, 0]]", "must be a DAG"),
    "self loop": ("weights: [[0.5, 1], [0, 0]]", "must be a DAG"),
    "ragged": ("weights: [[0, 1], [0]]", "square"),
    "noise length": ("noise: [1, 1, 1]", "noise must have d = 2"),
    "negative noise": ("noise: [1, -1]", ">= 0"),
    "infinite": ("weights: [[0, .inf], [0, 0]]", "finite"),
    "not numbers": ("noise: [a, b]", "noise"),
}


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_bad_causal_linear_datasets_are_located_manifest_errors(tmp_path, case):
    from caramba.manifest.compile import check
    from caramba.manifest.errors import ManifestError

    line, match = BAD_DATA[case]
    key = line.split(":")[0]
    base = {"weights": "weights: [[0, 2.0], [0, 0]]", "noise": "noise: [1, 1]"}
    base[key] = line
    text = f"""name: bad
topology:
  inputs:
    data: {{shape: [batch, 2]}}
  nodes:
    - {{id: effect, op: causal.backdoor_adjustment, in: [data], config: {{treatment: 0, outcome: 1}}}}
  outputs: {{effect: effect}}
datasets:
  scm:
    source: causal_linear
    n: 100
    {base["weights"]}
    {base["noise"]}
    feed: {{data: data}}
trainer: {{loss: effect, steps: 0}}
targets:
  - {{name: cpu, backend: cpu, runs: [{{id: a, mode: eval}}]}}
"""
    path = tmp_path / "m.yml"
    path.write_text(text)
    with pytest.raises(ManifestError, match=match) as info:
        check(path)
    assert info.value.line is not None or info.value.path


def test_causal_linear_source_samples_the_scm():
    from caramba.data.sources import load_dataset

    spec = {"source": "causal_linear", "n": 20000, "weights": [[0, 0, 0.5], [0, 0, -1.0], [0, 0, 0]],
            "noise": [1.0, 2.0, 0.5], "intercepts": [1.0, 0.0, 3.0], "seed": 3,
            "split": {"train": 1.0, "val": 0.0, "test": 0.0}}
    ds = load_dataset("scm", spec)
    x = ds.arrays("train")["data"]
    assert x.shape == (20000, 3)
    w = np.array(spec["weights"])
    noise = np.diag(np.square(spec["noise"]))
    inv = np.linalg.inv(np.eye(3) - w)
    np.testing.assert_allclose(np.cov(x.T), inv.T @ noise @ inv, atol=0.1)
    np.testing.assert_allclose(x.mean(axis=0), np.array(spec["intercepts"]) @ inv, atol=0.05)
