"""Helpers shared by VJP rules: broadcasting adjoints and scalar constants."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from caramba.ir.graph import Value


def scalar(value: float, like: Value) -> Value:
    """A scalar constant of ``like``'s dtype in ``like``'s graph."""
    return like.graph.constant(np.asarray(value, dtype=like.dtype.numpy))


def zero(like: Value) -> Value:
    return scalar(0.0, like)


def call(like: Value, op: str, inputs: Sequence[Value], **attrs) -> Value:
    return like.graph.call(op, inputs, attrs)


def reshape(x: Value, shape: Sequence[int]) -> Value:
    shape = tuple(shape)
    return x if x.shape == shape else call(x, "shape.reshape", (x,), shape=shape)


def broadcast(x: Value, shape: Sequence[int]) -> Value:
    shape = tuple(shape)
    return x if x.shape == shape else call(x, "shape.broadcast_to", (x,), shape=shape)


def zeros(like: Value, shape: Sequence[int] | None = None) -> Value:
    return broadcast(zero(like), like.shape if shape is None else shape)


def sum_axes(x: Value, axes: Sequence[int], keepdims: bool = False) -> Value:
    return call(x, "reduce.sum", (x,), axes=tuple(axes), keepdims=keepdims)


def unbroadcast(ct: Value, shape: Sequence[int]) -> Value:
    """Adjoint of NumPy broadcasting: sum ``ct`` down to ``shape``."""
    shape = tuple(shape)
    if ct.shape == shape:
        return ct
    lead = len(ct.shape) - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape) if d == 1 and ct.shape[lead + i] != 1]
    out = sum_axes(ct, axes, keepdims=True) if axes else ct
    return reshape(out, shape)


def kept_shape(shape: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def expand(ct: Value, shape: Sequence[int], axes: Sequence[int]) -> Value:
    """Adjoint of a reduction over ``axes``: ``ct`` (reduced, with or without kept axes)
    broadcast back to the input ``shape``."""
    return broadcast(reshape(ct, kept_shape(shape, axes)), shape)


def count(shape: Sequence[int], axes: Sequence[int]) -> int:
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def where(cond: Value, x: Value, y: Value) -> Value:
    return call(x, "math.where", (cond, x, y))
