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

from ..harness import FLOATS, NUMERIC, SUBJECT, Case, Expect, arg, bad, row, tol, uniform
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

# ---- fused.attention_probs: the probabilities sdpa's VJP recomputes ------------------------------


def _attention_probs_ref(q, k, *, scale, causal):
    """sdpa's mpmath loop with v = identity: its output is the probabilities themselves."""
    from ..reference import sdpa_loop

    eye = np.broadcast_to(np.eye(k.shape[-2]), k.shape[:-1] + (k.shape[-2],))
    return sdpa_loop(q, k, eye, None, scale, causal)


ATTENTION_PROBS = row(
    "fused.attention_probs",
    FLOATS,
    [Case(f"{qs}-{ks}-scale={sc}-causal={c}", (arg(qs, uniform(-2, 2)), arg(ks, uniform(-2, 2))),
          {"scale": sc, "causal": c}, _attention_probs_ref, tol(4, 4, float16=(4, 8)))
     for qs, ks, sc, c in (((2, 3, 5, 4), (2, 3, 5, 4), 0.5, True), ((3, 4), (7, 4), 0.7, True),
                           ((2, 5, 3), (2, 6, 3), -0.4, False), ((1, 2, 33, 8), (1, 2, 33, 8), 0.35, True))],
    [bad("causal needs Tq <= Tk, got 6 > 5", ((6, 4), ir.DType.float64), ((5, 4), ir.DType.float64), causal=True),
     bad("of one batch shape", ((2, 5, 4), ir.DType.float64), ((3, 5, 4), ir.DType.float64))],
)

# ---- convolution and pooling backward (what fuse makes of the nn.conv* / nn.*_pool2d VJPs) -------


def _as2d(a, nd):
    return a if nd == 2 else a[:, :, None, :]


def _conv_taps(x_shape, k_shape, stride, padding, dilation):
    """(oy, ox, i, j, padded row, padded column) of every tap of a 2-D convolution."""
    ho = (x_shape[2] + 2 * padding[0] - dilation[0] * (k_shape[0] - 1) - 1) // stride[0] + 1
    wo = (x_shape[3] + 2 * padding[1] - dilation[1] * (k_shape[1] - 1) - 1) // stride[1] + 1
    for oy in range(ho):
        for ox in range(wo):
            for i in range(k_shape[0]):
                for j in range(k_shape[1]):
                    yield oy, ox, i, j, oy * stride[0] + i * dilation[0], ox * stride[1] + j * dilation[1]


def _per2(v, nd):
    return tuple(v) if nd == 2 else (1,) + tuple(v)


def _conv_transpose_ref(ct, w, *, stride, padding, dilation, groups, size):
    """dx of a convolution by its definition: every tap adds w * ct to the input element it read."""
    nd = ct.ndim - 2
    st, pd, dl = _per2(stride, nd), (0,) + tuple(padding) if nd == 1 else tuple(padding), _per2(dilation, nd)
    c2, w2 = _as2d(np.asarray(ct, np.float64), nd), _as2d(np.asarray(w, np.float64), nd)
    n, o = c2.shape[:2]
    cg = w2.shape[1]
    og = o // groups
    hw = ((1,) + tuple(size)) if nd == 1 else tuple(size)
    acc = np.zeros((n, groups * cg, hw[0] + 2 * pd[0], hw[1] + 2 * pd[1]))
    sc = np.zeros_like(acc)
    for oy, ox, i, j, py, px in _conv_taps((n, groups * cg) + hw, w2.shape[2:], st, pd, dl):
        for g in range(groups):
            c = c2[:, g * og:(g + 1) * og, oy, ox]
            k = w2[g * og:(g + 1) * og, :, i, j]
            acc[:, g * cg:(g + 1) * cg, py, px] += c @ k
            sc[:, g * cg:(g + 1) * cg, py, px] += np.abs(c) @ np.abs(k)
    crop = (slice(None), slice(None), slice(pd[0], pd[0] + hw[0]), slice(pd[1], pd[1] + hw[1]))
    out, scale = acc[crop], sc[crop]
    return Expect(out[:, :, 0] if nd == 1 else out, scale[:, :, 0] if nd == 1 else scale)


def _conv_weight_grad_ref(x, ct, *, stride, padding, dilation, groups, kernel):
    """dw of a convolution by its definition: every tap adds ct * the input element it read."""
    nd = x.ndim - 2
    st, pd, dl = _per2(stride, nd), (0,) + tuple(padding) if nd == 1 else tuple(padding), _per2(dilation, nd)
    x2, c2 = _as2d(np.asarray(x, np.float64), nd), _as2d(np.asarray(ct, np.float64), nd)
    k2 = _per2(kernel, nd)
    c = x2.shape[1]
    o = c2.shape[1]
    cg, og = c // groups, o // groups
    xp = np.pad(x2, ((0, 0), (0, 0), (pd[0], pd[0]), (pd[1], pd[1])))
    out, sc = np.zeros((o, cg) + k2), np.zeros((o, cg) + k2)
    for oy, ox, i, j, py, px in _conv_taps(x2.shape, k2, st, pd, dl):
        for g in range(groups):
            cv = c2[:, g * og:(g + 1) * og, oy, ox]
            xv = xp[:, g * cg:(g + 1) * cg, py, px]
            out[g * og:(g + 1) * og, :, i, j] += cv.T @ xv
            sc[g * og:(g + 1) * og, :, i, j] += np.abs(cv.T) @ np.abs(xv)
    return Expect(out[:, :, 0] if nd == 1 else out, sc[:, :, 0] if nd == 1 else sc)


def _conv_grad_cases(weight: bool):
    cases = []
    # (x shape, weight shape, stride, padding, dilation, groups)
    for xs, ws, s, p, d, g in (((2, 3, 7, 6), (4, 3, 3, 3), (2, 2), (1, 1), (1, 1), 1),
                               ((1, 4, 9, 9), (6, 2, 3, 3), (2, 1), (0, 2), (2, 1), 2),
                               ((2, 4, 5, 5), (4, 1, 1, 1), (2, 2), (0, 0), (1, 1), 4),
                               ((2, 3, 11), (4, 3, 3), (3,), (1,), (2,), 1)):
        nd = len(xs) - 2
        so = tuple((xs[2 + i] + 2 * p[i] - d[i] * (ws[2 + i] - 1) - 1) // s[i] + 1 for i in range(nd))
        ct = (xs[0], ws[0]) + so
        label = f"x{'x'.join(map(str, xs))}-w{'x'.join(map(str, ws))}-s{s}-p{p}-d{d}-g{g}".replace(" ", "")
        attrs = {"stride": s, "padding": p, "dilation": d, "groups": g}
        if weight:
            cases.append(Case(label, (arg(xs, uniform(-2, 2)), arg(ct, uniform(-2, 2))), {**attrs, "kernel": ws[2:]},
                              _conv_weight_grad_ref, DOT))
        else:
            cases.append(Case(label, (arg(ct, uniform(-2, 2)), arg(ws, uniform(-2, 2))), {**attrs, "size": xs[2:]},
                              _conv_transpose_ref, DOT))
    return cases


CONV_TRANSPOSE = row(
    "fused.conv_transpose",
    FLOATS,
    _conv_grad_cases(False),
    [bad("do not agree", ((1, 4, 3, 3), ir.DType.float64), ((6, 2, 3, 3), ir.DType.float64), stride=(1, 1), padding=(0, 0),
         dilation=(1, 1), size=(5, 5)),
     bad("gives spatial axis 0", ((1, 4, 3, 3), ir.DType.float64), ((4, 2, 3, 3), ir.DType.float64), stride=(1, 1),
         padding=(0, 0), dilation=(1, 1), size=(9, 9))],
)

CONV_WEIGHT_GRAD = row(
    "fused.conv_weight_grad",
    FLOATS,
    _conv_grad_cases(True),
    [bad("gives spatial axis 0", ((1, 4, 5, 5), ir.DType.float64), ((1, 6, 3, 3), ir.DType.float64), stride=(1, 1),
         padding=(0, 0), dilation=(1, 1), kernel=(4, 3)),
     bad("do not agree", ((1, 4, 5, 5), ir.DType.float64), ((1, 6, 3, 3), ir.DType.float64), stride=(1, 1),
         padding=(0, 0), dilation=(1, 1), kernel=(3, 3), groups=4)],
)


def _windows(shape, kernel, stride, padding):
    """(oy, ox, [(iy, ix) of the window in row-major order, None where padding])."""
    h, w = shape[2:]
    ho = (h + 2 * padding[0] - kernel[0]) // stride[0] + 1
    wo = (w + 2 * padding[1] - kernel[1]) // stride[1] + 1
    for oy in range(ho):
        for ox in range(wo):
            taps = []
            for i in range(kernel[0]):
                for j in range(kernel[1]):
                    iy, ix = oy * stride[0] - padding[0] + i, ox * stride[1] - padding[1] + j
                    taps.append((iy, ix) if 0 <= iy < h and 0 <= ix < w else None)
            yield oy, ox, taps


def _max_pool_grad_ref(x, ct, *, kernel, stride, padding):
    """The first maximum of each window (padding as -inf) takes the window's cotangent."""
    x, ct = np.asarray(x, np.float64), np.asarray(ct, np.float64)
    out, sc = np.zeros(x.shape), np.zeros(x.shape)
    for b in range(x.shape[0]):
        for ch in range(x.shape[1]):
            for oy, ox, taps in _windows(x.shape, kernel, stride, padding):
                vals = [x[b, ch, t[0], t[1]] if t is not None else -math.inf for t in taps]
                m = max(vals)
                t = taps[vals.index(m)]
                if t is not None:
                    out[b, ch, t[0], t[1]] += ct[b, ch, oy, ox]
                    sc[b, ch, t[0], t[1]] += abs(ct[b, ch, oy, ox])
    return Expect(out, sc)


def _avg_pool_grad_ref(ct, *, kernel, stride, padding, size):
    ct = np.asarray(ct, np.float64)
    shape = ct.shape[:2] + tuple(size)
    out, sc = np.zeros(shape), np.zeros(shape)
    for oy, ox, taps in _windows(shape, kernel, stride, padding):
        for t in taps:
            if t is not None:
                out[:, :, t[0], t[1]] += ct[:, :, oy, ox] / (kernel[0] * kernel[1])
                sc[:, :, t[0], t[1]] += np.abs(ct[:, :, oy, ox]) / (kernel[0] * kernel[1])
    return Expect(out, sc)


# (x shape, kernel, stride, padding): overlapping, tiling, padded, and non-square windows
POOL_GRAD_SHAPES = (((2, 3, 7, 7), (3, 3), (2, 2), (1, 1)), ((1, 2, 6, 6), (2, 2), (2, 2), (0, 0)),
                    ((2, 1, 5, 8), (3, 2), (1, 3), (1, 1)))


def _pool_out(xs, k, s, p):
    return xs[:2] + tuple((xs[2 + i] + 2 * p[i] - k[i]) // s[i] + 1 for i in range(2))


def _max_pool_grad_build(k, s, p):
    def build_(g, ins, d, precision):
        y = g.call("nn.max_pool2d", [ins[0]], {"kernel": k, "stride": s, "padding": p})
        return g.call("fused.max_pool2d_grad", [ins[0], y, ins[1]], {"kernel": k, "stride": s, "padding": p}, id=SUBJECT,
                      precision=precision)

    return build_


MAX_POOL2D_GRAD = row(
    "fused.max_pool2d_grad",
    FLOATS,
    [Case(f"{'x'.join(map(str, xs))}-k{k}-s{s}-p{p}".replace(" ", ""),
          (arg(xs, uniform(-2, 2)), arg(_pool_out(xs, k, s, p), uniform(-2, 2))),
          {"kernel": k, "stride": s, "padding": p}, _max_pool_grad_ref, SUM, build=_max_pool_grad_build(k, s, p))
     for xs, k, s, p in POOL_GRAD_SHAPES],
    [bad("the cotangent is", ((1, 1, 7, 7), ir.DType.float64), ((1, 1, 5, 4), ir.DType.float64),
         ((1, 1, 5, 4), ir.DType.float64), kernel=(3, 3), stride=(2, 2), padding=(1, 1)),
     bad("padding at most", ((1, 1, 7, 7), ir.DType.float64), ((1, 1, 4, 4), ir.DType.float64),
         ((1, 1, 4, 4), ir.DType.float64), kernel=(3, 3), stride=(2, 2), padding=(2, 2))],
    # the dtype rule is the fused op's own: probed as a single node (x, y, ct given directly)
    probe=Case("probe", (arg((1, 2, 6, 6)), arg((1, 2, 3, 3)), arg((1, 2, 3, 3))),
               {"kernel": (2, 2), "stride": (2, 2), "padding": (0, 0)}),
)

AVG_POOL2D_GRAD = row(
    "fused.avg_pool2d_grad",
    FLOATS,
    [Case(f"{'x'.join(map(str, xs))}-k{k}-s{s}-p{p}".replace(" ", ""), (arg(_pool_out(xs, k, s, p), uniform(-2, 2)),),
          {"kernel": k, "stride": s, "padding": p, "size": xs[2:]}, _avg_pool_grad_ref, SUM)
     for xs, k, s, p in POOL_GRAD_SHAPES],
    [bad("the cotangent is", ((1, 1, 5, 4), ir.DType.float64), kernel=(3, 3), stride=(2, 2), padding=(1, 1), size=(7, 7))],
)

def _sdpa_probs_ref(q, k, v, *, scale, causal):
    from ..reference import sdpa_loop

    return sdpa_loop(q, k, v, None, scale, causal), _attention_probs_ref(q, k, scale=scale, causal=causal)


SDPA_PROBS = row(
    "fused.sdpa_probs",
    FLOATS,
    [Case(f"{qs}-{ks}-{vs}-scale={sc}-causal={c}", (arg(qs, uniform(-2, 2)), arg(ks, uniform(-2, 2)), arg(vs, uniform(-2, 2))),
          {"scale": sc, "causal": c}, _sdpa_probs_ref, tol(4, 4, float16=(4, 8)))
     for qs, ks, vs, sc, c in (((2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 5, 6), 0.5, True), ((3, 4), (7, 4), (7, 2), 0.7, True),
                               ((2, 5, 3), (2, 6, 3), (2, 6, 3), -0.4, False))],
    [bad("needs v", ((2, 5, 4), ir.DType.float64), ((2, 5, 4), ir.DType.float64), ((2, 6, 4), ir.DType.float64))],
)

ROWS = [ELEMENTWISE, LINEAR, LAYER_NORM_RESIDUAL, SOFTMAX, LAYER_NORM_GRAD, RMS_NORM_GRAD, SOFTMAX_GRAD, LOG_SOFTMAX_GRAD, ATTENTION_PROBS, SDPA_PROBS]
ROWS += [CONV_TRANSPOSE, CONV_WEIGHT_GRAD, MAX_POOL2D_GRAD, AVG_POOL2D_GRAD]
