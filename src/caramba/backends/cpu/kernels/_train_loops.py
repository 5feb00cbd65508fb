"""Numba loops for the optimizer updates in ``train.py`` (imported only when Numba is present).

Each loop applies an update rule of ``caramba.ops.train`` in one pass over flattened float64
arrays (inputs, then outputs, then the scalars of the element function); the ``<rule>_f32``
loops do the same over float32 arrays in float32 operations (see below); compiled code is
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

from caramba.backends.cpu.native import BLOCK_SIG, ptr_float32, ptr_float64, run_blocks  # noqa: E402
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


# ---- float32 loops ---------------------------------------------------------------------------
#
# NumPy evaluates a rule on float32 arrays with Python-float scalars in float32: each scalar is
# rounded to float32 where it meets an array (NEP 50: Python floats are "weak"), and a
# subexpression of scalars alone (``1.0 - b1``, ``1.0 - lr * wd``) is computed by Python in
# float64 first. The ``<rule>_f32`` loops take those scalars already rounded, in one float32
# array ``s`` (``train._f32_scalars``; a flag is 0 or 1), and perform the rule's float32
# operations in its order, so their bits equal the NumPy path's
# (tests/unit/backends/cpu/test_train_f32.py). The generic loops above cannot be used for
# float32: Numba would keep the scalars in float64 and round once at the end. One array of
# scalars instead of a dozen NumPy scalars keeps a call cheap (Numba's dispatcher types a NumPy
# scalar argument slowly: 10 us a call with 12 of them, 1 us with arrays only).


@njit(inline="always", error_model="numpy")
def _max32(x, y):  # np.maximum: the first operand when it is NaN, else the second when that is
    return x if x >= y or x != x else y


@njit(inline="always", error_model="numpy")
def _sign32(x):  # np.sign of a float: +-1, 0 for either zero (+0.0), NaN for NaN
    if x > 0:
        return np.float32(1.0)
    if x < 0:
        return np.float32(-1.0)
    return x if x != x else np.float32(0.0)


@njit(**JIT)
def sgd_f32(p, g, buf, p_out, buf_out, s):
    """s: lr, gs, momentum, 1 - dampening, nesterov, wd, wd != 0, momentum != 0."""
    lr, gs, momentum, one_minus_dampening, wd = s[0], s[1], s[2], s[3], s[5]
    nesterov, use_wd, use_momentum = s[4] != 0, s[6] != 0, s[7] != 0
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
def adam_f32(p, g, m, v, p_out, m_out, v_out, s):
    """s: gs, wd, b1, 1 - b1, b2, 1 - b2, 1 - lr*wd (AdamW's decay), step_size, sqrt_c2, eps,
    coupled (wd*p added to the gradient: Adam with weight decay), decoupled (AdamW)."""
    gs, wd, b1, one_minus_b1, b2, one_minus_b2 = s[0], s[1], s[2], s[3], s[4], s[5]
    decay, step_size, sqrt_c2, eps = s[6], s[7], s[8], s[9]
    coupled, decoupled = s[10] != 0, s[11] != 0
    for i in range(p.size):
        gi = g[i] * gs
        if coupled:
            gi = gi + wd * p[i]
        mi = b1 * m[i] + one_minus_b1 * gi
        vi = b2 * v[i] + one_minus_b2 * gi * gi
        pi = p[i] * decay if decoupled else p[i]
        p_out[i] = pi - step_size * (mi / (np.sqrt(vi) / sqrt_c2 + eps))
        m_out[i] = mi
        v_out[i] = vi


@njit(**JIT)
def adamax_f32(p, g, m, u, p_out, m_out, u_out, s):
    """s: gs, wd, b1, 1 - b1, b2, eps, step_size, wd != 0."""
    gs, wd, b1, one_minus_b1, b2, eps, step_size = s[0], s[1], s[2], s[3], s[4], s[5], s[6]
    use_wd = s[7] != 0
    for i in range(p.size):
        gi = g[i] * gs
        if use_wd:
            gi = gi + wd * p[i]
        mi = b1 * m[i] + one_minus_b1 * gi
        ui = _max32(b2 * u[i], abs(gi) + eps)
        p_out[i] = p[i] - step_size * (mi / ui)
        m_out[i] = mi
        u_out[i] = ui


@njit(**JIT)
def rmsprop_f32(p, g, v, buf, p_out, v_out, buf_out, s):
    """s: lr, gs, wd, alpha, 1 - alpha, eps, momentum, wd != 0, momentum != 0."""
    lr, gs, wd, alpha, one_minus_alpha, eps, momentum = s[0], s[1], s[2], s[3], s[4], s[5], s[6]
    use_wd, use_momentum = s[7] != 0, s[8] != 0
    for i in range(p.size):
        gi = g[i] * gs
        if use_wd:
            gi = gi + wd * p[i]
        vi = alpha * v[i] + one_minus_alpha * gi * gi
        d = gi / (np.sqrt(vi) + eps)
        if use_momentum:
            d = momentum * buf[i] + d
        buf_out[i] = d if use_momentum else buf[i]
        p_out[i] = p[i] - lr * d
        v_out[i] = vi


@njit(**JIT)
def adagrad_f32(p, g, acc, p_out, acc_out, s):
    """s: lr, gs, wd, eps, wd != 0."""
    lr, gs, wd, eps = s[0], s[1], s[2], s[3]
    use_wd = s[4] != 0
    for i in range(p.size):
        gi = g[i] * gs
        if use_wd:
            gi = gi + wd * p[i]
        ai = acc[i] + gi * gi
        p_out[i] = p[i] - lr * (gi / (np.sqrt(ai) + eps))
        acc_out[i] = ai


@njit(**JIT)
def lion_f32(p, g, m, p_out, m_out, s):
    """s: lr, gs, b1, 1 - b1, b2, 1 - b2, 1 - lr*wd."""
    lr, gs, b1, one_minus_b1, b2, one_minus_b2, decay = s[0], s[1], s[2], s[3], s[4], s[5], s[6]
    for i in range(p.size):
        gi = g[i] * gs
        c = b1 * m[i] + one_minus_b1 * gi
        p_out[i] = p[i] * decay - lr * _sign32(c)
        m_out[i] = b2 * m[i] + one_minus_b2 * gi


@njit(**JIT)
def lamb_dir_f32(p, g, m, v, r_out, m_out, v_out, s):
    """s: gs, b1, 1 - b1, b2, 1 - b2, eps, wd, c1, c2."""
    gs, b1, one_minus_b1, b2, one_minus_b2, eps, wd, c1, c2 = s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8]
    for i in range(p.size):
        gi = g[i] * gs
        mi = b1 * m[i] + one_minus_b1 * gi
        vi = b2 * v[i] + one_minus_b2 * gi * gi
        r_out[i] = (mi / c1) / (np.sqrt(vi / c2) + eps) + wd * p[i]
        m_out[i] = mi
        v_out[i] = vi


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


@njit(inline="always", error_model="numpy")
def _v32(a, i, lo, hi):
    return carray(ptr_float32(a[1 + i]), (a[0],))[lo:hi]


@njit(inline="always", error_model="numpy")
def _s32(a, arrays, count):
    return carray(ptr_float32(a[1 + arrays]), (count,))


def _sgd_f32_block(a, lo, hi):
    sgd_f32(_v32(a, 0, lo, hi), _v32(a, 1, lo, hi), _v32(a, 2, lo, hi), _v32(a, 3, lo, hi), _v32(a, 4, lo, hi),
            _s32(a, 5, 8))


def _adam_f32_block(a, lo, hi):
    adam_f32(_v32(a, 0, lo, hi), _v32(a, 1, lo, hi), _v32(a, 2, lo, hi), _v32(a, 3, lo, hi), _v32(a, 4, lo, hi),
             _v32(a, 5, lo, hi), _v32(a, 6, lo, hi), _s32(a, 7, 12))


def _adamax_f32_block(a, lo, hi):
    adamax_f32(_v32(a, 0, lo, hi), _v32(a, 1, lo, hi), _v32(a, 2, lo, hi), _v32(a, 3, lo, hi), _v32(a, 4, lo, hi),
               _v32(a, 5, lo, hi), _v32(a, 6, lo, hi), _s32(a, 7, 8))


def _rmsprop_f32_block(a, lo, hi):
    rmsprop_f32(_v32(a, 0, lo, hi), _v32(a, 1, lo, hi), _v32(a, 2, lo, hi), _v32(a, 3, lo, hi), _v32(a, 4, lo, hi),
                _v32(a, 5, lo, hi), _v32(a, 6, lo, hi), _s32(a, 7, 9))


def _adagrad_f32_block(a, lo, hi):
    adagrad_f32(_v32(a, 0, lo, hi), _v32(a, 1, lo, hi), _v32(a, 2, lo, hi), _v32(a, 3, lo, hi), _v32(a, 4, lo, hi),
                _s32(a, 5, 5))


def _lion_f32_block(a, lo, hi):
    lion_f32(_v32(a, 0, lo, hi), _v32(a, 1, lo, hi), _v32(a, 2, lo, hi), _v32(a, 3, lo, hi), _v32(a, 4, lo, hi),
             _s32(a, 5, 7))


def _lamb_dir_f32_block(a, lo, hi):
    lamb_dir_f32(_v32(a, 0, lo, hi), _v32(a, 1, lo, hi), _v32(a, 2, lo, hi), _v32(a, 3, lo, hi), _v32(a, 4, lo, hi),
                 _v32(a, 5, lo, hi), _v32(a, 6, lo, hi), _s32(a, 7, 9))


BLOCKS = ("sgd", "adam", "adamax", "rmsprop", "adagrad", "lion", "lamb_dir",
          "sgd_f32", "adam_f32", "adamax_f32", "rmsprop_f32", "adagrad_f32", "lion_f32", "lamb_dir_f32")


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
    """Run the rule whose block is at ``fn`` over ``arrays`` (flat, C-contiguous; float64 with
    float64 ``scalars``, or float32 with float32 ``scalars`` for a ``<rule>_f32`` block)."""
    a = np.empty(len(arrays) + 2, np.int64)
    a[0] = arrays[0].size
    i = 1
    for x in literal_unroll(arrays):  # a heterogeneous tuple: some inputs are read-only
        a[i] = x.ctypes.data
        i += 1
    a[1 + len(arrays)] = scalars.ctypes.data
    run_blocks(boxes, ranges, fn, a.ctypes.data, ctl)
