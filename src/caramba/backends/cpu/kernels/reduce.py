"""cpu kernels for reduce.* (output dtype always equals the input dtype)."""

from __future__ import annotations

import numpy as np

from caramba.backends.cpu.kernels import FLOAT, NUM, kernel
from caramba.ops._define import norm_axes, norm_axis


def _axes(node, ins):
    return norm_axes(node.attrs["axes"], ins[0].rank), node.attrs["keepdims"]


def _typed(fn):
    """Reductions that NumPy would widen (int sum/prod) keep the input dtype."""

    def factory(node, ins):
        axes, keep = _axes(node, ins)
        d = ins[0].dtype.numpy
        return lambda x: np.asarray(fn(x, axis=axes, keepdims=keep, dtype=d))

    return factory


@kernel("reduce.sum", NUM)
def _sum(node, ins):
    axes, keep = _axes(node, ins)
    d, shape = ins[0].dtype.numpy, ins[0].shape
    k = len(axes)
    if k < 2 or tuple(axes) != tuple(range(k)) or k == len(shape) or 0 in shape:  # (a whole-array sum is pairwise)
        return lambda x: np.asarray(np.sum(x, axis=axes, keepdims=keep, dtype=d))
    # the leading axes of a C-contiguous array (a bias gradient: [B, T, N] -> [N]) as one axis:
    # NumPy adds the same rows in the same order either way (the same bits), but its
    # multi-axis reduction costs twice the single-axis one ([16,64,64] float32: 45 -> 20 us)
    rows = 1
    for n in shape[:k]:
        rows *= n
    out = (1,) * k + tuple(shape[k:]) if keep else tuple(shape[k:])

    def leading_sum(x):
        if not x.flags.c_contiguous:
            return np.asarray(np.sum(x, axis=axes, keepdims=keep, dtype=d))
        return np.sum(x.reshape(rows, -1), axis=0, dtype=d).reshape(out)

    return leading_sum


kernel("reduce.prod", NUM)(_typed(np.prod))


def _count_and_acc(node, ins):
    """Elements per reduced group, and the accumulation dtype (float16 accumulates in float32)."""
    axes, keep = _axes(node, ins)
    n = 1
    for a in axes:
        n *= ins[0].shape[a]
    d = ins[0].dtype.numpy
    return axes, keep, n, d, (np.dtype(np.float32) if d == np.float16 else d)


@kernel("reduce.mean", FLOAT)
def _mean(node, ins):
    # sum / n rather than np.mean: an empty group gives NaN (0/0) without a Python warning
    axes, keep, n, d, acc = _count_and_acc(node, ins)
    return lambda x: np.asarray(np.sum(x, axis=axes, keepdims=keep, dtype=acc) / n).astype(d, copy=False)


@kernel("reduce.max", NUM)
def _max(node, ins):
    axes, keep = _axes(node, ins)
    return lambda x: np.asarray(np.max(x, axis=axes, keepdims=keep))


@kernel("reduce.min", NUM)
def _min(node, ins):
    axes, keep = _axes(node, ins)
    return lambda x: np.asarray(np.min(x, axis=axes, keepdims=keep))


@kernel("reduce.variance", FLOAT)
def _var(node, ins):
    # two passes in the accumulation dtype; divides by max(n - correction, 0) (0 gives inf/NaN)
    axes, keep, n, d, acc = _count_and_acc(node, ins)
    div = max(n - node.attrs["correction"], 0)

    def variance(x):
        c = x.astype(acc, copy=False) - np.sum(x, axis=axes, keepdims=True, dtype=acc) / n
        return np.asarray(np.sum(c * c, axis=axes, keepdims=keep) / div).astype(d, copy=False)

    return variance


def logsumexp(x, axes, keep):
    m = np.max(x, axis=axes, keepdims=True) if x.size else np.zeros((1,) * x.ndim, x.dtype)
    m = np.where(np.isfinite(m), m, 0).astype(x.dtype, copy=False)  # all -inf rows give -inf, not NaN
    out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return np.asarray(out if keep else np.squeeze(out, axis=axes))


@kernel("reduce.logsumexp", FLOAT)
def _lse(node, ins):
    axes, keep = _axes(node, ins)
    return lambda x: logsumexp(x, axes, keep)


def _arg(fn):
    def factory(node, ins):
        axis = norm_axis(node.attrs["axis"], ins[0].rank)
        keep = node.attrs["keepdims"]
        return lambda x: np.asarray(fn(x, axis=axis, keepdims=keep)).astype(np.int64, copy=False)

    return factory


kernel("reduce.argmax", NUM)(_arg(np.argmax))
kernel("reduce.argmin", NUM)(_arg(np.argmin))
