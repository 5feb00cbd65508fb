"""markov_blanket.*: the partition from explicit parent/child sets in Python (Pearl's blanket,
the labelling in caramba.ops.markov_blanket's docstring); Gaussian mutual information from
sub-covariance determinants by Gaussian elimination in Python; discrete mutual information by
explicit sums over the table; flows as explicit dot products; the VJP op against complex-step
derivatives of those loops (exact to rounding)."""

from __future__ import annotations

import cmath
import math

import numpy as np

from ..harness import BOOL, F64, FLOATS, I64, Case, Expect, arg, bad, row, tol, uniform


def _log(x):
    return cmath.log(x) if isinstance(x, complex) else math.log(x)


def partition_ref(adj, internal):
    n = len(adj)
    edge = [[adj[i][j] != 0 and i != j for j in range(n)] for i in range(n)]
    inner = {i for i in range(n) if internal[i]}
    parents = {i for i in range(n) for j in inner if edge[i][j]}
    children = {j for i in inner for j in range(n) if edge[i][j]}
    coparents = {i for i in range(n) for j in children if edge[i][j]}
    blanket = (parents | children | coparents) - inner
    return np.array([2 if v in inner else 1 if v in children - inner else 0 if v in blanket else 3 for v in range(n)],
                    dtype=np.int64)


def _det(m):
    """Determinant by Gaussian elimination with partial pivoting (real or complex entries)."""
    m = [list(r) for r in m]
    n, det = len(m), 1.0
    for k in range(n):
        p = max(range(k, n), key=lambda i: abs(m[i][k]))
        if p != k:
            m[k], m[p] = m[p], m[k]
            det = -det
        det *= m[k][k]
        for i in range(k + 1, n):
            f = m[i][k] / m[k][k]
            for j in range(k, n):
                m[i][j] -= f * m[k][j]
    return det


def _sub(cov, idx):
    return [[cov[i][j] for j in idx] for i in idx]


def mi_gauss(cov, a, b):
    ab = list(a) + list(b)
    return 0.5 * (_log(_det(_sub(cov, a))) + _log(_det(_sub(cov, b))) - _log(_det(_sub(cov, ab))))


def mi_disc(p):
    nx, ny = len(p), len(p[0])
    z = sum(p[i][j] for i in range(nx) for j in range(ny))
    pn = [[p[i][j] / z for j in range(ny)] for i in range(nx)]
    px = [sum(pn[i]) for i in range(nx)]
    py = [sum(pn[i][j] for i in range(nx)) for j in range(ny)]
    return sum(pn[i][j] * (_log(pn[i][j]) - _log(px[i]) - _log(py[j]))
               for i in range(nx) for j in range(ny) if pn[i][j].real > 0)


def mi_ref(x, kind="gaussian", a=(), b=()):
    x = np.asarray(x)
    flat = x.reshape((-1,) + x.shape[-2:])
    fn = (lambda m: mi_gauss(m, a, b)) if kind == "gaussian" else mi_disc
    return np.array([fn(m) for m in flat]).reshape(x.shape[:-2])


def flow_ref(x, w, b):
    x = np.asarray(x)
    flat = x.reshape(-1, x.shape[-1])
    out = [[(cmath.tanh if isinstance(b[j], complex) else math.tanh)(
        sum(flat[r][i] * w[i][j] for i in range(len(w))) + b[j]) for j in range(len(b))] for r in range(len(flat))]
    return np.array(out).reshape(x.shape[:-1] + (len(b),))


def _value(fn):
    def ref(*xs, **attrs):
        xs = [np.asarray(v, dtype=np.float64) for v in xs]
        y = fn(*xs, **{k: attrs[k] for k in ("kind", "a", "b") if k in attrs}).astype(np.float64)
        return Expect(y, np.maximum(1.0, np.abs(y)) * 64)

    return ref


def vjp_ref(ct, *xs, of, kind="gaussian", a=(), b=()):
    fn = (lambda x: mi_ref(x, kind, a, b)) if of == "mutual_information" else flow_ref
    xs = [np.asarray(v, dtype=np.float64) for v in xs]
    ct = np.asarray(ct, dtype=np.float64)
    h = 1e-30
    grads = []
    for p, x in enumerate(xs):
        g = np.zeros(x.shape)
        for idx in np.ndindex(x.shape):
            pert = [v.astype(complex) for v in xs]
            pert[p][idx] += 1j * h
            g[idx] = np.sum(ct * fn(*pert)).imag / h
        grads.append(Expect(g, np.maximum(1.0, np.abs(g)) * 64))
    return tuple(grads)


def _cov(rng, d, shape):
    w = rng.normal(size=shape)
    return (w @ np.swapaxes(w, -1, -2) + np.eye(shape[-1])).astype(d.numpy)


def _dag(rng, d, shape):
    n = shape[0]
    order = rng.permutation(n)
    adj = np.zeros(shape)
    for i in range(n):
        for j in range(i + 1, n):
            if rng.random() < 0.35:
                adj[order[i], order[j]] = rng.uniform(0.5, 1.5)
    return adj.astype(d.numpy)


def _internal(rng, d, shape):
    m = np.zeros(shape, dtype=bool)
    m[rng.choice(shape[0], size=2, replace=False)] = True
    return m


POS = uniform(0.1, 1.0)
TOL = tol(64, 64)
GAUSS = {"kind": "gaussian", "a": (0, 2), "b": (3,)}
ROWS = [
    row(
        "markov_blanket.partition",
        FLOATS,
        [Case("dag-8", (arg((8, 8), _dag), arg((8,), _internal, BOOL)), {}, partition_ref),
         Case("dag-12", (arg((12, 12), _dag), arg((12,), _internal, BOOL)), {}, partition_ref)],
        [bad("square", ((3, 4), F64), ((3,), BOOL)),
         bad("bool mask", ((3, 3), F64), ((3,), I64))],
    ),
    row(
        "markov_blanket.mutual_information",
        FLOATS,
        [Case("gaussian-5", (arg((5, 5), _cov),), GAUSS, _value(mi_ref), TOL),
         Case("gaussian-batch", (arg((2, 4, 4), _cov),), {"kind": "gaussian", "a": (1,), "b": (0, 3)},
              _value(mi_ref), TOL),
         Case("discrete-3x4", (arg((3, 4), POS),), {"kind": "discrete"}, _value(mi_ref), TOL),
         Case("discrete-batch", (arg((2, 5, 2), POS),), {"kind": "discrete"}, _value(mi_ref), TOL)],
        [bad("disjoint", ((4, 4), F64), kind="gaussian", a=(0,), b=(0,)),
         bad("outside", ((4, 4), F64), kind="gaussian", a=(0,), b=(7,)),
         bad("joint table", ((4,), F64), kind="discrete")],
    ),
    *[row(
        f"markov_blanket.flow_{which}",
        FLOATS,
        [Case("vec", (arg((3,)), arg((3, 2)), arg((2,))), {}, _value(flow_ref), TOL),
         Case("batch", (arg((2, 3, 4)), arg((4, 5)), arg((5,))), {}, _value(flow_ref), TOL)],
        [bad("W must be", ((2, 3), F64), ((4, 2), F64), ((2,), F64)),
         bad("bias must be", ((2, 3), F64), ((3, 2), F64), ((3,), F64))],
    ) for which in ("internal", "active")],
    row(
        "markov_blanket.vjp",
        FLOATS,
        [Case("gaussian", (arg(()), arg((4, 4), _cov)), {"of": "mutual_information", **GAUSS}, vjp_ref, TOL),
         Case("discrete", (arg((2,)), arg((2, 3, 2), POS)), {"of": "mutual_information", "kind": "discrete"},
              vjp_ref, TOL),
         Case("flow", (arg((2, 2)), arg((2, 3)), arg((3, 2)), arg((2,))), {"of": "flow"}, vjp_ref, TOL)],
        [bad("the cotangent must be", ((3,), F64), ((4, 4), F64), of="mutual_information", a=(0,), b=(1,)),
         bad("takes the cotangent and 3 inputs", ((2,), F64), ((3,), F64), of="flow")],
    ),
]
