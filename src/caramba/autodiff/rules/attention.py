"""VJP rules for attention.*: sdpa by recomputing its probabilities, rope by rotating back."""

from __future__ import annotations

import math

import numpy as np

from caramba import ops
from caramba.autodiff.rules import rule
from caramba.autodiff.rules._util import sum_axes, unbroadcast, where
from caramba.autodiff.rules.linalg import swap_last
from caramba.ir.dtypes import DType


@rule("attention.sdpa")
def sdpa(c, ct):
    q, k, v = c.x[:3]
    mask = c.x[3] if len(c.x) == 4 else None
    scale = c.attrs["scale"] if c.attrs["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    tq, tk = q.shape[-2], k.shape[-2]
    s = ops.matmul(q, swap_last(k)) * scale
    if mask is not None:
        if mask.dtype is DType.bool:
            s = where(mask, s, s.graph.constant(np.asarray(-np.inf, dtype=q.dtype.numpy)))
        else:
            s = s + mask
    if c.attrs["causal"]:
        keep = s.graph.constant(np.tril(np.ones((tq, tk), dtype=bool), k=tk - tq))
        s = where(keep, s, s.graph.constant(np.asarray(-np.inf, dtype=q.dtype.numpy)))
    p = ops.softmax(s, axis=-1)
    dq = dk = dv = dm = None
    if c.needs[2]:
        dv = unbroadcast(ops.matmul(swap_last(p), ct), v.shape)
    if c.needs[0] or c.needs[1] or (mask is not None and c.needs[3]):
        dp = ops.matmul(ct, swap_last(v))
        ds = p * (dp - sum_axes(dp * p, (-1 % dp.ndim,), keepdims=True))
        if c.needs[0]:
            dq = unbroadcast(ops.matmul(ds, k) * scale, q.shape)
        if c.needs[1]:
            dk = unbroadcast(ops.matmul(swap_last(ds), q) * scale, k.shape)
        if mask is not None and c.needs[3] and mask.dtype is not DType.bool:
            dm = unbroadcast(ds, mask.shape)
    return (dq, dk, dv) if mask is None else (dq, dk, dv, dm)


@rule("attention.rope")
def rope(c, ct):
    # rope rotates each (x1, x2) pair by +theta; its transpose rotates by -theta, which is
    # rope applied to (ct1, -ct2) with the second half negated again afterwards. Any inv_freq
    # and scale carry over: scale * [[c, -s], [s, c]] transposes to scale * [[c, s], [-s, c]].
    x = c.x[0]
    half = x.shape[-1] // 2
    sign = x.graph.constant(np.concatenate([np.ones(half), -np.ones(half)]).astype(x.dtype.numpy))
    return (c.call("attention.rope", (ct * sign,), dict(c.attrs)) * sign,)
