"""Float64 / arbitrary-precision references that share no code with any backend kernel.

Elementwise functions are evaluated per element on Python scalars (``math``, ``mpmath``);
reductions, norms, convolutions, pooling and attention are explicit loops over ``np.ndindex``
on small sizes. NumPy is used only to hold values and to broadcast/index them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import mpmath as mp
import numpy as np

from .harness import Expect

DPS = 40  # decimal digits for mpmath references: far beyond float64


def scalars(x: np.ndarray) -> list[Any]:
    """Exact Python scalars (int, float, bool) of ``x`` in row-major order."""
    if x.dtype.kind == "f":
        return [float(v) for v in x.astype(np.float64).ravel()]
    return x.ravel().tolist()


def elementwise(fn: Callable[..., Any], with_attrs: bool = False) -> Callable[..., np.ndarray]:
    """Reference ``ref(*arrays, **attrs)`` applying ``fn`` to broadcast Python scalars one at a
    time (passing the op's attributes too if ``with_attrs``). Int results stay exact Python ints
    (object array), bools become a bool array, anything else float64."""

    def ref(*arrays: np.ndarray, **attrs: Any) -> np.ndarray:
        kw = attrs if with_attrs else {}
        b = np.broadcast_arrays(*arrays)
        shape = b[0].shape
        cols = [scalars(np.ascontiguousarray(a)) for a in b]
        res = [fn(*vs, **kw) for vs in zip(*cols)]
        if res and all(isinstance(v, bool) for v in res):
            return np.array(res, dtype=bool).reshape(shape)
        if res and all(isinstance(v, int) for v in res):
            return np.array(res, dtype=object).reshape(shape)
        return np.array(res, dtype=np.float64).reshape(shape)

    return ref


def _to_float(v: Any) -> float:
    if isinstance(v, mp.mpc):
        return float(v.real) if v.imag == 0 else math.nan
    return float(v)


def mpfn(f: Callable[..., Any]) -> Callable[..., float]:
    """A scalar function evaluated in mpmath at DPS digits: NaN in -> NaN out, complex -> NaN."""

    def g(*xs: float, **attrs: Any) -> float:
        if any(isinstance(x, float) and math.isnan(x) for x in xs):
            return math.nan
        with mp.workdps(DPS):
            return _to_float(f(*(mp.mpf(x) for x in xs), **attrs))

    return g


def mp_unary(f: Callable[..., Any], with_attrs: bool = False) -> Callable[..., np.ndarray]:
    return elementwise(mpfn(f), with_attrs)


def mp_unary_cond(f: Callable[..., Any], with_attrs: bool = False) -> Callable[..., Expect]:
    """Like ``mp_unary``, with the error scale ``|x f'(x)|``: what a half-ulp perturbation of an
    argument the kernel must compute (``x / sqrt 2``, ``beta * x``) may legitimately cost. Used for
    tails of composite functions, where a relative tolerance alone is the wrong yardstick."""

    def ref(x: np.ndarray, **attrs: Any) -> Expect:
        kw = attrs if with_attrs else {}
        vals, scales = [], []
        with mp.workdps(DPS):
            for v in scalars(x):
                t = mp.mpf(v)
                vals.append(_to_float(f(t, **kw)))
                scales.append(abs(float(t * mp.diff(lambda s: f(s, **kw), t))))
        return Expect(np.array(vals).reshape(x.shape), np.array(scales).reshape(x.shape))

    return ref


# ---- special functions written once in mpmath ------------------------------------------------


def mp_gelu(x: Any) -> Any:
    return x * mp.ncdf(x)


def mp_gelu_tanh(x: Any) -> Any:
    with mp.extradps(150):  # 1 + tanh(z) cancels ~0.87|z| digits in the negative tail
        z = mp.sqrt(2 / mp.pi) * (x + mp.mpf("0.044715") * x**3)
        return x * (1 + mp.tanh(z)) / 2


def mp_sigmoid(x: Any) -> Any:
    if mp.isinf(x):
        return mp.mpf(1) if x > 0 else mp.mpf(0)
    return 1 / (1 + mp.exp(-x))


def mp_softplus(x: Any, beta: float = 1.0) -> Any:
    b = mp.mpf(beta)
    if mp.isinf(x):
        return x if x > 0 else mp.mpf(0)
    return mp.log1p(mp.exp(b * x)) / b


SELU_ALPHA = mp.mpf("1.6732632423543772848170429916717")
SELU_SCALE = mp.mpf("1.0507009873554804934193349852946")


def mp_selu(x: Any) -> Any:
    return SELU_SCALE * (x if x > 0 else SELU_ALPHA * mp.expm1(x))


# ---- reductions as explicit loops ------------------------------------------------------------


def norm_axes(axes: Iterable[int] | None, rank: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(rank))
    return tuple(sorted(a % rank for a in axes)) if rank else ()


def reduce_loop(
    x: np.ndarray, axes: Iterable[int] | None, keepdims: bool, fn: Callable[[list[Any]], Any], dtype: Any = np.float64
) -> np.ndarray:
    """out[i] = fn(elements of x reduced into output position i), by explicit iteration."""
    ax = norm_axes(axes, x.ndim)
    keep_shape = tuple(1 if i in ax else s for i, s in enumerate(x.shape))
    red_shape = tuple(x.shape[i] for i in ax)
    out = np.empty(keep_shape, dtype=dtype)
    for idx in np.ndindex(*keep_shape):
        items = []
        for r in np.ndindex(*red_shape):
            full = list(idx)
            for a, k in zip(ax, r):
                full[a] = k
            items.append(x[tuple(full)])
        out[idx] = fn(scalars(np.array(items, dtype=x.dtype)))
    if not keepdims:
        out = out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in ax))
    return out


def along(x: np.ndarray, axis: int, fn: Callable[[list[Any]], Sequence[Any]]) -> np.ndarray:
    """Apply ``fn`` (list -> same-length list) to every 1-D lane of ``x`` along ``axis``."""
    axis %= x.ndim
    out = np.empty(x.shape, dtype=np.float64)
    other = tuple(s for i, s in enumerate(x.shape) if i != axis)
    for idx in np.ndindex(*other):
        sl = list(idx)
        sl.insert(axis, slice(None))
        out[tuple(sl)] = fn(scalars(x[tuple(sl)]))
    return out


def fsum_scale(xs: list[float]) -> float:
    return math.fsum(abs(v) for v in xs)


def mp_logsumexp(xs: list[float]) -> float:
    if not xs:
        return -math.inf
    if any(math.isnan(v) for v in xs):
        return math.nan
    if math.inf in xs:
        return math.inf
    with mp.workdps(DPS):
        return float(mp.log(mp.fsum(mp.exp(mp.mpf(v)) for v in xs)))


def mp_softmax(xs: list[float]) -> list[float]:
    with mp.workdps(DPS):
        es = [mp.exp(mp.mpf(v)) for v in xs]
        s = mp.fsum(es)
        return [float(e / s) for e in es]


def mp_log_softmax(xs: list[float]) -> list[float]:
    with mp.workdps(DPS):
        lse = mp.log(mp.fsum(mp.exp(mp.mpf(v)) for v in xs))
        return [float(mp.mpf(v) - lse) for v in xs]


def matmul_loop(a: np.ndarray, b: np.ndarray) -> Expect:
    """NumPy matmul semantics by explicit loops; scale = sum_k |a_ik b_kj| (rounding grows with it)."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a3 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b3 = np.broadcast_to(b2, batch + b2.shape[-2:])
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    exact = a.dtype.kind in "iu"
    out = np.empty(batch + (m, n), dtype=object if exact else np.float64)
    scale = np.empty(batch + (m, n), dtype=np.float64)
    for bi in np.ndindex(*batch):
        am, bm = a3[bi], b3[bi]
        for i in range(m):
            row = scalars(am[i])
            for j in range(n):
                col = scalars(np.ascontiguousarray(bm[:, j]))
                prods = [row[t] * col[t] for t in range(k)]
                out[bi + (i, j)] = sum(prods) if exact else math.fsum(prods)
                scale[bi + (i, j)] = math.fsum(abs(float(p)) for p in prods)
    if a.ndim == 1:
        out, scale = out[..., 0, :], scale[..., 0, :]
    if b.ndim == 1:
        out, scale = out[..., 0], scale[..., 0]
    return Expect(out, scale)


# ---- data movement by explicit index maps ---------------------------------------------------


def remap(x: np.ndarray, out_shape: Sequence[int], src: Callable[[tuple[int, ...]], Any], fill: Any = 0) -> np.ndarray:
    """out[i] = x[src(i)] for every output index i (``src`` returns None for ``fill``)."""
    out = np.empty(tuple(out_shape), dtype=x.dtype)
    for idx in np.ndindex(*out.shape):
        j = src(idx)
        out[idx] = fill if j is None else x[j]
    return out


def unravel(k: int, shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major multi-index of flat position ``k`` (written out, not np.unravel_index)."""
    idx = []
    for s in reversed(shape):
        idx.append(k % s)
        k //= s
    return tuple(reversed(idx))


def ravel(idx: Sequence[int], shape: Sequence[int]) -> int:
    k = 0
    for i, s in zip(idx, shape):
        k = k * s + i
    return k
