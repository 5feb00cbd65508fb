"""cpu kernels for activation.* — float64-accurate forms (exact erf GELU via erfc)."""

from __future__ import annotations

import math

import numpy as np

from caramba.backends.cpu.kernels import FLOAT, kernel, simple, special

SQRT1_2 = math.sqrt(0.5)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _expit(x):
    return special().expit(x).astype(x.dtype, copy=False)


def relu(x):
    return np.maximum(x, 0)


def sigmoid(x):
    return _expit(x)


def silu(x):
    return x * _expit(x)


def selu(x):
    return SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.expm1(np.minimum(x, 0)))


simple("activation.relu", FLOAT, relu)
simple("activation.sigmoid", FLOAT, sigmoid)
simple("activation.silu", FLOAT, silu)
simple("activation.selu", FLOAT, selu)


@kernel("activation.gelu", FLOAT)
def _gelu(node, ins):
    if node.attrs["approximate"] == "tanh":
        # 0.5 * (1 + tanh(z)) == sigmoid(2z): the sigmoid form keeps full relative accuracy in
        # the negative tail, where 1 + tanh(z) cancels (to exactly 0 below x ~ -6 in float64).
        def tanh_form(x):
            return x * _expit(2.0 * SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))

        return tanh_form

    # 0.5 * x * erfc(-x / sqrt 2) keeps full relative accuracy in the negative tail,
    # where 1 + erf(x / sqrt 2) would cancel to zero.
    def exact(x):
        return (0.5 * x * special().erfc(-x * SQRT1_2)).astype(x.dtype, copy=False)

    return exact


@kernel("activation.leaky_relu", FLOAT)
def _leaky(node, ins):
    alpha = node.attrs["alpha"]
    return lambda x: np.where(x > 0, x, alpha * x)


@kernel("activation.elu", FLOAT)
def _elu(node, ins):
    alpha = node.attrs["alpha"]
    return lambda x: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


@kernel("activation.softplus", FLOAT)
def _softplus(node, ins):
    beta = node.attrs["beta"]

    def softplus(x):
        bx = beta * x
        return (np.maximum(bx, 0) + np.log1p(np.exp(-np.abs(bx)))) / beta

    return softplus


@kernel("activation.swiglu", FLOAT)
def _swiglu(node, ins):
    if len(ins) == 2:
        return lambda gate, up: silu(gate) * up
    half = ins[0].shape[-1] // 2
    return lambda x: silu(x[..., :half]) * x[..., half:]
