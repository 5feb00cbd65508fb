"""active_inference.*: every value from explicit Python loops over states, outcomes, policies and
time steps (Da Costa et al. 2020's definitions, no vectorization, no caramba code); the VJP op
against complex-step derivatives of those loops (exact to rounding)."""

from __future__ import annotations

import cmath
import math

import numpy as np

from ..harness import F64, FLOATS, I64, Case, Expect, arg, bad, row, tol, uniform

EPS = 2.0**-52
NO, S, U = 3, 4, 2  # outcomes, states, actions


def _log(x):
    return cmath.log(x) if isinstance(x, complex) else math.log(x)


def _exp(x):
    return cmath.exp(x) if isinstance(x, complex) else math.exp(x)


def _slog(x):
    return _log(x) if x.real > EPS else math.log(EPS)


def _xlogx(x):
    return x * _log(x) if x.real > 0 else 0.0


def _softmax(z):
    m = max(v.real for v in z)
    e = [_exp(v - m) for v in z]
    t = sum(e)
    return [v / t for v in e]


def _evidence(a, obs, prior):
    return [sum(obs[o] * _slog(a[o][s]) for o in range(len(a))) + _slog(prior[s]) for s in range(len(prior))]


def _lead(x, keep):
    x = np.asarray(x)
    return x.reshape((-1,) + x.shape[x.ndim - keep:]), x.shape[: x.ndim - keep]


def bu_ref(a, obs, prior):
    ob, _ = _lead(obs, 1)
    pr, _ = _lead(prior, 1)
    out = [_softmax(_evidence(a, ob[i], pr[i])) for i in range(len(ob))]
    return np.array(out).reshape(np.shape(prior))


def fe_ref(q, a, obs, prior):
    ob, lead = _lead(obs, 1)
    pr, _ = _lead(prior, 1)
    qq, _ = _lead(q, 1)
    out = []
    for i in range(len(ob)):
        z = _evidence(a, ob[i], pr[i])
        out.append(sum(_xlogx(qq[i][s]) - qq[i][s] * z[s] for s in range(len(z))))
    return np.array(out).reshape(lead)


def efe_ref(q, a, b, c, policies):
    qq, lead = _lead(q, 1)
    n_o, n_s = len(a), len(a[0])
    m = max(v.real for v in c)
    lse = m + _log(sum(_exp(v - m) for v in c))
    lnc = [v - lse for v in c]
    out = []
    for i in range(len(qq)):
        row_ = []
        for pol in policies:
            qt, g = list(qq[i]), 0.0
            for u in pol:
                qt = [sum(b[s2][s1][int(u)] * qt[s1] for s1 in range(n_s)) for s2 in range(n_s)]
                qo = [sum(a[o][s] * qt[s] for s in range(n_s)) for o in range(n_o)]
                g += sum(_xlogx(qo[o]) - qo[o] * lnc[o] for o in range(n_o))
                g += sum(qt[s] * -sum(_xlogx(a[o][s]) for o in range(n_o)) for s in range(n_s))
            row_.append(g)
        out.append(row_)
    return np.array(out).reshape(lead + (len(policies),))


def pw_ref(g, gamma, e=None):
    gg, _ = _lead(g, 1)
    gamma = gamma[()] if np.ndim(gamma) == 0 else gamma
    out = []
    for i in range(len(gg)):
        z = [-gamma * gg[i][p] + (_slog(e[p]) if e is not None else 0.0) for p in range(len(gg[i]))]
        out.append(_softmax(z))
    return np.array(out).reshape(np.shape(g))


REFS = {"belief_update": bu_ref, "free_energy": fe_ref, "expected_free_energy": efe_ref, "precision_weight": pw_ref}


def _f64(xs):
    return [np.asarray(x, dtype=np.float64) if x.dtype != np.int64 else x for x in xs]


def _value(fn):
    def ref(*xs, **attrs):
        y = fn(*_f64(xs)).astype(np.float64)
        return Expect(y, np.maximum(1.0, np.abs(y)) * 64)

    return ref


def vjp_ref(ct, *xs, of):
    """Cotangents of the float inputs by complex-step differentiation of the loops:
    d/dp <ct, f(p)> = Im <ct, f(p + i h e)> / h, exact to rounding for h = 1e-30."""
    fn = REFS[of]
    xs = _f64(xs)
    ct = np.asarray(ct, dtype=np.float64)
    h = 1e-30
    grads = []
    for p, x in enumerate(xs):
        if x.dtype == np.int64:
            continue
        g = np.zeros(x.shape)
        for idx in np.ndindex(x.shape):
            pert = [v.astype(complex) if v.dtype != np.int64 else v for v in xs]
            pert[p][idx] += 1j * h
            g[idx] = np.sum(ct * fn(*pert)).imag / h
        grads.append(Expect(g, np.maximum(1.0, np.abs(g)) * 64))
    return tuple(grads)


def simplex(axis: int):
    """Positive entries normalised along ``axis`` (columns of A and B, distributions)."""

    def gen(rng, d, shape):
        x = rng.uniform(0.1, 1.0, shape)
        return (x / x.sum(axis=axis, keepdims=True)).astype(d.numpy)

    return gen


def _policies(rng, d, shape):
    return rng.integers(0, U, size=shape).astype(np.int64)


A = arg((NO, S), simplex(0))
B = arg((S, S, U), simplex(0))
C = arg((NO,))
GAMMA = arg((), uniform(0.5, 3.0))
TOL = tol(64, 64)
ROWS = [
    row(
        "active_inference.belief_update",
        FLOATS,
        [Case("single", (A, arg((NO,), simplex(-1)), arg((S,), simplex(-1))), {}, _value(bu_ref), TOL),
         Case("batch-2x3", (A, arg((2, 3, NO), simplex(-1)), arg((2, 3, S), simplex(-1))), {}, _value(bu_ref), TOL)],
        [bad("obs must be", ((3, 4), F64), ((4,), F64), ((4,), F64)),
         bad("prior must be", ((3, 4), F64), ((2, 3), F64), ((4,), F64)),
         bad(r"A \(the likelihood", ((3,), F64), ((3,), F64), ((4,), F64))],
    ),
    row(
        "active_inference.free_energy",
        FLOATS,
        [Case("single", (arg((S,), simplex(-1)), A, arg((NO,), simplex(-1)), arg((S,), simplex(-1))), {},
              _value(fe_ref), TOL),
         Case("batch-4", (arg((4, S), simplex(-1)), A, arg((4, NO), simplex(-1)), arg((4, S), simplex(-1))), {},
              _value(fe_ref), TOL)],
        [bad("q must be", ((3,), F64), ((3, 4), F64), ((3,), F64), ((4,), F64))],
    ),
    row(
        "active_inference.expected_free_energy",
        FLOATS,
        [Case("5-policies-3-steps", (arg((S,), simplex(-1)), A, B, C, arg((5, 3), _policies, I64)), {},
              _value(efe_ref), TOL),
         Case("batch-2", (arg((2, S), simplex(-1)), A, B, C, arg((4, 1), _policies, I64)), {}, _value(efe_ref), TOL)],
        [bad("policies must be int64", ((4,), F64), ((3, 4), F64), ((4, 4, 2), F64), ((3,), F64), ((2, 3), F64)),
         bad(r"B \(transitions", ((4,), F64), ((3, 4), F64), ((4, 3, 2), F64), ((3,), F64), ((2, 3), I64)),
         bad(r"C \(log-preferences", ((4,), F64), ((3, 4), F64), ((4, 4, 2), F64), ((4,), F64), ((2, 3), I64))],
    ),
    row(
        "active_inference.precision_weight",
        FLOATS,
        [Case("no-prior", (arg((2, 5)), GAMMA), {}, _value(pw_ref), TOL),
         Case("with-prior", (arg((6,)), GAMMA, arg((6,), simplex(-1))), {}, _value(pw_ref), TOL)],
        [bad("gamma .*must be a scalar", ((3,), F64), ((1,), F64)),
         bad(r"E \(the prior over policies\)", ((3,), F64), ((), F64), ((2,), F64))],
    ),
    row(
        "active_inference.vjp",
        FLOATS,
        [Case("belief_update", (arg((2, S)), A, arg((2, NO), simplex(-1)), arg((2, S), simplex(-1))),
              {"of": "belief_update"}, vjp_ref, TOL),
         Case("free_energy", (arg((2,)), arg((2, S), simplex(-1)), A, arg((2, NO), simplex(-1)),
                              arg((2, S), simplex(-1))), {"of": "free_energy"}, vjp_ref, TOL),
         Case("expected_free_energy", (arg((3,)), arg((S,), simplex(-1)), A, B, C, arg((3, 2), _policies, I64)),
              {"of": "expected_free_energy"}, vjp_ref, TOL),
         Case("precision_weight", (arg((2, 4)), arg((2, 4)), GAMMA,
                                   arg((4,), simplex(-1))), {"of": "precision_weight"}, vjp_ref, TOL)],
        [bad("the cotangent must be", ((2,), F64), ((3,), F64), ((), F64), of="precision_weight"),
         bad("takes the cotangent and 3 inputs", ((4,), F64), ((3, 4), F64), ((3,), F64), of="belief_update")],
    ),
]
