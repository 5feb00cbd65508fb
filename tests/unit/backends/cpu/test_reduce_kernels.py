"""cpu reduce.sum over leading axes: reduced as one axis of a [rows, rest] view, with the bits of
NumPy's multi-axis sum (the same rows added in the same order), for every dtype and layout."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import ops


def _sum(cpu, x, axes, keepdims):
    g = caramba.trace(lambda a: ops.sum(a, axes=axes, keepdims=keepdims), (x.shape, str(x.dtype)))
    exe = cpu.compile(g)
    [name] = exe.input_types
    return exe.run({name: cpu.upload(x)})["out"].download()


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "float16"])
@pytest.mark.parametrize("shape,axes", [((16, 64, 64), (0, 1)), ((2, 3, 5, 7), (0, 1, 2)), ((3, 5, 130), (0, 1)),
                                        ((4, 6), (0, 1)), ((0, 3, 4), (0, 1)), ((3, 4, 5), (0, 2)),
                                        ((3, 4, 5), (1, 2))])
@pytest.mark.parametrize("keepdims", [True, False])
def test_sum_over_axes_has_numpys_bits(cpu, dtype, shape, axes, keepdims):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 50).astype(dtype)
    got = _sum(cpu, x, axes, keepdims)
    want = np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_sum_of_a_transposed_input_keeps_numpys_order(cpu):
    """A non-contiguous input is summed by NumPy itself (its own traversal order)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 6, 5)).astype("float32")
    g = caramba.trace(lambda a: ops.sum(ops.transpose(a, perm=(1, 0, 2)), axes=(0, 1)), (x.shape, "float32"))
    exe = cpu.compile(g)
    [name] = exe.input_types
    got = exe.run({name: cpu.upload(x)})["out"].download()
    np.testing.assert_allclose(got, x.sum(axis=(0, 1)), rtol=1e-6, atol=1e-5)
