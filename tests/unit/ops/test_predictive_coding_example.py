"""examples/predictive_coding_digits.yml: the trainer's step is predictive coding's
inference-then-learning. The example relaxes the hidden layer for 20 inference steps, then
descends the energy 2F = |eps1|^2 + |eps2|^2 at the relaxed state; at equilibrium dF/dh = 0,
so that gradient (caramba's autodiff through the whole graph) equals the local Hebbian updates
r^T (f' * eps) computed here in NumPy from an independent relaxation (cosine >= 0.99). A slow
test trains it for its 400 steps and asks >= 90% test accuracy (measured 0.928)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from .research_helpers import runner

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "predictive_coding_digits.yml"
B = 16


def _lowered():
    from caramba.manifest.loader import load
    from caramba.manifest.lower import lower_topology
    from caramba.manifest.schema import validate

    doc = load(EXAMPLE)
    return lower_topology(validate(doc).topology, doc, dims={"batch": B}, name="t", training=True)


def test_the_trainers_gradient_is_the_hebbian_update_at_equilibrium():
    from caramba import autodiff

    low = _lowered()
    rng = np.random.default_rng(0)
    params = {}
    for name, spec in low.params.items():
        params[name] = rng.normal(size=spec.shape) * (0.2 if len(spec.shape) == 2 else 0.05)
    names = sorted(params)
    g = autodiff.grad_graph(low.graph, "energy", names)
    r = runner("cpu")
    for n, v in params.items():
        r.state[n] = r.upload(v)
    x = rng.random((B, 64))
    label = rng.integers(0, 10, B).astype(np.int64)
    out = {k: v.download() for k, v in r.compile(g).run({"x": r.upload(x), "label": r.upload(label)}).items()}
    by_shape = {}
    for n in names:
        by_shape.setdefault(params[n].shape, []).append(n)
    w0 = next(params[n] for n in by_shape[(64, 64)])
    w1 = next(params[n] for n in by_shape[(64, 10)])
    b0 = next(params[n] for n in by_shape[(64,)])
    b1 = next(params[n] for n in by_shape[(10,)])
    # NumPy: relax h with x and the one-hot target clamped (Pi = 1), from the feedforward value
    t = np.eye(10)[label]
    a0 = x @ w0 + b0
    mu1 = np.tanh(a0)
    h = mu1.copy()
    for _ in range(20):
        e1, e2 = h - mu1, t - (h @ w1 + b1)
        h = h + 0.2 * (e2 @ w1.T - e1)
    e1, e2 = h - mu1, t - (h @ w1 + b1)
    hebb = {(64, 64): x.T @ ((1 - mu1**2) * e1), (64, 10): h.T @ e2,
            (64,): ((1 - mu1**2) * e1).sum(0), (10,): e2.sum(0)}
    np.testing.assert_allclose(out["energy"], np.mean(np.sum(e1**2, 1) + np.sum(e2**2, 1)), rtol=1e-9)
    for shape, want in hebb.items():
        got = -out["grad." + by_shape[shape][0]] * B / 2  # d(2F)/dW = -(2 / B) x Hebbian update
        cos = np.sum(got * want) / np.linalg.norm(got) / np.linalg.norm(want)
        assert cos >= 0.99, (shape, cos)
        np.testing.assert_allclose(np.linalg.norm(got), np.linalg.norm(want), rtol=0.1)


@pytest.mark.slow
def test_the_example_learns_digits(tmp_path):
    from caramba.manifest.experiment import run_experiment
    from caramba.store import RunStore

    res = run_experiment(EXAMPLE, [], store=RunStore(tmp_path))
    assert res.ok, [r.error for r in res.runs]
    assert res.runs[0].summary["test.accuracy"] >= 0.90, res.runs[0].summary
