"""vsa.*: HRR against an explicit circular convolution/correlation (independent O(d^2) sums),
HRR binding recall at d=1024 far above chance, MAP algebra (self-inverse binding, bundling,
permutation), a MAP bundle capacity curve against its analytic prediction, cpu == xla, and
VJPs against finite differences in float64."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from caramba import ir
from caramba.errors import GraphError
from caramba.ops import vsa

from .research_helpers import WITH_ONNX as BACKENDS
from .research_helpers import check_vjp, run


def circ_conv(a, b):
    d = a.shape[-1]
    return np.stack([sum(a[..., j] * b[..., (i - j) % d] for j in range(d)) for i in range(d)], axis=-1)


def circ_corr(a, c):
    d = a.shape[-1]
    return np.stack([sum(a[..., j] * c[..., (i + j) % d] for j in range(d)) for i in range(d)], axis=-1)


def cosine(a, b):
    return np.sum(a * b, -1) / np.sqrt(np.sum(a * a, -1) * np.sum(b * b, -1))


def bipolar(rng, *shape):
    return rng.choice([-1.0, 1.0], size=shape)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("d", (1, 2, 7, 16))
def test_hrr_bind_is_circular_convolution_and_unbind_correlation(backend, d):
    rng = np.random.default_rng(d)
    a, b = rng.normal(size=(3, d)), rng.normal(size=(d,))
    out = run(backend, lambda g, v: (g.output("c", vsa.bind(v["a"], v["b"])),
                                     g.output("r", vsa.bind(v["a"], v["b"], unbind=True))), {"a": a, "b": b})
    bb = np.broadcast_to(b, a.shape)
    np.testing.assert_allclose(out["c"], circ_conv(a, bb), rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["r"], circ_corr(a, bb), rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hrr_unbinding_recovers_the_bound_item_at_d1024(backend):
    d, items = 1024, 20
    rng = np.random.default_rng(0)
    keys, vals = rng.normal(0, 1 / math.sqrt(d), (items, d)), rng.normal(0, 1 / math.sqrt(d), (items, d))
    out = run(backend, lambda g, v: (
        g.output("pair", vsa.similarity(vsa.bind(v["k"], vsa.bind(v["k"], v["v"]), unbind=True), v["v"])),
        g.output("chance", vsa.similarity(v["k"], v["v"]))), {"k": keys, "v": vals})
    chance = 3 / math.sqrt(d)  # 3 standard deviations of the similarity of random vectors
    assert np.all(np.abs(out["chance"]) < chance + 0.02)
    assert np.all(out["pair"] > 0.5), out["pair"]  # Plate: about 1/sqrt(2) for Gaussian vectors
    assert np.mean(out["pair"]) > 5 * chance and abs(np.mean(out["pair"]) - 1 / math.sqrt(2)) < 0.05
    # a record of 5 bound pairs: each value is recalled as its nearest neighbour among all values
    rec = run(backend, lambda g, v: g.output("r", vsa.bundle(vsa.bind(v["k"], v["v"]), axis=-2)),
              {"k": keys[:5], "v": vals[:5]})["r"]
    got = run(backend, lambda g, v: g.output("u", vsa.bind(v["k"], v["r"], unbind=True)), {"k": keys[:5], "r": rec})["u"]
    assert np.array_equal(np.argmax(cosine(got[:, None, :], vals[None, :, :]), axis=1), np.arange(5))


@pytest.mark.parametrize("backend", BACKENDS)
def test_map_algebra(backend):
    d = 1000
    rng = np.random.default_rng(1)
    a, b, c = bipolar(rng, d), bipolar(rng, d), bipolar(rng, d)
    out = run(backend, lambda g, v: (
        g.output("ab", vsa.bind(v["a"], v["b"], model="map")),
        g.output("rt", vsa.similarity(vsa.bind(v["a"], vsa.bind(v["a"], v["b"], model="map"), model="map"), v["b"])),
        g.output("s", vsa.bundle(v["abc"], model="map")),
        g.output("p", vsa.permute(v["a"], shift=3)),
        g.output("pp", vsa.inverse_permute(vsa.permute(v["a"], shift=3), shift=3)),
    ), {"a": a, "b": b, "abc": np.stack([a, b, c])})
    assert np.array_equal(out["ab"], a * b)
    assert out["rt"] >= 0.99 and np.array_equal(out["ab"] * a, b)  # self-inverse: exact round trip
    assert abs(cosine(out["ab"], a)) < 0.1 and abs(cosine(out["ab"], b)) < 0.1  # binding is dissimilar
    assert set(np.unique(out["s"])) <= {-1.0, 1.0}  # three items: never a tie
    for x in (a, b, c):  # a majority of 3 agrees with each member on 3/4 of the coordinates: cosine 1/2
        assert abs(cosine(out["s"], x) - 0.5) < 0.1
    assert np.array_equal(out["p"], np.roll(a, 3)) and np.array_equal(out["pp"], a)
    assert abs(cosine(out["p"], a)) < 0.1


def _predicted_accuracy(d, k, n_items):
    """Analytic recall probability of one of k bundled items (the capacity curve of MAP
    superposition, cf. Frady, Kleyko & Sommer 2018, "A theory of sequence indexing and working
    memory in recurrent neural networks", Neural Computation 30(6)): each coordinate of
    s = sign(sum of k bipolar items), k odd, agrees with a member with probability
    p = P(S >= 0), S a sum of k - 1 fair +-1 steps, independently across coordinates, so the
    member's agreement count is Binomial(d, p); a non-member's is Binomial(d, 1/2), independent
    of the others given s. Recall (strictly above every one of the n_items - k non-members):
    sum_v P(member = v) P(non-member < v)^(n_items - k), exactly."""
    from scipy import stats

    m = k - 1
    p = sum(math.comb(m, j) for j in range(m // 2, m + 1)) / 2**m
    v = np.arange(d + 1)
    return float(np.sum(stats.binom.pmf(v, d, p) * stats.binom.cdf(v - 1, d, 0.5) ** (n_items - k)))


@pytest.mark.parametrize("backend", ("cpu",))
def test_map_bundle_recall_follows_the_analytic_capacity_curve(backend):
    d, n_items, trials = 256, 64, 40
    rng = np.random.default_rng(7)
    for k in (5, 15, 31, 51):
        books = rng.choice([-1.0, 1.0], size=(trials, n_items, d))
        members = np.stack([rng.choice(n_items, size=k, replace=False) for _ in range(trials)])
        items = np.take_along_axis(books, members[:, :, None], axis=1)  # [trials, k, d]
        s = run(backend, lambda g, v: g.output("s", vsa.bundle(v["x"], model="map")), {"x": items})["s"]
        sims = run(backend, lambda g, v: g.output("c", vsa.similarity(v["s"], v["b"])),
                   {"s": s[:, None, :], "b": books})["c"]  # [trials, n_items]
        recalled = 0
        for t in range(trials):
            non = np.setdiff1d(np.arange(n_items), members[t])
            top = np.max(sims[t, non])
            recalled += np.sum(sims[t, members[t]] > top)
        acc = recalled / (trials * k)
        want = _predicted_accuracy(d, k, n_items)
        assert abs(acc - want) < 0.05, (k, acc, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_similarity_of_a_zero_vector_is_zero(backend):
    out = run(backend, lambda g, v: g.output("s", vsa.similarity(v["a"], v["b"])),
              {"a": np.zeros((2, 4)), "b": np.ones(4)})["s"]
    assert np.array_equal(out, np.zeros(2))


VJP_CASES = {
    **{f"bind-{m}-{'unbind' if u else 'bind'}": (lambda v, m=m, u=u: vsa.bind(v["a"], v["b"], model=m, unbind=u), ("a", "b"))
       for m in ("hrr", "map") for u in (False, True)},
    "similarity": (lambda v: vsa.similarity(v["a"], v["b"]), ("a", "b")),
    "permute": (lambda v: vsa.permute(v["a"], shift=2), ("a",)),
    "inverse_permute": (lambda v: vsa.inverse_permute(v["a"], shift=-3), ("a",)),
    "bundle": (lambda v: vsa.bundle(v["x"], axis=0), ("x",)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(VJP_CASES))
def test_vjps_match_finite_differences(backend, case):
    rng = np.random.default_rng(5)
    fn, wrt = VJP_CASES[case]
    x = {"x": rng.normal(size=(3, 2, 4))} if case == "bundle" else {"a": rng.normal(size=(2, 5)), "b": rng.normal(size=(5,))}
    check_vjp(backend, fn, x, wrt)


def test_type_rules():
    with ir.Graph() as g:
        a, b = g.input("a", (3, 8)), g.input("b", (7,))
        with pytest.raises(GraphError, match="one dimension d on the last axis"):
            vsa.bind(a, b)
        with pytest.raises(GraphError, match="hypervector axis"):
            vsa.bundle(a, axis=-1)
        with pytest.raises(GraphError, match="model"):
            vsa.bind(a, a, model="fhrr")
        with pytest.raises(GraphError, match="does not accept"):
            vsa.permute(g.input("i", (4,), dtype="int64"))
        with pytest.raises(GraphError, match="item axis"):
            vsa.bundle(b)


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "vsa_resonator.yml"


def _run_example(tmp_path, overrides=()):
    from caramba.manifest.experiment import run_experiment
    from caramba.store import RunStore

    res = run_experiment(EXAMPLE, list(overrides), store=RunStore(tmp_path))
    assert res.ok, [r.error for r in res.runs]
    return res.runs[0].summary


@pytest.mark.slow
def test_resonator_example_decodes_the_factors(tmp_path):
    # 200 held-out products of codebooks of 20 vectors in dimension 1,000, 8 restarts (docs/research_ops.md)
    s = _run_example(tmp_path)
    assert min(s["test.accuracy_x"], s["test.accuracy_y"], s["test.accuracy_z"]) >= 0.95, s
