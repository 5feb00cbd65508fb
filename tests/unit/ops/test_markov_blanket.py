"""markov_blanket.*: the partition against networkx (blanket by predecessors/successors, and
internal independent of external given the blanket by ``nx.is_d_separator``), Gaussian mutual
information against scipy's multivariate-normal entropies, discrete mutual information against
scikit-learn's ``mutual_info_score``, flows against NumPy; VJPs against finite differences in
float64; bad index sets and shapes rejected with clear errors."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from scipy.stats import multivariate_normal
from sklearn.metrics import mutual_info_score

import caramba
from caramba.errors import GraphError
from caramba.ops import markov_blanket as mb

from .research_helpers import BACKENDS, check_vjp, run


def random_dag(n: int, p: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    adj = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            if rng.random() < p:
                adj[order[i], order[j]] = rng.uniform(0.5, 2.0) * rng.choice([-1, 1])
    return adj


def nx_labels(adj: np.ndarray, internal: np.ndarray) -> np.ndarray:
    g = nx.DiGraph(adj != 0)
    inner = {int(i) for i in np.flatnonzero(internal)}
    parents = set().union(*(g.predecessors(i) for i in inner))
    children = set().union(*(g.successors(i) for i in inner))
    coparents = set().union(*(g.predecessors(c) for c in children)) if children else set()
    blanket = (parents | children | coparents) - inner
    out = []
    for v in range(len(adj)):
        if v in inner:
            out.append(2)
        elif v in children:
            out.append(1)
        elif v in blanket:
            out.append(0)
        else:
            out.append(3)
    return np.array(out)


@pytest.mark.parametrize("backend", BACKENDS)
def test_partition_matches_networkx_and_d_separates(backend):
    checked = 0
    for seed in range(12):
        n = 9
        adj = random_dag(n, 0.3, seed)
        rng = np.random.default_rng(100 + seed)
        internal = np.zeros(n, dtype=bool)
        internal[rng.choice(n, size=2, replace=False)] = True
        got = run(backend, lambda g, v: g.output("l", mb.partition(v["adj"], v["internal"])),
                  {"adj": adj, "internal": internal})["l"]
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, nx_labels(adj, internal))
        inner, blanket, outer = ({int(i) for i in np.flatnonzero(got == k)} for k in (2, -1, 3))
        blanket = {int(i) for i in np.flatnonzero((got == 0) | (got == 1))}
        if outer:
            assert nx.is_d_separator(nx.DiGraph(adj != 0), inner, outer, blanket), seed
            checked += 1
    assert checked >= 6


def test_partition_labels_a_chain_by_hand():
    # e -> s -> i -> a -> e2, plus a co-parent c -> a: s sensory, a active, c sensory, e and e2 external
    adj = np.zeros((6, 6))
    for i, j in ((0, 1), (1, 2), (2, 3), (3, 4), (5, 3)):
        adj[i, j] = 1.0
    adj[2, 2] = 1.0  # the diagonal (a self-loop) is ignored
    internal = np.array([False, False, True, False, False, False])
    np.testing.assert_array_equal(mb.partition_xp(adj, internal), [3, 0, 2, 1, 3, 0])


def gaussian_mi_scipy(cov, a, b):
    def h(idx):
        return multivariate_normal(mean=np.zeros(len(idx)), cov=cov[np.ix_(idx, idx)]).entropy()

    return h(list(a)) + h(list(b)) - h(list(a) + list(b))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gaussian_mutual_information_matches_scipy_entropies(backend):
    rng = np.random.default_rng(3)
    w = rng.normal(size=(3, 6, 6))
    cov = w @ np.swapaxes(w, -1, -2) + 0.5 * np.eye(6)
    a, b = (0, 4), (1, 2, 5)
    got = run(backend, lambda g, v: g.output("i", mb.mutual_information(v["cov"], kind="gaussian", a=a, b=b)),
              {"cov": cov})["i"]
    want = [gaussian_mi_scipy(c, a, b) for c in cov]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    # independent blocks carry no information
    blockdiag = np.eye(4)
    blockdiag[0, 1] = blockdiag[1, 0] = 0.6
    assert abs(mb.mi_gaussian_xp(blockdiag, (0, 1), (2, 3))) < 1e-15
    # bivariate closed form: -0.5 ln(1 - rho^2)
    rho = 0.8
    np.testing.assert_allclose(mb.mi_gaussian_xp(np.array([[1, rho], [rho, 1.0]]), (0,), (1,)), -0.5 * np.log(1 - rho**2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_discrete_mutual_information_matches_sklearn(backend):
    rng = np.random.default_rng(4)
    counts = rng.integers(0, 20, size=(4, 5, 3)).astype(np.float64)
    counts[0, 1, :] = 0  # empty cells and an empty row
    got = run(backend, lambda g, v: g.output("i", mb.mutual_information(v["p"], kind="discrete")), {"p": counts})["i"]
    want = [mutual_info_score(None, None, contingency=c.astype(np.int64)) for c in counts]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
def test_flows_are_tanh_affine(backend):
    rng = np.random.default_rng(5)
    xs, w, b = rng.normal(size=(2, 3, 4)), rng.normal(size=(4, 5)), rng.normal(size=5)
    xi, w2, b2 = rng.normal(size=(3, 5)), rng.normal(size=(5, 2)), rng.normal(size=2)
    out = run(backend, lambda g, v: (g.output("fi", mb.flow_internal(v["xs"], v["w"], v["b"])),
                                     g.output("fa", mb.flow_active(v["xi"], v["w2"], v["b2"]))),
              {"xs": xs, "w": w, "b": b, "xi": xi, "w2": w2, "b2": b2})
    np.testing.assert_allclose(out["fi"], np.tanh(np.einsum("abi,ij->abj", xs, w) + b), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(out["fa"], np.tanh(xi @ w2 + b2), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
def test_vjps_match_finite_differences(backend):
    rng = np.random.default_rng(6)
    w = rng.normal(size=(2, 5, 5))
    cov = w @ np.swapaxes(w, -1, -2) + np.eye(5)
    check_vjp(backend, lambda v: mb.mutual_information(v["cov"], kind="gaussian", a=(0, 3), b=(1,)), {"cov": cov},
              ("cov",))
    p = rng.uniform(0.1, 1.0, size=(2, 3, 4))
    check_vjp(backend, lambda v: mb.mutual_information(v["p"], kind="discrete"), {"p": p}, ("p",))
    check_vjp(backend, lambda v: mb.flow_internal(v["x"], v["w"], v["b"]),
              {"x": rng.normal(size=(2, 3)), "w": rng.normal(size=(3, 2)), "b": rng.normal(size=2)}, ("x", "w", "b"))
    check_vjp(backend, lambda v: mb.flow_active(v["x"], v["w"], v["b"]),
              {"x": rng.normal(size=(4,)), "w": rng.normal(size=(4, 3)), "b": rng.normal(size=3)}, ("x", "w", "b"))


@pytest.mark.parametrize(("build", "match"), [
    (lambda g: mb.mutual_information(g.input("c", (4, 4)), kind="gaussian", a=(0,), b=(0, 1)), "disjoint"),
    (lambda g: mb.mutual_information(g.input("c", (4, 4)), kind="gaussian", a=(0,), b=(4,)), "outside"),
    (lambda g: mb.mutual_information(g.input("c", (4, 4)), kind="gaussian", a=(), b=(1,)), "empty"),
    (lambda g: mb.mutual_information(g.input("c", (4, 4)), kind="gaussian", a=(1, 1), b=(2,)), "repeats"),
    (lambda g: mb.mutual_information(g.input("c", (4, 3)), kind="gaussian", a=(0,), b=(1,)), "covariance"),
    (lambda g: mb.mutual_information(g.input("c", (4,)), kind="discrete"), "joint table"),
    (lambda g: mb.mutual_information(g.input("c", (4, 4)), kind="poisson"), "kind"),
    (lambda g: mb.partition(g.input("adj", (3, 4)), g.input("i", (3,), dtype="bool")), "square"),
    (lambda g: mb.partition(g.input("adj", (3, 3)), g.input("i", (3,), dtype="int64")), "bool mask"),
    (lambda g: mb.flow_internal(g.input("x", (2, 3)), g.input("w", (4, 2)), g.input("b", (2,))), "W must be"),
    (lambda g: mb.flow_active(g.input("x", (2, 3)), g.input("w", (3, 2)), g.input("b", (3,))), "bias must be"),
])
def test_bad_inputs_are_graph_errors(build, match):
    with caramba.Graph("bad") as g, pytest.raises(GraphError, match=match):
        build(g)


def lower_block(op: str, inputs: dict, config: dict, outs: tuple[str, ...]):
    from pathlib import Path

    from caramba.manifest.loader import Document
    from caramba.manifest.lower import lower_topology
    from caramba.manifest.schema import validate

    data = {"name": "blk", "topology": {
        "inputs": {k: {"shape": list(v), "dtype": "float64"} for k, v in inputs.items()},
        "nodes": [{"id": "blk", "op": op, "in": list(inputs), "out": list(outs), "config": config}],
        "outputs": {k: k for k in outs}}}
    doc = Document(data, "<test>", Path("."))
    return lower_topology(validate(doc).topology, doc, name="blk")


@pytest.mark.parametrize("backend", BACKENDS)
def test_flow_block_computes_both_flows(backend):
    from .research_helpers import runner

    low = lower_block("block.markov_blanket.flow", {"x_sens": (2, 3), "x_int": (2, 4)},
                      {"sensory": 3, "internal": 4, "active": 2}, ("flow_int", "flow_act"))
    assert sorted(low.params) == ["blk.act_coupling.bias", "blk.act_coupling.weight", "blk.int_coupling.bias",
                                  "blk.int_coupling.weight"]
    rng = np.random.default_rng(7)
    r = runner(backend)
    vals = {name: rng.normal(size=spec.shape) for name, spec in low.params.items()}
    for name, v in vals.items():
        r.state[name] = r.upload(v)
    xs, xi = rng.normal(size=(2, 3)), rng.normal(size=(2, 4))
    out = r.compile(low.graph).run({"x_sens": r.upload(xs), "x_int": r.upload(xi)})
    np.testing.assert_allclose(out["flow_int"].download(),
                               np.tanh(xs @ vals["blk.int_coupling.weight"] + vals["blk.int_coupling.bias"]), rtol=1e-13)
    np.testing.assert_allclose(out["flow_act"].download(),
                               np.tanh(xi @ vals["blk.act_coupling.weight"] + vals["blk.act_coupling.bias"]), rtol=1e-13)


@pytest.mark.parametrize(("config", "match"), [
    ({"outcomes": 2, "states": 2, "actions": 64, "horizon": 12}, "more than 4096"),
    ({"outcomes": 2, "states": 2, "actions": 2, "horizon": 0}, "horizon"),
    ({"outcomes": 2, "states": 2, "actions": 2, "gamma": -1.0}, "gamma"),
    ({"outcomes": 2, "states": 2, "actions": 2, "gamma": float("nan")}, "gamma"),
    ({"outcomes": 0, "states": 2, "actions": 2}, "outcomes"),
])
def test_hostile_agent_configs_are_clear_errors(config, match):
    from caramba.errors import CarambaError

    with pytest.raises(CarambaError, match=match):
        lower_block("block.active_inference.agent", {"obs": (1, max(config["outcomes"], 1)), "prior": (1, 2)}, config,
                    ("q", "action"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_invalid_covariance_and_empty_table_give_nan(backend):
    bad_cov = np.array([[1.0, 2.0], [2.0, 1.0]])  # det < 0: not a covariance
    out = run(backend, lambda g, v: (
        g.output("g", mb.mutual_information(v["c"], kind="gaussian", a=(0,), b=(1,))),
        g.output("d", mb.mutual_information(v["p"], kind="discrete"))), {"c": bad_cov, "p": np.zeros((2, 3))})
    assert np.isnan(out["g"]) and np.isnan(out["d"])
