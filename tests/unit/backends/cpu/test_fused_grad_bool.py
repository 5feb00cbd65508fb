"""Regression (issue 20, "Also fix"): a fused cpu kernel taking a bool array failed to compile
(LLVM "Type of #3 arg mismatch: i8* != i1*") once the tensor was large enough to be split over
the workers: ``where(x > 0, x, -x)`` on [256, 256] and the gradient of ``maximum`` on [256, 512]
(fine at [64, 64] or with fusion disabled)."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import ops
from caramba.autodiff.api import grad
from caramba.compiler import compile_graph

from ...compiler._util import run

pytest.importorskip("numba")


def _bool_fused(cpu, g) -> bool:
    """Does a fused node of ``g`` take a bool input (the case that failed to compile)?"""
    from caramba.ir.dtypes import DType

    after, _ = compile_graph(g, cpu)
    return any(n.op.startswith("fused.") and any(after.type_of(r).dtype is DType.bool for r in n.inputs)
               for n in after.nodes)


@pytest.mark.parametrize("shape", [(64, 64), (256, 256)])
def test_where_on_a_comparison_split_over_workers(cpu, shape):
    x = np.random.default_rng(0).standard_normal(shape)
    g = caramba.trace(lambda x: ops.where(x > 0, x, -x), (shape, "float64"))
    got = run(cpu, g, {"x": x})["out"]
    np.testing.assert_array_equal(got, np.abs(x))
    np.testing.assert_array_equal(run(cpu, g, {"x": x}, disable=("fuse",))["out"], np.abs(x))


def test_maximum_gradient_split_over_workers(cpu):
    shape = (256, 512)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(shape), rng.standard_normal(shape)
    b[0, :7] = a[0, :7]  # ties: each side gets half
    g = caramba.trace(lambda a, b: grad(ops.sum(ops.maximum(a, b)), [a, b]), (shape, "float64"), (shape, "float64"))
    assert _bool_fused(cpu, g)
    got = run(cpu, g, {"a": a, "b": b})
    ref = run(cpu, g, {"a": a, "b": b}, disable=("fuse",))
    np.testing.assert_array_equal(got["out0"], ref["out0"])
    np.testing.assert_array_equal(got["out1"], ref["out1"])
    np.testing.assert_array_equal(got["out0"] + got["out1"], np.ones(shape))
    np.testing.assert_array_equal(got["out0"][0, :7], np.full(7, 0.5))
    strict = a != b
    np.testing.assert_array_equal(got["out0"][strict], (a > b)[strict].astype(float))
