"""VJP rules for activation.*."""

from __future__ import annotations

import math

from caramba import ops
from caramba.autodiff.rules import rule
from caramba.autodiff.rules._util import call, scalar, unbroadcast, where, zero
from caramba.ops.activation import GELU_ERFC_SCALE

INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


@rule("activation.relu")
def relu(c, ct):
    return (where(ops.greater(c.x[0], zero(ct)), ct, zero(ct)),)


@rule("activation.leaky_relu")
def leaky_relu(c, ct):
    return (where(ops.greater(c.x[0], zero(ct)), ct, ct * c.attrs["alpha"]),)


@rule("activation.gelu")
def gelu(c, ct):
    x = c.x[0]
    if c.attrs["approximate"] == "tanh":
        k = 0.044715
        t = ops.tanh((x + x * x * x * k) * SQRT_2_OVER_PI)
        d = (t + 1.0) * 0.5 + x * 0.5 * (1.0 - t * t) * SQRT_2_OVER_PI * (x * x * (3 * k) + 1.0)
        return (ct * d,)
    # Phi(x) = gelu(x) / x: the forward output already holds the erf, so the backward pass
    # needs only an exp. The quotient is within two ulps of Phi wherever Phi is normal (and
    # below that its absolute error is negligible); x == 0 takes Phi(0) = 1/2.
    # The pdf is spelled exp(-u*u) with erfc's own argument u = x * -1/sqrt2, which is how the
    # exact GELU lowers under xla: XLA then computes that exp once for the forward's erfc and
    # this pdf, and the xla lowering reads gelu(x) / x as the forward's Phi (see
    # backends/xla/lowering.py, `_gelu`), as JAX's own GELU gradient shares both.
    y = c.y[0]
    cdf = where(ops.equal(x, zero(x)), scalar(0.5, x), y / x)
    u = x * GELU_ERFC_SCALE
    pdf = ops.exp(-(u * u)) * INV_SQRT_2PI
    return (ct * (cdf + x * pdf),)


def dsilu(x):
    s = ops.sigmoid(x)
    return s * (x * (1.0 - s) + 1.0)


@rule("activation.silu")
def silu(c, ct):
    return (ct * dsilu(c.x[0]),)


@rule("activation.sigmoid")
def sigmoid(c, ct):
    y = c.y[0]
    return (ct * y * (1.0 - y),)


@rule("activation.selu")
def selu(c, ct):
    x, y = c.x[0], c.y[0]
    return (ct * where(ops.greater(x, zero(x)), scalar(SELU_SCALE, x), y + SELU_SCALE * SELU_ALPHA),)


@rule("activation.elu")
def elu(c, ct):
    x, y = c.x[0], c.y[0]
    return (ct * where(ops.greater(x, zero(x)), scalar(1.0, x), y + c.attrs["alpha"]),)


@rule("activation.softplus")
def softplus(c, ct):
    return (ct * ops.sigmoid(c.x[0] * c.attrs["beta"]),)


@rule("activation.swiglu")
def swiglu(c, ct):
    if len(c.x) == 2:
        gate, up = c.x
        return (
            unbroadcast(ct * up * dsilu(gate), gate.shape) if c.needs[0] else None,
            unbroadcast(ct * ops.silu(gate), up.shape) if c.needs[1] else None,
        )
    x = c.x[0]
    gate, up = call(x, "shape.split", (x,), axis=-1, num=2)
    return (ops.concat(ct * up * dsilu(gate), ct * ops.silu(gate), axis=-1),)
