"""Numba loops for the optimizer updates in ``train.py`` (imported only when Numba is present).

Each loop applies the element function of ``train.py`` in parallel over flattened float64
arrays; compiled code is cached on disk.
"""

from __future__ import annotations

from numba import njit, prange

from caramba.backends.cpu.kernels import train as t

_sgd = njit(inline="always")(t.sgd_elem)
_adam = njit(inline="always")(t.adam_elem)
_adamax = njit(inline="always")(t.adamax_elem)
_rmsprop = njit(inline="always")(t.rmsprop_elem)
_adagrad = njit(inline="always")(t.adagrad_elem)
_lion = njit(inline="always")(t.lion_elem)
_lamb_dir = njit(inline="always")(t.lamb_dir_elem)
JIT = dict(parallel=True, cache=True, nogil=True)


@njit(**JIT)
def sgd(p, g, b, po, bo, *s):
    for i in prange(p.size):
        po[i], bo[i] = _sgd(p[i], g[i], b[i], *s)


@njit(**JIT)
def adam(p, g, m, v, po, mo, vo, *s):
    for i in prange(p.size):
        po[i], mo[i], vo[i] = _adam(p[i], g[i], m[i], v[i], *s)


@njit(**JIT)
def adamax(p, g, m, u, po, mo, uo, *s):
    for i in prange(p.size):
        po[i], mo[i], uo[i] = _adamax(p[i], g[i], m[i], u[i], *s)


@njit(**JIT)
def rmsprop(p, g, v, b, po, vo, bo, *s):
    for i in prange(p.size):
        po[i], vo[i], bo[i] = _rmsprop(p[i], g[i], v[i], b[i], *s)


@njit(**JIT)
def adagrad(p, g, a, po, ao, *s):
    for i in prange(p.size):
        po[i], ao[i] = _adagrad(p[i], g[i], a[i], *s)


@njit(**JIT)
def lion(p, g, m, po, mo, *s):
    for i in prange(p.size):
        po[i], mo[i] = _lion(p[i], g[i], m[i], *s)


@njit(**JIT)
def lamb_dir(p, g, m, v, ro, mo, vo, *s):
    for i in prange(p.size):
        ro[i], mo[i], vo[i] = _lamb_dir(p[i], g[i], m[i], v[i], *s)
