"""The cpu ``vsa.similarity`` kernel's broadcast path (dot products as one einsum on the
operands' own axes) equals the definition on every broadcast pattern, zero vectors included."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from caramba import compute
from caramba.backends.cpu.kernels import research
from caramba.ir.graph import Graph
from caramba.ops import vsa


def _shapes():
    """Pairs of operand shapes that broadcast: each leading axis 1 in a, in b, in both, or shared."""
    rng = np.random.default_rng(7)
    for n in range(1, 4):
        for pattern in itertools.product("ab1s", repeat=n):
            sizes = [int(rng.integers(2, 5)) for _ in pattern]
            a = tuple(s if p in "as" else 1 for p, s in zip(pattern, sizes))
            b = tuple(s if p in "bs" else 1 for p, s in zip(pattern, sizes))
            d = int(rng.integers(1, 9))
            yield a + (d,), b + (d,)
            yield a + (d,), b[1:] + (d,)  # b of lower rank


def _kernel(a_shape, b_shape, dtype):
    with Graph("sim") as g:
        a = g.input("a", a_shape, dtype)
        b = g.input("b", b_shape, dtype)
        g.output("s", vsa.similarity(a, b))
    return g


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_broadcast_dot_path_equals_the_definition(monkeypatch, dtype):
    monkeypatch.setattr(research, "BROADCAST_DOT_MIN", 0)  # the einsum path on every shape
    rng = np.random.default_rng(0)
    planned = 0
    with compute.new("cpu") as r:
        for a_shape, b_shape in _shapes():
            a = rng.standard_normal(a_shape).astype(dtype)
            b = rng.standard_normal(b_shape).astype(dtype)
            a.reshape(-1, a_shape[-1])[0] = 0.0  # a zero vector: similarity 0, not nan
            planned += research._dot_plan(a_shape, b_shape) is not None
            got = r.execute(_kernel(a_shape, b_shape, dtype), inputs={"a": r.upload(a), "b": r.upload(b)})["s"].download()
            want = vsa.similarity_xp(a.astype(np.float64), b.astype(np.float64))
            assert got.shape == want.shape and got.dtype == np.dtype(dtype)
            np.testing.assert_allclose(got, want, rtol=1e-12 if dtype == "float64" else 2e-6, atol=1e-15 if dtype == "float64" else 1e-6)
            assert np.all(np.isfinite(got))
    assert planned > 100  # most patterns broadcast


def test_the_resonator_cleanup_shape_uses_the_product_and_matches():
    a_shape, b_shape = (50, 8, 1, 1000), (20, 1000)
    assert research._dot_plan(a_shape, b_shape) == ("abz,cz->abc", (50, 8, 1000), (20, 1000), (50, 8, 20))
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(a_shape), np.sign(rng.standard_normal(b_shape))
    with compute.new("cpu") as r:
        got = r.execute(_kernel(a_shape, b_shape, "float64"), inputs={"a": r.upload(a), "b": r.upload(b)})["s"].download()
    np.testing.assert_allclose(got, vsa.similarity_xp(a, b), rtol=1e-12, atol=1e-15)


def test_no_plan_where_nothing_is_broadcast_or_the_work_is_small():
    assert research._dot_plan((64, 1000), (64, 1000)) is None  # same leading shape: the definition
    assert research._dot_plan((3, 6), (6,)) is None  # 18 multiply-adds
    assert research._dot_plan((0, 1, 100), (5, 100)) is None  # nothing to compute
