"""float32 SGD runs as one Numba loop of float32 operations (``_train_loops.sgd_f32``): the same
bits as the rule's NumPy expression over the whole arrays (``caramba.ops.train.sgd_elem``), for
parameters of every size (one loop, or blocks on the cpu workers)."""

from __future__ import annotations

import numpy as np
import pytest

from caramba.backends.cpu.kernels import train as k
from caramba.compute.spare import Spare
from caramba.ops import train as t

SGD = [
    (0.01, 0.5, 0.9, 0.1, True, 1e-4),
    (0.01, 1.0, 0.9, 0.0, False, 0.0),
    (0.1, 0.3, 0.0, 0.0, False, 0.05),
    (1e-4, 1.0, 0.9, 0.3, False, 1e-4),
]


@pytest.mark.parametrize("scalars", SGD)
def test_float32_sgd_with_inf_nan_and_signed_zero_gradients_equals_the_numpy_rule(scalars):
    rng = np.random.default_rng(0)
    shape = (70001,)
    p, g, buf = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    g[:5] = [np.inf, -np.inf, np.nan, 0.0, -0.0]
    with np.errstate(all="ignore"):  # inf and NaN gradients on purpose
        want = tuple(np.asarray(o, dtype=np.float32) for o in t.sgd_elem(p, g, buf, *scalars))
        got = k._run(Spare(4), "sgd", t.sgd_elem, (p, g, buf), scalars)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.float32 and a.shape == shape
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_float32_sgd_keeps_the_parameter_shape_and_never_writes_its_inputs():
    rng = np.random.default_rng(1)
    p = rng.standard_normal((300, 257)).astype(np.float32)
    g = np.asfortranarray(rng.standard_normal((300, 257)).astype(np.float32))  # not C-contiguous
    buf = rng.standard_normal((300, 257)).astype(np.float32)
    before = [x.copy() for x in (p, g, buf)]
    new_p, new_buf = k._run(Spare(4), "sgd", t.sgd_elem, (p, g, buf), (0.1, 1.0, 0.9, 0.0, False, 0.0))
    want_p, want_buf = t.sgd_elem(p, g, buf, 0.1, 1.0, 0.9, 0.0, False, 0.0)
    assert new_p.shape == p.shape and new_buf.shape == p.shape
    np.testing.assert_array_equal(new_p, want_p)
    np.testing.assert_array_equal(new_buf, want_buf)
    for x, b in zip((p, g, buf), before, strict=True):
        np.testing.assert_array_equal(x, b)


@pytest.mark.parametrize("n", [600, 5000, 40000])  # one loop, one loop, blocks on the workers
@pytest.mark.parametrize("scalars", [(0.01, 0.5, 0.9, 0.1, True, 1e-4), (1e-4, 1.0, 0.9, 0.3, False, 1e-4),
                                     (0.1, 0.7, 0.0, 0.0, False, 0.0)])
def test_float32_sgd_loop_equals_the_numpy_rule_bit_for_bit(n, scalars):
    rng = np.random.default_rng(n)
    p, g, buf = ((rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)).astype(np.float32) for _ in range(3))
    want = [np.asarray(o, dtype=np.float32) for o in t.sgd_elem(p, g, buf, *scalars)]
    got = k._run(Spare(4), "sgd", t.sgd_elem, (p, g, buf), scalars)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
