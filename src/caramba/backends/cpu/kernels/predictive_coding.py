"""cpu kernels for predictive_coding.*: the NumPy definitions written once in
``caramba.ops.predictive_coding``, run with ``xp = numpy``."""

from __future__ import annotations

import numpy as np

from caramba.backends.cpu.kernels import kernel
from caramba.ir.dtypes import DType
from caramba.ops import predictive_coding as pc

FLOAT = frozenset({DType.float64, DType.float32})  # float16: not claimed (like the other research families)


@kernel("predictive_coding.prediction", FLOAT)
def _prediction(node, ins):
    act = node.attrs["activation"]
    return lambda r, w, b: pc.prediction_xp(r, w, b, act, np)


@kernel("predictive_coding.prediction_error", FLOAT)
def _prediction_error(node, ins):
    return lambda x, mu, pi: np.asarray(pc.prediction_error_xp(x, mu, pi, np))


@kernel("predictive_coding.update_representation", FLOAT)
def _update_representation(node, ins):
    act, lr = node.attrs["activation"], node.attrs["lr"]
    return lambda r, w, b, eb, es: pc.update_representation_xp(r, w, b, eb, es, act, lr, np)


@kernel("predictive_coding.update_weights", FLOAT)
def _update_weights(node, ins):
    act, lr = node.attrs["activation"], node.attrs["lr"]
    return lambda r, w, b, eb: pc.update_weights_xp(r, w, b, eb, act, lr, np)


@kernel("predictive_coding.vjp", FLOAT)
def _vjp(node, ins):
    of, act, lr = node.attrs["of"], node.attrs["activation"], node.attrs["lr"]

    def vjp(*xs):
        if of == "prediction":
            return pc.prediction_xp(*xs[1:], act, np, ct=xs[0])
        if of == "prediction_error":
            return tuple(np.asarray(v) for v in pc.prediction_error_xp(*xs[1:], np, ct=xs[0]))
        if of == "update_representation":
            return pc.update_representation_xp(*xs[1:], act, lr, np, ct=xs[0])
        return pc.update_weights_xp(*xs[2:], act, lr, np, ct=xs[:2])

    return vjp
