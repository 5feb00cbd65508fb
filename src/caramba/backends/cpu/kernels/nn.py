"""cpu kernels for nn.*: softmax, norms, embedding, convolution (im2col + BLAS), pooling, dropout."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from caramba.backends.cpu.kernels import ANY, FLOAT, kernel
from caramba.backends.cpu.kernels.random import generator
from caramba.backends.cpu.kernels.shape import _check_indices
from caramba.ir.dtypes import DType
from caramba.ops._define import norm_axis


def softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis):
    s = x - np.max(x, axis=axis, keepdims=True)
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


@kernel("nn.softmax", FLOAT, out=True)
def _softmax(node, ins):
    """The generated ``fused.softmax`` kernel with no prologue where Numba is installed (one
    pass per row, split over the workers when large: ~20x fewer µs than NumPy's five calls on
    a [128,10] batch of logits), else NumPy into the output."""
    from caramba.backends.cpu import fused

    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    shape, dtype = node.types[0].shape, node.types[0].dtype.numpy
    if _rows_ok(ins[0]) and axis == ins[0].rank - 1:
        return fused_rows().softmax_rows(ins[0], log=False)  # makes its output when given none
    if fused.available() and ins[0].size and ins[0].dtype in (DType.float64, DType.float32):
        kern = fused.softmax_kernel(ins[0], node.types[0], axis)

        def softmax_rows(x, out=None):
            if out is None:
                out = np.empty(shape, dtype)
            kern(x, out)
            return out

        return softmax_rows

    def softmax_numpy(x, out=None):
        if out is None:
            return softmax(x, axis)
        np.subtract(x, np.max(x, axis=axis, keepdims=True), out=out)
        np.exp(out, out=out)
        out /= np.sum(out, axis=axis, keepdims=True)
        return out

    return softmax_numpy


@kernel("nn.log_softmax", FLOAT, out=True)
def _log_softmax(node, ins):
    """One generated row kernel over the last axis where Numba is installed (``fused/rows.py``),
    else NumPy."""
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    if _rows_ok(ins[0]) and axis == ins[0].rank - 1:
        return fused_rows().softmax_rows(ins[0], log=True)

    def log_softmax_numpy(x, out=None):
        y = log_softmax(x, axis)
        if out is None:
            return y
        out[...] = y
        return out

    return log_softmax_numpy


def fused_rows():
    """``backends/cpu/fused/rows.py`` (imports Numba: call only where ``_rows_ok``)."""
    from caramba.backends.cpu.fused import rows

    return rows


def _rows_ok(x) -> bool:
    """Does a generated row kernel (``fused/rows.py``) take this input?"""
    from caramba.backends.cpu import fused

    return fused.available() and x.dtype in (DType.float64, DType.float32) and x.rank >= 1


def _affine(y, rest):
    if len(rest) >= 1:
        y = y * rest[0]
    if len(rest) >= 2:
        y = y + rest[1]
    return y


def _norm_kernel(centered: bool):
    """One generated row kernel (``fused/rows.py``: the NumPy arithmetic below, in one pass
    structure per row, split over the workers when large) where Numba is installed, else NumPy."""

    def factory(node, ins):
        axis = norm_axis(node.attrs["axis"], ins[0].rank)
        axes = tuple(range(axis, ins[0].rank))
        eps = node.attrs["eps"]
        shape, dtype = node.types[0].shape, node.types[0].dtype.numpy
        if _rows_ok(ins[0]):
            kern = fused_rows().norm_rows(ins[0], len(ins) - 1, eps, axis, centered)

            def norm_rows(x, *rest):
                if len(rest) == len(ins):  # the output buffer came last
                    kern(x, *rest)
                    return rest[-1]
                out = np.empty(shape, dtype)
                kern(x, *rest, out)
                return out

            return norm_rows

        def norm(x, *rest):
            if len(rest) == len(ins):
                *rest, out = rest
            else:
                out = None
            if centered:
                c = x - np.mean(x, axis=axes, keepdims=True)
                y = _affine(c / np.sqrt(np.mean(c * c, axis=axes, keepdims=True) + eps), rest)
            else:
                y = _affine(x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + eps), rest)
            if out is None:
                return y
            out[...] = y
            return out

        return norm

    return factory


kernel("nn.layer_norm", FLOAT, out=True)(_norm_kernel(centered=True))
kernel("nn.rms_norm", FLOAT, out=True)(_norm_kernel(centered=False))


@kernel("nn.group_norm", FLOAT)
def _group_norm(node, ins):
    shape = ins[0].shape
    n, c = shape[:2]
    g = node.attrs["num_groups"]
    eps = node.attrs["eps"]
    grouped = (n, g, -1)
    bshape = (1, c) + (1,) * (len(shape) - 2)

    def group_norm(x, *rest):
        y = x.reshape(grouped)
        mu = np.mean(y, axis=2, keepdims=True)
        cen = y - mu
        var = np.mean(cen * cen, axis=2, keepdims=True)
        out = (cen / np.sqrt(var + eps)).reshape(shape)
        return _affine(out, [r.reshape(bshape) for r in rest])

    return group_norm


@kernel("nn.embedding", ANY)  # any table dtype; int32/int64 ids
def _embedding(node, ins):
    vocab = ins[1].shape[0]

    def embedding(ids, table):
        _check_indices(ids, vocab, f"nn.embedding node '{node.id}'")
        return np.take(table, ids, axis=0)

    return embedding


def _conv_params(node, nd):
    def per(key):
        v = node.attrs[key]
        return tuple(v) * nd if len(v) == 1 else tuple(v)

    return per("stride"), per("padding"), per("dilation"), node.attrs["groups"]


def conv_nd(x, w, b, stride, padding, dilation, groups):
    """Cross-correlation over the trailing nd axes of x [N, C, *S] with w [O, C/g, *K]."""
    nd = x.ndim - 2
    if any(padding):
        x = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    ks = w.shape[2:]
    span = tuple(d * (k - 1) + 1 for d, k in zip(dilation, ks, strict=True))
    win = sliding_window_view(x, span, axis=tuple(range(2, 2 + nd)))  # [N, C, *out_full, *span]
    idx = tuple(slice(None, None, s) for s in stride)
    dil = tuple(slice(None, None, d) for d in dilation)
    win = win[(slice(None), slice(None)) + idx + dil]  # [N, C, *out, *K]
    c = x.shape[1]
    o = w.shape[0]
    cg, og = c // groups, o // groups
    out_sp = win.shape[2 : 2 + nd]
    outs = []
    letters = "hwd"[:nd]
    kl = "klm"[:nd]
    spec = f"nc{letters}{kl},oc{kl}->no{letters}"
    for gi in range(groups):
        wi = win[:, gi * cg : (gi + 1) * cg]
        outs.append(np.einsum(spec, wi, w[gi * og : (gi + 1) * og], optimize=True))
    out = outs[0] if groups == 1 else np.concatenate(outs, axis=1)
    if b is not None:
        out = out + b.reshape((1, o) + (1,) * nd)
    assert out.shape[2:] == out_sp
    return np.ascontiguousarray(out)


def _conv(nd):
    def factory(node, ins):
        """im2col + BLAS GEMM where Numba is installed (``backends/cpu/conv.py``), else ``conv_nd``."""
        from caramba.backends.cpu.conv import conv_kernel

        stride, padding, dilation, groups = _conv_params(node, nd)
        return conv_kernel(ins[0].shape, ins[1].shape, stride, padding, dilation, groups, node.types[0].dtype.numpy)

    return factory


kernel("nn.conv1d", FLOAT)(_conv(1))
kernel("nn.conv2d", FLOAT)(_conv(2))


def _pool_params(node):
    k = node.attrs["kernel"]
    k = tuple(k) * 2 if len(k) == 1 else tuple(k)
    s = node.attrs["stride"]
    s = k if s is None else (tuple(s) * 2 if len(s) == 1 else tuple(s))
    p = node.attrs["padding"]
    p = tuple(p) * 2 if len(p) == 1 else tuple(p)
    return k, s, p


def _pool(reduce_fn, pad_value):
    def factory(node, ins):
        k, s, p = _pool_params(node)
        from caramba.backends.cpu.pool import pool_kernel

        fast = pool_kernel(reduce_fn is np.max, ins[0].shape, k, s, p, node.types[0].shape, node.types[0].dtype.numpy)
        if fast is not None:  # a Numba loop (``backends/cpu/pool.py``)
            return fast

        def pool(x):
            if any(p):
                x = np.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])], constant_values=pad_value)
            win = sliding_window_view(x, k, axis=(2, 3))[:, :, :: s[0], :: s[1]]
            return np.ascontiguousarray(reduce_fn(win, axis=(-2, -1)))

        return pool

    return factory


kernel("nn.max_pool2d", FLOAT)(_pool(np.max, -np.inf))
kernel("nn.avg_pool2d", FLOAT)(_pool(np.mean, 0.0))


@kernel("nn.dropout", FLOAT | {DType.int64})  # int64: the optional key input
def _dropout(node, ins):
    rate, seed = node.attrs["rate"], node.attrs["seed"]
    shape = ins[0].shape
    scale = 1.0 / (1.0 - rate)

    def dropout(x, key=None):
        if rate == 0.0:
            return x
        keep = generator(seed, key).random(shape) >= rate
        return np.where(keep, x * scale, 0).astype(x.dtype, copy=False)

    return dropout
