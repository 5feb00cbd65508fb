"""cpu kernels for the research families fft.*, vsa.* and hawkes.*: the float64 NumPy
definitions written once in ``caramba.ops.{fft, vsa, hawkes}``, run with ``xp = numpy``."""

from __future__ import annotations

import math

import numpy as np

from caramba.backends.cpu.kernels import kernel
from caramba.backends.cpu.kernels.shape import IndexOutOfRange
from caramba.ir.dtypes import DType
from caramba.ops import fft, hawkes, vsa

# float16 is not claimed: pocketfft and the event recursions have no half-precision path worth the name
FLOAT = frozenset({DType.float64, DType.float32})
EVENTS = FLOAT | {DType.int64}  # int64: marks (and the simulation key)


# ---- fft ----------------------------------------------------------------------------------
@kernel("fft.rfft", FLOAT)
def _rfft(node, ins):
    return lambda x: fft.rfft_xp(x, np)


@kernel("fft.irfft", FLOAT)
def _irfft(node, ins):
    n = node.attrs["n"]
    return lambda z: fft.irfft_xp(z, n, np)


# ---- vsa ----------------------------------------------------------------------------------
@kernel("vsa.bind", FLOAT)
def _bind(node, ins):
    model, unbind = node.attrs["model"], node.attrs["unbind"]
    shape = np.broadcast_shapes(ins[0].shape, ins[1].shape)

    def bind(a, b):
        if model == "hrr":  # the FFTs need both operands at the output's shape
            a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
        return vsa.bind_xp(a, b, model, unbind, np)

    return bind


@kernel("vsa.bundle", FLOAT)
def _bundle(node, ins):
    model, axis = node.attrs["model"], node.attrs["axis"]
    return lambda x: vsa.bundle_xp(x, model, axis, np)


@kernel("vsa.permute", FLOAT)
def _permute(node, ins):
    shift = node.attrs["shift"]
    return lambda x: vsa.permute_xp(x, shift, np)


@kernel("vsa.inverse_permute", FLOAT)
def _inverse_permute(node, ins):
    shift = node.attrs["shift"]
    return lambda x: vsa.permute_xp(x, -shift, np)


@kernel("vsa.similarity", FLOAT)
def _similarity(node, ins):
    """``vsa.similarity_xp``, except that where the operands broadcast against each other (an
    estimate [B, R, 1, D] against a codebook [S, D]: the resonator's cleanup), the dot products
    are one ``einsum`` whose operands keep only their own axes, a [B·R, D] x [D, S] product on
    BLAS, instead of a [B, R, S, D] temporary (the resonator example: 256 MB and 0.1 s a call,
    94 calls). The norms are the definition's, only the order of the dot's sums differs."""
    a_t, b_t = ins
    plan = _dot_plan(a_t.shape, b_t.shape)
    if plan is None:
        return lambda a, b: np.asarray(vsa.similarity_xp(a, b, np))
    subscripts, a_shape, b_shape, lead = plan

    def similarity(a, b):
        dot = np.einsum(subscripts, a.reshape(a_shape), b.reshape(b_shape), optimize=True).reshape(lead)
        return np.asarray(vsa.similarity_xp(a, b, np, dot))

    return similarity


_LABELS = "abcdefghijklmnopqrstuvwxy"  # z: the contracted axis
BROADCAST_DOT_MIN = 1 << 16  # multiply-adds below which the broadcast product of the definition is as fast


def _dot_plan(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """(einsum subscripts, a's and b's shapes without their size-1 leading axes, the output's
    shape) for the last-axis dot products of ``a`` and ``b`` broadcast together; None where
    nothing is broadcast (each operand already has the output's leading shape) or the work is small."""
    lead = np.broadcast_shapes(a[:-1], b[:-1])
    n = len(lead)
    if n > len(_LABELS) or a[:-1] == b[:-1] or math.prod(lead) * a[-1] < BROADCAST_DOT_MIN:
        return None
    a_full, b_full = (1,) * (n - len(a) + 1) + a[:-1], (1,) * (n - len(b) + 1) + b[:-1]
    keep_a = [i for i in range(n) if a_full[i] != 1]
    keep_b = [i for i in range(n) if b_full[i] != 1]
    out = [i for i in range(n) if lead[i] != 1]
    subs = "".join(_LABELS[i] for i in keep_a) + "z," + "".join(_LABELS[i] for i in keep_b) + "z->" + "".join(_LABELS[i] for i in out)
    return (subs, tuple(a_full[i] for i in keep_a) + (a[-1],), tuple(b_full[i] for i in keep_b) + (b[-1],), lead)


# ---- hawkes -------------------------------------------------------------------------------
def check_marks(node, marks: np.ndarray, m: int) -> None:
    bad = (marks < 0) | (marks >= m)
    if np.any(bad):
        raise IndexOutOfRange(f"{node.op} (node {node.id}): marks {np.unique(marks[bad])[:5].tolist()} are outside "
                              f"[0, {m}) for a process of {m} dimensions")


def _check(node, times, marks, m):
    check_marks(node, marks, m)
    if times.shape[-1] > 1 and np.any(np.diff(times, axis=-1) < 0):
        raise IndexOutOfRange(f"{node.op} (node {node.id}): event times must be sorted ascending in each sequence")


@kernel("hawkes.intensity", EVENTS)
def _intensity(node, ins):
    def intensity(mu, alpha, beta, times, marks, t):
        check_marks(node, marks, mu.shape[0])
        return hawkes.intensity_xp(mu, alpha, beta, times, marks, t, np)

    return intensity


@kernel("hawkes.kernel_matrix", EVENTS)
def _kernel_matrix(node, ins):
    def kernel_matrix(alpha, beta, times, marks):
        check_marks(node, marks, alpha.shape[0])
        return hawkes.kernel_matrix_xp(alpha, beta, times, marks, np)

    return kernel_matrix


@kernel("hawkes.log_likelihood", EVENTS)
def _log_likelihood(node, ins):
    def log_likelihood(mu, alpha, beta, times, marks, end):
        _check(node, times, marks, mu.shape[0])
        return np.asarray(hawkes.log_likelihood_xp(mu, alpha, beta, times, marks, end, np))

    return log_likelihood


@kernel("hawkes.vjp", EVENTS)
def _vjp(node, ins):
    of = node.attrs["of"]

    def vjp(ct, *xs):
        if of == "kernel_matrix":
            check_marks(node, xs[3], xs[0].shape[0])
            return hawkes.kernel_matrix_xp(*xs, np, ct=ct)
        if of == "intensity":
            check_marks(node, xs[4], xs[0].shape[0])
            return hawkes.intensity_xp(*xs, np, ct=ct)
        _check(node, xs[3], xs[4], xs[0].shape[0])
        return hawkes.log_likelihood_xp(*xs, np, ct=ct)

    return vjp


@kernel("hawkes.simulate", EVENTS)
def _simulate(node, ins):
    n, seed = node.attrs["events"], node.attrs["seed"]
    return lambda mu, alpha, beta, key=None: hawkes.simulate_numpy(mu, alpha, beta, n, seed, key)
