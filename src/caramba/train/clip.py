"""Global-norm gradient clipping, built from existing ops."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from caramba import ops
from caramba.ir.graph import Value


def sum_of_squares(x: Value) -> Value:
    """``sum(x**2)`` as one dot product (``[1, n] @ [n, 1]``): one pass, no temporary."""
    n = x.type.size
    flat = ops.reshape(x, shape=(1, n))
    return ops.reshape(flat @ ops.reshape(x, shape=(n, 1)), shape=())


def global_norm(grads: Sequence[Value]) -> Value:
    """``sqrt(sum_i |g_i|²)`` over all gradients (in the first gradient's dtype)."""
    d = grads[0].dtype
    total = None
    for g in grads:
        s = sum_of_squares(g)
        s = s if s.dtype == d else ops.cast(s, dtype=d)
        total = s if total is None else total + s
    return ops.sqrt(total)


def clip_by_global_norm(grads: Sequence[Value], max_norm: float) -> tuple[Value, Value]:
    """``(scale, norm)`` with ``scale = min(1, max_norm / (norm + 1e-6))`` (as PyTorch's
    ``clip_grad_norm_``); multiply every gradient by ``scale`` (optimizer ops take it as
    ``grad_scale``)."""
    norm = global_norm(grads)
    one = norm.graph.constant(np.ones((), dtype=norm.dtype.numpy))
    return ops.minimum(one, float(max_norm) / (norm + 1e-6)), norm


__all__ = ["clip_by_global_norm", "global_norm", "sum_of_squares"]
