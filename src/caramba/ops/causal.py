"""causal.*: linear-Gaussian structural causal models and linear effect estimators.

Conventions (Pearl 2009, "Causality", 2nd ed., ch. 1.4, 3 and 7). A linear-Gaussian SCM on ``d``
variables is ``x_j = b_j + sum_i W[i, j] x_i + e_j``, ``e_j ~ N(0, s_j)`` independent, with
``W [d, d]`` the weights (``W[i, j]`` the direct effect of ``x_i`` on ``x_j``; a DAG: some
order of the variables makes ``W`` strictly upper triangular), ``b [d]`` the intercepts and
``s [d] > 0`` the noise *variances*. In row form ``x = b + x W + e``, so ``x = (b + e)(I - W)^{-1}``.
``mask [d]`` (bool) is the intervention set ``S`` and ``v [d]`` its values (read where the mask
is set). ``do(X_S = v)`` replaces the equations of ``S`` by constants: ``W_S = W`` with the
columns ``j in S`` zeroed (incoming edges cut), ``c = where(mask, v, b)``, ``s_S = where(mask, 0, s)``.
Acyclicity is the caller's contract (not checked); a cyclic ``W`` with ``I - W`` invertible gives
the equilibrium of the linear system instead.

- ``do_calculus(W, b, s, mask, v) -> (mean [d], cov [d, d])``: the interventional distribution
  ``X | do(X_S = v) ~ N(mean, cov)`` with ``B = (I - W_S^T)^{-1}``:
  ``mean = B c``, ``cov = B diag(s_S) B^T`` (Pearl 2009 §1.4.1 and §5.2: the truncated
  factorization of a linear SEM).
- ``counterfactual(W, x [..., d], mask, v) -> [..., d]``: abduction-action-prediction (Pearl
  2009 §7.1, Theorem 7.1.7) for each observed row ``x``: abduction ``u = x - x W`` (the
  exogenous terms, intercept included, are pinned by the observation in a linear SCM), action
  ``u_S = where(mask, v, u)`` with ``W_S``, prediction ``x_cf = u_S (I - W_S)^{-1}``.
- ``dag_markov_factorization(W, b, s, x [..., d]) -> [...]``: the log-likelihood of each row
  under the DAG's Markov factorization ``log p(x) = sum_j log N(x_j | b_j + sum_i W[i, j] x_i, s_j)``
  (Pearl 2009 eq. (1.33)).

The estimators take a data matrix ``data [n, d]`` (rows are units, columns variables) and pick
columns by the integer attributes ``treatment``, ``outcome``, ``mediator``, ``adjust``,
``covariates``, ``instruments`` (distinct, in ``[0, d)``). Each regression has an intercept and
is ordinary least squares ``beta = argmin |y - Z beta|^2``, solved by a reduced QR of ``Z``
(``Z = Q R``, ``beta = R^{-1} Q^T y``); ``n`` must exceed the regressor count (checked when
the op runs, ``EstimationError``: a manifest's graph is first built at batch 1). A design of
exactly deficient rank is an ``EstimationError`` on cpu and gives inf/NaN on xla.

- ``backdoor_adjustment(data; treatment, outcome, adjust) -> []``: the average treatment effect
  by regression adjustment on the back-door set ``Z = adjust`` (Pearl 2009 Theorem 3.3.2): the
  coefficient of ``T`` in ``Y ~ 1 + T + Z``. In a linear SCM with ``Z`` satisfying the back-door
  criterion this is ``d E[Y | do(T = t)] / dt``.
- ``frontdoor_adjustment(data; treatment, mediator, outcome) -> []``: the linear front-door
  estimator (Pearl 2009 Theorem 3.3.4 with linear equations): ``a * b`` with ``a`` the
  coefficient of ``T`` in ``M ~ 1 + T`` and ``b`` the coefficient of ``M`` in ``Y ~ 1 + M + T``.
- ``cate(data; treatment, outcome, covariates) -> [n]``: the conditional average treatment
  effect per row under the interacted linear model ``Y ~ 1 + T + C + T C`` (each covariate and its
  product with ``T``): ``tau(c_i) = beta_T + sum_k beta_{T C_k} c_ik``. With ignorability given
  ``C`` and a correctly specified model, ``tau(c) = E[Y(1) - Y(0) | C = c]`` for binary ``T``
  (and the effect per unit of ``T`` for continuous ``T``).
- ``iv_estimate(data; treatment, outcome, instruments, covariates) -> [2 + k]``: two-stage least
  squares (Angrist & Pischke 2009, "Mostly Harmless Econometrics", §4.1.1): regressors
  ``X = [1, T, W]``, instruments ``Z = [1, instruments, W]`` (``W`` the exogenous covariates),
  first stage ``X_hat = Z (Z^T Z)^{-1} Z^T X``, second stage ``beta = (X_hat^T X_hat)^{-1} X_hat^T y``
  = ``(X^T P_Z X)^{-1} X^T P_Z y``. Output ``[intercept, effect of T, covariates...]`` (needs at
  least one instrument; over-identification is fine).

VJPs (``caramba.autodiff.rules.causal``) are the op ``causal.vjp`` (attribute ``of`` and the
forward op's column attributes), analytic: for OLS ``A beta = Z^T y`` with ``A = Z^T Z`` and a
cotangent ``g`` on ``beta``, ``u = A^{-1} g``: ``dy = Z u``, ``dZ = r u^T - (Z u) beta^T`` with the
residual ``r = y - Z beta``; chained through both stages of 2SLS, the products of the front-door
estimator and the interaction columns of CATE. For ``M = I - W_S^T``, ``B = M^{-1}``:
``dW_S = B H^T B`` with ``H = g_mean c^T + (G + G^T) B diag(s_S)``, ``dc = B^T g_mean``,
``ds = diag(B^T G B)`` off the intervention set. The mask gets none; ``v`` gets the cotangent of
the intervened entries; the data's columns that an estimator does not read get 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caramba.errors import CarambaError, GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS, DType
from caramba.ir.types import ValueType
from caramba.ops._define import define, require_dtype

# ---- type rules ---------------------------------------------------------------------------


def _weights(op_id: str, w: ValueType) -> int:
    require_dtype(op_id, w, FLOATS, "W")
    if w.rank != 2 or w.shape[0] != w.shape[1] or w.shape[0] < 1:
        raise GraphError(f"{op_id} W must be [d, d] with d >= 1 (W[i, j]: effect of x_i on x_j), got {w}")
    return w.shape[0]


def _vector(op_id: str, t: ValueType, d: int, dt: DType, name: str) -> None:
    if t.dtype != dt or t.shape != (d,):
        raise GraphError(f"{op_id} {name} must be {dt} [{d}] like W's axes, got {t}")


def _mask(op_id: str, t: ValueType, d: int) -> None:
    if t.dtype is not DType.bool or t.shape != (d,):
        raise GraphError(f"{op_id} mask must be bool [{d}] (the intervened variables), got {t}")


def _do_calculus(ins, a):
    w, b, s, mask, v = ins
    d = _weights("causal.do_calculus", w)
    for t, name in ((b, "b"), (s, "s"), (v, "v")):
        _vector("causal.do_calculus", t, d, w.dtype, name)
    _mask("causal.do_calculus", mask, d)
    return ValueType((d,), w.dtype), ValueType((d, d), w.dtype)


do_calculus = define(
    "causal.do_calculus", _do_calculus, 5, (),
    doc="X | do(X_S = v) ~ N(mean, cov) for the linear-Gaussian SCM x = b + x W + e, e ~ N(0, diag(s)):"
    " (W [d, d], b [d], s [d], mask bool [d], v [d]) -> (mean [d], cov [d, d]); see caramba.ops.causal.",
)


def _counterfactual(ins, a):
    w, x, mask, v = ins
    d = _weights("causal.counterfactual", w)
    if x.dtype != w.dtype or x.rank < 1 or x.shape[-1] != d:
        raise GraphError(f"causal.counterfactual x must be {w.dtype} [..., {d}] (observed rows), got {x}")
    _mask("causal.counterfactual", mask, d)
    _vector("causal.counterfactual", v, d, w.dtype, "v")
    return (x,)


counterfactual = define(
    "causal.counterfactual", _counterfactual, 4, (),
    doc="abduction-action-prediction on the linear SCM x = u + x W: the counterfactual rows under do(X_S = v),"
    " (W [d, d], x [..., d], mask bool [d], v [d]) -> [..., d]; see caramba.ops.causal.",
)


def _dag(ins, a):
    w, b, s, x = ins
    op = "causal.dag_markov_factorization"
    d = _weights(op, w)
    _vector(op, b, d, w.dtype, "b")
    _vector(op, s, d, w.dtype, "s")
    if x.dtype != w.dtype or x.rank < 1 or x.shape[-1] != d:
        raise GraphError(f"{op} x must be {w.dtype} [..., {d}] (rows of data), got {x}")
    return (ValueType(x.shape[:-1], w.dtype),)


dag_markov_factorization = define(
    "causal.dag_markov_factorization", _dag, 4, (),
    doc="per-row log-likelihood sum_j log N(x_j | b_j + sum_i W[i, j] x_i, s_j) of a linear-Gaussian DAG:"
    " (W [d, d], b [d], s [d], x [..., d]) -> [...]; see caramba.ops.causal.",
)

TREATMENT = Attr("treatment", "int", doc="column of the treatment T")
OUTCOME = Attr("outcome", "int", doc="column of the outcome Y")


def columns(op_id: str, data: ValueType, a: Any) -> dict[str, tuple[int, ...]]:
    """Check data [n, d] and the op's column attributes; return {role: column indices}."""
    require_dtype(op_id, data, FLOATS, "data")
    if data.rank != 2:
        raise GraphError(f"{op_id} data must be [n, d] (rows are units, columns variables), got {data}")
    d = data.shape[1]
    roles = {k: (a[k],) if isinstance(a[k], int) else tuple(a[k]) for k in ROLES[op_id]}
    used = [c for cols in roles.values() for c in cols]
    bad = [c for c in used if not 0 <= c < d]
    if bad:
        raise GraphError(f"{op_id} columns {bad} are outside [0, {d}) for data {data}")
    if len(set(used)) != len(used):
        raise GraphError(f"{op_id} the columns of {', '.join(f'{k}={list(v)}' for k, v in roles.items())} must be distinct")
    if op_id == "causal.iv_estimate" and not roles["instruments"]:
        raise GraphError("causal.iv_estimate needs at least one instrument (2SLS is not identified without)")
    return roles


class EstimationError(CarambaError):
    """An estimator's least squares has no unique solution: fewer rows than regressors, or (cpu)
    a design matrix of exactly deficient rank (a constant or duplicated column)."""


ROLES = {
    "causal.backdoor_adjustment": ("treatment", "outcome", "adjust"),
    "causal.frontdoor_adjustment": ("treatment", "mediator", "outcome"),
    "causal.cate": ("treatment", "outcome", "covariates"),
    "causal.iv_estimate": ("treatment", "outcome", "instruments", "covariates"),
}
REGRESSORS = {
    "causal.backdoor_adjustment": lambda r: 2 + len(r["adjust"]),
    "causal.frontdoor_adjustment": lambda r: 3,
    "causal.cate": lambda r: 2 + 2 * len(r["covariates"]),
    "causal.iv_estimate": lambda r: 1 + max(len(r["instruments"]), 1) + len(r["covariates"]),  # the first stage
}


def _estimator(op_id: str, shape):
    def infer(ins, a):
        roles = columns(op_id, ins[0], a)
        return (ValueType(shape(ins[0], roles), ins[0].dtype),)

    return infer


backdoor_adjustment = define(
    "causal.backdoor_adjustment", _estimator("causal.backdoor_adjustment", lambda x, r: ()), 1,
    (TREATMENT, OUTCOME, Attr("adjust", "ints", (), doc="columns of the back-door adjustment set")),
    doc="average treatment effect by regression adjustment: the coefficient of T in Y ~ 1 + T + adjust,"
    " data [n, d] -> []; see caramba.ops.causal.",
)
frontdoor_adjustment = define(
    "causal.frontdoor_adjustment", _estimator("causal.frontdoor_adjustment", lambda x, r: ()), 1,
    (TREATMENT, Attr("mediator", "int", doc="column of the mediator M"), OUTCOME),
    doc="linear front-door estimate a * b (a: T in M ~ 1 + T; b: M in Y ~ 1 + M + T), data [n, d] -> [];"
    " see caramba.ops.causal.",
)
cate = define(
    "causal.cate", _estimator("causal.cate", lambda x, r: (x.shape[0],)), 1,
    (TREATMENT, OUTCOME, Attr("covariates", "ints", (), doc="columns of the effect modifiers C")),
    doc="per-row conditional average treatment effect beta_T + sum_k beta_{T C_k} c_k of Y ~ 1 + T + C + T C,"
    " data [n, d] -> [n]; see caramba.ops.causal.",
)
iv_estimate = define(
    "causal.iv_estimate", _estimator("causal.iv_estimate", lambda x, r: (2 + len(r["covariates"]),)), 1,
    (TREATMENT, OUTCOME, Attr("instruments", "ints", doc="columns of the excluded instruments"),
     Attr("covariates", "ints", (), doc="columns of the exogenous covariates")),
    doc="two-stage least squares, data [n, d] -> [intercept, effect of T, covariates...]; see caramba.ops.causal.",
)

# ---- the VJP op -----------------------------------------------------------------------------

# of -> (forward infer, cotangent count, forward arity, input positions that get a cotangent)
VJP_OF: dict[str, tuple[Any, int, int, tuple[int, ...]]] = {
    "do_calculus": (_do_calculus, 2, 5, (0, 1, 2, 4)),
    "counterfactual": (_counterfactual, 1, 4, (0, 1, 3)),
    "dag_markov_factorization": (_dag, 1, 4, (0, 1, 2, 3)),
    **{k.split(".")[1]: (v.opdef.infer, 1, 1, (0,)) for k, v in (
        ("causal.backdoor_adjustment", backdoor_adjustment), ("causal.frontdoor_adjustment", frontdoor_adjustment),
        ("causal.cate", cate), ("causal.iv_estimate", iv_estimate))},
}
VJP_ATTRS = (
    Attr("of", "str", choices=tuple(VJP_OF), doc="the op differentiated"),
    Attr("treatment", "int", 0), Attr("outcome", "int", 0), Attr("mediator", "int", 0),
    Attr("adjust", "ints", ()), Attr("covariates", "ints", ()), Attr("instruments", "ints", ()),
)


def _vjp(ins, a):
    of = a["of"]
    infer, n_ct, arity, grads = VJP_OF[of]
    if len(ins) != n_ct + arity:
        raise GraphError(f"causal.vjp of {of} takes {n_ct} cotangent(s) and {arity} inputs, got {len(ins)} inputs")
    ys = infer(ins[n_ct:], a)
    for ct, y in zip(ins[:n_ct], ys, strict=True):
        if ct != y:
            raise GraphError(f"causal.vjp of {of}: the cotangent must be {y} like the op's output, got {ct}")
    return tuple(ins[n_ct + i] for i in grads)


vjp = define(
    "causal.vjp", _vjp, (2, 7), VJP_ATTRS, differentiable=False,
    doc="cotangents of the float inputs of a causal op, given its output cotangent(s) and inputs;"
    " see caramba.ops.causal.",
)


# ---- the definitions, for an array module xp (numpy, jax.numpy) ---------------------------------


def _solve_r(r: Any, y: Any, xp: Any, transpose: bool = False) -> Any:
    return xp.linalg.solve(r.T if transpose else r, y)


def ols(z: Any, y: Any, xp: Any = np) -> tuple[Any, Any]:
    """OLS coefficients of ``y [n, m]`` on ``z [n, k]`` (reduced QR), and R of the QR."""
    q, r = xp.linalg.qr(z)
    return _solve_r(r, q.T @ y, xp), r


def ols_vjp(z: Any, y: Any, beta: Any, r: Any, g: Any, xp: Any = np) -> tuple[Any, Any]:
    """(dz, dy) for a cotangent ``g [k, m]`` on ``beta = (z^T z)^{-1} z^T y``."""
    u = _solve_r(r, _solve_r(r, g, xp, transpose=True), xp)  # (z^T z)^{-1} g = R^{-1} R^{-T} g
    zu = z @ u
    return (y - z @ beta) @ u.T - zu @ beta.T, zu


def select(cols: tuple[int, ...], d: int, dtype: Any) -> np.ndarray:
    """The one-hot [d, k] matrix S with data @ S = data[:, cols] (and dZ @ S^T scatters back)."""
    s = np.zeros((d, len(cols)), dtype=dtype)
    s[list(cols), np.arange(len(cols))] = 1
    return s


def _design(data: Any, cols: tuple[int, ...], xp: Any) -> Any:
    ones = xp.ones((data.shape[0], 1), data.dtype)
    return xp.concatenate([ones, data @ select(cols, data.shape[1], data.dtype)], axis=1)


def _scatter(dz: Any, cols: tuple[int, ...], d: int, dtype: Any) -> Any:
    """d data from the cotangent of the design [1, data[:, cols]] (the intercept gets none)."""
    return dz[:, 1:] @ select(cols, d, dtype).T


def _e(k: int, i: int, dtype: Any) -> np.ndarray:
    e = np.zeros((k, 1), dtype=dtype)
    e[i, 0] = 1
    return e


def estimator_xp(of: str, data: Any, attrs: Any, xp: Any = np, ct: Any = None) -> Any:
    """The estimator ``of`` on data [n, d]; with a cotangent ``ct`` instead d data [n, d]."""
    n, d = data.shape
    dt = data.dtype
    roles = {k: (attrs[k],) if isinstance(attrs[k], int) else tuple(attrs[k]) for k in ROLES["causal." + of]}
    k = REGRESSORS["causal." + of](roles)
    if n <= k:  # a run-time check (shapes are static here, on xla too): graphs are built at batch 1 first
        raise EstimationError(f"causal.{of} needs more rows than its {k} regressors, got data [{n}, {d}]",
                         hint="feed a bigger batch (a regression needs n > regressors)")
    t, y_col = roles["treatment"], roles["outcome"]
    y = data @ select(y_col, d, dt)  # [n, 1]
    grad = ct is not None
    if of == "backdoor_adjustment":
        cols = t + roles["adjust"]
        z = _design(data, cols, xp)
        beta, r = ols(z, y, xp)
        if not grad:
            return beta[1, 0]
        dz, dy = ols_vjp(z, y, beta, r, _e(len(cols) + 1, 1, dt) * ct, xp)
        return _scatter(dz, cols, d, dt) + dy @ select(y_col, d, dt).T
    if of == "frontdoor_adjustment":
        mcol = roles["mediator"]
        m = data @ select(mcol, d, dt)
        z1, z2 = _design(data, t, xp), _design(data, mcol + t, xp)
        b1, r1 = ols(z1, m, xp)
        b2, r2 = ols(z2, y, xp)
        if not grad:
            return b1[1, 0] * b2[1, 0]
        dz1, dm = ols_vjp(z1, m, b1, r1, _e(2, 1, dt) * (ct * b2[1, 0]), xp)
        dz2, dy = ols_vjp(z2, y, b2, r2, _e(3, 1, dt) * (ct * b1[1, 0]), xp)
        return (_scatter(dz1, t, d, dt) + _scatter(dz2, mcol + t, d, dt) + dm @ select(mcol, d, dt).T
                + dy @ select(y_col, d, dt).T)
    if of == "cate":
        cov = roles["covariates"]
        k = len(cov)
        tv = data @ select(t, d, dt)  # [n, 1]
        c = data @ select(cov, d, dt)  # [n, k]
        z = xp.concatenate([xp.ones((n, 1), dt), tv, c, tv * c], axis=1)
        beta, r = ols(z, y, xp)
        inter = beta[2 + k:, 0]  # [k]
        if not grad:
            return beta[1, 0] + c @ inter
        g = xp.concatenate([xp.zeros((1,), dt), xp.sum(ct)[None], xp.zeros((k,), dt), ct @ c])[:, None]
        dz, dy = ols_vjp(z, y, beta, r, g, xp)
        dzt, dzc, dzi = dz[:, 1:2], dz[:, 2:2 + k], dz[:, 2 + k:]
        dtv = dzt + xp.sum(dzi * c, axis=1, keepdims=True)
        dc = dzc + dzi * tv + ct[:, None] * inter[None, :]
        return dtv @ select(t, d, dt).T + dc @ select(cov, d, dt).T + dy @ select(y_col, d, dt).T
    if of == "iv_estimate":
        xcols, zcols = t + roles["covariates"], roles["instruments"] + roles["covariates"]
        x, z = _design(data, xcols, xp), _design(data, zcols, xp)
        pi, rz = ols(z, x, xp)  # first stage [kz, kx]
        xhat = z @ pi
        beta, rx = ols(xhat, y, xp)
        if not grad:
            return beta[:, 0]
        dxhat, dy = ols_vjp(xhat, y, beta, rx, ct[:, None], xp)
        dz, dx = ols_vjp(z, x, pi, rz, z.T @ dxhat, xp)
        dz = dz + dxhat @ pi.T
        return _scatter(dx, xcols, d, dt) + _scatter(dz, zcols, d, dt) + dy @ select(y_col, d, dt).T
    raise ValueError(f"unknown causal estimator {of!r}")


def _intervened(w: Any, mask: Any, xp: Any) -> tuple[Any, Any]:
    keep = xp.where(mask, xp.zeros((), w.dtype), xp.ones((), w.dtype))
    return w * keep[None, :], keep


def do_calculus_xp(w, b, s, mask, v, xp: Any = np, ct: Any = None):
    """(mean, cov); with cotangents ``ct = (g_mean, g_cov)`` instead (dW, db, ds, dv)."""
    d = w.shape[0]
    ws, keep = _intervened(w, mask, xp)
    c = xp.where(mask, v, b)
    bm = xp.linalg.inv(xp.eye(d, dtype=w.dtype) - ws.T)
    mean = bm @ c
    ds_ = s * keep
    if ct is None:
        return mean, (bm * ds_[None, :]) @ bm.T
    gm, gc = ct
    h = gm[:, None] * c[None, :] + ((gc + gc.T) @ bm) * ds_[None, :]
    dws = bm @ h.T @ bm
    dc = bm.T @ gm
    dsv = xp.sum(bm * (gc @ bm), axis=0) * keep  # diag(B^T G B)
    return dws * keep[None, :], dc * keep, dsv, xp.where(mask, dc, xp.zeros((), w.dtype))


def counterfactual_xp(w, x, mask, v, xp: Any = np, ct: Any = None):
    """The counterfactual rows [..., d]; with a cotangent ``ct`` instead (dW, dx, dv)."""
    d = w.shape[0]
    x2 = xp.reshape(x, (-1, d))
    ws, keep = _intervened(w, mask, xp)
    u = x2 - x2 @ w
    us = u * keep[None, :] + xp.where(mask, v, xp.zeros((), w.dtype))[None, :]
    cinv = xp.linalg.inv(xp.eye(d, dtype=w.dtype) - ws)
    y = us @ cinv
    if ct is None:
        return xp.reshape(y, x.shape)
    g = xp.reshape(ct, (-1, d))
    dus = g @ cinv.T
    du = dus * keep[None, :]
    dw = (y.T @ dus) * keep[None, :] - x2.T @ du
    dx = du - du @ w.T
    dv = xp.sum(dus, axis=0) * (1 - keep)
    return dw, xp.reshape(dx, x.shape), dv


def dag_markov_factorization_xp(w, b, s, x, xp: Any = np, ct: Any = None):
    """Per-row log-likelihood [...]; with a cotangent ``ct`` instead (dW, db, ds, dx)."""
    d = w.shape[0]
    x2 = xp.reshape(x, (-1, d))
    r = x2 - b[None, :] - x2 @ w
    if ct is None:
        ll = -0.5 * xp.sum(xp.log(2 * np.pi * s)[None, :] + r * r / s[None, :], axis=1)
        return xp.reshape(ll, x.shape[:-1])
    g = xp.reshape(ct, (-1,))
    dr = -(g[:, None] * r) / s[None, :]
    ds = xp.sum(g[:, None] * (r * r / (s * s)[None, :] - 1.0 / s[None, :]), axis=0) * 0.5
    return -x2.T @ dr, -xp.sum(dr, axis=0), ds, xp.reshape(dr - dr @ w.T, x.shape)


def vjp_xp(of: str, cts: tuple, xs: tuple, attrs: Any, xp: Any = np) -> tuple:
    """The cotangents ``causal.vjp`` returns (see VJP_OF), for backends' kernels."""
    if of == "do_calculus":
        return do_calculus_xp(*xs, xp=xp, ct=cts)
    if of == "counterfactual":
        return counterfactual_xp(*xs, xp=xp, ct=cts[0])
    if of == "dag_markov_factorization":
        return dag_markov_factorization_xp(*xs, xp=xp, ct=cts[0])
    return (estimator_xp(of, xs[0], attrs, xp, ct=cts[0]),)


__all__ = [
    "ROLES", "VJP_OF", "EstimationError", "backdoor_adjustment", "cate", "columns", "counterfactual", "counterfactual_xp",
    "dag_markov_factorization", "dag_markov_factorization_xp", "do_calculus", "do_calculus_xp", "estimator_xp",
    "frontdoor_adjustment", "iv_estimate", "ols", "ols_vjp", "vjp", "vjp_xp",
]
