"""cpu kernels for the research families fft.*, vsa.* and hawkes.*: the float64 NumPy
definitions written once in ``caramba.ops.{fft, vsa, hawkes}``, run with ``xp = numpy``."""

from __future__ import annotations

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
    return lambda a, b: np.asarray(vsa.similarity_xp(a, b, np))


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
