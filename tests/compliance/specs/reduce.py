"""reduce.*: reductions over axes (None: all, negative axes, keepdims), references by explicit loops."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np

from ..harness import F32, F64, FLOATS, I8, I32, I64, NUMERIC, U8, Case, Expect, arg, bad, row, tol, uniform, values
from ..reference import DPS, mp_logsumexp, reduce_loop
from ._helpers import INF, NAN, label

# (shape, axes, keepdims): all axes, each axis, negative axes, several axes, scalars, empty.
AXES = (
    ((), None, False),
    ((1,), None, False),
    ((7,), None, True),
    ((64,), (0,), False),
    ((3, 5, 7), None, False),
    ((3, 5, 7), (0,), False),
    ((3, 5, 7), (1,), True),
    ((3, 5, 7), (-1,), False),
    ((3, 5, 7), (0, 2), True),
    ((3, 5, 7), (-3, -2), False),
    ((3, 5, 7), (), False),
    ((2, 0, 3), (0,), False),
)
EMPTY = (((2, 0, 3), (1,), False), ((0,), None, True))  # reducing an empty axis (sum/prod/... only)
SMALL_INT = frozenset({I8, U8})


def _choice(signed, unsigned):
    def gen(rng, d, shape):
        pool = unsigned if d is U8 else signed
        return np.asarray(rng.choice(pool, size=shape)).astype(d.numpy)

    return gen


def red_cases(ref, gen=uniform(-3, 3, -1, 1), t=tol(1, 0), axes=AXES, dtypes=None, extra_attrs=None, prefix=""):
    out = []
    for shape, ax, keep in axes:
        attrs = {"axes": ax, "keepdims": keep, **(extra_attrs or {})}
        lab = f"{prefix}{label(shape)}-axes={'all' if ax is None else ','.join(map(str, ax)) or 'none'}{'-keep' if keep else ''}"
        out.append(Case(lab, (arg(shape, gen),), attrs, ref, t, None if dtypes is None else frozenset(dtypes)))
    return out


def _is_nan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def looped(fn, scale=None):
    """Reference: ``fn`` over each reduced group (exact for ints); optional error scale per group."""

    def ref(x, axes, keepdims, **attrs):
        ints = x.dtype.kind in "iub"
        v = reduce_loop(x, axes, keepdims, lambda xs: fn(xs, **attrs), object if ints else np.float64)
        if scale is None or ints:
            return v
        return Expect(v, reduce_loop(x, axes, keepdims, lambda xs: scale(xs, **attrs)))

    return ref


def _sum(xs):
    if xs and isinstance(xs[0], float):
        return math.fsum(xs)
    return sum(xs)


def _abs_sum(xs):
    return math.fsum(abs(v) for v in xs)


def _mean(xs):
    return math.fsum(xs) / len(xs) if xs else NAN


def _mean_abs(xs):
    return math.fsum(abs(v) for v in xs) / max(len(xs), 1)


def _max(xs):
    return NAN if any(_is_nan(v) for v in xs) else max(xs)


def _min(xs):
    return NAN if any(_is_nan(v) for v in xs) else min(xs)


def _prod(xs):
    if xs and isinstance(xs[0], float):
        with mp.workdps(DPS):
            return float(mp.fprod(xs))
    return math.prod(xs)


def _variance(xs, correction=0):
    n = len(xs)
    if any(_is_nan(v) for v in xs):
        return NAN
    with mp.workdps(DPS):
        m = mp.fsum(xs) / n if n else mp.nan
        ss = mp.fsum((mp.mpf(v) - m) ** 2 for v in xs) if n else mp.nan
        if n - correction <= 0:
            return NAN if ss == 0 or n == 0 else INF
        return float(ss / (n - correction))


def _sq_mean(xs, correction=0):
    return math.fsum(v * v for v in xs) / max(len(xs) - correction, 1)


def _lse_scale(xs):
    return 1.0 + max((abs(v) for v in xs if math.isfinite(v)), default=0.0)


def _argfirst(pick):
    def ref(x, axis, keepdims):
        ax = axis % x.ndim
        def fn(xs):
            if x.dtype.kind == "f" and any(math.isnan(v) for v in xs):
                return next(i for i, v in enumerate(xs) if math.isnan(v))  # NaN wins, first one
            best = pick(xs)
            return xs.index(best)
        return reduce_loop(x, (ax,), keepdims, fn, object)

    return ref


def _arg_cases(ref):
    cases = []
    for shape, axis, keep in (((7,), -1, False), ((1,), 0, True), ((64,), 0, False), ((3, 5, 7), 0, False), ((3, 5, 7), 1, True), ((3, 5, 7), -1, False), ((3, 5, 7), -3, True), ((0, 4), 1, False)):
        gen = uniform(-2, 2, -2, 2) if shape != (64,) else uniform(-3, 3, -100, 100)
        cases.append(Case(f"{label(shape)}-axis={axis}{'-keep' if keep else ''}", (arg(shape, gen),), {"axis": axis, "keepdims": keep}, ref, tol(0, 0)))
    ties = [1.0, 3.0, 3.0, 0.0, 3.0, 0.0, 2.0]  # first max at 1, first min at 3
    cases.append(Case("ties", (arg(7, values(ties)),), {"axis": 0}, ref, tol(0, 0)))
    cases.append(Case("nan", (arg(5, values([1.0, NAN, 3.0, NAN, -INF])),), {"axis": 0}, ref, tol(0, 0), FLOATS))
    cases.append(Case("inf", (arg(4, values([1.0, INF, -INF, INF])),), {"axis": 0}, ref, tol(0, 0), FLOATS))
    return cases


BAD_AXES = [
    bad("axis 3 is out of range for rank 3", ((2, 3, 4), F64), axes=[3]),
    bad("axis -4 is out of range for rank 3", ((2, 3, 4), F64), axes=[-4]),
    bad("repeated axis in \\[0, -3\\]", ((2, 3, 4), F64), axes=[0, -3]),
    bad("attribute 'keepdims' \\(bool\\): expected true/false", ((2,), F64), keepdims=1),
    bad("attribute 'axes' \\(ints\\?\\): expected a list of ints", ((2,), F64), axes="0"),
]
FLOAT_SPECIALS = [NAN, 1.0, INF]
SUM_TOL = tol(1, 8, float16=(1, 16))  # pairwise summation: error grows with sum |x|

ROWS = [
    row(
        "reduce.sum",
        NUMERIC,
        [
            *red_cases(looped(_sum, _abs_sum), t=SUM_TOL),
            *red_cases(looped(_sum, _abs_sum), uniform(-1, 1, -1000, 1000), SUM_TOL, (((1024,), None, False), ((32, 32), (1,), False)), {F64, F32, I64, I32}, prefix="big-"),
            *red_cases(looped(_sum, _abs_sum), t=SUM_TOL, axes=EMPTY, prefix="empty-"),
            Case("ieee", (arg((2, 3), values([INF, -INF, 1.0, NAN, 1.0, 2.0])),), {"axes": (1,)}, lambda x, **a: np.array([NAN, NAN]), tol(0, 0), FLOATS),
        ],
        [*BAD_AXES, bad("does not accept input of dtype bool", ((2,), "bool"))],
    ),
    row(
        "reduce.mean",
        FLOATS,
        [
            *red_cases(looped(_mean, _mean_abs), t=SUM_TOL),
            *red_cases(looped(_mean, _mean_abs), t=SUM_TOL, axes=(((1024,), None, False),), prefix="big-"),
            *red_cases(looped(_mean, _mean_abs), t=SUM_TOL, axes=EMPTY, prefix="empty-"),
        ],
        [bad("does not accept input of dtype int64", ((2,), I64))],
    ),
    row(
        "reduce.max",
        NUMERIC,
        [
            *red_cases(looped(_max), uniform(-3, 3, -100, 100), tol(0, 0)),
            Case("ieee", (arg((2, 3), values([NAN, 1.0, 2.0, -INF, INF, 0.0])),), {"axes": (1,)}, lambda x, **a: np.array([NAN, INF]), tol(0, 0), FLOATS),
        ],
        [bad("reduce.max of an empty axis has no identity", ((2, 0), F64), axes=[1])],
    ),
    row(
        "reduce.min",
        NUMERIC,
        [
            *red_cases(looped(_min), uniform(-3, 3, -100, 100), tol(0, 0)),
            Case("ieee", (arg((2, 3), values([1.0, NAN, 2.0, -INF, INF, 0.0])),), {"axes": (1,)}, lambda x, **a: np.array([NAN, -INF]), tol(0, 0), FLOATS),
        ],
        [bad("reduce.min of an empty axis has no identity", ((0,), F64))],
    ),
    row(
        "reduce.prod",
        NUMERIC,
        [
            *red_cases(looped(_prod), _choice([-1, 1, 2, -2], [1, 2]), tol(8, 0), AXES[:3] + AXES[5:], NUMERIC - {I8, U8}),
            *red_cases(looped(_prod), _choice([-1, 1], [1, 2]), tol(8, 0), (((7,), None, False), ((3, 5, 7), (0,), True), ((3, 5, 7), (-1,), False)), {I8, U8}, prefix="small-"),
            *red_cases(looped(_prod), uniform(0.5, 1.5), tol(8, 0, float16=(64, 0)), (((3, 5, 7), None, False),), FLOATS, prefix="all-"),
            *red_cases(looped(_prod), t=tol(0, 0), axes=EMPTY, prefix="empty-"),
        ],
    ),
    row(
        "reduce.logsumexp",
        FLOATS,
        [
            *red_cases(looped(mp_logsumexp, _lse_scale), uniform(-5, 5), tol(4, 4)),
            *red_cases(looped(mp_logsumexp, _lse_scale), uniform(-500, 500), tol(4, 4), (((64,), None, False), ((8, 8), (-1,), True)), {F64, F32}, prefix="wide-"),
            *red_cases(looped(mp_logsumexp, _lse_scale), t=tol(4, 4), axes=EMPTY, prefix="empty-"),
            Case(
                "ieee",
                (arg((4, 3), values([-INF, -INF, -INF, INF, 1.0, 2.0, NAN, 1.0, 1.0, -INF, 0.0, -INF])),),
                {"axes": (1,)},
                lambda x, **a: np.array([-INF, INF, NAN, 0.0]),
                tol(0, 0),
                FLOATS,
            ),
        ],
    ),
    row(
        "reduce.variance",
        FLOATS,
        [
            *red_cases(looped(_variance, _sq_mean), t=tol(4, 8, float16=(4, 16))),
            *red_cases(looped(_variance, _sq_mean), uniform(99, 101), tol(4, 8, float16=(4, 16)), (((64,), None, False), ((3, 5, 7), (-1,), True)), prefix="offset-", extra_attrs={"correction": 1}),
            *red_cases(looped(_variance, _sq_mean), t=tol(4, 8), axes=(((3, 5, 7), (0, 1), False), ((1,), None, False), ((0,), None, False)), prefix="unbiased-", extra_attrs={"correction": 1}),
        ],
        [bad("attribute 'correction' \\(int\\): expected an int", ((3,), F64), correction=0.5)],
    ),
    row(
        "reduce.argmax",
        NUMERIC,
        _arg_cases(_argfirst(max)),
        [
            bad("needs an input of rank >= 1", ((), F64)),
            bad("over an empty axis", ((3, 0), F64)),
            bad("axis 2 is out of range for rank 2", ((3, 4), F64), axis=2),
        ],
    ),
    row("reduce.argmin", NUMERIC, _arg_cases(_argfirst(min)), [bad("does not accept input of dtype bool", ((3,), "bool"))]),
]
