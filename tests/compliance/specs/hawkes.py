"""hawkes.*: every value from explicit per-event Python sums of the kernel definition (no
recursion, no vectorization); the VJP op against complex-step derivatives of those sums
(exact to rounding); the simulation against a plain-Python Ogata thinning on the SplitMix64
stream in Python ints."""

from __future__ import annotations

import cmath
import math

import numpy as np

from ..harness import F64, FLOATS, I64, Case, Expect, arg, bad, build, row, tol, uniform

M, K = 2, 2


def _times(n_lo: float = 0.0):
    def gen(rng, d, shape):
        return np.sort(rng.uniform(n_lo, 6.0, shape), axis=-1).astype(d.numpy)

    return gen


def _marks(rng, d, shape):
    return rng.integers(0, M, size=shape).astype(np.int64)


def _end(rng, d, shape):
    return np.full(shape, 6.5, dtype=d.numpy)


def _phi(alpha, beta, i, j, s, exp=math.exp):
    return sum(alpha[i][j][k] * beta[i][j][k] * exp(-beta[i][j][k] * s) for k in range(len(alpha[i][j])))


def _lam(mu, alpha, beta, t, m, tq, i, exp=math.exp):
    return mu[i] + sum(_phi(alpha, beta, i, int(m[n]), tq - t[n], exp) for n in range(len(t)) if t[n] < tq)


def _seqs(x):
    x = np.asarray(x)
    return x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x[None]


def intensity_ref(mu, alpha, beta, t, m, q, exp=math.exp):
    ts, ms, qs = _seqs(t), _seqs(m), _seqs(q)
    out = np.array([[[_lam(mu, alpha, beta, ts[b], ms[b], tq, i, exp) for i in range(len(mu))] for tq in qs[b]]
                    for b in range(len(ts))], dtype=complex if exp is cmath.exp else float)
    return out.reshape(np.shape(q) + (len(mu),))


def kernel_ref(alpha, beta, t, m, exp=math.exp):
    ts, ms = _seqs(t), _seqs(m)
    n = ts.shape[-1]
    out = np.array([[[_phi(alpha, beta, int(ms[b][i]), int(ms[b][p]), ts[b][i] - ts[b][p], exp) if ts[b][p] < ts[b][i]
                      else 0.0 for p in range(n)] for i in range(n)] for b in range(len(ts))],
                   dtype=complex if exp is cmath.exp else float)
    return out.reshape(np.shape(t) + (n,))


def ll_ref(mu, alpha, beta, t, m, end, exp=math.exp, log=math.log):
    ts, ms, ends = _seqs(t), _seqs(m), np.reshape(end, (-1,))
    out = []
    for b in range(len(ts)):
        tb, mb, big_t = ts[b], ms[b], ends[b]
        total = sum(log(_lam(mu, alpha, beta, tb, mb, tb[n], int(mb[n]), exp)) for n in range(len(tb)))
        total -= big_t * sum(mu)
        for n in range(len(tb)):
            for i in range(len(mu)):
                for k in range(len(alpha[i][int(mb[n])])):
                    a, be = alpha[i][int(mb[n])][k], beta[i][int(mb[n])][k]
                    total -= a * (1 - exp(-be * (big_t - tb[n])))
        out.append(total)
    return np.array(out, dtype=complex if exp is cmath.exp else float).reshape(np.shape(end))


def _ref_value(fn):
    def ref(*xs, **attrs):
        xs = [np.asarray(x, dtype=np.float64) if x.dtype != np.int64 else x for x in xs]
        y = fn(*xs)
        return Expect(y, np.maximum(1.0, np.abs(y)) * 64)

    return ref


def vjp_ref(ct, *xs, of):
    """Cotangents of (mu,) alpha, beta by complex-step differentiation of the explicit sums:
    d/dp <ct, f(p)> = Im <ct, f(p + i h e)> / h, exact to rounding for h = 1e-30."""
    fn = {"intensity": intensity_ref, "kernel_matrix": kernel_ref, "log_likelihood": ll_ref}[of]
    n_params = 2 if of == "kernel_matrix" else 3
    xs = [np.asarray(x, dtype=np.float64) if x.dtype != np.int64 else x for x in xs]
    ct = np.asarray(ct, dtype=np.float64)
    h = 1e-30
    extra = {"log": cmath.log} if of == "log_likelihood" else {}
    grads = []
    for p in range(n_params):
        g = np.zeros(xs[p].shape)
        for idx in np.ndindex(xs[p].shape):
            pert = [x.astype(complex) if i < n_params else x for i, x in enumerate(xs)]
            pert[p][idx] += 1j * h
            g[idx] = np.sum(ct * fn(*pert, exp=cmath.exp, **extra)).imag / h
        grads.append(Expect(g, np.maximum(1.0, np.abs(g)) * 64))
    return tuple(grads)


P = (arg((M,), uniform(0.2, 0.8)), arg((M, M, K), uniform(0.05, 0.3)), arg((M, M, K), uniform(0.5, 3.0)))
EV = (arg((7,), _times()), arg((7,), _marks, I64))
EV2 = (arg((2, 5), _times()), arg((2, 5), _marks, I64))
TOL = tol(64, 64)


# ---- simulation reference ------------------------------------------------------------------
from .sample import GOLDEN, U64, _mix  # noqa: E402  (the same SplitMix64 stream as sample.token's reference)


def simulate_ref(mu, alpha, beta, events, seed, key=None):
    s = _mix(seed) if key is None else _mix((seed & U64) ^ _mix((key & U64) + GOLDEN))

    def u(i):
        return (_mix(s + i * GOLDEN) >> 11) * 2.0**-53

    m_dims, kk = len(mu), len(alpha[0][0])
    r = [[[0.0] * kk for _ in range(m_dims)] for _ in range(m_dims)]
    times, marks = [math.inf] * events, [-1] * events

    def lam():
        return [mu[i] + sum(alpha[i][j][k] * beta[i][j][k] * r[i][j][k] for j in range(m_dims) for k in range(kk))
                for i in range(m_dims)]

    t, n, c = 0.0, 0, 0
    while n < events:
        bar = sum(lam())
        u1, u2 = u(2 * c + 1), u(2 * c + 2)
        c += 1
        w = -math.log1p(-u1) / bar
        t += w
        r = [[[r[i][j][k] * math.exp(-beta[i][j][k] * w) for k in range(kk)] for j in range(m_dims)] for i in range(m_dims)]
        lams = lam()
        level, acc = u2 * bar, 0.0
        if level < sum(lams):
            mark = m_dims - 1
            for i, li in enumerate(lams):
                acc += li
                if acc > level:
                    mark = i
                    break
            times[n], marks[n] = t, mark
            for i in range(m_dims):
                for k in range(kk):
                    r[i][mark][k] += 1.0
            n += 1
    return np.array(times), np.array(marks, dtype=np.int64)


def _check_simulate(runner, case, d):
    b = build(case, d)
    exe = runner.compile(b.graph)
    got = exe.run({k: runner.upload(v) for k, v in b.inputs.items()})
    ins = [b.inputs[f"x{i}"] for i in range(len(case.args))]
    key = int(ins[3]) if len(ins) == 4 else None
    mu, al, be = (x.astype(np.float64).tolist() for x in ins[:3])
    attrs = case.attrs_for(d)
    want_t, want_m = simulate_ref(mu, al, be, attrs["events"], attrs.get("seed", 0), key)
    outs = [got[k].download() for k in sorted(got)]
    times = next(o for o in outs if o.dtype != np.int64)
    marks = next(o for o in outs if o.dtype == np.int64)
    assert times.dtype == d.numpy and times.shape == (attrs["events"],)
    np.testing.assert_array_equal(marks, want_m)
    rtol = 1e-12 if d == F64 else 1e-4
    np.testing.assert_allclose(times.astype(np.float64), want_t, rtol=rtol)


SIM_ARGS = (arg((M,), uniform(0.3, 0.8)), arg((M, M, K), uniform(0.05, 0.2)), arg((M, M, K), uniform(0.5, 3.0)))
ROWS = [
    row(
        "hawkes.intensity",
        FLOATS,
        [Case("7-events", (*P, *EV, arg((5,), uniform(0.0, 7.0))), {}, _ref_value(intensity_ref), TOL),
         Case("2x5-events", (*P, *EV2, arg((2, 3), uniform(0.0, 7.0))), {}, _ref_value(intensity_ref), TOL)],
        [bad("query times t must be", ((2,), F64), ((2, 2, 1), F64), ((2, 2, 1), F64), ((4,), F64), ((4,), I64), ((3, 2), F64)),
         bad("marks must be int64", ((2,), F64), ((2, 2, 1), F64), ((2, 2, 1), F64), ((4,), F64), ((4,), F64), ((3,), F64))],
    ),
    row(
        "hawkes.kernel_matrix",
        FLOATS,
        [Case("7-events", (*P[1:], *EV), {}, _ref_value(kernel_ref), TOL),
         Case("2x5-events", (*P[1:], *EV2), {}, _ref_value(kernel_ref), TOL)],
        [bad(r"alpha must be \[M, M, K\]", ((2, 3, 1), F64), ((2, 3, 1), F64), ((4,), F64), ((4,), I64))],
    ),
    row(
        "hawkes.log_likelihood",
        FLOATS,
        [Case("7-events", (*P, *EV, arg((), _end)), {}, _ref_value(ll_ref), TOL),
         Case("2x5-events", (*P, *EV2, arg((2,), _end)), {}, _ref_value(ll_ref), TOL)],
        [bad("T .*must be", ((2,), F64), ((2, 2, 1), F64), ((2, 2, 1), F64), ((4,), F64), ((4,), I64), ((1,), F64)),
         bad("mu must be", ((3,), F64), ((2, 2, 1), F64), ((2, 2, 1), F64), ((4,), F64), ((4,), I64), ((), F64))],
    ),
    row(
        "hawkes.vjp",
        FLOATS,
        [Case("intensity", (arg((5, M)), *P, *EV, arg((5,), uniform(0.0, 7.0))), {"of": "intensity"}, vjp_ref, TOL),
         Case("kernel_matrix", (arg((2, 5, 5)), *P[1:], *EV2), {"of": "kernel_matrix"}, vjp_ref, TOL),
         Case("log_likelihood", (arg((2,)), *P, *EV2, arg((2,), _end)), {"of": "log_likelihood"}, vjp_ref, TOL)],
        [bad("the cotangent must be", ((3,), F64), ((2,), F64), ((2, 2, 1), F64), ((2, 2, 1), F64), ((4,), F64),
             ((4,), I64), ((), F64), of="log_likelihood"),
         bad("takes the cotangent and 4 inputs", ((3,), F64), ((2,), F64), ((2, 2, 1), F64), ((2, 2, 1), F64),
             ((4,), F64), ((4,), I64), of="kernel_matrix")],
    ),
    row(
        "hawkes.simulate",
        FLOATS,
        [Case("2d-40", SIM_ARGS, {"events": 40, "seed": 3}, check=_check_simulate),
         Case("2d-40-key", (*SIM_ARGS, arg((), uniform(-50, 50), I64)), {"events": 40, "seed": 3},
              check=_check_simulate),
         Case("zero-events", SIM_ARGS, {"events": 0}, check=_check_simulate)],
        [bad("events must be >= 0", ((2,), F64), ((2, 2, 1), F64), ((2, 2, 1), F64), events=-1),
         bad("key must be an int64 scalar", ((2,), F64), ((2, 2, 1), F64), ((2, 2, 1), F64), ((2,), I64), events=3)],
    ),
]
