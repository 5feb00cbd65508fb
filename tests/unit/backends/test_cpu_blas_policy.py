"""The cpu backend runs small matrix products on one BLAS thread and large ones on the count
the process chose; a count someone else set is respected."""

import numpy as np

from caramba.backends.cpu import blas


class FakeBlas:
    def __init__(self, n):
        self.n, self.sets = n, []

    def get(self):
        return self.n

    def set(self, n):
        self.n = n
        self.sets.append(n)


def test_small_products_use_one_thread_and_large_ones_the_chosen_count():
    b = FakeBlas(4)
    p = blas._Policy(b.get, b.set, 4)
    p.use(small=True)
    assert b.n == 1
    p.use(small=True)
    assert b.sets == [1]  # switched only when needed
    p.use(small=False)
    assert b.n == 4 and b.sets == [1, 4]
    b.n = 2  # e.g. threadpool_limits(2) by the user, or cpu:threads=2
    p.use(small=True)
    p.use(small=False)
    assert b.n == 2  # the user's count, not the first one


def test_policed_matmul_gives_numpy_results():
    """The product numpy gives: bit for bit when the policy calls BLAS on the whole matrix; to
    a few ulps when it splits the rows into blocks run on worker threads (OpenBLAS may pick
    another kernel for a block's fewer rows, which sums in another order; whether the rows are
    split depends on the size, the tuning and the machine's spare cores)."""
    rng = np.random.default_rng(0)
    for shape in ((8, 16, 4), (300, 300, 300)):
        m, k, n = shape
        a, w = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        f = blas.matmul_for(a.shape, w.shape, (m, n))
        out = np.empty((m, n))
        f(a, w, out)
        want = np.matmul(a, w)
        if f.__name__ == "blocked_matmul":
            scale = np.abs(a) @ np.abs(w)  # the error bound of a sum of products scales with this
            assert np.all(np.abs(out - want) <= 8 * np.finfo(float).eps * scale)
            assert np.all(np.abs(f(a, w) - want) <= 8 * np.finfo(float).eps * scale)
        else:
            np.testing.assert_array_equal(out, want)
            np.testing.assert_array_equal(f(a, w), want)
    from caramba.ops.cost import matmul_flops

    assert matmul_flops((8, 16), (8, 4)) == 2 * 8 * 16 * 4
