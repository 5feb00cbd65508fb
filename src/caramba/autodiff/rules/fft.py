"""VJP rules for fft.*: rfft and irfft are linear and each other's transpose up to the
one-sided weights w_k (1 for DC and the even-n Nyquist term, 2 otherwise); see caramba.ops.fft."""

from __future__ import annotations

import numpy as np

from caramba.autodiff.rules import rule
from caramba.ops.fft import weights


def _w(n: int, like, inverse: bool):
    w = weights(n)
    col = (1.0 / w if inverse else w)[:, None] * np.ones((1, 2))
    return like.graph.constant(col.astype(like.dtype.numpy))


@rule("fft.rfft")
def rfft(c, ct):
    n = c.x[0].shape[-1]
    # dx[t] = sum_k ct_re[k] cos - ct_im[k] sin = n * irfft(ct / w)[t]
    return (c.call("fft.irfft", (ct * _w(n, ct, inverse=True),), {"n": n}) * float(n),)


@rule("fft.irfft")
def irfft(c, ct):
    n = c.attrs["n"]
    # dX = rfft(ct) * w / n (the DC and Nyquist imaginary parts come out 0, as they should)
    return (c.call("fft.rfft", (ct,)) * _w(n, ct, inverse=False) * (1.0 / n),)
