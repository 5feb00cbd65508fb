"""``shape.scatter_add`` on the cpu backend through its Numba loop (``_scatter_loops.py``):
bit for bit ``np.add.at`` (duplicates, negative indices, every axis, 0-d and empty indices),
out-of-range indices still refused, and the embedding gradient it computes agrees with
PyTorch's autograd."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import ops
from caramba.autodiff.api import grad
from caramba.errors import CarambaError

from ...compiler._util import run

pytest.importorskip("numba")
torch = pytest.importorskip("torch")


CASES = [((128, 64), 0, (16, 64)), ((5, 7, 3), 1, (4, 2)), ((6, 4), 1, (9,)), ((3, 5), 0, ()), ((4, 3), 0, (0,)),
         ((2, 3, 4, 5), 3, (6,)), ((1, 1), 0, (5,))]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape,axis,ishape", CASES, ids=lambda c: str(c))
def test_scatter_add_equals_numpy_add_at_bitwise(cpu, dtype, shape, axis, ishape):
    rng = np.random.default_rng(len(shape) * 10 + axis)
    x = rng.standard_normal(shape).astype(dtype)
    n = shape[axis]
    idx = rng.integers(-n, n, ishape)  # duplicates and negative indices
    upd = (rng.standard_normal(shape[:axis] + ishape + shape[axis + 1:]) * 3).astype(dtype)
    g = caramba.trace(lambda x, i, u: ops.scatter_add(x, i, u, axis=axis),
                      (shape, dtype), (ishape, "int64"), (upd.shape, dtype))
    (got,) = run(cpu, g, {n_.id: a for n_, a in zip(g.inputs, (x, idx, upd), strict=True)}).values()
    want = x.copy()
    np.add.at(want, (slice(None),) * axis + (idx,), upd)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_scatter_add_out_of_range_is_refused(cpu):
    g = caramba.trace(lambda x, i, u: ops.scatter_add(x, i, u, axis=0), ((4, 3), "float64"), ((2,), "int64"),
                      ((2, 3), "float64"))
    with pytest.raises(CarambaError, match="out of range"):
        run(cpu, g, {g.inputs[0].id: np.zeros((4, 3)), g.inputs[1].id: np.array([1, 4]),
                     g.inputs[2].id: np.ones((2, 3))})


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_embedding_gradient_matches_torch(cpu, dtype):
    rng = np.random.default_rng(3)
    table, ids, w = rng.standard_normal((50, 8)).astype(dtype), rng.integers(0, 50, (6, 10)), rng.standard_normal((6, 10, 8)).astype(dtype)
    g = caramba.trace(lambda t, i, w: grad(ops.sum(ops.embedding(i, t) * w), [t]),
                      ((50, 8), dtype), ((6, 10), "int64"), ((6, 10, 8), dtype))
    (got,) = run(cpu, g, {n.id: a for n, a in zip(g.inputs, (table, ids, w), strict=True)}).values()
    tt = torch.tensor(table.astype(np.float64), requires_grad=True)
    (torch.nn.functional.embedding(torch.from_numpy(ids), tt) * torch.from_numpy(w.astype(np.float64))).sum().backward()
    tol = 1e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose(got, tt.grad.numpy(), rtol=tol, atol=tol)
