"""VJP rules for reduce.*."""

from __future__ import annotations

from caramba import ops
from caramba.autodiff.rules import rule
from caramba.autodiff.rules._util import count, expand, scalar, sum_axes, where, zero
from caramba.ops._define import norm_axes


def _axes(c):
    return norm_axes(c.attrs["axes"], c.x[0].ndim)


@rule("reduce.sum")
def sum(c, ct):
    x = c.x[0]
    return (expand(ct, x.shape, _axes(c)),)


@rule("reduce.mean")
def mean(c, ct):
    x = c.x[0]
    axes = _axes(c)
    return (expand(ct * (1.0 / count(x.shape, axes)), x.shape, axes),)


def _extremum(c, ct):
    """max/min: the cotangent goes to the extreme elements, split evenly between ties."""
    x = c.x[0]
    axes = _axes(c)
    hit = ops.equal(x, expand(c.y[0], x.shape, axes))
    n = sum_axes(ops.cast(hit, dtype=x.dtype), axes, keepdims=True)
    return (where(hit, expand(ct, x.shape, axes) / n, zero(x)),)


@rule("reduce.max")
def max(c, ct):
    return _extremum(c, ct)


@rule("reduce.min")
def min(c, ct):
    return _extremum(c, ct)


@rule("reduce.prod")
def prod(c, ct):
    """d prod / d x_i is the product of the others: prod / x_i without zeros; with exactly one
    zero only that element gets the product of the rest; with two or more zeros all get 0."""
    x = c.x[0]
    axes = _axes(c)
    z, one = zero(x), scalar(1.0, x)
    is_zero = ops.equal(x, z)
    nonzero = where(is_zero, one, x)
    p = expand(ops.prod(nonzero, axes=axes, keepdims=True), x.shape, axes)
    zeros_n = expand(sum_axes(ops.cast(is_zero, dtype=x.dtype), axes, keepdims=True), x.shape, axes)
    others = where(
        ops.equal(zeros_n, z),
        p / nonzero,
        where(ops.logical_and(is_zero, ops.equal(zeros_n, one)), p, z),
    )
    return (expand(ct, x.shape, axes) * others,)


@rule("reduce.logsumexp")
def logsumexp(c, ct):
    x = c.x[0]
    axes = _axes(c)
    return (expand(ct, x.shape, axes) * ops.exp(x - expand(c.y[0], x.shape, axes)),)


@rule("reduce.variance")
def variance(c, ct):
    x = c.x[0]
    axes = _axes(c)
    n = count(x.shape, axes) - c.attrs["correction"]
    mu = ops.mean(x, axes=axes, keepdims=True)
    return (expand(ct, x.shape, axes) * (x - mu) * (2.0 / n),)
