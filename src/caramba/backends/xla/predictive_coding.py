"""xla rules for predictive_coding.*: the definitions in ``caramba.ops.predictive_coding`` with
``xp = jax.numpy`` (the same steps as the cpu kernels)."""

from __future__ import annotations

import jax.numpy as jnp

from caramba.backends.xla.lowering import rule
from caramba.ir.dtypes import DType
from caramba.ops import predictive_coding as pc

FLOAT = frozenset({DType.float64, DType.float32})  # float16: not claimed (like the other research families)


@rule("predictive_coding.prediction", FLOAT)
def _prediction(node, ins, ctx):
    act = node.attrs["activation"]
    return lambda r, w, b: pc.prediction_xp(r, w, b, act, jnp)


@rule("predictive_coding.prediction_error", FLOAT)
def _prediction_error(node, ins, ctx):
    return lambda x, mu, pi: pc.prediction_error_xp(x, mu, pi, jnp)


@rule("predictive_coding.update_representation", FLOAT)
def _update_representation(node, ins, ctx):
    act, lr = node.attrs["activation"], node.attrs["lr"]
    return lambda r, w, b, eb, es: pc.update_representation_xp(r, w, b, eb, es, act, lr, jnp)


@rule("predictive_coding.update_weights", FLOAT)
def _update_weights(node, ins, ctx):
    act, lr = node.attrs["activation"], node.attrs["lr"]
    return lambda r, w, b, eb: pc.update_weights_xp(r, w, b, eb, act, lr, jnp)


@rule("predictive_coding.vjp", FLOAT)
def _vjp(node, ins, ctx):
    of, act, lr = node.attrs["of"], node.attrs["activation"], node.attrs["lr"]

    def vjp(*xs):
        if of == "prediction":
            return pc.prediction_xp(*xs[1:], act, jnp, ct=xs[0])
        if of == "prediction_error":
            return pc.prediction_error_xp(*xs[1:], jnp, ct=xs[0])
        if of == "update_representation":
            return pc.update_representation_xp(*xs[1:], act, lr, jnp, ct=xs[0])
        return pc.update_weights_xp(*xs[2:], act, lr, jnp, ct=xs[:2])

    return vjp
