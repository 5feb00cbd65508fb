"""fft.*: numpy.fft's values (pocketfft, an independent implementation) for odd, even and edge
lengths, float64 and float32 (the dtypes cpu and xla claim; float16/bfloat16 are refused)."""

from __future__ import annotations

import numpy as np

from ..harness import F64, FLOATS, I64, Case, Expect, arg, bad, row, tol

SIZES = (1, 2, 7, 64, 1024)


def _rfft_ref(x):
    z = np.fft.rfft(np.asarray(x, dtype=np.float64), axis=-1)
    return Expect(np.stack([z.real, z.imag], axis=-1), np.sum(np.abs(x), axis=-1)[..., None, None])


def _irfft_ref(z, n):
    z = np.asarray(z, dtype=np.float64)
    return Expect(np.fft.irfft(z[..., 0] + 1j * z[..., 1], n=n, axis=-1), np.sum(np.abs(z), axis=(-2, -1))[..., None])


TOL = tol(4, 8)

ROWS = [
    row(
        "fft.rfft",
        FLOATS,
        [Case(f"3x{n}", (arg((3, n)),), {}, _rfft_ref, TOL) for n in SIZES]
        + [Case("2x3x5", (arg((2, 3, 5)),), {}, _rfft_ref, TOL)],
        [bad("does not accept input of dtype int64", ((4,), I64)), bad("n >= 1", ((3, 0), F64))],
    ),
    row(
        "fft.irfft",
        FLOATS,
        [Case(f"3x{n}", (arg((3, n // 2 + 1, 2)),), {"n": n}, _irfft_ref, TOL) for n in SIZES]
        + [Case("odd-9", (arg((5, 2)),), {"n": 9}, _irfft_ref, TOL)],
        [bad(r"needs \[\.\.\., n//2 \+ 1, 2\]", ((4, 2), F64), n=4), bad("n >= 1", ((1, 2), F64), n=0)],
        probe=Case("probe", (arg((3, 2)),), {"n": 4}),
    ),
]
