"""Scheduler tables and steps against the papers' formulas, written out here independently.

diffusers' DDPMScheduler is the reference implementation; when it is installed the tables and
one step are also compared with it (it is not a test dependency, so usually they are not).
"""

from math import cos, pi

import numpy as np
import pytest

from caramba import compute
from caramba.diffusion.schedule import DDPM, Flow, GraphEmit, ddpm_betas, scheduler, time_features, time_features_host
from caramba.errors import ConfigError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Graph


def run(graph: Graph, **feeds):
    r = compute.new("cpu")
    try:
        return {k: v.download() for k, v in r.compile(graph).run({k: r.upload(v) for k, v in feeds.items()}).items()}
    finally:
        r.close()


# ---- tables -------------------------------------------------------------------------------------


def test_linear_betas_are_ho_et_al_scaled_to_the_step_count():
    b = ddpm_betas(1000, "linear")
    assert b.dtype == np.float64 and b.shape == (1000,)
    assert b[0] == pytest.approx(1e-4) and b[-1] == pytest.approx(0.02)  # Ho et al. 2020, T = 1000
    np.testing.assert_allclose(np.diff(b), (0.02 - 1e-4) / 999)
    b100 = ddpm_betas(100, "linear")  # 1000 / T scaling (Nichol & Dhariwal 2021)
    assert b100[0] == pytest.approx(1e-3) and b100[-1] == pytest.approx(0.2)
    np.testing.assert_allclose(ddpm_betas(10, "linear", 0.01, 0.3), [0.01 + i * 0.29 / 9 for i in range(10)])


def test_cosine_betas_follow_nichol_and_dhariwal():
    T, s = 50, 0.008

    def f(t):
        return cos((t / T + s) / (1 + s) * pi / 2) ** 2

    want = [min(1 - f(t + 1) / f(t), 0.999) for t in range(T)]
    np.testing.assert_allclose(ddpm_betas(T, "cosine"), want, rtol=1e-12)
    ab = DDPM.make(T, "cosine").alphas_cumprod
    # ab_t = f(t+1)/f(0) exactly, up to the last step, whose beta is clipped to 0.999
    np.testing.assert_allclose(ab[:-1], [f(t + 1) / f(0) for t in range(T - 1)], rtol=1e-9)
    assert ddpm_betas(T, "cosine")[-1] == 0.999


def test_alphas_cumprod_is_the_product_of_one_minus_beta():
    d = DDPM.make(20, "linear")
    want = [np.prod([1 - b for b in d.betas[: t + 1]]) for t in range(20)]
    np.testing.assert_allclose(d.alphas_cumprod, want, rtol=1e-13)
    assert d.alphas_cumprod[-1] < 0.01  # noised to (almost) pure noise at T


def test_timesteps_leading_spacing():
    d = DDPM.make(100)
    np.testing.assert_array_equal(d.timesteps(), np.arange(100)[::-1])
    np.testing.assert_array_equal(d.timesteps(10), np.arange(0, 100, 10)[::-1])
    np.testing.assert_array_equal(d.timesteps(3), [66, 33, 0])
    for bad in (0, 101):
        with pytest.raises(ConfigError, match="1..100"):
            d.timesteps(bad)


def test_bad_tables_are_refused():
    with pytest.raises(ConfigError, match="unknown beta schedule 'quadratic'"):
        ddpm_betas(10, "quadratic")
    with pytest.raises(ConfigError, match="beta_start <= beta_end < 1"):
        ddpm_betas(10, "linear", 0.1, 0.05)
    assert ddpm_betas(10, "linear")[-1] == 0.999  # the default 0.02 * 1000 / 10 is capped
    with pytest.raises(ConfigError, match="steps must be in"):
        ddpm_betas(0)
    with pytest.raises(ConfigError, match="steps must be in"):
        Flow(0)
    with pytest.raises(ConfigError, match="unknown scheduler 'ddim'"):
        scheduler({"scheduler": "ddim", "steps": 10})
    with pytest.raises(ConfigError, match="even number"):
        time_features(GraphEmit(Graph(), "t"), Graph().input("s", (2,)), 7, DType.float64)


# ---- one step on the cpu backend, against the formulas -----------------------------------------


def _step_graph(sched, plan, n: int, d: int, with_z: bool) -> Graph:
    g = Graph("step")
    x, pred = g.input("x", (n, d)), g.input("pred", (n, d))
    k = g.input("k", (), DType.int64)
    z = g.input("z", (n, d)) if with_z else None
    g.output("x", sched.update(GraphEmit(g, "s"), plan, x, pred, k, z))
    return g


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_ddpm_step_is_ho_et_al_eq_11_with_the_posterior_variance(schedule):
    # Ho et al. 2020, Algorithm 2: x_{t-1} = 1/sqrt(a_t) (x_t - b_t / sqrt(1 - ab_t) eps) + sigma_t z,
    # sigma_t^2 = (1 - ab_{t-1}) / (1 - ab_t) b_t (the posterior variance); no clipping of x0.
    T = 30
    sched = DDPM(ddpm_betas(T, schedule), clip_sample=False)
    plan = sched.plan()
    rng = np.random.default_rng(0)
    x, eps, z = (rng.standard_normal((3, 5)) for _ in range(3))
    g = _step_graph(sched, plan, 3, 5, True)
    betas = ddpm_betas(T, schedule)
    alphas = 1 - betas
    abar = np.cumprod(alphas)
    for k, t in enumerate(range(T - 1, -1, -1)):
        got = run(g, x=x, pred=eps, k=np.array(k, np.int64), z=z)["x"]
        ab_prev = abar[t - 1] if t > 0 else 1.0
        sigma = np.sqrt((1 - ab_prev) / (1 - abar[t]) * betas[t]) if t > 0 else 0.0
        want = (x - betas[t] / np.sqrt(1 - abar[t]) * eps) / np.sqrt(alphas[t]) + sigma * z
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"t={t}")
        if k == 3:
            break
    got = run(g, x=x, pred=eps, k=np.array(T - 1, np.int64), z=z)["x"]  # t = 0: no noise added
    want = (x - betas[0] / np.sqrt(1 - abar[0]) * eps) / np.sqrt(alphas[0])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_ddpm_step_clips_x0_and_takes_the_posterior_mean_eq_7():
    # With clip_sample (diffusers' default): x0 = clip((x - sqrt(1 - ab_t) eps) / sqrt(ab_t), -1, 1), then
    # the posterior mean of Ho et al. eq. 7; with a strided schedule the step's beta is 1 - ab_t / ab_prev.
    T, n_steps = 100, 10
    sched = DDPM.make(T, "cosine")
    plan = sched.plan(n_steps)
    np.testing.assert_allclose(plan.times, np.arange(0, 100, 10)[::-1] / 100)
    abar = np.cumprod(1 - ddpm_betas(T, "cosine"))
    rng = np.random.default_rng(1)
    x, eps, z = 3 * rng.standard_normal((4, 6)), rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
    g = _step_graph(sched, plan, 4, 6, True)
    for k, t in enumerate([90, 50, 0]):
        k = [90, 80, 70, 60, 50, 40, 30, 20, 10, 0].index(t)
        ab_t, ab_prev = abar[t], (abar[t - 10] if t >= 10 else 1.0)
        beta = 1 - ab_t / ab_prev
        x0 = np.clip((x - np.sqrt(1 - ab_t) * eps) / np.sqrt(ab_t), -1, 1)
        mean = np.sqrt(ab_prev) * beta / (1 - ab_t) * x0 + np.sqrt(1 - beta) * (1 - ab_prev) / (1 - ab_t) * x
        var = (1 - ab_prev) / (1 - ab_t) * beta if t > 0 else 0.0
        got = run(g, x=x, pred=eps, k=np.array(k, np.int64), z=z)["x"]
        np.testing.assert_allclose(got, mean + np.sqrt(var) * z, rtol=1e-10, atol=1e-12, err_msg=f"t={t}")


def test_flow_euler_step_and_plan():
    sched = Flow(4)
    plan = sched.plan()
    np.testing.assert_allclose(plan.times, [1.0, 0.75, 0.5, 0.25])
    plan8 = sched.plan(8)
    assert plan8.steps == 8 and plan8.times[0] == 1.0 and plan8.times[-1] == 0.125
    rng = np.random.default_rng(2)
    x, v = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    got = run(_step_graph(sched, plan, 2, 3, False), x=x, pred=v, k=np.array(1, np.int64))["x"]
    np.testing.assert_allclose(got, x - 0.25 * v, rtol=1e-14)
    # Euler on the exact velocity of a straight path lands on x0
    x0, e = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    g = _step_graph(sched, plan, 2, 3, False)
    cur = e
    for k in range(4):
        cur = run(g, x=cur, pred=e - x0, k=np.array(k, np.int64))["x"]
    np.testing.assert_allclose(cur, x0, atol=1e-12)


@pytest.mark.parametrize("kind", ["ddpm", "flow"])
def test_noising_formulas(kind):
    sched = scheduler({"scheduler": kind, "steps": 50, "schedule": "linear"})
    g = Graph("noise")
    x0, eps, u = g.input("x0", (5, 2, 3)), g.input("eps", (5, 2, 3)), g.input("u", (5,))
    x_t, s, target = sched.noise(GraphEmit(g, "n"), x0, eps, u)
    for name, v in (("x_t", x_t), ("s", s), ("target", target)):
        g.output(name, v)
    rng = np.random.default_rng(3)
    feeds = {"x0": rng.uniform(-1, 1, (5, 2, 3)), "eps": rng.standard_normal((5, 2, 3)),
             "u": np.array([0.0, 0.2, 0.5, 0.999, 0.9999999999])}
    out = run(g, **feeds)
    b = lambda a: a.reshape(5, 1, 1)
    if kind == "ddpm":
        t = np.array([0, 10, 25, 49, 49])
        ab = np.cumprod(1 - ddpm_betas(50, "linear"))[t]
        want = np.sqrt(b(ab)) * feeds["x0"] + np.sqrt(1 - b(ab)) * feeds["eps"]
        np.testing.assert_allclose(out["s"], t / 50)
        np.testing.assert_array_equal(out["target"], feeds["eps"])
    else:
        u = feeds["u"]
        want = (1 - b(u)) * feeds["x0"] + b(u) * feeds["eps"]
        np.testing.assert_allclose(out["s"], u)
        np.testing.assert_allclose(out["target"], feeds["eps"] - feeds["x0"])
    np.testing.assert_allclose(out["x_t"], want, rtol=1e-12)


def test_time_features_graph_matches_host():
    g = Graph("tf")
    s = g.input("s", (4,))
    g.output("f", time_features(GraphEmit(g, "t"), s, 8, DType.float64))
    sv = np.array([0.0, 0.01, 0.5, 0.99])
    got = run(g, s=sv)["f"]
    np.testing.assert_allclose(got, time_features_host(sv, 8), rtol=1e-12)
    freqs = 1000 * 10000.0 ** (-np.arange(4) / 4)
    np.testing.assert_allclose(got[:, :4], np.sin(sv[:, None] * freqs), rtol=1e-12)
    np.testing.assert_allclose(got[:, 4:], np.cos(sv[:, None] * freqs), rtol=1e-12)


# ---- diffusers, when installed ------------------------------------------------------------------


@pytest.mark.parametrize("schedule", ["linear", "squaredcos_cap_v2"])
def test_tables_and_step_match_diffusers_when_installed(schedule):
    diffusers = pytest.importorskip("diffusers")
    torch = pytest.importorskip("torch")
    T = 100
    ours = DDPM(ddpm_betas(T, "linear", 1e-3, 0.2) if schedule == "linear" else ddpm_betas(T, "cosine"))
    ref = diffusers.DDPMScheduler(num_train_timesteps=T, beta_schedule=schedule, beta_start=1e-3, beta_end=0.2)
    np.testing.assert_allclose(ours.betas, ref.betas.double().numpy(), rtol=1e-5)
    np.testing.assert_allclose(ours.alphas_cumprod, ref.alphas_cumprod.double().numpy(), rtol=1e-4)  # float32 there
    ref.set_timesteps(T)
    np.testing.assert_array_equal(ours.timesteps(), ref.timesteps.numpy())
    rng = np.random.default_rng(4)
    x, eps = rng.standard_normal((2, 4)), rng.standard_normal((2, 4))
    k, t = 60, int(ours.timesteps()[60])
    want = ref.step(torch.tensor(eps), t, torch.tensor(x)).pred_original_sample  # the deterministic part
    x0 = np.clip((x - np.sqrt(1 - ours.alphas_cumprod[t]) * eps) / np.sqrt(ours.alphas_cumprod[t]), -1, 1)
    np.testing.assert_allclose(x0, want.double().numpy(), rtol=1e-4, atol=1e-5)
    plan = ours.plan()
    g = _step_graph(ours, plan, 2, 4, False)
    ref_mean = ref.step(torch.tensor(eps), t, torch.tensor(x), generator=torch.Generator().manual_seed(0))
    got = run(g, x=x, pred=eps, k=np.array(k, np.int64))["x"]
    var = ref._get_variance(t).double().numpy()
    assert np.abs(got - ref_mean.prev_sample.double().numpy()).max() <= 6 * np.sqrt(var)  # mean vs one noisy draw
