"""Fresh outputs of the cpu optimizer kernels reuse earlier outputs only when nobody holds them."""

from __future__ import annotations

import numpy as np

from caramba.compute.spare import Spare


def test_an_array_someone_holds_is_never_handed_out_again():
    s = Spare(keep=4)
    a = s.empty(10, np.dtype(np.float64))
    a[:] = 1.0
    b = s.empty(10, np.dtype(np.float64))
    assert b is not a  # a is still held here
    view = a[2:5]
    del a
    c = s.empty(10, np.dtype(np.float64))
    assert c is not b and not np.shares_memory(c, view)  # a view keeps its base alive
    np.testing.assert_array_equal(view, 1.0)


def test_a_released_array_is_reused_writable():
    s = Spare(keep=4)
    a = s.empty(10, np.dtype(np.float64))
    addr = a.__array_interface__["data"][0]
    a.setflags(write=False)  # as a resident tensor would
    del a
    b = s.empty(10, np.dtype(np.float64))
    assert b.__array_interface__["data"][0] == addr and b.flags.writeable
    other = s.empty(11, np.dtype(np.float64))
    assert other.size == 11  # only same size and dtype are reused
    f32 = s.empty(10, np.dtype(np.float32))
    assert f32.dtype == np.float32 and not np.shares_memory(f32, b)


def test_the_pool_stays_bounded():
    s = Spare(keep=3)
    held = [s.empty(4, np.dtype(np.float64)) for _ in range(10)]
    assert len(s._arrays) == 3 and len({id(h) for h in held}) == 10
