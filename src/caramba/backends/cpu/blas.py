"""Matrix products on NumPy's BLAS, with a thread policy for small ones.

OpenBLAS splits even small products over all its threads, which then spin-wait for the next
call. The cpu backend alternates BLAS calls with parallel fused kernels on Numba's OpenMP
pool; on a small machine the two pools' spinning threads starve each other (a [128,64] MLP
train step took 16-19 ms instead of 3.8 ms on 2 cores when another OpenMP runtime such as
PyTorch's was loaded first). A product below ``SMALL_FLOPS`` gains nothing from BLAS threads
there, so it runs on one: the product's shape is known when the kernel is made, so the
choice costs one C call per product (about 0.2 µs).

The thread count is process-wide in OpenBLAS: a product running concurrently in another
thread may briefly run on one thread too (speed only). The choice depends only on the shapes,
so a graph's results are as reproducible as before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from caramba.compiler.schedule import matmul_flops

# Below this many flops (2*M*N*K over the batch) a product runs on one BLAS thread.
SMALL_FLOPS = 3.0e7


@functools.cache
def _openblas_threads() -> tuple[Callable[[], int], Callable[[int], None], int] | None:
    """(get, set, count at first use) of the thread count of the OpenBLAS NumPy uses; None for
    another BLAS (MKL, Accelerate, BLIS: their threads do not spin between calls the same way)."""
    try:
        from threadpoolctl import ThreadpoolController

        for lib in ThreadpoolController().select(internal_api="openblas").lib_controllers:
            if "numpy" in lib.filepath:
                get = lib.dynlib[lib._get_symbol("openblas_get_num_threads")]  # the C calls, not the wrappers
                set_ = lib.dynlib[lib._get_symbol("openblas_set_num_threads")]
                get.restype, set_.restype = int, None
                return get, set_, max(1, int(get()))
    except Exception:  # no threadpoolctl, or a build without these symbols: leave BLAS alone
        return None
    return None


class _Policy:
    """The BLAS thread count products get: 1 for small ones, else the count the process chose
    (``threadpool_limits``, ``cpu:threads=N``, OPENBLAS_NUM_THREADS). A count found that this
    policy did not set was set by someone else, and becomes the count for large products."""

    def __init__(self, get: Callable[[], int], set_: Callable[[int], None], initial: int) -> None:
        self.get, self.set, self.chosen, self.ours = get, set_, initial, initial

    def use(self, small: bool) -> None:
        n = self.get()
        if n != self.ours:
            self.chosen = n
        want = 1 if small else self.chosen
        if n != want:
            self.set(want)
        self.ours = want


@functools.cache
def _policy() -> _Policy | None:
    threads = _openblas_threads()
    return None if threads is None else _Policy(*threads)


def matmul_for(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...]) -> Callable[..., Any]:
    """``np.matmul`` for these shapes (called ``f(a, b[, out])``): a small product runs on one
    BLAS thread, a large one on the count the process chose.

    The count is switched only when a product needs the other one, not restored after each
    call: waking OpenBLAS's pool on every restore is what makes its threads spin."""
    policy = _policy()
    if policy is None:
        return np.matmul
    small = matmul_flops(a, out) < SMALL_FLOPS
    use, matmul = policy.use, np.matmul

    def policed_matmul(x, w, out=None):
        use(small)
        return matmul(x, w, out)

    return policed_matmul
