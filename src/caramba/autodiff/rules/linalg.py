"""VJP rules for linalg.*."""

from __future__ import annotations

import math

from caramba import ops
from caramba.autodiff.rules import rule
from caramba.autodiff.rules._util import reshape, unbroadcast


def swap_last(x):
    """Transpose of the last two axes (a view on most backends)."""
    r = x.ndim
    perm = None if r == 2 else tuple(range(r - 2)) + (r - 1, r - 2)
    return ops.transpose(x, perm=perm)


@rule("linalg.matmul")
def matmul(c, ct):
    a, b = c.x
    # Work on the rank >= 2 forms (NumPy matmul promotes vectors), then undo the promotion.
    a2 = reshape(a, (1,) + a.shape) if a.ndim == 1 else a
    b2 = reshape(b, b.shape + (1,)) if b.ndim == 1 else b
    out2 = ct.shape
    if a.ndim == 1:
        out2 = out2[:-1] + (1,) + out2[-1:] if b.ndim > 1 else out2 + (1,)
    if b.ndim == 1:
        out2 = out2 + (1,)
    ct2 = reshape(ct, out2)
    da = db = None
    if c.needs[0]:
        da = reshape(unbroadcast(ops.matmul(ct2, swap_last(b2)), a2.shape), a.shape)
    if c.needs[1]:
        if a2.ndim > 2 and all(d == 1 for d in b2.shape[:-2]):
            # b shared by every leading index of a (a layer's weight): the batch sum folds into
            # one GEMM over the flattened rows, a2^T [K, rows] @ ct2 [rows, N], as PyTorch does,
            # instead of a product per leading index followed by a sum of [.., K, N] results
            rows = math.prod(a2.shape[:-1])
            db = ops.matmul(swap_last(reshape(a2, (rows, a2.shape[-1]))), reshape(ct2, (rows, ct2.shape[-1])))
            db = reshape(db, b.shape)
        else:
            db = reshape(unbroadcast(ops.matmul(swap_last(a2), ct2), b2.shape), b.shape)
    return da, db


@rule("linalg.outer")
def outer(c, ct):
    a, b = c.x
    return (ops.matmul(ct, b) if c.needs[0] else None, ops.matmul(a, ct) if c.needs[1] else None)
