"""cpu kernel for sample.token: the float64 NumPy definition in ``caramba.ops.sample``, run as is."""

from __future__ import annotations

import numpy as np

from caramba.backends.cpu.kernels import FLOAT, kernel
from caramba.ir.dtypes import DType
from caramba.ops import sample


@kernel("sample.token", FLOAT | {DType.int64, DType.bool})  # int64: key and tokens; bool: seen
def _token(node, ins):
    a, (k, s) = dict(node.attrs), sample.roles(ins)

    def token(logits, *rest):
        xs = (logits, *rest)
        return sample.draw(logits, a, None if k is None else xs[k], None if s is None else xs[s], np)

    return token
