"""fused.*: the forms the fuse pass produces, built here by hand so every backend that claims
them runs them against float64 references (and every other backend refuses them).

A backend claims a fused node only if it declares the fused op for its dtypes *and* every
step of its program (``Capabilities.fusions``); lowering checks both.
"""

from __future__ import annotations

import math
from typing import Any

import mpmath as mp
import numpy as np

from caramba import ir
from caramba.ops import fused as F
from caramba.ops.linalg import MATMUL_DTYPES

from ..harness import FLOATS, NUMERIC, Case, Expect, arg, bad, row, tol, uniform
from ..reference import (
    DPS,
    along,
    elementwise,
    matmul_loop,
    mp_gelu,
    mp_gelu_tanh,
    mp_normalize,
    mp_softmax,
    per_group,
    reduce_loop,
    scalars,
)

EXACT = tol(0, 0)
ACT = tol(4, 1, float16=(2, 1))
SUM = tol(2, 8)
DOT = tol(4, 8)
NORM = tol(4, 8)
SOFT = tol(4, 2)


def _step(sid: str, op: str, args: tuple, **attrs: Any) -> F.Step:
    o = ir.get_op(op)
    return F.Step(sid, op, o.version, args, o.make_attrs(attrs))


def _const(sid: str, value: float, d) -> F.Step:
    return _step(sid, "graph.constant", (), value=np.array(value, dtype=d.numpy))


def _program(*steps: F.Step) -> dict[str, str]:
    return F.expr_attr(F.Expr(tuple(steps), steps[-1].id))


# ---- fused.elementwise ----------------------------------------------------------------------

CHAIN = _program(_step("m", "math.mul", (0, 1)), _step("a", "math.add", ("m", 0)))


def _chain_ref(a, b, **attrs):
    # x*y + x may cancel: the rounding of x*y is bounded by |x*y|, not by the result
    value = elementwise(lambda x, y: x * y + x)(a, b)
    if value.dtype == object or value.dtype.kind in "iub":
        return value
    return Expect(value, elementwise(lambda x, y: abs(x * y) + abs(x))(a, b))


def _gelu_attrs(approximate: str):
    def attrs(d):
        return _program(_const("half", 0.5, d), _step("m", "math.mul", (0, "half")),
                        _step("g", "activation.gelu", ("m",), approximate=approximate))

    return attrs


def _gelu_ref(approximate: str):
    f = mp_gelu if approximate == "none" else mp_gelu_tanh

    def ref(x, **attrs):
        def one(v: float) -> float:
            if math.isnan(v):
                return math.nan
            with mp.workdps(DPS):
                return float(f(mp.mpf(v) * mp.mpf(0.5)))

        return elementwise(one)(x)

    return ref


EXP_SUM = _program(_step("e", "math.exp", (0,)), _step("s", "reduce.sum", ("e",), axes=(1,)))


def _exp_sum_ref(x, **attrs):
    def f(xs):
        with mp.workdps(DPS):
            return float(mp.fsum(mp.exp(mp.mpf(v)) for v in xs))

    value = reduce_loop(x, (1,), False, f)
    return Expect(value, reduce_loop(x, (1,), False, lambda xs: math.fsum(math.exp(v) for v in xs)))


BCAST = (((3, 4), (4,)), ((2, 3, 1), (5,)), ((), ()), ((7,), (7,)), ((1024,), (1024,)), ((0, 3), (3,)))
GEN = uniform(-3, 3, -3, 3)

ELEMENTWISE = row(
    "fused.elementwise",
    NUMERIC,
    [
        *[Case(f"chain-{a}-{b}", (arg(a, GEN), arg(b, GEN)), CHAIN, _chain_ref, tol(2, 1)) for a, b in BCAST],
        *[Case(f"gelu-{ap}-{n}", (arg((n,), uniform(-6, 6)),), _gelu_attrs(ap), _gelu_ref(ap), ACT, FLOATS)
          for ap in ("none", "tanh") for n in (7, 1024)],
        Case("exp-sum-rows", (arg((3, 64), uniform(-2, 2)),), EXP_SUM, _exp_sum_ref, SUM, FLOATS),
    ],
    [
        bad("do not broadcast", ((3, 4), ir.DType.float64), ((3,), ir.DType.float64), **CHAIN),
        bad("inputs \\[1\\] are never used", ((3,), ir.DType.float64), ((3,), ir.DType.float64),
            **_program(_step("e", "math.exp", (0,)))),
        bad("cannot be part of a fused elementwise program", ((3, 3), ir.DType.float64),
            **_program(_step("t", "linalg.matmul", (0, 0)))),
    ],
)


# ---- fused.linear ----------------------------------------------------------------------------

_ACTS = {
    "none": lambda y: y,
    "relu": lambda y: y if y > 0 else mp.mpf(0),
    "gelu": mp_gelu,
    "gelu_tanh": mp_gelu_tanh,
    "silu": lambda y: y / (1 + mp.exp(-y)),
    "tanh": mp.tanh,
}


def _linear_ref(x, w, b=None, *, activation):
    e = matmul_loop(x, w)
    value, scale = np.asarray(e.value), np.asarray(e.scale)
    if b is not None:
        value, scale = np.broadcast_arrays(value, scale)
        bb = np.broadcast_to(b, value.shape)
        exact_ints = value.dtype == object
        value = np.array([v + (int(c) if exact_ints else float(c)) for v, c in zip(value.ravel(), bb.ravel())],
                         dtype=object if exact_ints else np.float64).reshape(value.shape)
        scale = scale + np.abs(bb.astype(np.float64))
    if activation == "none":
        return Expect(value, scale)
    f = _ACTS[activation]

    def one(v: float) -> float:
        with mp.workdps(DPS):
            return float(f(mp.mpf(v)))

    return Expect(elementwise(one)(value.astype(np.float64)), scale)


LINEAR_SHAPES = (((3, 4), (4, 5), (5,)), ((2, 3, 4), (4, 5), (5,)), ((4,), (4, 6), (6,)), ((64, 64), (64, 64), (64,)), ((3, 4), (4, 5), (3, 5)))

LINEAR = row(
    "fused.linear",
    MATMUL_DTYPES,
    [
        *[Case(f"{act}-{xs}-{ws}-{bs}", (arg(xs, GEN), arg(ws, GEN), arg(bs, GEN)), {"activation": act},
               _linear_ref, DOT, None if act == "none" else FLOATS)
          for act in _ACTS for xs, ws, bs in LINEAR_SHAPES[: 5 if act == "none" else 2]],
        Case("gelu-no-bias", (arg((3, 4), GEN), arg((4, 5), GEN)), {"activation": "gelu"}, _linear_ref, DOT, FLOATS),
    ],
    [
        bad("bias \\[3, 1, 5\\] must broadcast to the product \\[3, 5\\]", ((3, 4), ir.DType.float64), ((4, 5), ir.DType.float64),
            ((3, 1, 5), ir.DType.float64)),
        bad("does not accept input of dtype int64", ((3, 4), ir.DType.int64), ((4, 5), ir.DType.int64), activation="gelu"),
    ],
)


# ---- fused.layer_norm_residual ---------------------------------------------------------------


def _lnr_ref(x, r, *affine, axis, eps, with_sum):
    s = elementwise(lambda a, b: a + b)(x, r)
    ax = axis % x.ndim

    def fn(xs, idx):
        with mp.workdps(DPS):
            ys = mp_normalize(xs, eps, True)
            g = scalars(affine[0]) if affine else None
            b = scalars(affine[1]) if len(affine) > 1 else None
            return [float(y * (g[i] if g else 1) + (b[i] if b else 0)) for i, y in enumerate(ys)]

    y = per_group(s, ax, fn)
    return (y, s) if with_sum else y


def _lnr_case(shape, axis, n_affine, with_sum):
    ax = axis % len(shape)
    args = [arg(shape, uniform(-3, 3)), arg(shape, uniform(-3, 3))]
    args += [arg(shape[ax:], uniform(0.5, 2)), arg(shape[ax:], uniform(-1, 1))][:n_affine]
    attrs = {"axis": axis, "eps": 1e-5, "with_sum": with_sum}
    return Case(f"{'x'.join(map(str, shape))}-axis={axis}-affine={n_affine}{'-sum' if with_sum else ''}", tuple(args), attrs,
                _lnr_ref, NORM)


LAYER_NORM_RESIDUAL = row(
    "fused.layer_norm_residual",
    FLOATS,
    [_lnr_case((3, 5, 7), -1, 2, True), _lnr_case((3, 5, 7), 1, 1, False), _lnr_case((64, 64), -1, 2, False),
     _lnr_case((7,), 0, 0, True), _lnr_case((4, 1), -1, 0, False)],
    [bad("x and residual of one shape", ((3, 4), ir.DType.float64), ((4,), ir.DType.float64))],
)


# ---- fused.softmax ---------------------------------------------------------------------------

SCALED = _program(_step("m", "math.mul", (0, 0)), _step("a", "math.add", ("m", 1)))  # x*x + mask


def _softmax_ref(x, m, *, axis, expr):
    pro = elementwise(lambda a, b: a * a + b)(x, m)
    return along(pro, axis, mp_softmax)


SOFTMAX = row(
    "fused.softmax",
    FLOATS,
    [Case(f"{xs}-{ms}-axis={axis}", (arg(xs, uniform(-2, 2)), arg(ms, uniform(-1, 1))), {**SCALED, "axis": axis}, _softmax_ref, SOFT)
     for xs, ms, axis in (((3, 8), (8,), -1), ((2, 3, 9), (3, 9), 1), ((1024,), (1024,), 0), ((2, 0, 4), (4,), -1))],
    [bad("axis 2 is out of range for rank 2", ((3, 4), ir.DType.float64), ((4,), ir.DType.float64), **SCALED, axis=2)],
)


# ---- fused.*_grad: the VJPs of the row ops (what fuse makes of autodiff/rules/nn.py's chains) ---


def _norm_grad_ref(x, ct, *gamma, axis, eps, with_dgamma, with_dbeta=False, centered=True):
    """dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = ct * gamma (no mean(g) for RMS
    norm), dgamma = sum(ct * xhat) and dbeta = sum(ct) over the leading axes, in mpmath."""
    ax = axis % x.ndim
    lead, tail = x.shape[:ax], x.shape[ax:]
    rows = int(np.prod(lead, dtype=np.int64))
    xs2, cs2 = x.reshape(rows, -1), ct.reshape(rows, -1)
    gam = scalars(gamma[0].reshape(-1)) if gamma else None
    dx, dx_scale = np.empty(xs2.shape), np.empty(xs2.shape)
    dgam = [mp.mpf(0)] * xs2.shape[1]
    dgam_scale = [mp.mpf(0)] * xs2.shape[1]
    with mp.workdps(DPS):
        for i in range(rows):
            xh = mp_normalize(scalars(xs2[i]), eps, centered)
            n = len(xh)
            m = mp.fsum(scalars(xs2[i])) / n if centered else mp.mpf(0)
            r = 1 / mp.sqrt(mp.fsum((mp.mpf(v) - m) ** 2 for v in scalars(xs2[i])) / n + mp.mpf(eps))
            cs = scalars(cs2[i])
            g = [mp.mpf(c) * (gam[j] if gam else 1) for j, c in enumerate(cs)]
            mg = mp.fsum(g) / n if centered else mp.mpf(0)
            mgx = mp.fsum(a * b for a, b in zip(g, xh, strict=True)) / n
            sg = mp.fsum(abs(v) for v in g) / n
            sgx = mp.fsum(abs(a * b) for a, b in zip(g, xh, strict=True)) / n
            for j in range(n):
                dx[i, j] = float(r * (g[j] - mg - xh[j] * mgx))
                dx_scale[i, j] = float(r * (abs(g[j]) + sg + abs(xh[j]) * sgx)) * n ** 0.5
                dgam[j] += mp.mpf(cs[j]) * xh[j]
                dgam_scale[j] += abs(mp.mpf(cs[j]) * xh[j])
    outs = [Expect(dx.reshape(x.shape), dx_scale.reshape(x.shape))]
    if with_dgamma:
        outs.append(Expect(np.array([float(v) for v in dgam]).reshape(tail),
                           np.array([float(v) for v in dgam_scale]).reshape(tail) * (1 + rows ** 0.5)))
    if centered and with_dbeta:
        outs.append(Expect(ct.reshape(rows, -1).astype(np.float64).sum(axis=0).reshape(tail) if rows else np.zeros(tail),
                           np.abs(ct.reshape(rows, -1).astype(np.float64)).sum(axis=0).reshape(tail) * (1 + rows ** 0.5)))
    return tuple(outs)


def _norm_grad_case(shape, axis, gamma, dgamma, dbeta, centered=True):
    ax = axis % len(shape)
    args = [arg(shape, uniform(-3, 3)), arg(shape, uniform(-2, 2))] + ([arg(shape[ax:], uniform(0.5, 2))] if gamma else [])
    attrs = {"axis": axis, "eps": 1e-5, "with_dgamma": dgamma}
    if centered:
        attrs["with_dbeta"] = dbeta

    def ref(*ins, **a):
        return _norm_grad_ref(*ins, **a, centered=centered)

    return Case(f"{'x'.join(map(str, shape))}-axis={axis}-gamma={int(gamma)}-dg={int(dgamma)}-db={int(dbeta)}", tuple(args),
                attrs, ref, NORM)


LAYER_NORM_GRAD = row(
    "fused.layer_norm_grad",
    FLOATS,
    [_norm_grad_case((3, 5, 7), -1, True, True, True), _norm_grad_case((3, 5, 7), 1, True, True, False),
     _norm_grad_case((40, 33), -1, False, False, False), _norm_grad_case((7,), 0, True, True, True),
     _norm_grad_case((4, 1), -1, True, True, True)],
    [bad("x and its cotangent of one shape", ((3, 4), ir.DType.float64), ((4,), ir.DType.float64)),
     bad("gamma must have shape \\[4\\]", ((3, 4), ir.DType.float64), ((3, 4), ir.DType.float64), ((3,), ir.DType.float64))],
)

RMS_NORM_GRAD = row(
    "fused.rms_norm_grad",
    FLOATS,
    [_norm_grad_case((3, 5, 7), -1, True, True, False, centered=False),
     _norm_grad_case((2, 3, 9), 1, False, False, False, centered=False),
     _norm_grad_case((40, 33), -1, True, False, False, centered=False)],
    [bad("needs inputs of rank >= 1", ((), ir.DType.float64), ((), ir.DType.float64))],
)


def _softmax_grad_ref(y, ct, *, axis, log):
    ax = axis % y.ndim
    yl, cl = np.moveaxis(y, ax, -1), np.moveaxis(ct, ax, -1)
    out, sc = np.empty(yl.shape), np.empty(yl.shape)
    with mp.workdps(DPS):
        for idx in np.ndindex(*yl.shape[:-1]):
            ys, cs = [mp.mpf(v) for v in scalars(yl[idx])], [mp.mpf(v) for v in scalars(cl[idx])]
            if log:
                s, sa = mp.fsum(cs), mp.fsum(abs(c) for c in cs)
                out[idx] = [float(c - mp.exp(v) * s) for v, c in zip(ys, cs, strict=True)]
                sc[idx] = [float(abs(c) + mp.exp(v) * sa) for v, c in zip(ys, cs, strict=True)]
            else:
                s = mp.fsum(c * v for v, c in zip(ys, cs, strict=True))
                sa = mp.fsum(abs(c * v) for v, c in zip(ys, cs, strict=True))
                out[idx] = [float(v * (c - s)) for v, c in zip(ys, cs, strict=True)]
                sc[idx] = [float(abs(v) * (abs(c) + sa)) for v, c in zip(ys, cs, strict=True)]
    return Expect(np.moveaxis(out, -1, ax), np.moveaxis(sc, -1, ax))


def _softmax_grad_row(op, log):
    def ref(y, ct, *, axis):
        return _softmax_grad_ref(y, ct, axis=axis, log=log)

    y_gen = uniform(-3, 0) if log else uniform(0, 1)
    return row(
        op,
        FLOATS,
        [Case(f"{'x'.join(map(str, shape))}-axis={axis}", (arg(shape, y_gen), arg(shape, uniform(-2, 2))), {"axis": axis}, ref, SOFT)
         for shape, axis in (((3, 8), -1), ((2, 3, 9), 1), ((1, 1000), -1), ((5, 1), -1), ((2, 0, 4), -1))],
        [bad("axis 2 is out of range for rank 2", ((3, 4), ir.DType.float64), ((3, 4), ir.DType.float64), axis=2)],
    )


SOFTMAX_GRAD = _softmax_grad_row("fused.softmax_grad", False)
LOG_SOFTMAX_GRAD = _softmax_grad_row("fused.log_softmax_grad", True)

ROWS = [ELEMENTWISE, LINEAR, LAYER_NORM_RESIDUAL, SOFTMAX, LAYER_NORM_GRAD, RMS_NORM_GRAD, SOFTMAX_GRAD, LOG_SOFTMAX_GRAD]
