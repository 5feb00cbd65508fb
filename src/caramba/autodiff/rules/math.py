"""VJP rules for math.*."""

from __future__ import annotations

import math

from caramba import ops
from caramba.autodiff.rules import rule
from caramba.autodiff.rules._util import scalar, unbroadcast, where, zero

TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@rule("math.add")
def add(c, ct):
    x, y = c.x
    return (unbroadcast(ct, x.shape) if c.needs[0] else None, unbroadcast(ct, y.shape) if c.needs[1] else None)


@rule("math.sub")
def sub(c, ct):
    x, y = c.x
    return (unbroadcast(ct, x.shape) if c.needs[0] else None, unbroadcast(-ct, y.shape) if c.needs[1] else None)


@rule("math.mul")
def mul(c, ct):
    x, y = c.x
    return (
        unbroadcast(ct * y, x.shape) if c.needs[0] else None,
        unbroadcast(ct * x, y.shape) if c.needs[1] else None,
    )


@rule("math.div")
def div(c, ct):
    x, y = c.x
    dx = ct / y
    return (
        unbroadcast(dx, x.shape) if c.needs[0] else None,
        unbroadcast(-(dx * c.y[0]), y.shape) if c.needs[1] else None,
    )


@rule("math.pow")
def pow(c, ct):
    x, y = c.x
    out = c.y[0]
    dx = dy = None
    if c.needs[0]:
        # y * x**(y - 1), defined as 0 where y == 0 (x**0 is constant even at x == 0)
        d = where(ops.equal(y, zero(y)), zero(y), y * ops.pow(x, y - 1.0))
        dx = unbroadcast(ct * d, x.shape)
    if c.needs[1]:
        d = where(ops.equal(x, zero(x)), zero(x), out * ops.log(x))
        dy = unbroadcast(ct * d, y.shape)
    return dx, dy


def _select(c, ct, pick_x):
    """maximum/minimum: the chosen input gets the cotangent; ties split it evenly."""
    x, y = c.x
    eq = ops.equal(x, y)
    one, half, z = scalar(1.0, ct), scalar(0.5, ct), zero(ct)
    wx = where(pick_x, one, where(eq, half, z))
    wy = where(pick_x, z, where(eq, half, one))
    return (
        unbroadcast(ct * wx, x.shape) if c.needs[0] else None,
        unbroadcast(ct * wy, y.shape) if c.needs[1] else None,
    )


@rule("math.maximum")
def maximum(c, ct):
    return _select(c, ct, ops.greater(*c.x))


@rule("math.minimum")
def minimum(c, ct):
    return _select(c, ct, ops.less(*c.x))


@rule("math.neg")
def neg(c, ct):
    return (-ct,)


@rule("math.abs")
def abs(c, ct):
    return (ct * ops.sign(c.x[0]),)


@rule("math.exp")
def exp(c, ct):
    return (ct * c.y[0],)


@rule("math.log")
def log(c, ct):
    return (ct / c.x[0],)


@rule("math.log1p")
def log1p(c, ct):
    return (ct / (c.x[0] + 1.0),)


@rule("math.expm1")
def expm1(c, ct):
    return (ct * (c.y[0] + 1.0),)


@rule("math.sqrt")
def sqrt(c, ct):
    return (ct * 0.5 / c.y[0],)


@rule("math.rsqrt")
def rsqrt(c, ct):
    return (ct * -0.5 * c.y[0] / c.x[0],)


@rule("math.square")
def square(c, ct):
    return (ct * 2.0 * c.x[0],)


@rule("math.reciprocal")
def reciprocal(c, ct):
    y = c.y[0]
    return (-(ct * y * y),)


@rule("math.sin")
def sin(c, ct):
    return (ct * ops.cos(c.x[0]),)


@rule("math.cos")
def cos(c, ct):
    return (-(ct * ops.sin(c.x[0])),)


@rule("math.tanh")
def tanh(c, ct):
    y = c.y[0]
    return (ct * (1.0 - y * y),)


@rule("math.erf")
def erf(c, ct):
    x = c.x[0]
    return (ct * TWO_OVER_SQRT_PI * ops.exp(-(x * x)),)


@rule("math.clamp")
def clamp(c, ct):
    x = c.x[0]
    lo, hi = c.attrs["min"], c.attrs["max"]
    keep = None
    if lo is not None:
        keep = ops.greater_equal(x, scalar(lo, x))
    if hi is not None:
        k = ops.less_equal(x, scalar(hi, x))
        keep = k if keep is None else ops.logical_and(keep, k)
    return (ct if keep is None else where(keep, ct, zero(ct)),)


@rule("math.where")
def where_(c, ct):
    cond, x, y = c.x
    z = zero(ct)
    return (
        None,
        unbroadcast(where(cond, ct, z), x.shape) if c.needs[1] else None,
        unbroadcast(where(cond, z, ct), y.shape) if c.needs[2] else None,
    )


@rule("math.cast")
def cast(c, ct):
    # A non-float input gets a cotangent here on purpose: the core then reports the gradient
    # flowing through an integer/bool value instead of silently dropping it.
    return (ops.cast(ct, dtype=c.x[0].dtype),)
