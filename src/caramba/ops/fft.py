"""fft.*: the real discrete Fourier transform over the last axis, complex-free.

caramba's IR has no complex dtype (``caramba.ir.dtypes``), so a half spectrum is a real tensor
with a trailing axis of 2 holding (real, imaginary) parts::

    fft.rfft(x [..., n])            -> X [..., n//2 + 1, 2]
        X[..., k, 0] =  sum_t x[t] cos(2 pi k t / n)
        X[..., k, 1] = -sum_t x[t] sin(2 pi k t / n)          (numpy.fft.rfft, norm="backward")
    fft.irfft(X [..., n//2 + 1, 2], n) -> x [..., n]
        x[t] = (1/n) sum_{k=0}^{n//2} w_k (X[k,0] cos(2 pi k t / n) - X[k,1] sin(2 pi k t / n))
        w_0 = 1, w_{n/2} = 1 for even n, w_k = 2 otherwise              (numpy.fft.irfft)

``irfft`` ignores the imaginary parts of the DC term (and of the Nyquist term for even ``n``),
as numpy does; it needs exactly ``n//2 + 1`` frequencies (no implicit cropping or zero padding).
Both are linear, and their VJPs are each other up to the weights ``w_k``:

    rfft:  dx = n * irfft(dX / w)           irfft: dX = rfft(dx) * w / n

(the imaginary cotangent of the DC and Nyquist terms of ``irfft`` is 0: they do not reach the
output). Backends compute these with their own FFT (cpu: ``numpy.fft``, xla: ``jnp.fft``);
``float32`` inputs give ``float32`` outputs. onnx computes them as one MatMul with a precomputed
DFT matrix, for n <= 4096 (``caramba.onnx.export_research``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS
from caramba.ir.types import ValueType
from caramba.ops._define import define, require_dtype


def _rfft(ins: tuple[ValueType, ...], a: Any) -> tuple[ValueType, ...]:
    x = ins[0]
    require_dtype("fft.rfft", x, FLOATS)
    if x.rank < 1 or x.shape[-1] < 1:
        raise GraphError(f"fft.rfft needs [..., n] with n >= 1, got {x}")
    return (ValueType(x.shape[:-1] + (x.shape[-1] // 2 + 1, 2), x.dtype),)


def _irfft(ins: tuple[ValueType, ...], a: Any) -> tuple[ValueType, ...]:
    z = ins[0]
    require_dtype("fft.irfft", z, FLOATS)
    n = a["n"]
    if n < 1:
        raise GraphError(f"fft.irfft needs n >= 1, got {n}")
    if z.rank < 2 or z.shape[-1] != 2 or z.shape[-2] != n // 2 + 1:
        raise GraphError(
            f"fft.irfft needs [..., n//2 + 1, 2] = [..., {n // 2 + 1}, 2] (real, imaginary) for n={n}, got {z}",
            hint="the spectrum of fft.rfft of a length-n signal has n//2 + 1 frequencies",
        )
    return (ValueType(z.shape[:-2] + (n,), z.dtype),)


rfft = define(
    "fft.rfft", _rfft, 1, (),
    doc="real FFT over the last axis: [..., n] -> [..., n//2 + 1, 2] (real, imaginary), numpy.fft.rfft's"
    " values; see caramba.ops.fft.",
)
irfft = define(
    "fft.irfft", _irfft, 1, (Attr("n", "int", doc="length of the real output signal"),),
    doc="inverse real FFT over the last two axes: [..., n//2 + 1, 2] -> [..., n], numpy.fft.irfft's"
    " values; see caramba.ops.fft.",
)


def weights(n: int) -> np.ndarray:
    """float64 ``w_k`` [n//2 + 1]: 1 for the DC (and even-n Nyquist) term, 2 for the others."""
    w = np.full(n // 2 + 1, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return w


def rfft_xp(x: Any, xp: Any = np) -> Any:
    """The op for an array module ``xp`` with an ``fft`` namespace (numpy, jax.numpy)."""
    z = xp.fft.rfft(x, axis=-1)
    return xp.stack([xp.real(z), xp.imag(z)], axis=-1).astype(x.dtype)


def irfft_xp(z: Any, n: int, xp: Any = np) -> Any:
    return xp.fft.irfft(z[..., 0] + 1j * z[..., 1], n=n, axis=-1).astype(z.dtype)


__all__ = ["irfft", "irfft_xp", "rfft", "rfft_xp", "weights"]
