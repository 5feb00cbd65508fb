"""predictive_coding.*: every value from explicit Python loops over units and batch rows (the
equations of caramba.ops.predictive_coding's docstring, Bogacz 2017's conventions, no
vectorization, no caramba code); the VJP op against complex-step derivatives of those loops
(exact to rounding)."""

from __future__ import annotations

import cmath
import math

import numpy as np

from ..harness import F64, FLOATS, Case, Expect, arg, bad, row, tol, uniform

K, N = 3, 4  # units above, units below


def _tanh(a):
    return cmath.tanh(a) if isinstance(a, complex) else math.tanh(a)


def _f(a, act):
    """(f(a), f'(a)) of one scalar pre-activation."""
    if act == "linear":
        return a, 1.0
    if act == "tanh":
        t = _tanh(a)
        return t, 1 - t * t
    if act == "sigmoid":
        s = 1 / (1 + (cmath.exp(-a) if isinstance(a, complex) else math.exp(-a)))
        return s, s * (1 - s)
    pos = a.real > 0
    return (a if pos else 0.0), (1.0 if pos else 0.0)


def _rows(x):
    x = np.asarray(x)
    return x.reshape(-1, x.shape[-1]), x.shape[:-1]


def _pre(r, w, b):
    """a[i][j] = sum_k r[i][k] w[k][j] + b[j] for each batch row i."""
    return [[sum(ri[k] * w[k][j] for k in range(len(w))) + b[j] for j in range(len(b))] for ri in r]


def pred_ref(r, w, b, activation="tanh"):
    rr, lead = _rows(r)
    out = [[_f(v, activation)[0] for v in row_] for row_ in _pre(rr, w, b)]
    return np.array(out).reshape(lead + (len(b),))


def err_ref(x, mu, pi):
    xx, lead = _rows(x)
    mm, _ = _rows(mu)
    pi = np.asarray(pi)
    n = xx.shape[-1]
    out = []
    for i in range(len(xx)):
        e = [xx[i][j] - mm[i][j] for j in range(n)]
        if pi.ndim == 2:
            out.append([sum(pi[a][c] * e[c] for c in range(n)) for a in range(n)])
        elif pi.ndim == 1:
            out.append([pi[a] * e[a] for a in range(n)])
        else:
            out.append([pi[()] * e[a] for a in range(n)])
    return np.array(out).reshape(lead + (n,))


def rep_ref(r, w, b, eb, es, activation="tanh", lr=0.1):
    rr, _ = _rows(r)
    ee, _ = _rows(eb)
    ss, _ = _rows(es)
    a = _pre(rr, w, b)
    out = []
    for i in range(len(rr)):
        g = [_f(a[i][j], activation)[1] * ee[i][j] for j in range(len(b))]
        out.append([rr[i][k] + lr * (sum(g[j] * w[k][j] for j in range(len(b))) - ss[i][k]) for k in range(len(w))])
    return np.array(out).reshape(np.shape(r))


def wts_ref(r, w, b, eb, activation="tanh", lr=0.1):
    rr, _ = _rows(r)
    ee, _ = _rows(eb)
    a = _pre(rr, w, b)
    k, n = len(w), len(b)
    dw = [[0.0] * n for _ in range(k)]
    db = [0.0] * n
    for i in range(len(rr)):
        for j in range(n):
            g = _f(a[i][j], activation)[1] * ee[i][j]
            db[j] += lr * g
            for q in range(k):
                dw[q][j] += lr * rr[i][q] * g
    return np.array(dw), np.array(db)


REFS = {"prediction": pred_ref, "prediction_error": err_ref, "update_representation": rep_ref,
        "update_weights": wts_ref}
N_OUT = {"prediction": 1, "prediction_error": 1, "update_representation": 1, "update_weights": 2}


def _f64(xs):
    return [np.asarray(x, dtype=np.float64) for x in xs]


def _expect(y):
    y = np.asarray(y, dtype=np.float64)
    return Expect(y, np.maximum(1.0, np.abs(y)) * 64)


def _value(fn):
    def ref(*xs, **attrs):
        y = fn(*_f64(xs), **attrs)
        return tuple(_expect(v) for v in y) if isinstance(y, tuple) else _expect(y)

    return ref


def vjp_ref(*xs, of, activation="tanh", lr=0.1):
    """Cotangents of every input by complex-step differentiation of the loops:
    d/dp <ct, f(p)> = Im <ct, f(p + i h e)> / h, exact to rounding for h = 1e-30."""
    n_out = N_OUT[of]
    cts, xs = _f64(xs[:n_out]), _f64(xs[n_out:])
    attrs = {} if of == "prediction_error" else {"activation": activation}
    if of in ("update_representation", "update_weights"):
        attrs["lr"] = lr
    h = 1e-30
    grads = []
    for p, x in enumerate(xs):
        g = np.zeros(x.shape)
        for idx in np.ndindex(x.shape):
            pert = [v.astype(complex) for v in xs]
            pert[p][idx] += 1j * h
            y = REFS[of](*pert, **attrs)
            y = y if isinstance(y, tuple) else (y,)
            g[idx] = sum(np.sum(c * v).imag for c, v in zip(cts, y, strict=True)) / h
        grads.append(_expect(g))
    return tuple(grads)


R = arg((2, K))
W = arg((K, N), uniform(-1.0, 1.0))
B = arg((N,), uniform(-0.5, 0.5))
EB = arg((2, N))
ES = arg((2, K))
POS = uniform(0.5, 2.0)
TOL = tol(64, 64)
ACTS = ("linear", "tanh", "sigmoid", "relu")
ROWS = [
    row(
        "predictive_coding.prediction",
        FLOATS,
        [*[Case(act, (R, W, B), {"activation": act}, _value(pred_ref), TOL) for act in ACTS],
         Case("batch-2x3", (arg((2, 3, K)), W, B), {"activation": "tanh"}, _value(pred_ref), TOL)],
        [bad("W must be", ((2, 3), F64), ((3,), F64), ((4,), F64)),
         bad("r must be", ((2, 2), F64), ((3, 4), F64), ((4,), F64)),
         bad("b must be", ((2, 3), F64), ((3, 4), F64), ((3,), F64))],
    ),
    row(
        "predictive_coding.prediction_error",
        FLOATS,
        [Case("scalar", (arg((2, N)), arg((2, N)), arg((), POS)), {}, _value(err_ref), TOL),
         Case("diagonal", (arg((2, N)), arg((2, N)), arg((N,), POS)), {}, _value(err_ref), TOL),
         Case("matrix", (arg((3, 2, N)), arg((3, 2, N)), arg((N, N))), {}, _value(err_ref), TOL)],
        [bad("x and mu must be one shape", ((2, 4), F64), ((2, 3), F64), ((), F64)),
         bad(r"Pi \(the precision\)", ((2, 4), F64), ((2, 4), F64), ((3,), F64))],
    ),
    row(
        "predictive_coding.update_representation",
        FLOATS,
        [*[Case(act, (R, W, B, EB, ES), {"activation": act, "lr": 0.3}, _value(rep_ref), TOL) for act in ACTS],
         Case("single", (arg((K,)), W, B, arg((N,)), arg((K,))), {"activation": "tanh", "lr": 0.1}, _value(rep_ref),
              TOL)],
        [bad("eps_below must be", ((2, 3), F64), ((3, 4), F64), ((4,), F64), ((2, 3), F64), ((2, 3), F64)),
         bad("eps_self must be", ((2, 3), F64), ((3, 4), F64), ((4,), F64), ((2, 4), F64), ((2, 4), F64)),
         bad("needs a finite lr > 0", ((2, 3), F64), ((3, 4), F64), ((4,), F64), ((2, 4), F64), ((2, 3), F64),
             lr=-1.0)],
    ),
    row(
        "predictive_coding.update_weights",
        FLOATS,
        [*[Case(act, (R, W, B, EB), {"activation": act, "lr": 0.3}, _value(wts_ref), TOL) for act in ACTS],
         Case("batch-2x2", (arg((2, 2, K)), W, B, arg((2, 2, N))), {"activation": "sigmoid", "lr": 1.0},
              _value(wts_ref), TOL)],
        [bad("eps_below must be", ((2, 3), F64), ((3, 4), F64), ((4,), F64), ((3, 4), F64))],
    ),
    row(
        "predictive_coding.vjp",
        FLOATS,
        [Case("prediction", (EB, R, W, B), {"of": "prediction", "activation": "sigmoid"}, vjp_ref, TOL),
         Case("prediction_error", (EB, arg((2, N)), arg((2, N)), arg((N, N))), {"of": "prediction_error"},
              vjp_ref, TOL),
         Case("update_representation", (ES, R, W, B, EB, ES), {"of": "update_representation", "activation": "tanh",
                                                               "lr": 0.3}, vjp_ref, TOL),
         Case("update_weights", (W, B, R, W, B, EB), {"of": "update_weights", "activation": "tanh", "lr": 0.3},
              vjp_ref, TOL)],
        [bad("takes 1 cotangent", ((2, 4), F64), ((2, 3), F64), ((3, 4), F64), ((4,), F64), ((2, 4), F64),
             of="prediction"),
         bad("shaped like the op's outputs", ((2, 3), F64), ((2, 3), F64), ((3, 4), F64), ((4,), F64),
             of="prediction")],
    ),
]
