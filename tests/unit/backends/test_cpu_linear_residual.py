"""fused.linear with an addend of the output's full shape (a residual the fuse pass takes as
the bias: ``x + h @ w`` in a transformer block): the row-blocked product splits the addend into
the same [rows, N] blocks, and an addend that broadcasts over leading axes is not split."""

import numpy as np
import pytest

import caramba
from caramba import compute

from ..compiler._util import run


@pytest.fixture(scope="module")
def cpu():
    r = compute.new("cpu")
    yield r
    r.close()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("rshape", [(16, 64, 64), (64, 64), (64,)])
def test_matmul_plus_residual_matches_numpy(cpu, dtype, rshape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 64, 64)).astype(dtype)
    w = rng.standard_normal((64, 64)).astype(dtype)
    r = rng.standard_normal(rshape).astype(dtype)
    g = caramba.trace(lambda x, w, r: r + x @ w, (x.shape, dtype), (w.shape, dtype), (r.shape, dtype))
    assert any(n.op == "fused.linear" for n in cpu.compile(g).graph.nodes)
    got = run(cpu, g, {"x": x, "w": w, "r": r})["out"]
    want = r.astype(np.float64) + x.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-12 if dtype == "float64" else 1e-4, atol=1e-12 if dtype == "float64" else 1e-4)
