"""Numba loops for the optimizer updates in ``train.py`` (imported only when Numba is present).

Each loop applies an update rule of ``caramba.ops.train`` in one pass over flattened float64
arrays (inputs, then outputs, then the scalars of the element function); compiled code is
cached on disk.
"""

from __future__ import annotations

from numba import njit

from caramba.ops import train as t

JIT = dict(cache=True, nogil=True, error_model="numpy")  # IEEE division (inf/nan), so loops vectorize

_sgd = njit(inline="always", error_model="numpy")(t.sgd_elem)
_adam = njit(inline="always", error_model="numpy")(t.adam_elem)
_adamax = njit(inline="always", error_model="numpy")(t.adamax_elem)
_rmsprop = njit(inline="always", error_model="numpy")(t.rmsprop_elem)
_adagrad = njit(inline="always", error_model="numpy")(t.adagrad_elem)
_lion = njit(inline="always", error_model="numpy")(t.lion_elem)
_lamb_dir = njit(inline="always", error_model="numpy")(t.lamb_dir_elem)


@njit(**JIT)
def sgd(p, g, buf, p_out, buf_out, lr, gs, momentum, dampening, nesterov, wd):
    for i in range(p.size):
        p_out[i], buf_out[i] = _sgd(p[i], g[i], buf[i], lr, gs, momentum, dampening, nesterov, wd)


@njit(**JIT)
def adam(p, g, m, v, p_out, m_out, v_out, lr, gs, b1, b2, eps, wd, decoupled, step_size, sqrt_c2):
    for i in range(p.size):
        p_out[i], m_out[i], v_out[i] = _adam(p[i], g[i], m[i], v[i], lr, gs, b1, b2, eps, wd, decoupled, step_size, sqrt_c2)


@njit(**JIT)
def adamax(p, g, m, u, p_out, m_out, u_out, gs, b1, b2, eps, wd, step_size):
    for i in range(p.size):
        p_out[i], m_out[i], u_out[i] = _adamax(p[i], g[i], m[i], u[i], gs, b1, b2, eps, wd, step_size)


@njit(**JIT)
def rmsprop(p, g, v, buf, p_out, v_out, buf_out, lr, gs, alpha, eps, momentum, wd):
    for i in range(p.size):
        p_out[i], v_out[i], buf_out[i] = _rmsprop(p[i], g[i], v[i], buf[i], lr, gs, alpha, eps, momentum, wd)


@njit(**JIT)
def adagrad(p, g, s, p_out, s_out, lr, gs, eps, wd):
    for i in range(p.size):
        p_out[i], s_out[i] = _adagrad(p[i], g[i], s[i], lr, gs, eps, wd)


@njit(**JIT)
def lion(p, g, m, p_out, m_out, lr, gs, b1, b2, wd):
    for i in range(p.size):
        p_out[i], m_out[i] = _lion(p[i], g[i], m[i], lr, gs, b1, b2, wd)


@njit(**JIT)
def lamb_dir(p, g, m, v, r_out, m_out, v_out, gs, b1, b2, eps, wd, c1, c2):
    for i in range(p.size):
        r_out[i], m_out[i], v_out[i] = _lamb_dir(p[i], g[i], m[i], v[i], gs, b1, b2, eps, wd, c1, c2)
