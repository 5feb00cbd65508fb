"""examples/markov_blanket_partition.yml against independent computations: the partition of its
chain equals the textbook definition computed with networkx (parents, children and co-parents of
the internal node; d-separation of internal and external given the blanket), and its mutual
informations equal NumPy's Gaussian formula on the same test rows' covariance, close to the
population values of the linear-Gaussian SCM (the closed form -1/2 ln(1 - rho^2) for a pair,
0 for the internal state and the external ones given the blanket)."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np
import yaml

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "markov_blanket_partition.yml"


def gaussian_mi(cov: np.ndarray, a: list[int], b: list[int]) -> float:
    def logdet(idx: list[int]) -> float:
        return float(np.linalg.slogdet(cov[np.ix_(idx, idx)])[1])

    return 0.5 * (logdet(a) + logdet(b) - logdet(a + b))


def textbook_counts(edges: list[tuple[int, int]], n: int, internal: set[int]) -> dict[str, int]:
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    children = set().union(*(g.successors(i) for i in internal)) - internal
    parents = set().union(*(g.predecessors(i) for i in internal)) - internal
    coparents = set().union(*(g.predecessors(c) for c in children)) - internal
    blanket = parents | children | coparents
    external = set(range(n)) - internal - blanket
    if external:  # the blanket screens the internal nodes off
        assert nx.is_d_separator(g, internal, external, blanket)
    return {"sensory": len(blanket - children), "active": len(children), "internal": len(internal),
            "external": len(external)}


def test_blanket_example_matches_independent_computations(tmp_path):
    from caramba.data.sources import load_dataset
    from caramba.manifest.experiment import run_experiment
    from caramba.store import RunStore

    res = run_experiment(EXAMPLE, store=RunStore(tmp_path))
    assert res.ok, [r.error for r in res.runs]
    s = res.runs[0].summary

    doc = yaml.safe_load(EXAMPLE.read_text())
    cfg = next(n for n in doc["topology"]["nodes"] if n["id"] == "chain")["config"]
    want = textbook_counts(list(zip(cfg["sources"], cfg["targets"], strict=True)), cfg["nodes"], set(cfg["internal"]))
    assert want == {"sensory": 1, "active": 1, "internal": 1, "external": 2}
    for k, v in want.items():
        assert s[f"test.n_{k}"] == v, (k, s)

    # the same test rows, one evaluation batch (eval_batch_size covers the test split)
    spec = doc["datasets"]["chain"]
    x = load_dataset("chain", spec).arrays("test")["data"]
    assert len(x) <= doc["trainer"]["eval_batch_size"]
    cov = np.cov(x, rowvar=False, bias=True)
    np.testing.assert_allclose(s["test.mi_external_sensory"], gaussian_mi(cov, [0], [1]), rtol=1e-8)
    np.testing.assert_allclose(s["test.mi_internal_external"], gaussian_mi(cov, [2], [0, 4]), rtol=1e-8)
    cmi = gaussian_mi(cov, [2], [0, 1, 3, 4]) - gaussian_mi(cov, [2], [1, 3])
    np.testing.assert_allclose(s["test.cmi_given_blanket"], cmi, rtol=1e-6, atol=1e-12)

    # population values of the SCM: x = x W + e, so Sigma = (I - W)^-T diag(noise^2) (I - W)^-1
    w, noise = np.asarray(spec["weights"], float), np.asarray(spec["noise"], float)
    inv = np.linalg.inv(np.eye(len(w)) - w)
    sigma = inv.T @ np.diag(noise**2) @ inv
    assert abs(gaussian_mi(sigma, [0], [1]) - (-0.5 * np.log(1 - 0.8**2))) < 1e-12  # the closed form
    assert abs(s["test.mi_external_sensory"] - gaussian_mi(sigma, [0], [1])) < 0.03, s
    assert abs(s["test.mi_internal_external"] - gaussian_mi(sigma, [2], [0, 4])) < 0.03, s
    assert abs(gaussian_mi(sigma, [2], [0, 1, 3, 4]) - gaussian_mi(sigma, [2], [1, 3])) < 1e-12
    assert abs(s["test.cmi_given_blanket"]) < 0.005, s
    # predicting mu: the external states add nothing to the blanket (s, a)
    b = [1, 3]
    resid = sigma[2, 2] - sigma[2, b] @ np.linalg.solve(sigma[np.ix_(b, b)], sigma[b, 2])
    assert abs(s["test.mse_blanket"] - resid) < 0.05 * resid, (s, resid)
    assert abs(s["test.mse_all"] - s["test.mse_blanket"]) < 0.01 * resid, s


def test_bad_graphs_are_located_manifest_errors(tmp_path):
    """markov_blanket.graph refuses edges without a head and nodes outside [0, nodes), with the
    manifest line, never a traceback."""
    import pytest

    from caramba.manifest.compile import check
    from caramba.manifest.errors import ManifestError

    good = "sources: [0, 1, 2, 3], targets: [1, 2, 3, 4], internal: [2]"
    for bad, match in (("sources: [0, 1, 2], targets: [1, 2, 3, 4], internal: [2]", "one source and one target"),
                       ("sources: [0, 1, 2, 3], targets: [1, 2, 3, 9], internal: [2]", "node 9 is outside"),
                       ("sources: [0, 1, 2, 3], targets: [1, 2, 3, 4], internal: [-1]", "node -1 is outside")):
        path = tmp_path / "bad.yml"
        text = EXAMPLE.read_text()
        assert good in text
        path.write_text(text.replace(good, bad))
        with pytest.raises(ManifestError, match=match) as info:
            check(path)
        assert "bad.yml:" in str(info.value), str(info.value)

