"""activation.*: elementwise nonlinearities, references in mpmath (relative accuracy in the tails)."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np

from ..harness import F32, F64, FLOATS, I64, Case, arg, bad, row, tol, uniform
from ..reference import elementwise, mp_gelu, mp_gelu_tanh, mp_selu, mp_sigmoid, mp_softplus, mp_unary, mp_unary_cond
from ._helpers import BIN_SHAPES, INF, NAN, SHAPES, pairs, sized, specials

ACT = tol(4, 1, float16=(2, 1))  # composite forms: a few ulps relative, one ulp absolute near 0
# Tails (tiny results): relative accuracy. Where the kernel must form an argument (x/sqrt2,
# beta*x) the reference's scale is |x f'(x)|, what rounding that argument may cost.
TAIL = tol(4, 0)
TAIL_COND = tol(4, 2)
TAILS = ((64,),)
HI = frozenset({F64, F32})  # tails where float16 underflows/overflows are checked in f64/f32


def act_row(op, ref, attrs_variants=({},), gen=uniform(-6, 6), t=ACT, tail=(-30.0, -3.0), tail_ref=None, extra=(), bads=()):
    cases = []
    for attrs in attrs_variants:
        tag = ",".join(f"{k}={v}" for k, v in attrs.items())
        prefix = f"{tag}-" if tag else ""
        shapes = SHAPES if not cases else ((7,), (1024,), (3, 5, 7))
        cases += sized(ref, gen, t, attrs, shapes, prefix=prefix)
        if tail is not None:
            tref, ttol = (ref, TAIL) if tail_ref is None else (tail_ref, TAIL_COND)
            cases += sized(tref, uniform(*tail), ttol, attrs, TAILS, HI, prefix=f"{prefix}tail-")
    return row(op, FLOATS, [*cases, *extra], bads)


def _relu(v: float) -> float:
    return v if math.isnan(v) else max(v, 0.0)


def _leaky(v: float, alpha: float) -> float:
    return v if v > 0 or math.isnan(v) else alpha * v


def _elu(x, alpha):
    return x if x > 0 else mp.mpf(alpha) * mp.expm1(x)


def _silu(x):
    return x * mp_sigmoid(x)


def _swiglu2(gate, up):
    return _silu(gate) * up


def _swiglu1(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return mp_unary(_swiglu2)(x[..., :half], x[..., half:])


SWIGLU_1 = [(8,), (3, 6), (2, 3, 64), (1, 2)]
ROWS = [
    act_row(
        "activation.relu", elementwise(_relu), t=tol(0, 0), tail=None,
        extra=[specials([NAN, INF, -INF, -1.0, 0.0], [NAN, INF, 0.0, 0.0, 0.0])],
        bads=[bad("does not accept input of dtype int64", ((3,), I64))],
    ),
    act_row(
        "activation.leaky_relu", elementwise(_leaky, with_attrs=True), ({}, {"alpha": 0.2}), t=tol(1, 0), tail=None,
        extra=[specials([NAN, INF, -INF, -2.0], [NAN, INF, -INF, -0.02])],
        bads=[bad("attribute 'alpha' \\(float\\): expected a number", ((3,), F64), alpha="x")],
    ),
    act_row(
        "activation.gelu", mp_unary(mp_gelu), ({}, {"approximate": "none"}), tail=(-35.0, -3.0), tail_ref=mp_unary_cond(mp_gelu),
        extra=[
            specials([NAN, INF, 0.0, -40.0, 40.0], [NAN, INF, 0.0, 0.0, 40.0]),
            # the tanh approximation is a different function, checked against its own formula
            *sized(mp_unary(mp_gelu_tanh), uniform(-6, 6), ACT, {"approximate": "tanh"}, prefix="tanh-"),
            *sized(mp_unary_cond(mp_gelu_tanh), uniform(-12, -3), TAIL_COND, {"approximate": "tanh"}, TAILS, HI, prefix="tanh-tail-"),
        ],
        bads=[bad("'approximate' \\(str\\): 'exact' is not one of 'none', 'tanh'", ((3,), F64), approximate="exact")],
    ),
    act_row("activation.silu", mp_unary(_silu), tail=(-700.0, -3.0), extra=[specials([NAN, INF, 0.0, -800.0], [NAN, INF, 0.0, 0.0])]),
    act_row(
        "activation.sigmoid", mp_unary(mp_sigmoid), tail=(-700.0, -3.0),
        extra=[specials([NAN, INF, -INF, 0.0, -800.0, 800.0], [NAN, 1.0, 0.0, 0.5, 0.0, 1.0])],
    ),
    act_row("activation.selu", mp_unary(mp_selu), tail=(-40.0, -1e-3), extra=[specials([NAN, INF, -INF, 0.0], [NAN, INF, float(-mp.mpf("1.0507009873554804934193349852946") * mp.mpf("1.6732632423543772848170429916717")), 0.0])]),
    act_row(
        "activation.elu", mp_unary(_elu, with_attrs=True), ({}, {"alpha": 0.5}), tail=(-40.0, -1e-3),
        extra=[specials([NAN, INF, -INF, 0.0], [NAN, INF, -1.0, 0.0])],
    ),
    act_row(
        "activation.softplus", mp_unary(mp_softplus, with_attrs=True), ({}, {"beta": 2.0}, {"beta": 0.5}),
        gen=uniform(-20, 20), tail=(-700.0, -20.0), tail_ref=mp_unary_cond(mp_softplus, with_attrs=True),
        extra=[specials([NAN, INF, -INF, 0.0, 800.0, -800.0], [NAN, INF, 0.0, math.log(2.0), 800.0, 0.0])],
    ),
    row(
        "activation.swiglu",
        FLOATS,
        [
            *(Case(f"split-{'x'.join(map(str, s))}", (arg(s, uniform(-6, 6)),), {}, _swiglu1, ACT) for s in SWIGLU_1),
            *pairs(mp_unary(_swiglu2), uniform(-6, 6), ACT, shapes=BIN_SHAPES, prefix="gate-up-"),
        ],
        [
            bad("splits its last axis in two; got shape \\[3, 5\\]", ((3, 5), F64)),
            bad("do not broadcast", ((3,), F64), ((4,), F64)),
            bad("one dtype", ((3,), F64), ((3,), F32)),
            bad("takes 1..2 inputs, got 3", ((2,), F64), ((2,), F64), ((2,), F64)),
        ],
    ),
]
