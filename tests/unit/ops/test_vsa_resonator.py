"""block.vsa.resonator at the issue's size: three bipolar codebooks of 20 vectors in dimension
1,000 (8,000 products). The block's similarities equal those of a NumPy resonator written here
(Frady et al. 2020 updates, weighted-superposition restarts, selection by rebinding) for >= 85%
of products (exact ties in a sign part a few trajectories), and over 2 seeded
codebook draws x 100 products it decodes all three factors of >= 95% of the products (the plain
resonator, restarts = 1, of about 85%: spurious fixed points)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from .research_helpers import runner

SIZE, DIM, ITERS, RESTARTS, N = 20, 1000, 30, 8, 100


def _lower(restarts: int):
    from caramba.manifest.loader import Document
    from caramba.manifest.lower import lower_topology
    from caramba.manifest.schema import validate

    nodes = [{"id": "res", "op": "block.vsa.resonator", "in": ["i", "j", "k"], "out": ["sx", "sy", "sz"],
              "config": {"size": SIZE, "dim": DIM, "iterations": ITERS, "restarts": restarts}}]
    inputs = {n: {"shape": [N], "dtype": "int64"} for n in "ijk"}
    data = {"name": "t", "topology": {"inputs": inputs, "nodes": nodes, "outputs": {k: k for k in ("sx", "sy", "sz")}}}
    doc = Document(data, "<test>", Path("."))
    return lower_topology(validate(doc).topology, doc, name="t", training=False)


def numpy_resonator(books, weights, idx):
    """The resonator of the block's docs, independently: estimates [N, R, d]."""
    s = (books[0][idx[:, 0]] * books[1][idx[:, 1]] * books[2][idx[:, 2]])[:, None, :]
    est = [np.broadcast_to(w @ b, (len(idx),) + (w.shape[0], b.shape[1])) for w, b in zip(weights, books)]
    for _ in range(ITERS):
        for f in range(3):
            o = [g for g in range(3) if g != f]
            u = s * est[o[0]] * est[o[1]]
            cos = (u @ books[f].T) / (np.sqrt(np.sum(u * u, -1, keepdims=True)) * np.sqrt(books[f].shape[1]))
            est[f] = np.sign(cos @ books[f])
    sims = [e @ b.T / b.shape[1] for e, b in zip(est, books)]  # cosine of bipolar vectors
    dec = [np.argmax(x, -1) for x in sims]
    score = np.sum(books[0][dec[0]] * books[1][dec[1]] * books[2][dec[2]] * s, -1)
    best = np.argmax(score, -1)
    return [x[np.arange(len(idx)), best] for x in sims]


def _trials(restarts: int, seeds: range):
    r = runner("cpu")
    low = _lower(restarts)
    exe = r.compile(low.graph)
    right, checked = [], False
    for seed in seeds:
        rng = np.random.default_rng(seed)
        raw = {}
        for name, spec in low.params.items():
            raw[name] = rng.normal(size=spec.shape)
            r.state[name] = r.upload(raw[name])
        books = [np.sign(raw[f"res.{c}.weight"]) for c in "XYZ"]
        weights = []
        for c in "xyz":
            w = np.exp(np.sign(raw[f"res.w{c}.weight"]))
            w[0] = 1.0
            weights.append(w)
        idx = rng.integers(0, SIZE, (N, 3))
        out = exe.run({n: r.upload(idx[:, a].astype(np.int64)) for a, n in enumerate("ijk")})
        sims = [out[k].download() for k in ("sx", "sy", "sz")]
        dec = np.stack([np.argmax(x, -1) for x in sims], 1)
        if not checked:  # the block is the resonator written above; the sign of a pre-activation
            # that is 0 in exact arithmetic depends on the order of summation, so a few
            # trajectories part (to a sign-flipped pair of estimates, say): compare per product
            want = numpy_resonator(books, weights, idx)
            same = np.all([np.all(np.abs(g - w) <= 1e-12, -1) for g, w in zip(sims, want)], 0)
            assert np.mean(same) >= 0.85, np.mean(same)  # measured 0.91 at restarts = 1
            wdec = np.stack([np.argmax(x, -1) for x in want], 1)
            assert abs(np.mean(np.all(dec == idx, 1)) - np.mean(np.all(wdec == idx, 1))) <= 0.05
            checked = True
        right.append(np.all(dec == idx, 1))
    return float(np.mean(np.concatenate(right)))


@pytest.mark.slow
def test_resonator_factorizes_three_codebooks_of_20_in_dimension_1000():
    acc = _trials(RESTARTS, range(2))
    assert acc >= 0.95, acc


@pytest.mark.slow
def test_one_restart_is_the_plain_resonator_and_falls_short():
    # why the block restarts: one resonator from the plain superposition settles on spurious
    # fixed points for a sizeable fraction of products (docs/research_ops.md)
    acc = _trials(1, range(3))
    assert 0.6 < acc < 0.95, acc
