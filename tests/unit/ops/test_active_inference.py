"""active_inference.*: posterior beliefs, variational and expected free energy and the policy
posterior against ``inferactively-pymdp`` (1.x, JAX; run here in a scoped x64 context so it
computes in float64 throughout) on its ``GridWorld`` transitions (rebuilt here; a slow test checks
them equal to pymdp's) with a noisy likelihood (so ambiguity is not zero) and on random models;
the agent block on a T-maze; analytic VJPs against finite differences in float64; bad shapes and
out-of-range actions rejected with clear errors.

pymdp's conventions that matter here: logs of A, the prior and E are ``ln max(x, finfo(float).eps)``
(caramba's ``EPS``), and its policy score is ``neg_efe = H[q_o] - E_Q H[A] + q_o . C`` summed over
the horizon, so caramba's ``G`` (risk against ``softmax(C)`` plus ambiguity) is
``-neg_efe + T logsumexp(C)``; the two are equal when C is a normalised log-distribution.
pymdp's entropies clip ``q_o`` at eps inside the log; with the models here no predicted outcome
is below 1e-10, so that clipping changes nothing at 1e-10."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy.special import logsumexp

from caramba import ops
from caramba.errors import CarambaError, GraphError
from caramba.ops import active_inference as ai

from .research_helpers import BACKENDS, check_vjp, run

TOL = 1e-10


def pymdp():
    """pymdp, imported under x64: its ``MINVAL = jnp.finfo(float).eps`` is fixed at import time
    and is float32's eps (1.2e-7, which then shows up at 1e-7 in G) when x64 is off."""
    with jax.enable_x64(True):  # no-ops for what is imported already; algos too (another test
        import pymdp.algos  # may have imported pymdp without it: "no attribute 'algos'")
        import pymdp.control
        import pymdp.maths
    import pymdp

    assert pymdp.maths.MINVAL == np.finfo(np.float64).eps, "pymdp was imported without x64 before this test"
    return pymdp


def grid_world_b(rows: int = 3, cols: int = 3, success: float = 0.8) -> np.ndarray:
    """pymdp's ``GridWorld`` transitions ``B[next, current, action]`` (UP, RIGHT, DOWN, LEFT,
    STAY; a move succeeds with ``success``, else stays; off-grid moves stay), written here:
    importing ``pymdp.envs`` costs 12 s (its T-maze module rotates images at import), so the
    slow test below checks this against pymdp's own ``GridWorld``."""
    n = rows * cols
    b = np.zeros((n, n, 5))
    for s in range(n):
        r, c = divmod(s, cols)
        for u, (dr, dc) in enumerate(((-1, 0), (0, 1), (1, 0), (0, -1))):
            r2, c2 = r + dr, c + dc
            if 0 <= r2 < rows and 0 <= c2 < cols:
                b[r2 * cols + c2, s, u] = success
                b[s, s, u] = 1 - success
            else:
                b[s, s, u] = 1.0
        b[s, s, 4] = 1.0
    return b


def pymdp_model(seed: int = 0, noise: float = 0.3):
    """The 3x3 grid world (``success_prob = 0.8``, 5 actions, uniform D) with a noisy location
    likelihood A and random preferences C."""
    b = grid_world_b()
    s = b.shape[0]
    rng = np.random.default_rng(seed)
    a = (1 - noise) * np.eye(s) + noise * rng.dirichlet(np.ones(s), size=s).T
    c = rng.normal(size=s)
    return a, b, c, np.full(s, 1.0 / s)


@pytest.mark.slow
def test_grid_world_is_pymdps():
    pymdp()
    with jax.enable_x64(True):
        from pymdp.envs.grid_world import GridWorld

        env = GridWorld(shape=(3, 3), success_prob=0.8)
        np.testing.assert_array_equal(np.asarray(env.B[0]), grid_world_b())
        np.testing.assert_array_equal(np.asarray(env.D[0]), np.full(9, 1 / 9))


def random_model(seed: int, o: int = 3, s: int = 4, u: int = 2):
    rng = np.random.default_rng(seed)
    a = rng.dirichlet(np.ones(o), size=s).T  # [O, S], columns sum to 1
    b = np.moveaxis(rng.dirichlet(np.ones(s), size=(s, u)), -1, 0)  # [S', S, U]
    return a, b, rng.normal(size=o), rng.dirichlet(np.ones(s))


def pymdp_posterior(a, obs, prior):
    algos = pymdp().algos

    with jax.enable_x64(True):
        import jax.numpy as jnp

        q = algos.run_vanilla_fpi([jnp.asarray(a)], [jnp.asarray(obs)], [jnp.asarray(prior)], num_iter=16)
        return np.asarray(q[0])


def pymdp_policies(q, a, b, c, policies, gamma, e):
    control = pymdp().control

    with jax.enable_x64(True):
        import jax.numpy as jnp

        pm = jnp.asarray(policies[:, :, None])
        q_pi, neg = control.update_posterior_policies(
            pm, [jnp.asarray(q)], [jnp.asarray(a)], [jnp.asarray(b)], [jnp.asarray(c)], jnp.asarray(e), None, None,
            [[0]], [[0]], gamma=gamma)
        return np.asarray(q_pi), np.asarray(neg)


def all_policies(u: int, horizon: int) -> np.ndarray:
    control = pymdp().control

    with jax.enable_x64(True):
        return np.asarray(control.construct_policies([u], [u], policy_len=horizon))[:, :, 0].astype(np.int64)


@pytest.mark.parametrize("backend", BACKENDS)
def test_belief_update_matches_pymdp_grid_world(backend):
    a, _, _, d = pymdp_model()
    rng = np.random.default_rng(1)
    s = a.shape[1]
    obs = np.eye(s)[rng.integers(0, s, size=5)]  # five one-hot observations
    prior = np.stack([d, *rng.dirichlet(np.ones(s), size=4)])
    got = run(backend, lambda g, v: g.output("q", ai.belief_update(v["A"], v["obs"], v["prior"])),
              {"A": a, "obs": obs, "prior": prior})["q"]
    want = np.stack([pymdp_posterior(a, obs[i], prior[i]) for i in range(5)])
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
    assert np.allclose(got.sum(-1), 1.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_free_energy_matches_pymdp_and_bounds_surprise(backend):
    """F equals pymdp's calc_vfe; at the posterior it is the surprise -ln P(o) (written here)."""
    calc_vfe = pymdp().maths.calc_vfe

    a, _, _, d = random_model(3, o=4, s=5)
    rng = np.random.default_rng(2)
    obs = np.eye(4)[[0, 2, 3]]
    prior = np.stack([d, *rng.dirichlet(np.ones(5), size=2)])
    q = rng.dirichlet(np.ones(5), size=3)
    post = (a[obs.argmax(-1)] * prior)
    post = post / post.sum(-1, keepdims=True)
    out = run(backend, lambda g, v: (g.output("f", ai.free_energy(v["q"], v["A"], v["obs"], v["prior"])),
                                     g.output("f_post", ai.free_energy(v["post"], v["A"], v["obs"], v["prior"]))),
              {"q": q, "A": a, "obs": obs, "prior": prior, "post": post})
    with jax.enable_x64(True):
        import jax.numpy as jnp

        want = [float(calc_vfe([jnp.asarray(q[i])], [jnp.asarray(prior[i])], obs=[jnp.asarray(obs[i])],
                               A=[jnp.asarray(a)])[1]) for i in range(3)]
    np.testing.assert_allclose(out["f"], want, rtol=0, atol=TOL)
    surprise = -np.log(np.einsum("bs,bs->b", a[obs.argmax(-1)], prior))
    np.testing.assert_allclose(out["f_post"], surprise, rtol=0, atol=TOL)
    assert np.all(out["f"] >= surprise - 1e-12)  # F = KL(q || posterior) - ln P(o) >= -ln P(o)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", ("grid_world", "random"))
def test_expected_free_energy_and_policy_posterior_match_pymdp(backend, model):
    if model == "grid_world":
        a, b, c, _ = pymdp_model(seed=4)
        horizon = 2
    else:
        a, b, c, _ = random_model(5)
        horizon = 3
    pol = all_policies(b.shape[2], horizon)
    rng = np.random.default_rng(6)
    q = rng.dirichlet(np.ones(a.shape[1]))
    e = rng.dirichlet(np.ones(len(pol)))
    gamma = np.asarray(2.5)
    out = run(backend, lambda g, v: (
        g.output("G", ai.expected_free_energy(v["q"], v["A"], v["B"], v["C"], v["pol"])),
        g.output("G_norm", ai.expected_free_energy(v["q"], v["A"], v["B"], v["Cn"], v["pol"])),
        g.output("qpi", ai.precision_weight(ai.expected_free_energy(v["q"], v["A"], v["B"], v["C"], v["pol"]),
                                            v["gamma"], v["E"]))),
        {"q": q, "A": a, "B": b, "C": c, "Cn": c - logsumexp(c), "pol": pol, "gamma": gamma, "E": e})
    q_pi, neg = pymdp_policies(q, a, b, c, pol, float(gamma), e)
    _, neg_n = pymdp_policies(q, a, b, c - logsumexp(c), pol, float(gamma), e)
    np.testing.assert_allclose(out["G"], -neg + horizon * logsumexp(c), rtol=0, atol=TOL)
    np.testing.assert_allclose(out["G_norm"], -neg_n, rtol=0, atol=TOL)
    np.testing.assert_allclose(out["qpi"], q_pi, rtol=0, atol=TOL)


def test_expected_free_energy_is_risk_plus_ambiguity_by_hand():
    """One policy, written as Da Costa et al. eq. (8) with explicit loops (no pymdp)."""
    a, b, c, _ = random_model(7, o=3, s=3, u=2)
    q = np.array([0.2, 0.5, 0.3])
    pol = np.array([[1, 0, 1]], dtype=np.int64)
    pc = np.exp(c) / np.exp(c).sum()
    total, qt = 0.0, q
    for u in pol[0]:
        qt = np.array([sum(b[i, j, u] * qt[j] for j in range(3)) for i in range(3)])
        qo = np.array([sum(a[o, s] * qt[s] for s in range(3)) for o in range(3)])
        total += sum(qo[o] * np.log(qo[o] / pc[o]) for o in range(3))
        total += sum(qt[s] * -sum(a[o, s] * np.log(a[o, s]) for o in range(3)) for s in range(3))
    np.testing.assert_allclose(ai.expected_free_energy_xp(q, a, b, c, pol), [total], rtol=1e-13)


def test_informative_action_is_preferred_when_ambiguous():
    """Epistemic value: with a flat preference, the policy that visits the state with an
    informative likelihood has lower G (less ambiguity) than staying in the ambiguous state."""
    a = np.array([[0.5, 1.0, 0.0], [0.5, 0.0, 1.0]])  # state 0 ambiguous; 1, 2 are cues
    b = np.zeros((3, 3, 2))
    b[:, :, 0] = np.eye(3)  # stay
    b[1, :, 1] = 0.5
    b[2, :, 1] = 0.5  # go to a cue state
    g = ai.expected_free_energy_xp(np.array([1.0, 0, 0]), a, b, np.zeros(2), np.array([[0], [1]]))
    assert g[1] < g[0]
    np.testing.assert_allclose(g, [np.log(2), 0.0], atol=1e-15)  # ambiguity ln 2 vs 0; risk 0 for both



def _vjp_inputs():
    a, b, c, d = random_model(8, o=3, s=4, u=2)
    rng = np.random.default_rng(9)
    return {
        "A": a, "B": b, "C": c, "prior": np.stack([d, rng.dirichlet(np.ones(4))]),
        "obs": rng.dirichlet(np.ones(3), size=2), "q": rng.dirichlet(np.ones(4), size=2),
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_vjps_match_finite_differences(backend):
    v0 = _vjp_inputs()
    check_vjp(backend, lambda v: ai.belief_update(v["A"], v["obs"], v["prior"]),
              {k: v0[k] for k in ("A", "obs", "prior")}, ("A", "obs", "prior"))
    check_vjp(backend, lambda v: ai.free_energy(v["q"], v["A"], v["obs"], v["prior"]),
              {k: v0[k] for k in ("q", "A", "obs", "prior")}, ("q", "A", "obs", "prior"))
    pol = np.array([[0, 1], [1, 1], [1, 0]], dtype=np.int64)
    check_vjp(backend, lambda v: ai.expected_free_energy(v["q"], v["A"], v["B"], v["C"], v["pol"]),
              {"q": v0["q"], "A": v0["A"], "B": v0["B"], "C": v0["C"], "pol": pol}, ("q", "A", "B", "C"))
    rng = np.random.default_rng(10)
    check_vjp(backend, lambda v: ai.precision_weight(v["G"], v["gamma"], v["E"]),
              {"G": rng.normal(size=(2, 3)), "gamma": np.asarray(1.7), "E": rng.dirichlet(np.ones(3))},
              ("G", "gamma", "E"))
    check_vjp(backend, lambda v: ai.precision_weight(v["G"], v["gamma"]),
              {"G": rng.normal(size=(4,)), "gamma": np.asarray(0.6)}, ("G", "gamma"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_range_actions_are_an_error(backend):
    a, b, c, d = random_model(11)
    with pytest.raises(CarambaError, match="outside"):
        run(backend, lambda g, v: g.output("G", ai.expected_free_energy(v["q"], v["A"], v["B"], v["C"], v["pol"])),
            {"q": d, "A": a, "B": b, "C": c, "pol": np.array([[0, 2]], dtype=np.int64)})


@pytest.mark.parametrize(("build", "match"), [
    (lambda g: ai.belief_update(g.input("A", (3, 4)), g.input("o", (4,)), g.input("p", (4,))), "obs must be"),
    (lambda g: ai.belief_update(g.input("A", (3,)), g.input("o", (3,)), g.input("p", (4,))), "A .*must be"),
    (lambda g: ai.belief_update(g.input("A", (3, 4)), g.input("o", (2, 3)), g.input("p", (4,))), "prior must be"),
    (lambda g: ai.free_energy(g.input("q", (3,)), g.input("A", (3, 4)), g.input("o", (3,)), g.input("p", (4,))),
     "q must be"),
    (lambda g: ai.expected_free_energy(g.input("q", (4,)), g.input("A", (3, 4)), g.input("B", (4, 4, 2)),
                                       g.input("C", (3,)), g.input("pol", (2, 3), dtype="float64")), "policies must be"),
    (lambda g: ai.expected_free_energy(g.input("q", (4,)), g.input("A", (3, 4)), g.input("B", (4, 3, 2)),
                                       g.input("C", (3,)), g.input("pol", (2, 3), dtype="int64")), "B .*must be"),
    (lambda g: ai.expected_free_energy(g.input("q", (4,)), g.input("A", (3, 4)), g.input("B", (4, 4, 2)),
                                       g.input("C", (4,)), g.input("pol", (2, 3), dtype="int64")), "C .*must be"),
    (lambda g: ai.precision_weight(g.input("G", (3,)), g.input("gamma", (1,))), "gamma .*must be a scalar"),
    (lambda g: ai.precision_weight(g.input("G", (3,)), g.input("gamma", ()), g.input("E", (2,))), "E .*must be"),
    (lambda g: ai.belief_update(g.input("A", (3, 4), dtype="float32"), g.input("o", (3,)), g.input("p", (4,))),
     "one dtype"),
])
def test_bad_shapes_are_graph_errors(build, match):
    import caramba

    with caramba.Graph("bad") as g, pytest.raises(GraphError, match=match):
        build(g)


def test_ops_are_exported():
    assert ops.active_inference.belief_update is ai.belief_update


# ---- the agent block on a T-maze ------------------------------------------------------------------
# The T-maze of pymdp's tutorial as one factor (s = 2 loc + ctx) and 7 outcomes, built by the
# script that writes the example's checkpoint (examples/checkpoints/make_tmaze_agent.py: its
# docstring spells the model out): tmaze(p_reward) -> (A [7, 8], B [8, 8, 4], C [7], D [8]).


def _load_tmaze_builder():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "checkpoints" / "make_tmaze_agent.py"
    spec = importlib.util.spec_from_file_location("make_tmaze_agent", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tmaze = _load_tmaze_builder().tmaze


OUTS = ("q", "G", "q_pi", "q_u", "action")


def agent_runner(backend: str, a, b, c, horizon: int = 2, gamma: float = 16.0):
    from caramba.manifest.loader import Document
    from caramba.manifest.lower import lower_topology
    from caramba.manifest.schema import validate

    from .research_helpers import runner

    o, s, u = a.shape[0], a.shape[1], b.shape[2]
    config = {"outcomes": o, "states": s, "actions": u, "horizon": horizon, "gamma": gamma}
    data = {"name": "agent", "topology": {
        "inputs": {"obs": {"shape": [1, o], "dtype": "float64"}, "prior": {"shape": [1, s], "dtype": "float64"}},
        "nodes": [{"id": "agent", "op": "block.active_inference.agent", "in": ["obs", "prior"], "out": list(OUTS),
                   "config": config}],
        "outputs": {k: k for k in OUTS}}}
    from pathlib import Path

    doc = Document(data, "<test>", Path("."))
    low = lower_topology(validate(doc).topology, doc, name="agent")
    r = runner(backend)
    values = {"a_logits": np.log(np.maximum(a, 1e-300)), "b_logits": np.log(np.maximum(b, 1e-300)), "c": c}
    for name in low.params:
        r.state[name] = r.upload(values[name.rsplit(".", 1)[-1]])
    exe = r.compile(low.graph)

    def step(obs, prior):
        out = exe.run({"obs": r.upload(obs[None]), "prior": r.upload(prior[None])})
        return {k: out[k].download()[0] for k in OUTS}

    return step


@pytest.mark.parametrize("backend", BACKENDS)
def test_agent_block_solves_the_tmaze(backend):
    """The agent block (perception, policy selection, action) with the T-maze as its model: at
    the start its expected free energies equal pymdp's on the same model, it visits the cue
    first (epistemic value), then the rewarded arm, in every one of 20 seeded episodes."""
    a, b, c, d = tmaze()
    step = agent_runner(backend, a, b, c)
    out = step(np.eye(7)[0], d)
    pol = all_policies(4, 2)
    q_pi, neg = pymdp_policies(out["q"], a, b, c, pol, 16.0, np.ones(len(pol)) / len(pol))
    np.testing.assert_allclose(out["G"], -neg + 2 * logsumexp(c), rtol=0, atol=1e-9)
    np.testing.assert_allclose(out["q_pi"], q_pi, rtol=0, atol=1e-9)
    solved = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        ctx, loc = int(rng.integers(0, 2)), 0
        prior, obs, actions = d, np.eye(7)[0], []
        for _ in range(3):
            out = step(obs, prior)
            act = int(out["action"])
            actions.append(act)
            loc = loc if loc in (1, 2) else act
            obs = np.eye(7)[rng.choice(7, p=a[:, 2 * loc + ctx])]
            prior = b[:, :, act] @ out["q"]
        assert actions[0] == 3, f"episode {seed}: first action {actions[0]}, not the cue"
        solved += loc == 1 + ctx
    assert solved >= 19, f"{solved} of 20 episodes reached the rewarded arm"
