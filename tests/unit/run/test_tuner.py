"""Tuner strategies (caramba.run.tuner): schema errors with lines, reproducible choices, the
active-inference bandit's math and behaviour, and choices/beliefs recorded with the runs."""

import math

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from caramba.errors import CarambaError
from caramba.manifest.loader import load_string
from caramba.manifest.schema import validate
from caramba.run import engine
from caramba.run.engine import RunResult, run_experiment
from caramba.run.tuner import MAX_BUDGET, Chooser, beliefs, pull_seed, standardize
from caramba.store import RunStore

HEAD = """\
topology:
  inputs: {x: {shape: [batch, 2]}}
  nodes:
    - {id: l, op: projection.linear, in: [x], config: {out_features: 1}}
tuner:
"""
ARMS = """\
  arms:
    - {id: a, set: {trainer.lr: 0.1}}
    - {id: b, set: {trainer.lr: 0.2}}
"""


def _error(tuner: str) -> CarambaError:
    with pytest.raises(CarambaError) as exc:
        validate(load_string(HEAD + tuner + ARMS, "m.yml"))
    return exc.value


@pytest.mark.parametrize("tuner, where, words", [
    ("  strategy: active_infernce\n", "m.yml:6:13", "did you mean 'active_inference'"),
    ("  strategy: random\n", "m.yml:6:3", "needs a budget"),
    ("  strategy: active_inference\n", "m.yml:6:3", "needs a budget"),
    ("  strategy: random\n  budget: 0\n", "m.yml:7:11", "greater than or equal to 1"),
    ("  strategy: active_inference\n  budget: 1000000000\n", "m.yml:7:11", "less than or equal to 1024"),
    ("  budget: 3\n", "m.yml:6:11", "strategy all runs every arm"),
    ("  seed: 3\n", "m.yml:6:9", "strategy all runs every arm"),
    ("  strategy: grid\n  precision: 2.0\n", "m.yml:7:14", "option of strategy active_inference, not grid"),
    ("  strategy: random\n  budget: 2\n  noise: 1.0\n", "m.yml:8:10", "not random"),
    ("  strategy: active_inference\n  budget: 2\n  precision: -1.0\n", "m.yml:8:14", "greater than 0"),
    ("  strategy: active_inference\n  budget: 2\n  precison: 1.0\n", "m.yml:8:3", "did you mean 'precision'"),
    ("  strategy: 3\n", "m.yml:6:13", "valid string"),
])
def test_tuner_schema_errors_name_the_line(tuner, where, words):
    err = _error(tuner)
    assert str(err).startswith(where) and words in str(err), str(err)


def test_tuner_schema_accepts_strategies_and_options():
    m = validate(load_string(HEAD + "  strategy: active_inference\n  budget: 5\n  seed: 7\n  precision: 2\n"
                             "  prior_std: 0.5\n  noise: 1.0\n  preference: 2.0\n" + ARMS, "m.yml"))
    t = m.tuner
    assert (t.strategy, t.budget, t.seed, t.precision, t.prior_std, t.noise, t.preference) == \
        ("active_inference", 5, 7, 2.0, 0.5, 1.0, 2.0)
    assert validate(load_string(HEAD + ARMS, "m.yml")).tuner.strategy == "all"
    assert validate(load_string(HEAD + "  strategy: grid\n" + ARMS, "m.yml")).tuner.budget is None


# ---- the chooser, on synthetic objectives -------------------------------------------------


def _play(strategy, means, budget, seed, noise=0.15, **kw):
    """Run a chooser on arms with known mean metrics (mode min) plus Gaussian noise."""
    rng = np.random.default_rng(10_000 + seed)
    ids = [f"arm{i}" for i in range(len(means))]
    c = Chooser(strategy, ids, budget, mode="min", seed=seed, **kw)
    picks, right = [], []
    best = ids[int(np.argmin(means))]
    for _ in range(budget):
        d = c.choose()
        picks.append(d.arm)
        c.observe(d.arm, float(means[d.arm] + noise * rng.standard_normal()))
        right.append(c.best() == best)
    found = budget + 1  # the run after which the recommendation is the best arm and stays so
    while found > 1 and right[found - 2]:
        found -= 1
    return picks, found, c


def test_random_strategy_is_reproducible_with_its_seed():
    a, _, _ = _play("random", [0.0, 1.0, 2.0], 30, seed=3)
    b, _, _ = _play("random", [0.0, 1.0, 2.0], 30, seed=3)
    c, _, _ = _play("random", [0.0, 1.0, 2.0], 30, seed=4)
    assert a == b and a != c and set(a) == {0, 1, 2}


def test_grid_is_round_robin():
    picks, _, _ = _play("grid", [0.0, 1.0, 2.0], 7, seed=0)
    assert picks == [0, 1, 2, 0, 1, 2, 0]


def test_active_inference_is_deterministic_given_seed_and_results():
    a, _, ca = _play("active_inference", [0.3, 0.1, 0.5, 0.2], 25, seed=11)
    b, _, cb = _play("active_inference", [0.3, 0.1, 0.5, 0.2], 25, seed=11)
    assert a == b and ca.beliefs().as_json(ca.arm_ids) == cb.beliefs().as_json(cb.arm_ids)


def test_active_inference_explores_every_arm_then_exploits_the_best():
    means = [0.9, 0.5, 0.2, 0.7]  # arm2 is best (min)
    for seed in range(5):
        picks, _, c = _play("active_inference", means, 30, seed=seed)
        assert sorted(picks[:4]) == [0, 1, 2, 3]  # each tried once first, in order
        assert picks[:4] == [0, 1, 2, 3]
        assert picks.count(2) > 15, picks
        assert c.best() == "arm2"


def test_active_inference_finds_the_best_of_8_arms_sooner_than_round_robin():
    """The issue's acceptance: 8 arms of a noisy objective (means 0..1, noise 0.15, best arm at a
    random place), 48 runs, 20 seeds; numbers in docs/manifest.md."""
    means = np.linspace(0.0, 1.0, 8)
    found = {"grid": [], "active_inference": []}
    on_best = []
    for seed in range(20):
        m = means[np.random.default_rng(seed).permutation(8)]
        for strategy in found:
            picks, n, _ = _play(strategy, m, 48, seed)
            found[strategy].append(n)
            if strategy == "active_inference":
                on_best.append(picks.count(int(np.argmin(m))) / 48)
    ai, rr = np.mean(found["active_inference"]), np.mean(found["grid"])
    assert ai < rr and ai <= 0.8 * rr, (ai, rr)
    assert np.mean(on_best) > 0.5


def test_beliefs_are_the_conjugate_gaussian_posterior():
    """Against the closed form computed independently (scipy's normal distribution for the
    posterior, by hand for the standardisation and the information gain)."""
    arms = [0, 1, 0, 2, 1, 0]
    vals = [1.0, 2.0, 1.2, 0.5, 2.4, 0.9]
    b = beliefs(3, arms, vals, "min", precision=3.0, prior_std=0.7, noise=0.4, preference=1.5)
    y = -np.array(vals)
    z = (y - y.mean()) / y.std()
    groups = [z[[i for i, a in enumerate(arms) if a == k]] for k in range(3)]
    ss = sum(((g - g.mean()) ** 2).sum() for g in groups)
    sigma2 = (0.4**2 + ss) / (1 + sum(len(g) - 1 for g in groups))
    assert b.sigma2 == pytest.approx(sigma2, rel=1e-12)
    for k, g in enumerate(groups):
        # posterior of theta given g ~ N(theta, sigma2), theta ~ N(0, tau2): product of densities
        grid = np.linspace(-6, 6, 200_001)
        logp = stats.norm.logpdf(grid, 0, 0.7) + stats.norm.logpdf(g[:, None], grid, math.sqrt(sigma2)).sum(0)
        w = np.exp(logp - logp.max())
        w /= w.sum()
        mean = (w * grid).sum()
        var = (w * (grid - mean) ** 2).sum()
        assert b.mu[k] == pytest.approx(mean, abs=1e-7) and b.var[k] == pytest.approx(var, rel=1e-5)
        # information gain = entropy of the prior predictive - entropy of the noise
        ig = stats.norm(0, math.sqrt(var + sigma2)).entropy() - stats.norm(0, math.sqrt(sigma2)).entropy()
        assert b.epistemic[k] == pytest.approx(ig, rel=1e-10)
        assert b.G[k] == pytest.approx(-1.5 * b.mu[k] - ig, rel=1e-12)
    q = np.exp(-3.0 * b.G) / np.exp(-3.0 * b.G).sum()
    assert np.allclose(b.q, q, rtol=1e-12)
    assert np.allclose(b.metric_mean(), -(y.mean() + y.std() * b.mu))


def test_a_failure_observes_one_spread_below_the_worst():
    z, m, s, _ = standardize([1.0, None, 3.0, float("nan")], "min")
    assert (m, s) == (-2.0, 1.0) and list(z) == [1.0, -2.0, -1.0, -2.0]
    z, *_ = standardize([None], "max")
    assert list(z) == [-1.0]
    c = Chooser("active_inference", ["ok", "boom"], 10)
    c.observe(0, 0.5)
    c.observe(1, None)
    assert c.choose().arm_id == "ok" and c.best() == "ok"


def test_pull_seeds_stay_in_range():
    assert pull_seed(0, 0) == 0 and pull_seed(5, 1) == 5 + 1_000_003
    assert 0 <= pull_seed(2**63 - 1, 3) < 2**63


# ---- the engine's loop ----------------------------------------------------------------------

BLOBS = """\
name: tuned
topology:
  inputs:
    x: {shape: [batch, 2]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: mlp, op: model.mlp_classifier, in: [x], config: {classes: 3, hidden: 8}}
    - {id: loss, op: loss.cross_entropy, in: [mlp, label]}
datasets:
  blobs: {source: generated, kind: blobs, n: 120, classes: 3, split: {train: 0.6, val: 0.2, test: 0.2}, feed: {label: y}}
trainer: {loss: loss, lr: 0.05, batch_size: 16, steps: 10, log_every: 5}
metrics: [loss]
targets:
  - name: cpu
    backend: cpu
    runs: [{id: s0, seed: 0}]
tuner:
  strategy: active_inference
  budget: %d
  seed: 1
  metric: val.loss
  arms:
    - {id: boom, set: {trainer.lr: 1.0e+300}}
    - {id: ok, set: {trainer.lr: 0.05}}
"""


class _Store:
    def __init__(self):
        self.config = {}

    def update_config(self, run_id, values):
        self.config.setdefault(run_id, {}).update(values)


def test_the_loop_runs_the_budget_and_repeats_with_fresh_seeds(monkeypatch):
    """The loop alone, with synthetic results (executing the run is faked)."""
    plans = engine.plan_runs(BLOBS % 12, backend="cpu")
    seen = []

    def fake(plan, store, progress=None, group="", data_roots=None, tuner=None):
        seen.append((plan.label, plan.run.seed, tuner))
        value = 0.2 + 0.01 * (plan.run.seed % 7) if plan.arm == "ok" else 1.0
        return RunResult(f"r{len(seen)}", plan.label, "finished", {"val.loss": value})

    monkeypatch.setattr(engine, "execute", fake)
    store = _Store()
    results = engine.run_tuned(plans, plans[0].prep.manifest.tuner, store)
    assert len(results) == 12 and [s[2]["step"] for s in seen] == list(range(12))
    assert [s[0] for s in seen[:3]] == ["boom/cpu/s0", "ok/cpu/s0", "ok/cpu/s0#1"]
    assert seen[2][1] == pull_seed(0, 1)
    assert sum(1 for s in seen if s[0].startswith("ok/")) >= 9
    assert store.config["r12"]["tuner_final"]["best"] == "ok"
    assert set(seen[5][2]["beliefs"]) == {"boom", "ok"}


def test_a_hostile_budget_is_bounded(monkeypatch):
    plans = engine.plan_runs(BLOBS % 3, backend="cpu")
    tuner = plans[0].prep.manifest.tuner.model_copy(update={"budget": 10**9})  # past the schema's check
    calls = []
    monkeypatch.setattr(engine, "execute", lambda plan, *a, **k: calls.append(1) or RunResult(
        str(len(calls)), plan.label, "failed", {}, "x"))
    engine.run_tuned(plans, tuner, _Store())
    assert len(calls) == MAX_BUDGET


def test_active_inference_tuner_records_choices_and_beliefs(tmp_path):
    """A real tiny experiment: an arm whose loss overflows (a failed run) and a good arm;
    budget 3: each arm once, then the good one. Choices and beliefs are in the store."""
    store = RunStore(tmp_path / "store")
    decisions = []
    res = run_experiment(BLOBS % 3, store=store, on_decision=decisions.append)
    assert [r.label for r in res.runs] == ["boom/cpu/s0", "ok/cpu/s0", "ok/cpu/s0#1"]
    assert [r.status for r in res.runs] == ["failed", "finished", "finished"]
    assert [d.arm_id for d in decisions] == ["boom", "ok", "ok"]
    recs = [store.get(r.run_id) for r in res.runs]
    assert [rec.config["tuner"]["step"] for rec in recs] == [0, 1, 2]
    assert recs[2].config["tuner"]["arm"] == "ok" and recs[2].seed == pull_seed(0, 1)
    b = recs[2].config["tuner"]["beliefs"]
    assert b["ok"]["n"] == 1 and b["boom"]["n"] == 1 and b["ok"]["q"] > b["boom"]["q"]
    assert b["ok"]["mean"] == pytest.approx(res.runs[1].summary["val.loss"])  # failures only shift the scale
    assert recs[2].config["tuner_final"]["best"] == "ok"
    assert "tuner active_inference step 3/3: arm 'ok'" in decisions[2].line()


def test_cli_prints_one_line_per_decision(tmp_path):
    from caramba.cli import app

    path = tmp_path / "m.yml"
    path.write_text(BLOBS.replace("1.0e+300", "0.001") % 2)
    out = CliRunner().invoke(app, ["research", "run", str(path), "--store", str(tmp_path / "s"), "-q"])
    assert out.exit_code == 0, out.output
    lines = [ln for ln in out.output.splitlines() if ln.startswith("tuner active_inference step")]
    assert len(lines) == 2 and "arm 'boom'" in lines[0] and "arm 'ok'" in lines[1]
    out = CliRunner().invoke(app, ["research", "inspect", "latest", "--store", str(tmp_path / "s")])
    assert out.exit_code == 0, out.output
    assert "tuner active_inference step 2/2: arm 'ok'" in out.output


@pytest.mark.parametrize("bad", [None, 3, {}, {"step": "x", "beliefs": []}, {"arm": 5, "beliefs": {"5": 1}},
                                 {"step": 0, "budget": 1, "arm": "a", "beliefs": {"a": {"n": "?"}}}])
def test_decision_text_of_a_malformed_record_never_raises(bad):
    from caramba.run.tuner import decision_text

    assert decision_text(bad).startswith("tuner")


def test_fuzzed_tuner_sections_validate_or_fail_located():
    """Seeded hostile tuner sections: each validates or is a ManifestError with a line."""
    import yaml

    from caramba.manifest.errors import ManifestError

    rng = np.random.default_rng(0)
    values = [None, True, 0, 1, -1, 3, 2**63, 10**30, 1.5, -0.0, 1e308, "x", "all", "grid", "random",
              "active_inference", "ACTIVE_INFERENCE", "", [], {}, [1], {"a": 1}]
    keys = ["strategy", "budget", "seed", "precision", "prior_std", "noise", "preference", "metric", "mode", "bogus"]
    outcomes = {"ok": 0, "error": 0}
    for _ in range(300):
        chosen = [keys[i] for i in rng.choice(len(keys), int(rng.integers(0, 6)), replace=False)]
        tuner = {k: values[int(rng.integers(len(values)))] for k in chosen}
        tuner["arms"] = [{"id": "a", "set": {"trainer.lr": 0.1}}]
        text = HEAD.replace("tuner:\n", "") + yaml.safe_dump({"tuner": tuner}, default_flow_style=False)
        try:
            m = validate(load_string(text, "m.yml"))
        except ManifestError as exc:
            assert exc.line is not None and str(exc).startswith("m.yml:"), str(exc)
            outcomes["error"] += 1
            continue
        outcomes["ok"] += 1
        t = m.tuner
        assert t.strategy in ("all", "grid", "random", "active_inference")
        assert t.budget is None or 1 <= t.budget <= MAX_BUDGET
        if t.strategy in ("random", "active_inference"):
            assert t.budget is not None
    assert outcomes["ok"] >= 10 and outcomes["error"] >= 100, outcomes
