"""NumPy basic indexing on graph values: the ops it builds, and (on the cpu reference) that it
means exactly what NumPy means."""

from __future__ import annotations

import numpy as np
import pytest

from caramba import compute, ir
from caramba.errors import GraphError

X = np.arange(4 * 5 * 6, dtype=np.float64).reshape(4, 5, 6)

INDICES = [
    (slice(1, 3), slice(None, None, -1), None, Ellipsis),
    (1,),
    (-1,),
    (Ellipsis, 0),
    (None,),
    (slice(None), None, slice(None)),
    (slice(None, None, -1),),
    (slice(5, 1, -2),),
    (slice(-100, 100),),
    (slice(3, 1),),
    (0, -1, slice(None, None, 2)),
    (Ellipsis,),
    (slice(None), slice(4, None, -1), -6),
    (slice(-2, None), Ellipsis, slice(None, -1, 3)),
    (None, 2, None, slice(1, -1), None),
    (slice(None, None, -3), slice(None, 0, -1)),
]


def _index(v, index):
    return v[index]


def test_the_headline_example_builds_slice_then_expand():
    with ir.Graph() as g:
        x = g.input("x", (4, 5, 6))
        y = x[1:3, ::-1, None, ...]
    assert y.shape == (2, 5, 1, 6)
    ops = [n.op for n in g.nodes[1:]]
    assert ops == ["shape.slice", "shape.expand_dims"]
    sl = g.nodes[1].attrs
    assert sl["axes"] == (0, 1) and sl["steps"] == (1, -1)


def test_full_slices_build_nothing():
    with ir.Graph() as g:
        x = g.input("x", (4, 5))
        y = x[:, ...]
    assert y.ref == x.ref and len(g.nodes) == 1


def test_int_index_squeezes():
    with ir.Graph() as g:
        x = g.input("x", (4, 5))
        y = x[2]
    assert y.shape == (5,) and [n.op for n in g.nodes[1:]] == ["shape.slice", "shape.squeeze"]


@pytest.mark.parametrize("index", INDICES, ids=[repr(i) for i in INDICES])
def test_indexing_matches_numpy(index):
    with ir.Graph("idx") as g:
        x = g.input("x", X.shape)
        g.output("y", _index(x, index))
    want = X[index]
    assert g.type_of(g.outputs["y"]).shape == want.shape
    with compute.new("cpu") as r:
        got = r.execute(g, inputs={"x": r.upload(X)})["y"].download()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "index, match",
    [
        ((Ellipsis, 0, Ellipsis), "at most one Ellipsis"),
        ((0, 0, 0, 0), "too many indices \\(4\\) for a value of rank 3"),
        ((4,), "index 4 is out of bounds for axis 0 of size 4"),
        ((0, -6), "index -6 is out of bounds for axis 1 of size 5"),
        (([0, 1],), "unsupported index \\[0, 1\\].*ops.gather"),
        ((1.5,), "unsupported index 1.5"),
    ],
)
def test_bad_indices(index, match):
    with ir.Graph() as g:
        x = g.input("x", X.shape)
        with pytest.raises(GraphError, match=match):
            _index(x, index)
