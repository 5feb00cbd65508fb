"""random.*: reproducibility for a (seed, key), different draws for a different key or seed,
and loose statistics (n >= 1024: bounds many standard errors wide, deterministic seeds)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..harness import BOOL, FLOATS, I32, I64, Case, arg, bad, build, row
from ._helpers import label

KEY = arg((), dtype=I64)


def _draw(runner, case, d, key=None, **attr_changes):
    c = replace(case, attrs=(lambda dd: {**case.attrs_for(dd), **attr_changes})) if attr_changes else case
    b = build(c, d)
    ins = {} if key is None else {"x0": runner.upload(np.array(key, dtype=np.int64))}
    out = runner.compile(b.graph).run(ins)["out"].download()
    t = b.graph.type_of(b.graph.outputs["out"])
    assert out.dtype == t.dtype.numpy and out.shape == t.shape, f"{out.dtype}{out.shape} vs {t}"
    return out


def _reproducible(runner, case, d, varies: bool = True) -> np.ndarray:
    keyed = bool(case.args)
    a = _draw(runner, case, d, 5 if keyed else None)
    np.testing.assert_array_equal(_draw(runner, case, d, 5 if keyed else None), a)  # same seed, key
    if varies and a.size >= 64:
        if keyed:
            assert not np.array_equal(_draw(runner, case, d, 6), a), "another key must give other values"
        seed = case.attrs_for(d)["seed"]
        assert not np.array_equal(_draw(runner, case, d, 5 if keyed else None, seed=seed + 1), a), "another seed must differ"
    return a


def _check_uniform(runner, case, d):
    a = _reproducible(runner, case, d)
    attrs = case.attrs_for(d)
    lo, hi = attrs.get("low", 0.0), attrs.get("high", 1.0)
    x = a.astype(np.float64)
    assert np.all(x >= lo) and np.all(x < hi), f"values outside [{lo}, {hi}): min {x.min()}, max {x.max()}"
    if x.size >= 1024:
        n, width = x.size, hi - lo
        assert abs(x.mean() - (lo + hi) / 2) < 6 * width / math.sqrt(12 * n)
        assert abs(x.std() / (width / math.sqrt(12)) - 1) < 0.1
        assert len(np.unique(x)) > min(n // 4, 200)  # not a handful of repeated values


def _check_normal(runner, case, d):
    a = _reproducible(runner, case, d)
    attrs = case.attrs_for(d)
    mu, sd = attrs.get("mean", 0.0), attrs.get("std", 1.0)
    x = a.astype(np.float64)
    assert np.all(np.isfinite(x))
    if x.size >= 1024:
        n = x.size
        assert abs(x.mean() - mu) < 6 * sd / math.sqrt(n)
        assert abs(x.std() / sd - 1) < 0.1
        z = (x - mu) / sd
        assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.05  # a normal shape, not just two moments


def _check_bernoulli(runner, case, d):
    p = case.attrs_for(d).get("p", 0.5)
    a = _reproducible(runner, case, d, varies=p not in (0.0, 1.0))
    assert a.dtype == np.bool_
    if p in (0.0, 1.0):
        assert np.all(a == bool(p))
    elif a.size >= 1024:
        assert abs(a.mean() - p) < 6 * math.sqrt(p * (1 - p) / a.size)


def _cases(check, variants, dtype_attr=True):
    out = []
    for shape, extra, keyed in variants:
        tag = ",".join(f"{k}={v}" for k, v in extra.items())

        def attrs(d, shape=shape, extra=extra):
            return {"shape": shape, "seed": 11, **extra} | ({"dtype": d} if dtype_attr else {})

        out.append(Case(f"{label(shape)}{'-key' if keyed else ''}{'-' + tag if tag else ''}", (KEY,) if keyed else (), attrs, check=check))
    return out


def _probe(dtype_attr=True):
    return Case("probe", (), (lambda d: {"shape": (3,)} | ({"dtype": d} if dtype_attr else {})))


ROWS = [
    row(
        "random.uniform",
        FLOATS,
        _cases(
            _check_uniform,
            (
                ((4096,), {}, True),
                ((64, 64), {"low": -2.0, "high": 3.0}, False),
                ((1 << 14,), {"low": 0.0, "high": 1.0}, True),  # float16 rounds near 1.0: still < high
                ((1,), {}, True),
                ((3, 5, 7), {"low": 10.0, "high": 10.5}, False),
                ((0, 3), {}, False),
            ),
        ),
        [
            bad("does not accept dtype of dtype int64", shape=[3], dtype="int64"),
            bad("key must be an int64 scalar, got i32\\[\\]", ((), I32), shape=[3]),
            bad("key must be an int64 scalar, got i64\\[2\\]", ((2,), I64), shape=[3]),
            bad("takes 0..1 inputs, got 2", ((), I64), ((), I64), shape=[3]),
            bad("needs low < high, got \\[1.0, 1.0\\)", shape=[3], low=1.0, high=1.0),
        ],
        probe=_probe(),
    ),
    row(
        "random.normal",
        FLOATS,
        _cases(_check_normal, (((4096,), {}, True), ((64, 64), {"mean": 2.0, "std": 0.5}, False), ((7,), {}, True), ((0,), {}, False))),
        [bad("does not accept dtype of dtype bool", shape=[3], dtype="bool"), bad("needs std >= 0, got -1.0", shape=[3], std=-1.0)],
        probe=_probe(),
    ),
    row(
        "random.bernoulli",
        frozenset({BOOL}),
        _cases(
            _check_bernoulli,
            (((4096,), {"p": 0.3}, True), ((64, 16), {}, False), ((1024,), {"p": 0.0}, True), ((1024,), {"p": 1.0}, False), ((3, 5, 7), {"p": 0.9}, True)),
            dtype_attr=False,
        ),
        [bad("unknown attribute 'dtype'", shape=[3], dtype="bool"), bad("needs 0 <= p <= 1, got 1.5", shape=[3], p=1.5)],
        probe=_probe(dtype_attr=False),
        typed=False,
    ),
]
