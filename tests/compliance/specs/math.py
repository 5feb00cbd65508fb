"""math.*: elementwise arithmetic, transcendental functions, comparisons, logic, where, cast."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np

from ..harness import (
    ALL,
    BOOL,
    F32,
    F64,
    FLOATS,
    I64,
    NUMERIC,
    SIGNED,
    U8,
    Case,
    arg,
    bad,
    ints,
    row,
    tol,
    uniform,
    values,
)
from ..reference import elementwise, mp_unary
from ._helpers import BIN_SHAPES, INF, NAN, SHAPES, label, pairs, sized, specials, specials2

EXACT = tol(0, 0)  # correctly rounded results (add, mul, sqrt, ...) are within half an ulp
ROUNDED = tol(1, 0)
TRANS = tol(4, 1)  # transcendental: a few ulps, plus an ulp absolute near zeros (sin, tanh)
BOOLS = frozenset({BOOL})


def _halves(lo: int, hi: int):
    """k/2 for integers k in [2lo, 2hi]: exercises ties in round/floor/ceil."""

    def gen(rng, d, shape):
        return (rng.integers(2 * lo, 2 * hi, size=shape, endpoint=True) / 2).astype(d.numpy)

    return gen


def _ieee_round(f):
    """Python's integer rounding functions, with IEEE results for inf/NaN/signed zero."""

    def g(v: float) -> float:
        if not math.isfinite(v):
            return v
        return float(f(v))

    return g


def unary_math(op: str, ref, gen, dtypes=FLOATS, t=TRANS, extra=(), near_zero=None, bads=()):
    cases = sized(ref, gen, t)
    if near_zero is not None:  # tiny results: relative accuracy only (catches exp(x) - 1 style cancellation)
        cases += sized(ref, uniform(-near_zero, near_zero), tol(t.ulps, 0), shapes=((64,),), dtypes=FLOATS, prefix="near0-")
    return row(op, dtypes, [*cases, *extra], bads)


ADD_GEN = uniform(-100, 100, -60, 60)
SUB_GEN = (uniform(-100, 100, 60, 120), uniform(-100, 100, 0, 60))  # uint8 stays non-negative
MUL_GEN = uniform(-10, 10, -11, 11)
MUL_U8 = uniform(0, 15, 0, 15)
CMP_GEN = ints(-2, 2)  # many ties so == and <= are exercised

ARITH = [
    ("math.add", lambda a, b: a + b, ADD_GEN, NUMERIC),
    ("math.sub", lambda a, b: a - b, SUB_GEN, NUMERIC),
    ("math.mul", lambda a, b: a * b, MUL_GEN, NUMERIC - {U8}),
]


def _div(a: float, b: float) -> float:
    if b == 0:
        return NAN if a == 0 or math.isnan(a) else math.copysign(INF, a) * math.copysign(1, b)
    return a / b


def _max(a, b):
    if isinstance(a, float) and (math.isnan(a) or math.isnan(b)):
        return NAN
    return max(a, b)


def _min(a, b):
    if isinstance(a, float) and (math.isnan(a) or math.isnan(b)):
        return NAN
    return min(a, b)


def _sign(v):
    if isinstance(v, float) and math.isnan(v):
        return NAN
    return (v > 0) - (v < 0) if isinstance(v, int) else float((v > 0) - (v < 0))


def _clamp_ref(v, min=None, max=None):
    if isinstance(v, float):
        if math.isnan(v):
            return NAN
        if min is not None:
            v = v if v >= min else float(min)
        if max is not None:
            v = v if v <= max else float(max)
        return v
    # integer inputs: the bounds round inward to the nearest integers inside them
    if min is not None:
        v = v if v >= math.ceil(min) else math.ceil(min)
    if max is not None:
        v = v if v <= math.floor(max) else math.floor(max)
    return v


def _clamp_case(lo, hi, gen=uniform(-3, 3, -5, 5), dtypes=None):
    return Case(
        f"min={lo},max={hi}",
        (arg((7, 9), gen),),
        {"min": lo, "max": hi},
        elementwise(lambda v, **a: _clamp_ref(v, lo, hi)),
        ROUNDED,
        None if dtypes is None else frozenset(dtypes),
    )


def _cast_fn(target):
    def f(v):
        if target is BOOL:
            return bool(v != 0)
        if target.is_float:
            return float(v)
        return int(v)  # floats truncate toward zero

    return f


def _cast_cases() -> list[Case]:
    cases = []
    for target in sorted(ALL, key=lambda d: d.value):
        t = target
        ref = elementwise(_cast_fn(t))
        # Values every type holds exactly (bool: 0/1), on an odd shape.
        cases.append(Case(f"to-{t.value}", (arg((3, 5, 7), ints(0, 100)),), {"dtype": t}, ref, ROUNDED))
        if t.is_int or t is BOOL:
            # float -> int truncates toward zero; -> bool is x != 0
            lo = 0 if t in (U8, BOOL) else -100
            cases.append(
                Case(f"trunc-to-{t.value}", (arg(64, uniform(lo - 0.99, 100.99)),), {"dtype": t}, ref, ROUNDED, FLOATS)
            )
            if t is not U8:
                cases.append(Case(f"signed-to-{t.value}", (arg(64, ints(-100, 100)),), {"dtype": t}, ref, ROUNDED, SIGNED))
        if t.is_float:
            # rounding to a narrower float, and IEEE specials survive every float conversion
            cases.append(Case(f"round-to-{t.value}", (arg(1024, uniform(-6e4, 6e4)),), {"dtype": t}, ref, ROUNDED, FLOATS))
            sp = [NAN, INF, -INF, 0.0, -0.0, 1.5]
            cases.append(
                Case(f"ieee-to-{t.value}", (arg(6, values(sp)),), {"dtype": t}, ref, ROUNDED, FLOATS)
            )
    cases.append(
        Case(
            "int64-to-float64-large",
            (arg(4, values([2**53, -(2**53), 2**40 + 1, -7]), dtype=I64),),
            {"dtype": F64},
            elementwise(float),
            ROUNDED,
            frozenset({I64}),
        )
    )
    return cases


def _where_cases() -> list[Case]:
    shapes = [((7,), (7,), (7,)), ((1024,), (1024,), (1024,)), ((3, 1), (1, 4), (3, 4)), ((2, 3, 4), (), (4,)), ((), (5,), (5,)), ((0, 2), (1, 2), (2,))]
    ref = elementwise(lambda c, a, b: a if c else b)
    return [
        Case(
            f"{label(c)}_{label(a)}_{label(b)}",
            (arg(c, dtype=BOOL), arg(a, uniform(-3, 3)), arg(b, uniform(-3, 3))),
            {},
            ref,
            EXACT,
        )
        for c, a, b in shapes
    ]


def _cmp(op: str, fn, dtypes=NUMERIC):
    nan_rows = [(NAN, 1.0), (1.0, NAN), (NAN, NAN), (INF, INF), (-INF, INF), (0.0, -0.0)]
    return row(
        op,
        dtypes,
        [
            *pairs(elementwise(fn), CMP_GEN, EXACT),
            specials2([(a, b, float(fn(a, b))) for a, b in nan_rows]),
        ],
        [bad("do not broadcast", ((3,), F64), ((4,), F64)), bad("one dtype", ((3,), F64), ((3,), F32))],
    )


def _pow_specials():
    return specials2(
        [
            (-2.0, 3.0, -8.0),
            (-2.0, 0.5, NAN),
            (0.0, -1.0, INF),
            (NAN, 0.0, 1.0),
            (1.0, NAN, 1.0),
            (2.0, INF, INF),
            (0.5, INF, 0.0),
            (INF, -1.0, 0.0),
            (4.0, 0.5, 2.0),
        ]
    )


def _mp_pow(a, b):
    if a < 0 and b != mp.floor(b):
        return mp.nan
    return mp.power(a, b)


POS = uniform(0.001, 100)
ROWS = [
    # ---- arithmetic -----------------------------------------------------------------------
    *(
        row(
            op,
            NUMERIC,
            [
                *pairs(elementwise(fn), gen, EXACT, dtypes=ds),
                *(pairs(elementwise(fn), MUL_U8, EXACT, shapes=BIN_SHAPES[:7], dtypes={U8}, prefix="u8-") if op == "math.mul" else ()),
                specials2([(INF, -INF, fn(INF, -INF)), (NAN, 1.0, NAN), (INF, 2.0, fn(INF, 2.0))]),
            ],
            [
                bad("do not broadcast", ((3,), F64), ((4,), F64)),
                bad("needs inputs of one dtype", ((3,), F64), ((3,), F32)),
                bad("does not accept input of dtype bool", ((3,), BOOL), ((3,), BOOL)),
                bad("takes 2 inputs, got 1", ((3,), F64)),
                bad("unknown attribute 'axis'.*this op takes no attributes", ((3,), F64), ((3,), F64), axis=0),
            ],
        )
        for op, fn, gen, ds in ARITH
    ),
    row(
        "math.div",
        FLOATS,
        [
            *pairs(elementwise(_div), (uniform(-10, 10), uniform(0.5, 4)), ROUNDED),
            specials2([(1.0, 0.0, INF), (-1.0, 0.0, -INF), (0.0, 0.0, NAN), (1.0, -0.0, -INF), (INF, INF, NAN), (1.0, INF, 0.0)]),
        ],
        [bad("does not accept input of dtype int64", ((3,), I64), ((3,), I64))],
    ),
    row(
        "math.pow",
        FLOATS,
        [
            *pairs(elementwise(lambda a, b: float(math.pow(a, b))), (uniform(0.1, 3), uniform(-3, 3)), tol(8, 1, float16=(4, 1))),
            Case("negative-base-int-exp", (arg(64, uniform(-3, -0.1)), arg(64, ints(-4, 4))), {}, mp_unary(_mp_pow), tol(8, 1)),
            _pow_specials(),
        ],
    ),
    row(
        "math.maximum",
        NUMERIC,
        [*pairs(elementwise(_max), uniform(-3, 3, -100, 100), EXACT), specials2([(NAN, 1.0, NAN), (1.0, NAN, NAN), (-INF, 2.0, 2.0), (INF, 2.0, INF)])],
    ),
    row(
        "math.minimum",
        NUMERIC,
        [*pairs(elementwise(_min), uniform(-3, 3, -100, 100), EXACT), specials2([(NAN, 1.0, NAN), (1.0, NAN, NAN), (-INF, 2.0, -INF), (INF, 2.0, 2.0)])],
    ),
    # ---- unary on signed numbers ------------------------------------------------------------
    unary_math(
        "math.neg", elementwise(lambda v: -v), uniform(-3, 3, -100, 100), SIGNED, EXACT,
        [specials([NAN, INF, -INF, 0.0], [NAN, -INF, INF, 0.0])],
        bads=[bad("does not accept input of dtype uint8", ((3,), U8))],
    ),
    unary_math(
        "math.abs", elementwise(abs), uniform(-3, 3, -100, 100), SIGNED, EXACT,
        [specials([NAN, INF, -INF, -0.0], [NAN, INF, INF, 0.0])],
    ),
    unary_math(
        "math.sign", elementwise(_sign), uniform(-3, 3, -3, 3), SIGNED, EXACT,
        [specials([NAN, INF, -INF, 0.0, -0.0, 1e-5, -1e-5], [NAN, 1.0, -1.0, 0.0, 0.0, 1.0, -1.0])],
    ),
    unary_math(
        "math.square", elementwise(lambda v: v * v), uniform(-10, 10, -11, 11), SIGNED, ROUNDED,
        [specials([NAN, INF, -INF], [NAN, INF, INF])],
    ),
    # ---- transcendental (floats) --------------------------------------------------------------
    unary_math("math.exp", mp_unary(mp.exp), uniform(-10, 10), extra=[specials([NAN, INF, -INF, 0.0, 710.0, -750.0], [NAN, INF, 0.0, 1.0, INF, 0.0])]),
    unary_math(
        "math.log", mp_unary(mp.log), POS,
        extra=[specials([NAN, INF, 0.0, -0.0, -1.0, 1.0, -INF], [NAN, INF, -INF, -INF, NAN, 0.0, NAN])],
        bads=[bad("does not accept input of dtype int32; accepts bfloat16, float16, float32, float64", ((3,), "int32"))],
    ),
    unary_math(
        "math.log1p", mp_unary(mp.log1p), uniform(-0.99, 10), near_zero=1e-3,
        extra=[specials([NAN, INF, -1.0, -2.0, 0.0], [NAN, INF, -INF, NAN, 0.0])],
    ),
    unary_math(
        "math.expm1", mp_unary(mp.expm1), uniform(-5, 5), near_zero=1e-3,
        extra=[specials([NAN, INF, -INF, 0.0, 1000.0], [NAN, INF, -1.0, 0.0, INF])],
    ),
    unary_math("math.sqrt", mp_unary(mp.sqrt), uniform(0, 100), t=tol(1, 0, float16=(1, 0)),
               extra=[specials([NAN, INF, 0.0, -1.0, 4.0, -INF], [NAN, INF, 0.0, NAN, 2.0, NAN])]),
    unary_math("math.rsqrt", mp_unary(lambda x: 1 / mp.sqrt(x)), uniform(0.01, 100), t=tol(2, 0),
               extra=[specials([NAN, INF, 0.0, -1.0, 4.0], [NAN, 0.0, INF, NAN, 0.5])]),
    unary_math("math.reciprocal", mp_unary(lambda x: 1 / x), uniform(0.1, 10), t=ROUNDED,
               extra=[specials([NAN, INF, -INF, 0.0, -0.0, 4.0], [NAN, 0.0, 0.0, INF, -INF, 0.25])]),
    unary_math("math.sin", mp_unary(mp.sin), uniform(-10, 10), extra=[specials([NAN, INF, -INF, 0.0], [NAN, NAN, NAN, 0.0])]),
    unary_math("math.cos", mp_unary(mp.cos), uniform(-10, 10), extra=[specials([NAN, INF, -INF, 0.0], [NAN, NAN, NAN, 1.0])]),
    unary_math("math.tanh", mp_unary(mp.tanh), uniform(-5, 5), near_zero=1e-3,
               extra=[specials([NAN, INF, -INF, 0.0, 30.0], [NAN, 1.0, -1.0, 0.0, 1.0])]),
    unary_math("math.erf", mp_unary(mp.erf), uniform(-4, 4), near_zero=1e-3,
               extra=[specials([NAN, INF, -INF, 0.0, 7.0], [NAN, 1.0, -1.0, 0.0, 1.0])]),
    # ---- rounding (floats; exact) -------------------------------------------------------------
    unary_math("math.floor", elementwise(_ieee_round(math.floor)), _halves(-10, 10), t=EXACT,
               extra=[specials([NAN, INF, -INF, -0.5, 0.5, 2.5, -2.5], [NAN, INF, -INF, -1.0, 0.0, 2.0, -3.0])]),
    unary_math("math.ceil", elementwise(_ieee_round(math.ceil)), _halves(-10, 10), t=EXACT,
               extra=[specials([NAN, INF, -INF, -0.5, 0.5, 2.5, -2.5], [NAN, INF, -INF, 0.0, 1.0, 3.0, -2.0])]),
    unary_math("math.round", elementwise(_ieee_round(round)), _halves(-10, 10), t=EXACT,
               extra=[specials([NAN, INF, -INF, -0.5, 0.5, 1.5, 2.5, -2.5], [NAN, INF, -INF, 0.0, 0.0, 2.0, 2.0, -2.0])]),
    row(
        "math.clamp",
        NUMERIC,
        [
            _clamp_case(-1.0, 1.0),
            _clamp_case(None, 0.5),
            _clamp_case(-0.5, None),
            _clamp_case(None, None),
            _clamp_case(1.5, 2.5, dtypes=NUMERIC),
            _clamp_case(-1000.0, 1000.0, uniform(-3, 3, 0, 100)),
            _clamp_case(2.0, 1.0),  # min > max: the max wins, as min(max(x, min), max) says
            *sized(elementwise(lambda v: _clamp_ref(v, 0.0, 1.0)), attrs={"min": 0.0, "max": 1.0}, shapes=SHAPES, prefix="unit-", tol=ROUNDED),
            Case("ieee", (arg(4, values([NAN, INF, -INF, 0.5])),), {"min": 0.0, "max": 1.0}, lambda *a, **k: np.array([NAN, 1.0, 0.0, 0.5]), EXACT, FLOATS),
        ],
        [bad("attribute 'min' \\(float\\?\\): expected a number", ((3,), F64), min="low")],
    ),
    # ---- comparisons and logic ------------------------------------------------------------------
    _cmp("math.equal", lambda a, b: a == b, ALL),
    _cmp("math.not_equal", lambda a, b: a != b, ALL),
    _cmp("math.less", lambda a, b: a < b),
    _cmp("math.less_equal", lambda a, b: a <= b),
    _cmp("math.greater", lambda a, b: a > b),
    _cmp("math.greater_equal", lambda a, b: a >= b),
    row("math.logical_and", BOOLS, pairs(elementwise(lambda a, b: a and b), tol=EXACT), [bad("does not accept input of dtype float64", ((3,), F64), ((3,), F64))]),
    row("math.logical_or", BOOLS, pairs(elementwise(lambda a, b: a or b), tol=EXACT)),
    row("math.logical_not", BOOLS, sized(elementwise(lambda a: not a), tol=EXACT)),
    row(
        "math.where",
        ALL,
        _where_cases(),
        [
            bad("condition must be bool", ((3,), F64), ((3,), F64), ((3,), F64)),
            bad("branches differ in dtype", ((3,), BOOL), ((3,), F64), ((3,), F32)),
            bad("do not broadcast", ((3,), BOOL), ((4,), F64), ((3,), F64)),
        ],
    ),
    row(
        "math.cast",
        ALL,
        _cast_cases(),
        [
            bad("missing required attribute 'dtype'", ((3,), F64)),
            bad("unknown dtype 'float128'", ((3,), F64), dtype="float128"),
        ],
    ),
]
