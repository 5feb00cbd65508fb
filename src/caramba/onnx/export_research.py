"""ONNX lowerings of the research op families: ``fft.*``, ``vsa.*``, ``causal.*`` estimators and
``hawkes.*`` (log-likelihood, intensity, kernel matrix and their VJP op).

Each rule registers into ``caramba.onnx.export.RULES`` (imported at the end of ``export.py``, like
the train.* rules, so the onnx backend and ``caramba export --format onnx`` both see them; an op
without a rule is refused at lowering) and
uses only ONNX operators whose float64 and float32 kernels ONNX Runtime's CPU provider has
(MatMul, Gather, ReduceSum, Exp, Log, Sqrt, Div, Where, Scan, ...). The capability table
(``caramba/backends/onnx/capabilities.py``) claims float64 and float32 for each op lowered here.

- ``fft.rfft`` / ``fft.irfft``: one MatMul with a precomputed real DFT matrix (an
  initializer; twiddles computed in extended precision and rounded once). ORT's own ``DFT``
  is accurate for powers of two only (~100 ulps of sum|x| at n = 1500, measured with
  onnxruntime 1.32), so it is not used. The matrix is O(n^2): lengths above ``MAX_DFT`` are
  refused at lowering (UnsupportedOperation) rather than computed approximately.
- ``vsa.bind`` (hrr): rfft both operands, complex product (conjugate for ``unbind``), irfft, as
  in ``caramba.ops.vsa.bind_xp``; (map) a product. ``vsa.permute``/``inverse_permute``: a
  Gather with the rolled indices (exact). ``vsa.bundle``: ReduceSum (and Sign for map).
  ``vsa.similarity``: dot / sqrt(|a|^2 |b|^2), 0 where a norm is 0.
- ``causal.{backdoor_adjustment, frontdoor_adjustment, cate, iv_estimate}``: the regressions of
  ``caramba.ops.causal.estimator_xp`` with each least squares solved by a QR of the design
  (classical Gram-Schmidt with one re-orthogonalization, "CGS2", as accurate as Householder:
  Giraud et al. 2005) and back substitution, unrolled over the (static, small) regressor count.
  ``causal.{do_calculus, counterfactual}``: a Gauss-Jordan inverse with partial pivoting
  (unrolled over d); ``dag_markov_factorization`` directly; ``causal.vjp`` (every ``of``): the
  analytic VJPs of ``caramba.ops.causal``. (ORT 1.32 fuses ``MatMul(Transpose(A), v)`` with a
  1-D ``v`` into wrong values at optimization level "all": no rule here emits that pattern.)
- ``hawkes.log_likelihood`` and ``hawkes.vjp``: Ozaki's recursion of
  ``caramba.ops.hawkes.log_likelihood_xp`` as an ONNX ``Scan`` over the events (the analytic
  gradient carried alongside for the VJP); intensity and kernel matrix (and their VJPs) as the
  dense formulas of ``intensity_xp`` / ``kernel_matrix_xp``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from onnx import helper

from caramba.errors import UnsupportedOperation
from caramba.ir.dtypes import DType
from caramba.ir.types import ValueType
from caramba.onnx.emitter import TO_ONNX, Emitter
from caramba.onnx.export import RUNTIME_CHECKS, Ctx, reshape, rule
from caramba.ops._define import norm_axis

MAX_DFT = 4096  # longest fft length lowered (the DFT matrix is n x (n + 2) entries)
_PI = np.longdouble("3.14159265358979323846264338327950288419716939937510")


# ---- fft ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=16)
def dft_matrices(n: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(F [n, 2h], G [2h, n]) with h = n//2 + 1: ``x @ F`` is rfft(x) with (real, imaginary)
    interleaved, ``z @ G`` is irfft of the interleaved half spectrum ``z`` (numpy's weights,
    the imaginary parts of the DC and even-n Nyquist terms ignored). Twiddles come from
    extended-precision cos/sin of the reduced angle 2 pi (k t mod n) / n, rounded once (where
    NumPy's longdouble is float64 itself, within ~2 ulps: still far inside the tolerances)."""
    h = n // 2 + 1
    t = np.arange(n, dtype=np.int64)
    k = np.arange(h, dtype=np.int64)
    m = (k[None, :] * t[:, None]) % n  # [n, h]
    ang = (2 * _PI / n) * np.arange(n, dtype=np.longdouble)  # the n distinct angles
    cos_t, sin_t = np.cos(ang).astype(np.float64), np.sin(ang).astype(np.float64)
    # exact zeros and ones at the quarter turns (angle index j n / 4 where that is an integer)
    for j, (cq, sq) in enumerate(((1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0))):
        if (j * n) % 4 == 0:
            cos_t[j * n // 4], sin_t[j * n // 4] = cq, sq
    cos, sin = cos_t[m], sin_t[m]
    f = np.empty((n, 2 * h))
    f[:, 0::2], f[:, 1::2] = cos, -sin
    w = np.full(h, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    g = np.empty((2 * h, n))
    g[0::2, :] = (w[:, None] * cos.T) / n
    g[1::2, :] = -(w[:, None] * sin.T) / n
    g[1, :] = 0.0  # DC imaginary part
    if n % 2 == 0:
        g[2 * h - 1, :] = 0.0  # Nyquist imaginary part
    return f.astype(dtype), g.astype(dtype)


def _check_len(c: Ctx, op: str, n: int) -> None:
    if n > MAX_DFT:
        raise UnsupportedOperation(
            f"{op} of length {n} has no exact ONNX lowering here: the onnx backend computes the transform as a"
            f" matmul with a dense DFT matrix, up to n = {MAX_DFT} (ONNX Runtime's DFT kernel is not accurate"
            " for lengths that are not powers of two)",
            op=op,
            node=c.e.origin,
            hint=f"run this graph on cpu or xla, or use a hypervector/signal length <= {MAX_DFT}",
        )


def rfft_flat(c: Ctx, x: str, n: int, d: DType) -> str:
    """[..., n] -> [..., 2h] interleaved (re, im)."""
    _check_len(c, "fft.rfft", n)
    f, _ = dft_matrices(n, d.numpy.str)
    return c.op("MatMul", x, c.e.const(f, hint="dft"))


def irfft_flat(c: Ctx, z: str, n: int, d: DType) -> str:
    """[..., 2h] interleaved -> [..., n]."""
    _check_len(c, "fft.irfft", n)
    _, g = dft_matrices(n, d.numpy.str)
    return c.op("MatMul", z, c.e.const(g, hint="idft"))


@rule("fft.rfft")
def _rfft(c: Ctx, node, xs, ins):
    t = ins[0]
    return reshape(c, rfft_flat(c, xs[0], t.shape[-1], t.dtype), node.types[0].shape)


@rule("fft.irfft")
def _irfft(c: Ctx, node, xs, ins):
    t = ins[0]
    flat = reshape(c, xs[0], t.shape[:-2] + (t.shape[-2] * 2,))
    return irfft_flat(c, flat, node.attrs["n"], t.dtype)


# ---- vsa ----------------------------------------------------------------------------------
@rule("vsa.bind")
def _bind(c: Ctx, node, xs, ins):
    a, b = xs
    if node.attrs["model"] == "map":
        return c.op("Mul", a, b)
    ta, tb = ins
    d, dt = ta.shape[-1], ta.dtype
    h = d // 2 + 1
    fa = reshape(c, rfft_flat(c, a, d, dt), ta.shape[:-1] + (h, 2))
    fb = reshape(c, rfft_flat(c, b, d, dt), tb.shape[:-1] + (h, 2))
    ar, ai = c.op("Split", fa, c.ints([1, 1]), axis=-1, outputs=2)
    br, bi = c.op("Split", fb, c.ints([1, 1]), axis=-1, outputs=2)
    if node.attrs["unbind"]:  # conj(fa) * fb
        re = c.op("Add", c.op("Mul", ar, br), c.op("Mul", ai, bi))
        im = c.op("Sub", c.op("Mul", ar, bi), c.op("Mul", ai, br))
    else:
        re = c.op("Sub", c.op("Mul", ar, br), c.op("Mul", ai, bi))
        im = c.op("Add", c.op("Mul", ar, bi), c.op("Mul", ai, br))
    lead = node.types[0].shape[:-1]
    z = reshape(c, c.op("Concat", re, im, axis=-1), lead + (2 * h,))
    return irfft_flat(c, z, d, dt)


@rule("vsa.permute", "vsa.inverse_permute")
def _permute(c: Ctx, node, xs, ins):
    d = ins[0].shape[-1]
    s = node.attrs["shift"] * (1 if node.op == "vsa.permute" else -1)
    idx = (np.arange(d, dtype=np.int64) - s) % d
    return c.op("Gather", xs[0], c.e.const(idx, hint="roll"), axis=ins[0].rank - 1)


@rule("vsa.bundle")
def _bundle(c: Ctx, node, xs, ins):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    s = c.op("ReduceSum", xs[0], c.ints([axis]), keepdims=0)
    return c.op("Sign", s) if node.attrs["model"] == "map" else s


@rule("vsa.similarity")
def _similarity(c: Ctx, node, xs, ins):
    a, b = xs
    dt = ins[0].dtype
    last = c.ints([-1])
    dot = c.op("ReduceSum", c.op("Mul", a, b), last, keepdims=0)
    na2 = c.op("ReduceSum", c.op("Mul", a, a), last, keepdims=0)
    nb2 = c.op("ReduceSum", c.op("Mul", b, b), last, keepdims=0)
    den = c.op("Sqrt", c.op("Mul", na2, nb2))
    zero = c.k(0, dt)
    ok = c.op("Greater", den, zero)
    safe = c.op("Where", ok, den, c.k(1, dt))
    return c.op("Where", ok, c.op("Div", dot, safe), zero)


# ---- causal: least squares by CGS2 QR and back substitution --------------------------------
def _col(c: Ctx, x: str, j: int) -> str:
    """Column j of a matrix [n, k] as [n, 1]."""
    return c.op("Slice", x, c.ints([j]), c.ints([j + 1]), c.ints([1]))


def _row(c: Ctx, x: str, i: int, stop: int | None = None) -> str:
    return c.op("Slice", x, c.ints([i]), c.ints([i + 1 if stop is None else stop]), c.ints([0]))


def qr(c: Ctx, z: str, k: int, d: DType) -> tuple[str, str]:
    """Reduced QR of z [n, k] (k >= 1) by classical Gram-Schmidt with re-orthogonalization:
    (Q [n, k], R [k, k] upper triangular). A column in the span of the previous ones gives a
    zero (or tiny) diagonal of R, hence inf/NaN coefficients, as on xla."""
    qs: list[str] = []
    rcols: list[str] = []
    for j in range(k):
        v = _col(c, z, j)
        coef = None
        if j:
            qm = qs[0] if j == 1 else c.op("Concat", *qs, axis=1)  # [n, j]
            qt = c.op("Transpose", qm, perm=[1, 0])
            for _ in range(2):  # twice is enough (Giraud, Langou & Rozloznik 2005)
                cf = c.op("MatMul", qt, v)  # [j, 1]
                v = c.op("Sub", v, c.op("MatMul", qm, cf))
                coef = cf if coef is None else c.op("Add", coef, cf)
        rjj = c.op("Sqrt", c.op("ReduceSum", c.op("Mul", v, v), c.ints([0]), keepdims=1))  # [1, 1]
        qs.append(c.op("Div", v, rjj))
        parts = ([coef] if coef is not None else []) + [rjj]
        if k - j - 1:
            parts.append(c.e.const(np.zeros((k - j - 1, 1), d.numpy), hint="zeros"))
        rcols.append(parts[0] if len(parts) == 1 else c.op("Concat", *parts, axis=0))
    q = qs[0] if k == 1 else c.op("Concat", *qs, axis=1)
    r = rcols[0] if k == 1 else c.op("Concat", *rcols, axis=1)
    return q, r


def _back(c: Ctx, r: str, rhs: str, k: int) -> str:
    """Solve R u = rhs for upper triangular R [k, k], rhs [k, m], by back substitution."""
    rows: list[str] = []  # solution rows i+1 .. k-1
    for i in reversed(range(k)):
        ri = _row(c, r, i)
        b = _row(c, rhs, i)  # [1, m]
        if rows:
            rest = rows[0] if len(rows) == 1 else c.op("Concat", *rows, axis=0)  # [k-1-i, m]
            b = c.op("Sub", b, c.op("MatMul", c.op("Slice", ri, c.ints([i + 1]), c.ints([k]), c.ints([1])), rest))
        rows.insert(0, c.op("Div", b, c.op("Slice", ri, c.ints([i]), c.ints([i + 1]), c.ints([1]))))
    return rows[0] if k == 1 else c.op("Concat", *rows, axis=0)


def _forward_t(c: Ctx, r: str, rhs: str, k: int) -> str:
    """Solve R^T u = rhs for upper triangular R [k, k] (R^T lower), rhs [k, m]."""
    rows: list[str] = []  # solution rows 0 .. i-1
    for i in range(k):
        ci = _col(c, r, i)  # [k, 1]: R[:, i], R[j, i] for j < i is R^T[i, j]
        b = _row(c, rhs, i)
        if rows:
            done = rows[0] if len(rows) == 1 else c.op("Concat", *rows, axis=0)  # [i, m]
            rji = c.op("Transpose", c.op("Slice", ci, c.ints([0]), c.ints([i]), c.ints([0])), perm=[1, 0])  # [1, i]
            b = c.op("Sub", b, c.op("MatMul", rji, done))
        rows.append(c.op("Div", b, c.op("Slice", ci, c.ints([i]), c.ints([i + 1]), c.ints([0]))))
    return rows[0] if k == 1 else c.op("Concat", *rows, axis=0)


def ols(c: Ctx, z: str, y: str, k: int, d: DType) -> tuple[str, str]:
    """(beta [k, m], R [k, k]): beta = argmin |y - z beta|^2 for z [n, k], y [n, m], from
    R beta = Q^T y (``caramba.ops.causal.ols``)."""
    q, r = qr(c, z, k, d)
    return _back(c, r, c.op("MatMul", c.op("Transpose", q, perm=[1, 0]), y), k), r


def ols_vjp(c: Ctx, z: str, y: str, beta: str, r: str, g: str, k: int) -> tuple[str, str]:
    """(dz, dy) for a cotangent g [k, m] on beta (``caramba.ops.causal.ols_vjp``)."""
    u = _back(c, r, _forward_t(c, r, g, k), k)  # (z^T z)^{-1} g
    zu = c.op("MatMul", z, u)
    tr = [1, 0]
    res = c.op("Sub", y, c.op("MatMul", z, beta))
    dz = c.op("Sub", c.op("MatMul", res, c.op("Transpose", u, perm=tr)), c.op("MatMul", zu, c.op("Transpose", beta, perm=tr)))
    return dz, zu


def _roles(op: str, attrs: Any) -> dict[str, tuple[int, ...]]:
    from caramba.ops.causal import ROLES

    return {k: (attrs[k],) if isinstance(attrs[k], int) else tuple(attrs[k]) for k in ROLES[op]}


def _pick(c: Ctx, data: str, cols: tuple[int, ...]) -> str:
    return c.op("Gather", data, c.e.const(np.asarray(cols, np.int64), hint="cols"), axis=1)


def _design(c: Ctx, data: str, cols: tuple[int, ...], n: int, d: DType) -> str:
    ones = c.op("Expand", c.e.const(np.ones((1, 1), d.numpy), hint="one"), c.ints([n, 1]))
    return c.op("Concat", ones, _pick(c, data, cols), axis=1) if cols else ones


def _entry(c: Ctx, beta: str, i: int) -> str:
    """beta[i, 0] as a 0-d tensor."""
    return reshape(c, c.op("Slice", beta, c.ints([i, 0]), c.ints([i + 1, 1]), c.ints([0, 1])), ())


def _scatter_cols(c: Ctx, dz: str, cols: tuple[int, ...], n: int, dcols: int, d: DType) -> str:
    """d data [n, d] from the cotangent of columns ``cols`` of data (a MatMul with a 0/1 matrix)."""
    sel = np.zeros((len(cols), dcols), d.numpy)
    sel[np.arange(len(cols)), list(cols)] = 1
    return c.op("MatMul", dz, c.e.const(sel, hint="scatter"))


def _drop_first(c: Ctx, dz: str, k: int) -> str:
    return c.op("Slice", dz, c.ints([1]), c.ints([k]), c.ints([1]))


def _unit(c: Ctx, k: int, i: int, scale: str, d: DType) -> str:
    """e_i [k, 1] * scale (a 0-d value)."""
    e = np.zeros((k, 1), d.numpy)
    e[i, 0] = 1
    return c.op("Mul", c.e.const(e, hint="unit"), scale)


def _estimator_impl(c: Ctx, op: str, attrs: Any, data: str, t_in: ValueType, ct: str | None) -> str:
    """``caramba.ops.causal.estimator_xp``: the estimate, or with a cotangent d data [n, d]."""
    from caramba.ops.causal import REGRESSORS, EstimationError

    n, dcols = t_in.shape
    dt = t_in.dtype
    roles = _roles(op, attrs)
    k = REGRESSORS[op](roles)
    if n <= k:  # static shapes: checked at lowering, as on xla
        raise EstimationError(f"{op} needs more rows than its {k} regressors, got data [{n}, {dcols}]",
                              hint="feed a bigger batch (a regression needs n > regressors)")
    t, ycol = roles["treatment"], roles["outcome"]
    y = _pick(c, data, ycol)
    grad = ct is not None

    def back(dz: str, cols: tuple[int, ...], kz: int) -> str:
        return _scatter_cols(c, _drop_first(c, dz, kz), cols, n, dcols, dt)

    if op == "causal.backdoor_adjustment":
        cols = t + roles["adjust"]
        z = _design(c, data, cols, n, dt)
        kz = len(cols) + 1
        beta, r = ols(c, z, y, kz, dt)
        if not grad:
            return _entry(c, beta, 1)
        dz, dy = ols_vjp(c, z, y, beta, r, _unit(c, kz, 1, ct, dt), kz)
        return c.op("Add", back(dz, cols, kz), _scatter_cols(c, dy, ycol, n, dcols, dt))
    if op == "causal.frontdoor_adjustment":
        mcol = roles["mediator"]
        mv = _pick(c, data, mcol)
        z1, z2 = _design(c, data, t, n, dt), _design(c, data, mcol + t, n, dt)
        b1, r1 = ols(c, z1, mv, 2, dt)
        b2, r2 = ols(c, z2, y, 3, dt)
        e1, e2 = _entry(c, b1, 1), _entry(c, b2, 1)
        if not grad:
            return c.op("Mul", e1, e2)
        dz1, dm = ols_vjp(c, z1, mv, b1, r1, _unit(c, 2, 1, c.op("Mul", ct, e2), dt), 2)
        dz2, dy = ols_vjp(c, z2, y, b2, r2, _unit(c, 3, 1, c.op("Mul", ct, e1), dt), 3)
        return c.op("Sum", back(dz1, t, 2), back(dz2, mcol + t, 3), _scatter_cols(c, dm, mcol, n, dcols, dt),
                    _scatter_cols(c, dy, ycol, n, dcols, dt))
    if op == "causal.cate":
        cov = roles["covariates"]
        kc = len(cov)
        kz = 2 + 2 * kc
        tv = _pick(c, data, t)
        parts = [_design(c, data, t, n, dt)]
        cv = None
        if kc:
            cv = _pick(c, data, cov)
            parts += [cv, c.op("Mul", tv, cv)]
        z = parts[0] if len(parts) == 1 else c.op("Concat", *parts, axis=1)
        beta, r = ols(c, z, y, kz, dt)
        eff = _entry(c, beta, 1)
        inter = c.op("Slice", beta, c.ints([2 + kc]), c.ints([kz]), c.ints([0])) if kc else None  # [kc, 1]
        if not grad:
            if not kc:
                return c.op("Expand", eff, c.ints([n]))
            return c.op("Add", eff, reshape(c, c.op("MatMul", cv, inter), (n,)))
        # g = [0, sum ct, 0 (kc), ct @ C]
        g_parts = [c.e.const(np.zeros((1, 1), dt.numpy), hint="zeros"),
                   reshape(c, c.op("ReduceSum", ct, c.ints([0]), keepdims=0), (1, 1))]
        if kc:
            g_parts += [c.e.const(np.zeros((kc, 1), dt.numpy), hint="zeros"),
                        c.op("MatMul", c.op("Transpose", cv, perm=[1, 0]), reshape(c, ct, (n, 1)))]
        dz, dy = ols_vjp(c, z, y, beta, r, c.op("Concat", *g_parts, axis=0), kz)
        dzt = c.op("Slice", dz, c.ints([1]), c.ints([2]), c.ints([1]))
        out = [_scatter_cols(c, dy, ycol, n, dcols, dt)]
        if kc:
            dzc = c.op("Slice", dz, c.ints([2]), c.ints([2 + kc]), c.ints([1]))
            dzi = c.op("Slice", dz, c.ints([2 + kc]), c.ints([kz]), c.ints([1]))
            dtv = c.op("Add", dzt, c.op("ReduceSum", c.op("Mul", dzi, cv), c.ints([1]), keepdims=1))
            dc = c.op("Add", c.op("Add", dzc, c.op("Mul", dzi, tv)),
                      c.op("Mul", reshape(c, ct, (n, 1)), reshape(c, inter, (1, kc))))
            out.append(_scatter_cols(c, dc, cov, n, dcols, dt))
        else:
            dtv = dzt
        out.append(_scatter_cols(c, dtv, t, n, dcols, dt))
        return c.op("Sum", *out)
    # iv_estimate: 2SLS
    xcols, zcols = t + roles["covariates"], roles["instruments"] + roles["covariates"]
    kx, kz = len(xcols) + 1, len(zcols) + 1
    x, z = _design(c, data, xcols, n, dt), _design(c, data, zcols, n, dt)
    pi, rz = ols(c, z, x, kz, dt)  # [kz, kx]
    xhat = c.op("MatMul", z, pi)
    beta, rx = ols(c, xhat, y, kx, dt)
    if not grad:
        return reshape(c, beta, (kx,))
    dxhat, dy = ols_vjp(c, xhat, y, beta, rx, reshape(c, ct, (kx, 1)), kx)
    dz, dx = ols_vjp(c, z, x, pi, rz, c.op("MatMul", c.op("Transpose", z, perm=[1, 0]), dxhat), kz)
    dz = c.op("Add", dz, c.op("MatMul", dxhat, c.op("Transpose", pi, perm=[1, 0])))
    return c.op("Sum", back(dx, xcols, kx), back(dz, zcols, kz), _scatter_cols(c, dy, ycol, n, dcols, dt))


@rule("causal.backdoor_adjustment", "causal.frontdoor_adjustment", "causal.cate", "causal.iv_estimate")
def _estimator(c: Ctx, node, xs, ins):
    return _estimator_impl(c, node.op, node.attrs, xs[0], ins[0], None)


def inverse(c: Ctx, a: str, n: int, d: DType) -> str:
    """a^{-1} for a [n, n] by Gauss-Jordan elimination with partial pivoting (row swaps as
    Gathers, so exact), unrolled over the static n. A singular matrix gives inf/NaN."""
    i64 = DType.int64
    ar = np.arange(n, dtype=np.int64)
    aug = c.op("Concat", a, c.e.const(np.eye(n, dtype=d.numpy), hint="eye"), axis=1)  # [n, 2n]
    rows = c.e.const(ar, hint="rows")
    for j in range(n):
        col = reshape(c, _col(c, aug, j), (n,))
        cand = c.op("Where", c.e.const(ar >= j, hint="below"), c.op("Abs", col), c.k(-1, d))
        p = c.op("ArgMax", cand, axis=0, keepdims=1)  # [1]
        jj = c.k(j, i64)
        idx = c.op("Where", c.op("Equal", rows, jj), p, c.op("Where", c.op("Equal", rows, p), jj, rows))
        aug = c.op("Gather", aug, idx, axis=0)
        piv = _row(c, aug, j)  # [1, 2n]
        piv = c.op("Div", piv, c.op("Slice", piv, c.ints([j]), c.ints([j + 1]), c.ints([1])))
        f = c.op("Mul", _col(c, aug, j), c.e.const((ar != j).astype(d.numpy).reshape(n, 1), hint="offdiag"))
        aug = c.op("Sub", aug, c.op("Mul", f, piv))
        aug = c.op("Where", c.e.const((ar == j).reshape(n, 1), hint="pivrow"), piv, aug)
    return c.op("Slice", aug, c.ints([n]), c.ints([2 * n]), c.ints([1]))


def _intervened(c: Ctx, w: str, mask: str, d: DType) -> tuple[str, str]:
    keep = c.op("Where", mask, c.k(0, d), c.k(1, d))
    return c.op("Mul", w, c.op("Unsqueeze", keep, c.ints([0]))), keep


def _do_calculus(c: Ctx, xs: list[str], ins: tuple[ValueType, ...], cts: list[str] | None) -> Any:
    w, b, s, mask, v = xs
    n, d = ins[0].shape[0], ins[0].dtype
    ws, keep = _intervened(c, w, mask, d)
    cv = c.op("Where", mask, v, b)
    eye = c.e.const(np.eye(n, dtype=d.numpy), hint="eye")
    bm = inverse(c, c.op("Sub", eye, c.op("Transpose", ws, perm=[1, 0])), n, d)
    bmt = c.op("Transpose", bm, perm=[1, 0])
    ds = c.op("Mul", s, keep)
    ds_row = c.op("Unsqueeze", ds, c.ints([0]))
    if cts is None:
        return [c.op("MatMul", bm, cv), c.op("MatMul", c.op("Mul", bm, ds_row), bmt)]
    gm, gc = cts
    h = c.op("Add", c.op("Mul", c.op("Unsqueeze", gm, c.ints([1])), c.op("Unsqueeze", cv, c.ints([0]))),
             c.op("Mul", c.op("MatMul", c.op("Add", gc, c.op("Transpose", gc, perm=[1, 0])), bm), ds_row))
    dws = c.op("MatMul", c.op("MatMul", bm, c.op("Transpose", h, perm=[1, 0])), bm)
    # gm^T B rather than B^T gm: ORT 1.32's fusion of Transpose into a matrix-vector MatMul
    # gives wrong values (measured), so no transposed operand meets a 1-D one here
    dc = reshape(c, c.op("MatMul", c.op("Unsqueeze", gm, c.ints([0])), bm), (n,))
    dsv = c.op("Mul", c.op("ReduceSum", c.op("Mul", bm, c.op("MatMul", gc, bm)), c.ints([0]), keepdims=0), keep)
    return [c.op("Mul", dws, c.op("Unsqueeze", keep, c.ints([0]))), c.op("Mul", dc, keep), dsv,
            c.op("Where", mask, dc, c.k(0, d))]


def _counterfactual(c: Ctx, xs: list[str], ins: tuple[ValueType, ...], cts: list[str] | None) -> Any:
    w, x, mask, v = xs
    n, d = ins[0].shape[0], ins[0].dtype
    shape = ins[1].shape
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    x2 = reshape(c, x, (rows, n))
    ws, keep = _intervened(c, w, mask, d)
    keep_row = c.op("Unsqueeze", keep, c.ints([0]))
    u = c.op("Sub", x2, c.op("MatMul", x2, w))
    us = c.op("Add", c.op("Mul", u, keep_row), c.op("Unsqueeze", c.op("Where", mask, v, c.k(0, d)), c.ints([0])))
    cinv = inverse(c, c.op("Sub", c.e.const(np.eye(n, dtype=d.numpy), hint="eye"), ws), n, d)
    y = c.op("MatMul", us, cinv)
    if cts is None:
        return reshape(c, y, shape)
    tr = [1, 0]
    g = reshape(c, cts[0], (rows, n))
    dus = c.op("MatMul", g, c.op("Transpose", cinv, perm=tr))
    du = c.op("Mul", dus, keep_row)
    dw = c.op("Sub", c.op("Mul", c.op("MatMul", c.op("Transpose", y, perm=tr), dus), keep_row),
              c.op("MatMul", c.op("Transpose", x2, perm=tr), du))
    dx = c.op("Sub", du, c.op("MatMul", du, c.op("Transpose", w, perm=tr)))
    dv = c.op("Mul", c.op("ReduceSum", dus, c.ints([0]), keepdims=0), c.op("Sub", c.k(1, d), keep))
    return [dw, reshape(c, dx, shape), dv]


def _dag(c: Ctx, xs: list[str], ins: tuple[ValueType, ...], cts: list[str] | None) -> Any:
    w, b, s, x = xs
    n, d = ins[0].shape[0], ins[0].dtype
    shape = ins[3].shape
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    x2 = reshape(c, x, (rows, n))
    r = c.op("Sub", c.op("Sub", x2, c.op("Unsqueeze", b, c.ints([0]))), c.op("MatMul", x2, w))
    s_row = c.op("Unsqueeze", s, c.ints([0]))
    if cts is None:
        terms = c.op("Add", c.op("Unsqueeze", c.op("Log", c.op("Mul", c.k(2 * np.pi, d), s)), c.ints([0])),
                     c.op("Div", c.op("Mul", r, r), s_row))
        ll = c.op("Mul", c.k(-0.5, d), c.op("ReduceSum", terms, c.ints([1]), keepdims=0))
        return reshape(c, ll, shape[:-1])
    g = reshape(c, cts[0], (rows, 1))
    dr = c.op("Div", c.op("Neg", c.op("Mul", g, r)), s_row)
    inner = c.op("Sub", c.op("Div", c.op("Mul", r, r), c.op("Mul", s_row, s_row)), c.op("Div", c.k(1, d), s_row))
    ds = c.op("Mul", c.op("ReduceSum", c.op("Mul", g, inner), c.ints([0]), keepdims=0), c.k(0.5, d))
    tr = [1, 0]
    dw = c.op("Neg", c.op("MatMul", c.op("Transpose", x2, perm=tr), dr))
    db = c.op("Neg", c.op("ReduceSum", dr, c.ints([0]), keepdims=0))
    dx = c.op("Sub", dr, c.op("MatMul", dr, c.op("Transpose", w, perm=tr)))
    return [dw, db, ds, reshape(c, dx, shape)]


_SCM = {"do_calculus": _do_calculus, "counterfactual": _counterfactual, "dag_markov_factorization": _dag}


@rule("causal.do_calculus", "causal.counterfactual", "causal.dag_markov_factorization")
def _scm(c: Ctx, node, xs, ins):
    return _SCM[node.op.split(".")[1]](c, xs, ins, None)


@rule("causal.vjp")
def _causal_vjp(c: Ctx, node, xs, ins):
    from caramba.ops.causal import VJP_OF

    of = node.attrs["of"]
    _, n_ct, _, _ = VJP_OF[of]
    if of in _SCM:
        return _SCM[of](c, xs[n_ct:], ins[n_ct:], xs[:n_ct])
    return _estimator_impl(c, "causal." + of, node.attrs, xs[1], ins[1], xs[0])


# ---- hawkes -------------------------------------------------------------------------------
def _checked_marks(c: Ctx, marks: str, m: int, times: str | None = None, n: int = 0, d: DType = DType.float64) -> str:
    """marks [B, N] unchanged, through a Gather that fails at run time for a mark outside
    [0, M) (ONNX Gather would wrap a negative one: it is mapped to M first) and, given the event
    ``times`` [B, N] of dtype ``d``, for times not sorted ascending in a sequence (ONNX has no
    assert: the runner says what these checks test, ``RUNTIME_CHECKS``)."""
    i64 = DType.int64
    bad = c.op("Where", c.op("Less", marks, c.k(0, i64)), c.k(m, i64), marks)
    if times is not None and n > 1:
        steps = c.op("Sub", c.op("Slice", times, c.ints([1]), c.ints([n]), c.ints([1])),
                     c.op("Slice", times, c.ints([0]), c.ints([n - 1]), c.ints([1])))
        unsorted = c.op("Less", c.op("ReduceMin", steps, keepdims=1), c.k(0.0, d))  # [1, 1]
        bad = c.op("Where", unsorted, c.k(m, i64), bad)
    return c.op("Gather", c.e.const(np.arange(m, dtype=np.int64), hint="marks"), bad, axis=0)


def _one_hot(c: Ctx, marks: str, m: int, d: DType) -> str:
    eq = c.op("Equal", c.op("Unsqueeze", marks, c.ints([-1])), c.e.const(np.arange(m, dtype=np.int64), hint="marks"))
    return c.cast(eq, d)


def _gathered(c: Ctx, p: str, marks: str) -> str:
    """p[i, m_n, k] as [B, N, M, K]."""
    return c.op("Transpose", c.op("Gather", p, marks, axis=1), perm=[1, 2, 0, 3])


def _scatter_events(c: Ctx, x: str, o: str, bn: int, m: int, k: int) -> str:
    """sum over sequences and events of x[b, n, i, k] o[b, n, j] -> [i, j, k] (one MatMul)."""
    xf = reshape(c, x, (bn, m * k))
    of = c.op("Transpose", reshape(c, o, (bn, m)), perm=[1, 0])
    return c.op("Transpose", reshape(c, c.op("MatMul", of, xf), (m, m, k)), perm=[1, 0, 2])


def _sub(c: Ctx) -> Ctx:
    """A Ctx emitting into a subgraph: names stay unique across the model and constants are
    initializers of the outer graph (a subgraph may read outer-scope values)."""
    sub = Emitter()
    sub._used, sub._consts, sub.initializers = c.e._used, c.e._consts, c.e.initializers
    sub.origin = f"{c.e.origin}|scan" if c.e.origin is not None else None
    return Ctx(sub, c.profile)


def _info(name: str, d: DType, shape: tuple[int, ...]) -> Any:
    return helper.make_tensor_value_info(name, TO_ONNX[d], list(shape))


def _hawkes_ll(c: Ctx, xs: list[str], ins: tuple[ValueType, ...], ct: str | None) -> Any:
    """log_likelihood_xp as ONNX: the log-likelihood [...]; with a cotangent, (dmu, dalpha, dbeta)."""
    mu, alpha, beta, times, marks, end = xs
    m, k = ins[1].shape[0], ins[1].shape[2]
    lead, n = ins[3].shape[:-1], ins[3].shape[-1]
    nb = int(np.prod(lead, dtype=np.int64))
    d = ins[0].dtype
    grad = ct is not None
    t2 = reshape(c, times, (nb, n))
    m2 = _checked_marks(c, reshape(c, marks, (nb, n)), m, t2, n, d)
    o = _one_hot(c, m2, m, d)  # [B, N, M]
    end1 = reshape(c, end, (nb,))
    ab = c.op("Mul", alpha, beta)
    w = reshape(c, ct, (nb,)) if grad else None
    zero_r = c.e.const(np.zeros((nb, m, m, k), d.numpy), hint="zeros")
    zg = c.e.const(np.zeros((m, m, k), d.numpy), hint="zeros")
    ll0 = c.e.const(np.zeros((nb,), d.numpy), hint="zeros")
    states = [("r", zero_r, (nb, m, m, k)), ("ll", ll0, (nb,))]
    if grad:
        states += [("dd", zero_r, (nb, m, m, k)), ("dmu", c.e.const(np.zeros((m,), d.numpy), hint="zeros"), (m,)),
                   ("dal", zg, (m, m, k)), ("dbe", zg, (m, m, k))]
    if n:
        prev_t = c.op("Concat", c.op("Slice", t2, c.ints([0]), c.ints([1]), c.ints([1])),
                      c.op("Slice", t2, c.ints([0]), c.ints([n - 1]), c.ints([1])), axis=1)
        prev_o = c.op("Concat", c.e.const(np.zeros((nb, 1, m), d.numpy), hint="zeros"),
                      c.op("Slice", o, c.ints([0]), c.ints([n - 1]), c.ints([1])), axis=1)
        scans = [("delta", c.op("Sub", t2, prev_t), (nb,)), ("on", o, (nb, m)), ("prev", prev_o, (nb, m))]
        b = _sub(c)
        v = {name: b.e.fresh(f"body.{name}") for name, _, _ in states + scans}
        delta4 = reshape(b, v["delta"], (nb, 1, 1, 1))
        decay = b.op("Exp", b.op("Mul", b.op("Neg", beta), delta4))
        s_ = b.op("Add", v["r"], reshape(b, v["prev"], (nb, 1, m, 1)))
        r = b.op("Mul", decay, s_)
        lam_all = b.op("Add", mu, b.op("ReduceSum", b.op("Mul", ab, r), b.ints([2, 3]), keepdims=0))  # [B, M]
        lam = b.op("ReduceSum", b.op("Mul", v["on"], lam_all), b.ints([1]), keepdims=0)  # [B]
        new = {"r": r, "ll": b.op("Add", v["ll"], b.op("Log", lam))}
        if grad:
            dd = b.op("Mul", decay, b.op("Add", v["dd"], b.op("Mul", delta4, s_)))
            g = b.op("Mul", b.op("Unsqueeze", b.op("Div", w, lam), b.ints([1])), v["on"])  # [B, M]
            g4 = reshape(b, g, (nb, m, 1, 1))
            new["dd"] = dd
            new["dmu"] = b.op("Add", v["dmu"], b.op("ReduceSum", g, b.ints([0]), keepdims=0))
            new["dal"] = b.op("Add", v["dal"], b.op("Mul", b.op(
                "ReduceSum", b.op("Mul", g4, r), b.ints([0]), keepdims=0), beta))
            new["dbe"] = b.op("Add", v["dbe"], b.op("Mul", b.op(
                "ReduceSum", b.op("Mul", g4, b.op("Sub", r, b.op("Mul", beta, dd))), b.ints([0]), keepdims=0), alpha))
        outs = [b.op("Identity", new[name], hint=f"body.{name}_out") for name, _, _ in states]
        body = helper.make_graph(
            b.e.nodes, c.e.fresh("scan_body"),
            [_info(v[name], d, shape) for name, _, shape in states + scans],
            [_info(o_, d, shape) for o_, (_, _, shape) in zip(outs, states, strict=True)],
        )
        finals = c.op("Scan", *[x for _, x, _ in states], *[x for _, x, _ in scans], outputs=len(states), body=body,
                      num_scan_inputs=len(scans), scan_input_axes=[1] * len(scans))
        final = dict(zip([name for name, _, _ in states], finals, strict=True))
    else:
        final = {name: x for name, x, _ in states}
    a, bb = _gathered(c, alpha, m2), _gathered(c, beta, m2)  # [B, N, M, K]
    tau = reshape(c, c.op("Sub", c.op("Unsqueeze", end1, c.ints([1])), t2), (nb, n, 1, 1))
    ex = c.op("Exp", c.op("Mul", c.op("Neg", bb), tau))
    one_m_ex = c.op("Sub", c.k(1, d), ex)
    if not grad:
        comp = c.op("Add", c.op("Mul", end1, c.op("ReduceSum", mu, c.ints([0]), keepdims=0)),
                    c.op("ReduceSum", c.op("Mul", a, one_m_ex), c.ints([1, 2, 3]), keepdims=0))
        return reshape(c, c.op("Sub", final["ll"], comp), lead)
    dmu = c.op("Sub", final["dmu"], c.op("ReduceSum", c.op("Mul", w, end1), c.ints([0]), keepdims=0))
    wn = reshape(c, w, (nb, 1, 1, 1))
    dal = c.op("Sub", final["dal"], _scatter_events(c, c.op("Mul", wn, one_m_ex), o, nb * n, m, k))
    xb = c.op("Mul", c.op("Mul", c.op("Mul", wn, a), tau), ex)
    dbe = c.op("Sub", final["dbe"], _scatter_events(c, xb, o, nb * n, m, k))
    return [dmu, dal, dbe]


def _hawkes_intensity(c: Ctx, xs: list[str], ins: tuple[ValueType, ...], ct: str | None) -> Any:
    mu, alpha, beta, times, marks, t = xs
    m, k = ins[1].shape[0], ins[1].shape[2]
    lead, n, q = ins[3].shape[:-1], ins[3].shape[-1], ins[5].shape[-1]
    nb = int(np.prod(lead, dtype=np.int64))
    d = ins[0].dtype
    m2 = _checked_marks(c, reshape(c, marks, (nb, n)), m)
    a, b = _gathered(c, alpha, m2), _gathered(c, beta, m2)  # [B, N, M, K]
    lag = c.op("Sub", reshape(c, t, (nb, q, 1)), reshape(c, times, (nb, 1, n)))  # [B, Q, N]
    zero = c.k(0, d)
    past = c.op("Greater", lag, zero)
    lag0 = reshape(c, c.op("Where", past, lag, zero), (nb, q, n, 1, 1))
    b5 = c.op("Unsqueeze", b, c.ints([1]))  # [B, 1, N, M, K]
    e = c.op("Where", reshape(c, past, (nb, q, n, 1, 1)), c.op("Exp", c.op("Mul", c.op("Neg", b5), lag0)), zero)
    if ct is None:
        y = c.op("Add", mu, c.op("ReduceSum", c.op("Mul", c.op("Mul", c.op("Unsqueeze", a, c.ints([1])), b5), e),
                                    c.ints([2, 4]), keepdims=0))
        return reshape(c, y, lead + (q, m))
    g = c.op("Mul", reshape(c, ct, (nb, q, 1, m, 1)), e)  # [B, Q, N, M, K]
    da = c.op("Mul", c.op("ReduceSum", g, c.ints([1]), keepdims=0), b)
    db = c.op("Mul", c.op("ReduceSum", c.op("Mul", g, c.op("Sub", c.k(1, d), c.op("Mul", b5, lag0))), c.ints([1]),
                          keepdims=0), a)
    o = _one_hot(c, m2, m, d)
    dmu = c.op("ReduceSum", reshape(c, ct, (nb * q, m)), c.ints([0]), keepdims=0)
    return [dmu, _scatter_events(c, da, o, nb * n, m, k), _scatter_events(c, db, o, nb * n, m, k)]


def _pair_scatter(c: Ctx, x: str, o: str, nb: int, n: int, m: int, k: int) -> str:
    """einsum('xnpk,xni,xpj->ijk', x, o, o) by two MatMuls."""
    xt = c.op("Transpose", x, perm=[0, 1, 3, 2])  # [B, N, K, P]
    tkj = c.op("MatMul", xt, c.op("Unsqueeze", o, c.ints([1])))  # [B, N, K, M(j)]
    of = c.op("Transpose", reshape(c, o, (nb * n, m)), perm=[1, 0])  # [M(i), B N]
    r = reshape(c, c.op("MatMul", of, reshape(c, tkj, (nb * n, k * m))), (m, k, m))
    return c.op("Transpose", r, perm=[0, 2, 1])


def _hawkes_kernel(c: Ctx, xs: list[str], ins: tuple[ValueType, ...], ct: str | None) -> Any:
    alpha, beta, times, marks = xs
    m, k = ins[0].shape[0], ins[0].shape[2]
    lead, n = ins[2].shape[:-1], ins[2].shape[-1]
    nb = int(np.prod(lead, dtype=np.int64))
    d = ins[0].dtype
    i64 = DType.int64
    m2 = _checked_marks(c, reshape(c, marks, (nb, n)), m)
    pair = c.op("Add", c.op("Mul", c.op("Unsqueeze", m2, c.ints([2])), c.k(m, i64)), c.op("Unsqueeze", m2, c.ints([1])))
    a = c.op("Gather", reshape(c, alpha, (m * m, k)), pair, axis=0)  # [B, N, N, K]
    b = c.op("Gather", reshape(c, beta, (m * m, k)), pair, axis=0)
    t2 = reshape(c, times, (nb, n))
    lag = c.op("Sub", c.op("Unsqueeze", t2, c.ints([2])), c.op("Unsqueeze", t2, c.ints([1])))  # [B, N, N]
    zero = c.k(0, d)
    past = c.op("Greater", lag, zero)
    lag0 = c.op("Unsqueeze", c.op("Where", past, lag, zero), c.ints([3]))
    e = c.op("Where", c.op("Unsqueeze", past, c.ints([3])), c.op("Exp", c.op("Mul", c.op("Neg", b), lag0)), zero)
    if ct is None:
        y = c.op("ReduceSum", c.op("Mul", c.op("Mul", a, b), e), c.ints([3]), keepdims=0)
        return reshape(c, y, lead + (n, n))
    o = _one_hot(c, m2, m, d)
    ge = c.op("Mul", reshape(c, ct, (nb, n, n, 1)), e)
    da = c.op("Mul", ge, b)
    db = c.op("Mul", c.op("Mul", ge, a), c.op("Sub", c.k(1, d), c.op("Mul", b, lag0)))
    return [_pair_scatter(c, da, o, nb, n, m, k), _pair_scatter(c, db, o, nb, n, m, k)]


_HAWKES = {"intensity": _hawkes_intensity, "kernel_matrix": _hawkes_kernel, "log_likelihood": _hawkes_ll}


@rule("hawkes.intensity", "hawkes.kernel_matrix", "hawkes.log_likelihood")
def _hawkes(c: Ctx, node, xs, ins):
    return _HAWKES[node.op.split(".")[1]](c, xs, ins, None)


@rule("hawkes.vjp")
def _hawkes_vjp(c: Ctx, node, xs, ins):
    return _HAWKES[node.attrs["of"]](c, xs[1:], ins[1:], xs[0])


__all__ = ["MAX_DFT", "dft_matrices", "inverse", "irfft_flat", "ols", "ols_vjp", "qr", "rfft_flat"]


RUNTIME_CHECKS.update({
    "hawkes.log_likelihood": "the marks in [0, M) and the event times sorted ascending in each sequence",
    "hawkes.intensity": "the marks in [0, M)",
    "hawkes.kernel_matrix": "the marks in [0, M)",
    "hawkes.vjp": "the marks in [0, M) (and, for the log-likelihood, event times sorted ascending)",
})
