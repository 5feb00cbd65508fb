"""Numba loops for the optimizer updates in ``train.py`` (imported only when Numba is present).

Each loop applies an update rule of ``caramba.ops.train`` in one pass over flattened float64
arrays (inputs, then outputs, then the scalars of the element function); compiled code is
cached on disk (``jitcache.py``). Nothing compiles at import: a loop compiles at its first call
and a ``<rule>_block`` C function when it is first asked for (module ``__getattr__``), so a
graph that uses one optimizer compiles that one only.
"""

from __future__ import annotations

import functools

import numpy as np

from caramba.backends.cpu import jitcache

jitcache.setup()  # before any cached function below is defined

from numba import carray, cfunc, literal_unroll, njit  # noqa: E402

from caramba.backends.cpu.native import BLOCK_SIG, ptr_float64, run_blocks  # noqa: E402
from caramba.ops import train as t  # noqa: E402

JIT = dict(cache=True, nogil=True, error_model="numpy")  # IEEE division (inf/nan), so loops vectorize
CFUNC = dict(cache=True, error_model="numpy")
ELEMS = (t.sgd_elem, t.adam_elem, t.adamax_elem, t.rmsprop_elem, t.adagrad_elem, t.lion_elem, t.lamb_dir_elem)


@njit(cache=True)
def _cache_probe():  # never called: its cache says where this module's compiled code lives
    return 0


def _drop_stale_cache() -> None:
    """Numba's disk cache notices edits to this file only, but the loops inline the element
    rules of ``ops/train.py``: after an edit there, cached loops would run the old rule. The
    rules' source is stamped next to the cache; when it changed, this module's cached code is
    dropped before anything below compiles."""
    import inspect

    jitcache.drop_stale(_cache_probe, __file__, "".join(inspect.getsource(f) for f in ELEMS))


_drop_stale_cache()

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
def sgd_f32(p, g, buf, p_out, buf_out, lr, gs, momentum, one_minus_dampening, nesterov, wd, use_wd, use_momentum):
    """``sgd_elem`` on float32 arrays with every scalar already float32: each operation is the one
    NumPy performs on float32 arrays with Python-float scalars (the scalar rounded to float32,
    the operation in float32; ``1 - dampening`` computed in float64 first, as Python does), so
    the bits equal the NumPy path's (tests/unit/backends/cpu/test_train_chunked.py). The
    generic loop cannot be used for float32: Numba would keep ``1.0 - dampening`` in float64."""
    for i in range(p.size):
        gi = g[i] * gs
        if use_wd:
            gi = gi + wd * p[i]
        if use_momentum:
            b = momentum * buf[i] + one_minus_dampening * gi
            d = gi + momentum * b if nesterov else b
            buf_out[i] = b
        else:
            d = gi
            buf_out[i] = buf[i]
        p_out[i] = p[i] - lr * d


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


# ---- the same loops on the cpu backend's native helpers (backends/cpu/native.py) ------------
#
# A block's argument block is [n, address of each array (inputs, then outputs), address of the
# float64 scalars]; ``<rule>_block`` runs the loop on elements lo..hi, ``split`` fills the block
# and runs one rule's blocks on the helpers.


@njit(inline="always", error_model="numpy")
def _v(a, i, lo, hi):
    return carray(ptr_float64(a[1 + i]), (a[0],))[lo:hi]


@njit(inline="always", error_model="numpy")
def _s(a, arrays, count):
    return carray(ptr_float64(a[1 + arrays]), (count,))


def _sgd_block(a, lo, hi):
    s = _s(a, 5, 6)
    sgd(_v(a, 0, lo, hi), _v(a, 1, lo, hi), _v(a, 2, lo, hi), _v(a, 3, lo, hi), _v(a, 4, lo, hi),
        s[0], s[1], s[2], s[3], s[4], s[5])


def _adam_block(a, lo, hi):
    s = _s(a, 7, 9)
    adam(_v(a, 0, lo, hi), _v(a, 1, lo, hi), _v(a, 2, lo, hi), _v(a, 3, lo, hi), _v(a, 4, lo, hi), _v(a, 5, lo, hi),
         _v(a, 6, lo, hi), s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8])


def _adamax_block(a, lo, hi):
    s = _s(a, 7, 6)
    adamax(_v(a, 0, lo, hi), _v(a, 1, lo, hi), _v(a, 2, lo, hi), _v(a, 3, lo, hi), _v(a, 4, lo, hi),
           _v(a, 5, lo, hi), _v(a, 6, lo, hi), s[0], s[1], s[2], s[3], s[4], s[5])


def _rmsprop_block(a, lo, hi):
    s = _s(a, 7, 6)
    rmsprop(_v(a, 0, lo, hi), _v(a, 1, lo, hi), _v(a, 2, lo, hi), _v(a, 3, lo, hi), _v(a, 4, lo, hi),
            _v(a, 5, lo, hi), _v(a, 6, lo, hi), s[0], s[1], s[2], s[3], s[4], s[5])


def _adagrad_block(a, lo, hi):
    s = _s(a, 5, 4)
    adagrad(_v(a, 0, lo, hi), _v(a, 1, lo, hi), _v(a, 2, lo, hi), _v(a, 3, lo, hi), _v(a, 4, lo, hi),
            s[0], s[1], s[2], s[3])


def _lion_block(a, lo, hi):
    s = _s(a, 5, 5)
    lion(_v(a, 0, lo, hi), _v(a, 1, lo, hi), _v(a, 2, lo, hi), _v(a, 3, lo, hi), _v(a, 4, lo, hi),
         s[0], s[1], s[2], s[3], s[4])


def _lamb_dir_block(a, lo, hi):
    s = _s(a, 7, 7)
    lamb_dir(_v(a, 0, lo, hi), _v(a, 1, lo, hi), _v(a, 2, lo, hi), _v(a, 3, lo, hi), _v(a, 4, lo, hi),
             _v(a, 5, lo, hi), _v(a, 6, lo, hi), s[0], s[1], s[2], s[3], s[4], s[5], s[6])


BLOCKS = ("sgd", "adam", "adamax", "rmsprop", "adagrad", "lion", "lamb_dir")


@functools.cache
def _compiled_block(rule: str):
    return cfunc(BLOCK_SIG, **CFUNC)(globals()[f"_{rule}_block"])


def __getattr__(name: str):
    """``<rule>_block``: the rule's block as a C function, compiled (or loaded from the disk
    cache) on first use: a ``cfunc`` compiles when it is defined."""
    rule = name.removesuffix("_block")
    if name.endswith("_block") and rule in BLOCKS:
        return _compiled_block(rule)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@njit(nogil=True, cache=True)
def split(arrays, scalars, boxes, ranges, fn, ctl):
    """Run the rule whose block is at ``fn`` over ``arrays`` (flat float64, C-contiguous)."""
    a = np.empty(len(arrays) + 2, np.int64)
    a[0] = arrays[0].size
    i = 1
    for x in literal_unroll(arrays):  # a heterogeneous tuple: some inputs are read-only
        a[i] = x.ctypes.data
        i += 1
    a[1 + len(arrays)] = scalars.ctypes.data
    run_blocks(boxes, ranges, fn, a.ctypes.data, ctl)
