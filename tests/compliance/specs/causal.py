"""causal.*: every value from references written here that share nothing with the kernels
(least squares by the normal equations, where the kernels use QR; the SCM's ``(I - W)^{-1}`` as
the finite Neumann series of a nilpotent ``W``, where the kernels invert it); the VJP op against
complex-step derivatives of those references (exact to rounding: every step is analytic)."""

from __future__ import annotations

import numpy as np

from ..harness import BOOL, F32, F64, FLOATS, Case, Expect, arg, bad, row, tol, uniform, values

D = 3  # SCM variables (topological order 0, 1, 2)


# ---- references ---------------------------------------------------------------------------


def _ols(z, y):
    return np.linalg.solve(z.T @ z, z.T @ y)  # no conjugate: analytic for the complex step


def _design(data, cols):
    return np.concatenate([np.ones((data.shape[0], 1), dtype=data.dtype), data[:, list(cols)]], axis=1)


def estimator_ref(of, data, attrs):
    t, y = attrs["treatment"], data[:, attrs["outcome"]]
    if of == "backdoor_adjustment":
        return np.asarray(_ols(_design(data, (t, *attrs["adjust"])), y)[1])
    if of == "frontdoor_adjustment":
        m = attrs["mediator"]
        a = _ols(_design(data, (t,)), data[:, m])[1]
        b = _ols(_design(data, (m, t)), y)[1]
        return np.asarray(a * b)
    if of == "cate":
        cov = list(attrs["covariates"])
        tv, c = data[:, t:t + 1], data[:, cov]
        beta = _ols(np.concatenate([np.ones_like(tv), tv, c, tv * c], axis=1), y)
        return beta[1] + c @ beta[2 + len(cov):]
    if of == "iv_estimate":
        x = _design(data, (t, *attrs["covariates"]))
        z = _design(data, (*attrs["instruments"], *attrs["covariates"]))
        xhat = z @ _ols(z, x)
        return _ols(xhat, y)
    raise ValueError(of)


def _neumann(a):
    """(I - a)^{-1} as sum_{k < 2d} a^k: exact for a nilpotent a (a DAG's weights, a^d = 0), and so
    is its derivative (sum_{p + q = k - 1} a^p da a^q vanishes for p >= d or q >= d), also along
    the entries a DAG leaves zero."""
    total, power = np.eye(len(a), dtype=a.dtype), np.eye(len(a), dtype=a.dtype)
    for _ in range(2 * len(a) - 1):
        power = power @ a
        total = total + power
    return total


def do_ref(w, b, s, mask, v):
    keep = np.where(mask, 0.0, 1.0)
    bm = _neumann((w * keep[None, :]).T)
    return bm @ np.where(mask, v, b), (bm * (s * keep)[None, :]) @ bm.T


def cf_ref(w, x, mask, v):
    u = x - x @ w
    keep = np.where(mask, 0.0, 1.0)
    return (u * keep + np.where(mask, v, 0.0)) @ _neumann(w * keep[None, :])


def dag_ref(w, b, s, x):
    r = x - b - x @ w
    return -0.5 * np.sum(np.log(2 * np.pi * s) + r * r / s, axis=-1)


def _f64(xs):
    return [np.asarray(x, dtype=np.float64) if x.dtype.kind == "f" else x for x in xs]


def _expect(y):
    return Expect(y, np.maximum(1.0, np.abs(y)))


def _value(fn):
    def ref(*xs, **attrs):
        out = fn(*_f64(xs))
        return tuple(_expect(o) for o in out) if isinstance(out, tuple) else _expect(out)

    return ref


def _estimator(of):
    def ref(data, **attrs):
        return _expect(estimator_ref(of, np.asarray(data, dtype=np.float64), attrs))

    return ref


# of -> (reference of the complex-step perturbed inputs, cotangent count, positions differentiated)
_GRADS = {
    "do_calculus": (lambda xs, a: do_ref(*xs), 2, (0, 1, 2, 4)),
    "counterfactual": (lambda xs, a: cf_ref(*xs), 1, (0, 1, 3)),
    "dag_markov_factorization": (lambda xs, a: dag_ref(*xs), 1, (0, 1, 2, 3)),
    **{k: (lambda xs, a, k=k: estimator_ref(k, xs[0], a), 1, (0,))
       for k in ("backdoor_adjustment", "frontdoor_adjustment", "cate", "iv_estimate")},
}


def vjp_ref(*ins, of, **attrs):
    """d/dp <ct, f(p)> = Im <ct, f(p + i h e)> / h per element, h = 1e-30."""
    fn, n_ct, positions = _GRADS[of]
    cts, xs = _f64(ins[:n_ct]), _f64(ins[n_ct:])
    h = 1e-30
    grads = []
    for p in positions:
        g = np.zeros(xs[p].shape)
        for idx in np.ndindex(xs[p].shape):
            pert = [x.astype(complex) if x.dtype.kind == "f" else x for x in xs]
            pert[p][idx] += 1j * h
            ys = fn(pert, attrs)
            ys = ys if isinstance(ys, tuple) else (ys,)
            g[idx] = sum(np.sum(c * y).imag for c, y in zip(cts, ys, strict=True)) / h
        grads.append(Expect(g, np.maximum(1.0, np.abs(g))))
    return tuple(grads) if len(grads) > 1 else grads[0]


# ---- inputs -------------------------------------------------------------------------------


def _dag_w(rng, d, shape):
    return np.triu(rng.uniform(-0.9, 0.9, shape), 1).astype(d.numpy)


def _data(rng, d, shape):
    """Correlated columns: 1 and 2 drive 0; 0, 1 and 3 drive the last."""
    x = rng.normal(size=shape)
    x[:, 0] += x[:, 1] + 0.5 * x[:, 2]
    x[:, -1] += x[:, 0] - x[:, 1] + 0.3 * x[:, 3]
    return x.astype(d.numpy)


W = arg((D, D), _dag_w)
VEC = arg((D,), uniform(-1.5, 1.5))
VAR = arg((D,), uniform(0.3, 1.5))
MASK = arg((D,), values([False, True, False]), BOOL)
MASK0 = arg((D,), values([True, False, False]), BOOL)
X = arg((2, 2, D), uniform(-2.0, 2.0))
DATA = arg((9, 5), _data)
TOL = tol(1024, 1024, float32=(4096, 4096))
EST = {
    "backdoor_adjustment": {"treatment": 0, "outcome": 4, "adjust": [1, 2]},
    "frontdoor_adjustment": {"treatment": 0, "mediator": 3, "outcome": 4},
    "cate": {"treatment": 0, "outcome": 4, "covariates": [1, 2]},
    "iv_estimate": {"treatment": 0, "outcome": 4, "instruments": [2, 3], "covariates": [1]},
}


def _est_row(of, cases):
    attrs = EST[of]
    return row(
        f"causal.{of}",
        FLOATS,
        [Case(label, (arg(shape, _data),), a, _estimator(of), TOL) for label, shape, a in cases],
        [bad(r"outside \[0, 5\)", ((9, 5), F64), **{**attrs, "outcome": 5}),
         bad(r"data must be \[n, d\]", ((9,), F64), **attrs)],
    )


ROWS = [
    row(
        "causal.do_calculus",
        FLOATS,
        [Case("one-intervened", (W, VEC, VAR, MASK, VEC), {}, _value(do_ref), TOL),
         Case("root-intervened", (W, VEC, VAR, MASK0, VEC), {}, _value(do_ref), TOL)],
        [bad("mask must be bool", ((3, 3), F64), ((3,), F64), ((3,), F64), ((3,), F64), ((3,), F64)),
         bad("b must be", ((3, 3), F64), ((2,), F64), ((3,), F64), ((3,), BOOL), ((3,), F64)),
         bad(r"W must be \[d, d\]", ((3, 2), F64), ((3,), F64), ((3,), F64), ((3,), BOOL), ((3,), F64))],
    ),
    row(
        "causal.counterfactual",
        FLOATS,
        [Case("2x2-rows", (W, X, MASK, VEC), {}, _value(cf_ref), TOL),
         Case("one-row", (W, arg((D,), uniform(-2, 2)), MASK0, VEC), {}, _value(cf_ref), TOL)],
        [bad(r"x must be", ((3, 3), F64), ((2, 4), F64), ((3,), BOOL), ((3,), F64)),
         bad("v must be", ((3, 3), F64), ((2, 3), F64), ((3,), BOOL), ((3,), F32))],
    ),
    row(
        "causal.dag_markov_factorization",
        FLOATS,
        [Case("2x2-rows", (W, VEC, VAR, X), {}, _value(dag_ref), TOL)],
        [bad("s must be", ((3, 3), F64), ((3,), F64), ((4,), F64), ((2, 3), F64)),
         bad(r"x must be", ((3, 3), F64), ((3,), F64), ((3,), F64), ((2, 2), F64))],
    ),
    _est_row("backdoor_adjustment", [("adjust-2", (9, 5), EST["backdoor_adjustment"]),
                                     ("no-adjust", (6, 5), {"treatment": 0, "outcome": 4})]),
    _est_row("frontdoor_adjustment", [("9-rows", (9, 5), EST["frontdoor_adjustment"])]),
    _est_row("cate", [("two-covariates", (9, 5), EST["cate"]),
                      ("no-covariates", (6, 5), {"treatment": 0, "outcome": 4})]),
    _est_row("iv_estimate", [("over-identified", (9, 5), EST["iv_estimate"]),
                             ("just-identified", (7, 5), {"treatment": 0, "outcome": 4, "instruments": [3]})]),
    row(
        "causal.vjp",
        FLOATS,
        [Case("do_calculus", (arg((D,)), arg((D, D)), W, VEC, VAR, MASK, VEC), {"of": "do_calculus"}, vjp_ref, TOL),
         Case("counterfactual", (arg((2, 2, D)), W, X, MASK, VEC), {"of": "counterfactual"}, vjp_ref, TOL),
         Case("dag", (arg((2, 2)), W, VEC, VAR, X), {"of": "dag_markov_factorization"}, vjp_ref, TOL),
         *[Case(of, (arg((9,) if of == "cate" else (3,) if of == "iv_estimate" else ()), DATA), {"of": of, **a},
                vjp_ref, TOL) for of, a in EST.items()]],
        [bad("the cotangent must be", ((2,), F64), ((9, 5), F64), of="backdoor_adjustment", treatment=0, outcome=4),
         bad("takes 2 cotangent", ((3,), F64), ((3, 3), F64), ((3,), F64), ((3,), F64), ((3,), BOOL), ((3,), F64),
             of="do_calculus")],
    ),
]
