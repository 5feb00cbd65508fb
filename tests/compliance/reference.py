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


# ---- normalization, convolution, pooling, attention ----------------------------------------------


def per_group(x: np.ndarray, lead: int, fn: Callable[[list[float], tuple[int, ...]], list[float]]) -> np.ndarray:
    """Apply ``fn(values, lead_index)`` to each block x[lead_index] (all trailing axes, row-major)."""
    out = np.empty(x.shape, dtype=np.float64)
    for idx in np.ndindex(*x.shape[:lead]):
        block = x[idx]
        res = fn(scalars(np.asarray(block)), idx)
        out[idx] = np.array(res, dtype=np.float64).reshape(np.shape(block))
    return out


def mp_normalize(xs: list[float], eps: float, center: bool) -> list[Any]:
    """(x - mean) / sqrt(var + eps) (center) or x / sqrt(mean(x^2) + eps), in mpmath."""
    n = len(xs)
    m = mp.fsum(xs) / n if center else mp.mpf(0)
    var = mp.fsum((mp.mpf(v) - m) ** 2 for v in xs) / n
    r = 1 / mp.sqrt(var + mp.mpf(eps))
    return [(mp.mpf(v) - m) * r for v in xs]


def conv_loop(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride, padding, dilation, groups) -> Expect:
    """Cross-correlation by explicit loops over [N, O, *out] and [C/g, *K] (zero padding)."""
    nd = x.ndim - 2
    n = x.shape[0]
    o, cg = w.shape[:2]
    ks = w.shape[2:]
    og = o // groups
    out_sp = tuple((x.shape[2 + i] + 2 * padding[i] - dilation[i] * (ks[i] - 1) - 1) // stride[i] + 1 for i in range(nd))
    out = np.empty((n, o) + out_sp, dtype=np.float64)
    scale = np.empty(out.shape, dtype=np.float64)
    xf, wf = x.astype(np.float64), w.astype(np.float64)
    for bi in range(n):
        for oi in range(o):
            g = oi // og
            for p in np.ndindex(*out_sp):
                terms = []
                for ci in range(cg):
                    for kk in np.ndindex(*ks):
                        pos = tuple(p[i] * stride[i] + kk[i] * dilation[i] - padding[i] for i in range(nd))
                        if all(0 <= pos[i] < x.shape[2 + i] for i in range(nd)):
                            terms.append(float(xf[(bi, g * cg + ci) + pos]) * float(wf[(oi, ci) + kk]))
                if b is not None:
                    terms.append(float(b[oi]))
                out[(bi, oi) + p] = math.fsum(terms)
                scale[(bi, oi) + p] = math.fsum(abs(t) for t in terms)
    return Expect(out, scale)


def pool_loop(x: np.ndarray, kernel, stride, padding, kind: str) -> np.ndarray:
    """max (padding is -inf) or average (padding counts as zeros) over 2-D windows."""
    n, c, h, w = x.shape
    oh = (h + 2 * padding[0] - kernel[0]) // stride[0] + 1
    ow = (w + 2 * padding[1] - kernel[1]) // stride[1] + 1
    out = np.empty((n, c, oh, ow), dtype=np.float64)
    for bi, ci, i, j in np.ndindex(n, c, oh, ow):
        vals = []
        for a, b in np.ndindex(*kernel):
            r, s = i * stride[0] + a - padding[0], j * stride[1] + b - padding[1]
            inside = 0 <= r < h and 0 <= s < w
            vals.append(float(x[bi, ci, r, s]) if inside else (-math.inf if kind == "max" else 0.0))
        out[bi, ci, i, j] = max(vals) if kind == "max" else math.fsum(vals) / len(vals)
    return out


def sdpa_loop(q, k, v, mask=None, scale=None, causal=False) -> Expect:
    """softmax(q k^T * scale + mask) v per batch index, in mpmath; scale = max|v| (1 + max|s|)."""
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    tq, d = q.shape[-2:]
    tk, dv = v.shape[-2:]
    sc = mp.mpf(1) / mp.sqrt(d) if scale is None else mp.mpf(scale)
    qb = np.broadcast_to(q, batch + q.shape[-2:])
    kb = np.broadcast_to(k, batch + k.shape[-2:])
    vb = np.broadcast_to(v, batch + v.shape[-2:])
    mb = None if mask is None else np.broadcast_to(mask, batch + (tq, tk))
    out = np.empty(batch + (tq, dv), dtype=np.float64)
    err = np.empty(out.shape, dtype=np.float64)
    with mp.workdps(DPS):
        for bi in np.ndindex(*batch):
            for i in range(tq):
                s = []
                for j in range(tk):
                    val = mp.fsum(mp.mpf(float(qb[bi][i, t])) * mp.mpf(float(kb[bi][j, t])) for t in range(d)) * sc
                    if mb is not None:
                        mval = mb[bi][i, j]
                        if mb.dtype == np.bool_:
                            val = val if mval else -mp.inf
                        else:
                            val = val + mp.mpf(float(mval))
                    if causal and j > i + (tk - tq):
                        val = -mp.inf
                    s.append(val)
                top = max(s)
                e = [mp.exp(x - top) if x != -mp.inf else mp.mpf(0) for x in s]
                tot = mp.fsum(e)
                p = [x / tot for x in e]
                vmax = max((abs(float(vb[bi][j, c])) for j in range(tk) for c in range(dv)), default=0.0)
                smax = max((abs(float(x)) for x in s if x != -mp.inf), default=0.0)
                for c in range(dv):
                    out[bi + (i, c)] = float(mp.fsum(p[j] * mp.mpf(float(vb[bi][j, c])) for j in range(tk)))
                    err[bi + (i, c)] = vmax * (1.0 + smax)
    return Expect(out, err)


def rope_loop(x: np.ndarray, base: float, offset: int, inv_freq: Sequence[float] = (), scale: float = 1.0) -> Expect:
    """Rotate-half RoPE in mpmath: angle = (offset + t) * f_i with f_i = inv_freq[i] if given,
    else base^(-2i/dim); cos and sin times ``scale``. Error scale = scale (|x1| + |x2|) (1 + angle)."""
    t_len, dim = x.shape[-2:]
    half = dim // 2
    out = np.empty(x.shape, dtype=np.float64)
    err = np.empty(x.shape, dtype=np.float64)
    with mp.workdps(DPS):
        freqs = [mp.mpf(float(f)) for f in inv_freq] or [mp.power(mp.mpf(base), -mp.mpf(2 * i) / dim) for i in range(half)]
        sc = mp.mpf(float(scale))
        for lead in np.ndindex(*x.shape[:-2]):
            for t in range(t_len):
                for i in range(half):
                    ang = (offset + t) * freqs[i]
                    cs, sn = sc * mp.cos(ang), sc * mp.sin(ang)
                    x1, x2 = mp.mpf(float(x[lead + (t, i)])), mp.mpf(float(x[lead + (t, half + i)]))
                    out[lead + (t, i)] = float(x1 * cs - x2 * sn)
                    out[lead + (t, half + i)] = float(x2 * cs + x1 * sn)
                    e = float(sc * (abs(x1) + abs(x2)) * (1 + abs(ang)))
                    err[lead + (t, i)] = err[lead + (t, half + i)] = e
    return Expect(out, err)
