"""hawkes.*: log-likelihood equal to tick's (its C++ models, to 1e-10), intensity and kernel
matrix against explicit per-event sums written here, analytic VJPs against finite differences
in float64, simulated counts against the exact mean of a process started empty, identical
simulations on cpu and xla, and maximum likelihood through caramba's gradient recovering the
generating parameters from 5,000 events.

tick 0.8's Python model classes fail to construct on this Python (``no settable attribute
'dtype'`` from its metaclass), so the test drives tick's compiled models
(``tick.hawkes.model.build.hawkes_model``) directly: ``set_data([events per dimension],
end_times)`` then ``loss(coeffs)``, coeffs = [mu, alpha flattened (i, j, k)]. tick's loss is
``-(l + M * T) / N`` for caramba's log-likelihood ``l`` (its log-likelihood carries the constant
``+ M * T``, independent of the parameters)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from caramba import ir, ops
from caramba.errors import CarambaError, GraphError
from caramba.ops import hawkes

from .research_helpers import WITH_ONNX as BACKENDS
from .research_helpers import check_vjp, run

MU = np.array([0.4, 0.25])
ALPHA = np.array([[[0.15, 0.1], [0.05, 0.1]], [[0.2, 0.05], [0.1, 0.15]]])  # [M, M, K=2]
DECAYS = np.array([1.0, 4.0])
BETA = np.broadcast_to(DECAYS, ALPHA.shape).copy()


def simulate(backend, mu, alpha, beta, n, seed=1, key=None):
    def build(g, v):
        args = [v["mu"], v["alpha"], v["beta"]]
        if key is not None:
            args.append(g.constant(np.asarray(key, dtype=np.int64)))
        t, m = hawkes.simulate(*args, events=n, seed=seed)
        g.output("t", t)
        g.output("m", m)

    out = run(backend, build, {"mu": mu, "alpha": alpha, "beta": beta})
    return out["t"], out["m"]


def loglik(backend, mu, alpha, beta, t, m, end):
    return run(backend, lambda g, v: g.output("l", hawkes.log_likelihood(*v.values())),
               {"mu": mu, "alpha": alpha, "beta": beta, "t": t, "m": m, "T": np.asarray(end, dtype=np.float64)})["l"]


def phi(alpha, beta, i, j, s):
    return sum(alpha[i, j, k] * beta[i, j, k] * math.exp(-beta[i, j, k] * s) for k in range(alpha.shape[2]))


def intensity_loop(mu, alpha, beta, t, m, q):
    return np.array([[mu[i] + sum(phi(alpha, beta, i, m[n], tq - t[n]) for n in range(len(t)) if t[n] < tq)
                      for i in range(len(mu))] for tq in q])


@pytest.fixture(scope="module")
def events():
    t, m = hawkes.simulate_numpy(MU, ALPHA, BETA, 400, seed=11)
    return t, m


def _tick():
    pytest.importorskip("tick", reason="tick is not installed (pip install tick)")
    from tick.hawkes.model.build import hawkes_model

    return hawkes_model


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kernel", ("exp", "sumexp"))
def test_log_likelihood_equals_ticks(backend, kernel, events):
    hm = _tick()
    t, m = events
    end = float(t[-1]) + 0.7
    per_dim = [np.ascontiguousarray(t[m == i]) for i in range(2)]
    if kernel == "exp":
        alpha, beta = ALPHA[..., :1], np.full((2, 2, 1), 2.5)
        model = hm.ModelHawkesExpKernLogLik(2.5, 1)
    else:
        alpha, beta = ALPHA, BETA
        model = hm.ModelHawkesSumExpKernLogLik(DECAYS, 1)
    model.set_data([per_dim], np.array([end]))
    for scale in (1.0, 0.5, 1.7):  # away from the generating parameters too
        a = alpha * scale
        want = -model.loss(np.concatenate([MU * scale, a.reshape(-1)])) * model.get_n_total_jumps() - 2 * end
        got = loglik(backend, MU * scale, a, beta, t, m, end)
        assert abs(got - want) <= 1e-10 * abs(want), (got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_intensity_and_kernel_matrix_equal_explicit_sums(backend, events):
    t, m = events[0][:40], events[1][:40]
    q = np.concatenate([t[::5], t[::7] + 0.01, [0.0, t[-1] + 3.0]])  # exactly at events: left limit
    out = run(backend, lambda g, v: (
        g.output("lam", hawkes.intensity(v["mu"], v["alpha"], v["beta"], v["t"], v["m"], v["q"])),
        g.output("G", hawkes.kernel_matrix(v["alpha"], v["beta"], v["t"], v["m"]))),
        {"mu": MU, "alpha": ALPHA, "beta": BETA, "t": t, "m": m, "q": q})
    np.testing.assert_allclose(out["lam"], intensity_loop(MU, ALPHA, BETA, t, m, q), rtol=1e-13, atol=0)
    want = np.array([[phi(ALPHA, BETA, m[n], m[p], t[n] - t[p]) if t[p] < t[n] else 0.0 for p in range(40)]
                     for n in range(40)])
    np.testing.assert_allclose(out["G"], want, rtol=1e-13, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batched_sequences_are_independent(backend):
    seqs = [hawkes.simulate_numpy(MU, ALPHA, BETA, 30, seed=s) for s in range(3)]
    t, m = np.stack([s[0] for s in seqs]), np.stack([s[1] for s in seqs])
    end = t[:, -1] + 0.25
    got = loglik(backend, MU, ALPHA, BETA, t, m, end)
    for b in range(3):
        np.testing.assert_allclose(got[b], loglik(backend, MU, ALPHA, BETA, t[b], m[b], end[b]), rtol=1e-13)


GRAD_CASES = ("log_likelihood", "intensity", "kernel_matrix")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("of", GRAD_CASES)
def test_vjps_match_finite_differences(backend, of):
    t, m = hawkes.simulate_numpy(MU, ALPHA, BETA, 12, seed=4)
    t2 = np.stack([t, np.sort(t * 1.3)])
    m2 = np.stack([m, m[::-1].copy()])
    x = {"mu": MU, "alpha": ALPHA, "beta": BETA, "t": t2, "m": m2}
    if of == "log_likelihood":
        x["T"] = t2[:, -1] + 0.5
        fn, wrt = (lambda v: hawkes.log_likelihood(*v.values())), ("mu", "alpha", "beta")
    elif of == "intensity":
        x["q"] = np.stack([np.linspace(0, 6, 5), np.linspace(1, 8, 5)])
        fn, wrt = (lambda v: hawkes.intensity(*v.values())), ("mu", "alpha", "beta")
    else:
        del x["mu"]
        fn, wrt = (lambda v: hawkes.kernel_matrix(*v.values())), ("alpha", "beta")
    check_vjp(backend, fn, x, wrt, tol=1e-6)


def test_simulation_is_the_same_on_cpu_and_xla():
    t_cpu, m_cpu = simulate("cpu", MU, ALPHA, BETA, 300, seed=9, key=5)
    t_xla, m_xla = simulate("xla", MU, ALPHA, BETA, 300, seed=9, key=5)
    assert np.array_equal(m_cpu, m_xla)
    np.testing.assert_allclose(t_xla, t_cpu, rtol=1e-12)
    assert np.all(np.diff(t_cpu) > 0) and set(np.unique(m_cpu)) == {0, 1}
    other, _ = simulate("cpu", MU, ALPHA, BETA, 300, seed=9, key=6)
    assert not np.allclose(other, t_cpu)  # the key changes the stream


def test_simulated_counts_match_the_mean_within_three_standard_errors():
    # univariate exponential kernel started empty: E lambda(t) = L + (mu - L) exp(-beta (1 - a) t),
    # L = mu / (1 - a), so E N(T) = L T + (mu - L) (1 - exp(-beta (1 - a) T)) / (beta (1 - a))
    mu, a, b, horizon, reps = 0.5, 0.5, 2.0, 100.0, 60
    counts = []
    for key in range(reps):
        t, _ = simulate("cpu", np.array([mu]), np.array([[[a]]]), np.array([[[b]]]), 250, seed=2, key=key)
        assert t[-1] > horizon  # enough events simulated to cover the window
        counts.append(np.sum(t <= horizon))
    lam = mu / (1 - a)
    mean = lam * horizon + (mu - lam) * (1 - math.exp(-b * (1 - a) * horizon)) / (b * (1 - a))
    se = np.std(counts, ddof=1) / math.sqrt(reps)
    assert abs(np.mean(counts) - mean) < 3 * se, (np.mean(counts), mean, se)
    np.testing.assert_allclose(hawkes.stationary_rate(np.array([mu]), np.array([[[a]]])), [lam])


@pytest.mark.slow
def test_maximum_likelihood_by_caramba_gradients_recovers_the_parameters():
    from scipy.optimize import minimize

    from caramba import autodiff
    from caramba.compute import new
    from caramba.ir import Graph

    truth = np.array([0.5, 0.6, 1.5])  # mu, alpha, beta
    t, m = simulate("cpu", truth[:1], truth[1:2].reshape(1, 1, 1), truth[2:].reshape(1, 1, 1), 5000, seed=21)
    with Graph("mle") as g:
        p = g.input("logp", (3,))  # log-parameters: positive by construction
        e = ops.exp(p)
        mu = ops.reshape(ops.slice(e, starts=(0,), ends=(1,)), shape=(1,))
        al = ops.reshape(ops.slice(e, starts=(1,), ends=(2,)), shape=(1, 1, 1))
        be = ops.reshape(ops.slice(e, starts=(2,), ends=(3,)), shape=(1, 1, 1))
        nll = -hawkes.log_likelihood(mu, al, be, g.constant(t), g.constant(m), g.constant(np.asarray(t[-1])))
        g.output("nll", nll)
        g.output("grad", autodiff.grad(nll, p))
    runner = new("cpu")
    exe = runner.compile(g)

    def f(x):
        out = exe.run({"logp": runner.upload(x)})
        return float(out["nll"].download()) / len(t), out["grad"].download() / len(t)

    res = minimize(f, np.log([0.3, 0.3, 1.0]), jac=True, method="L-BFGS-B", options={"ftol": 1e-13, "gtol": 1e-9})
    est = np.exp(res.x)
    assert np.all(np.abs(est - truth) <= 0.1 * truth), (est, truth)


def test_type_rules_and_bad_marks():
    with ir.Graph() as g:
        mu, al = g.input("mu", (2,)), g.input("al", (2, 2, 1))
        t, m = g.input("t", (5,)), g.input("m", (5,), dtype="int64")
        with pytest.raises(GraphError, match=r"alpha must be \[M, M, K\]"):
            hawkes.kernel_matrix(g.input("a3", (2, 3, 1)), g.input("b3", (2, 3, 1)), t, m)
        with pytest.raises(GraphError, match="beta must be"):
            hawkes.kernel_matrix(al, g.input("b1", (2, 2, 2)), t, m)
        with pytest.raises(GraphError, match="marks must be int64"):
            hawkes.log_likelihood(mu, al, al, t, t, g.input("T", ()))
        with pytest.raises(GraphError, match="mu must be"):
            hawkes.log_likelihood(g.input("mu3", (3,)), al, al, t, m, g.input("T2", ()))
        with pytest.raises(GraphError, match="T .* must be"):
            hawkes.log_likelihood(mu, al, al, t, m, g.input("T3", (1,)))
        with pytest.raises(GraphError, match="events must be >= 0"):
            hawkes.simulate(mu, al, al, events=-1)
    for backend in BACKENDS:
        with pytest.raises(CarambaError, match=r"marks|outside"):
            loglik(backend, MU, ALPHA, BETA, np.array([0.1, 0.2]), np.array([0, 2]), 1.0)
        with pytest.raises(CarambaError, match="sorted"):
            loglik(backend, MU, ALPHA, BETA, np.array([0.3, 0.2]), np.array([0, 1]), 1.0)


@pytest.mark.slow
def test_fit_example_recovers_the_generating_parameters(tmp_path):
    from pathlib import Path

    from caramba.manifest.experiment import run_experiment
    from caramba.store import RunStore

    example = Path(__file__).resolve().parents[3] / "examples" / "hawkes_fit.yml"
    res = run_experiment(example, store=RunStore(tmp_path))
    assert res.ok, [r.error for r in res.runs]
    s = res.runs[0].summary
    for name, truth in (("mu", 0.5), ("alpha", 0.6), ("beta", 1.5)):  # the dataset's generating values
        assert abs(s[f"test.{name}"] - truth) <= 0.1 * truth, s


BAD_DATA = {
    "explosive": ("alpha: [[[1.2]]]", "explosive"),
    "negative alpha": ("alpha: [[[-0.1]]]", "alpha must be >= 0"),
    "zero beta": ("beta: [[[0.0]]]", "mu and beta must be > 0"),
    "ragged": ("alpha: [[[0.1], [0.2]]]", r"alpha must be \[M\]\[M\]\[K\]"),
    "too many events": ("n: 1000", "over the limit"),
    "not numbers": ("mu: [abc]", "mu"),
    "infinite": ("beta: [[[.inf]]]", "finite"),
}


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_bad_hawkes_datasets_are_located_manifest_errors(tmp_path, case):
    from pathlib import Path

    from caramba.manifest.compile import check
    from caramba.manifest.errors import ManifestError

    text = (Path(__file__).resolve().parents[3] / "examples" / "hawkes_fit.yml").read_text()
    line, match = BAD_DATA[case]
    key = line.split(":")[0]
    lines = [f"    {line}" if ln.startswith(f"    {key}:") else ln for ln in text.splitlines()]
    assert any(ln == f"    {line}" for ln in lines)
    path = tmp_path / "m.yml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ManifestError, match=match) as info:
        check(path)
    assert info.value.line is not None or info.value.path
