"""``ops.where(cond, x, 0.0)``: a Python scalar branch takes the other branch's dtype, never the
bool condition's (it used to fail with "branches differ in dtype")."""

from __future__ import annotations

import numpy as np
import pytest

from caramba import compute, ops
from caramba.ir.graph import Graph


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_a_scalar_branch_takes_the_other_branchs_dtype(dtype):
    with Graph("where") as g:
        x = g.input("x", (4,), dtype)
        keep = ops.greater(x, 0)
        g.output("a", ops.where(keep, x, 0))
        g.output("b", ops.where(keep, 2, x))
    assert g.type_of(g.outputs["a"]).dtype.value == dtype
    r = compute.new("cpu")
    try:
        x = np.array([-1, 2, -3, 4], dtype=dtype)
        out = r.compile(g).run({"x": r.upload(x)})
        np.testing.assert_array_equal(out["a"].download(), np.where(x > 0, x, 0))
        np.testing.assert_array_equal(out["b"].download(), np.where(x > 0, 2, x))
    finally:
        r.close()


def test_two_scalar_branches_still_need_a_typed_value():
    from caramba.errors import GraphError

    with Graph("where") as g:
        keep = ops.greater(g.input("x", (2,)), 0.0)
        with pytest.raises(GraphError, match="all Python scalars, so nothing says their dtype"):
            ops.where(keep, 1.0, 0.0)  # not silently the condition's bool
