"""vsa.*: circular convolution and correlation as explicit O(d^2) sums (not FFTs), MAP products
and sign-of-sum bundles, numpy.roll-free permutations by index arithmetic, cosine similarity."""

from __future__ import annotations

import numpy as np

from ..harness import F32, F64, FLOATS, I64, Case, Expect, arg, bad, row, tol, values


def _conv(a, b, model="hrr", unbind=False):
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    if model == "map":
        return a * b
    d = a.shape[-1]
    out = np.zeros(a.shape)
    scale = np.zeros(a.shape)
    for i in range(d):
        for j in range(d):
            other = b[..., (i + j) % d] if unbind else b[..., (i - j) % d]
            out[..., i] += a[..., j] * other
            scale[..., i] += np.abs(a[..., j] * other)
    return Expect(out, scale)


def _bundle(x, model="hrr", axis=-2):
    s = np.sum(np.asarray(x, np.float64), axis=axis)
    return np.sign(s) if model == "map" else Expect(s, np.sum(np.abs(x), axis=axis))


def _shift(x, shift=1, sign=1):
    d = x.shape[-1]
    idx = [(i - sign * shift) % d for i in range(d)]
    return np.asarray(x)[..., idx]


def _sim(a, b):
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    out = np.zeros(a.shape[:-1])
    for idx in np.ndindex(out.shape):
        x, y = a[idx], b[idx]
        den = np.sqrt(float(np.dot(x, x)) * float(np.dot(y, y)))
        out[idx] = float(np.dot(x, y)) / den if den > 0 else 0.0
    return Expect(out, 4.0)


BIPOLAR = values  # alias for readability below


def _pm(rng, d, shape):
    return rng.choice([-1.0, 1.0], size=shape).astype(d.numpy)


TOL = tol(4, 8)
BIND_SHAPES = (((1,), (1,)), ((7,), (7,)), ((3, 16), (16,)), ((2, 1, 8), (3, 8)), ((4, 1024), (4, 1024)))
ROWS = [
    row(
        "vsa.bind",
        FLOATS,
        [Case(f"{m}{'-unbind' if u else ''}-{'x'.join(map(str, sa))}_{'x'.join(map(str, sb))}",
              (arg(sa), arg(sb)), {"model": m, "unbind": u}, _conv, TOL)
         for m in ("hrr", "map") for u in (False, True) for sa, sb in BIND_SHAPES],
        [bad("one dimension d on the last axis", ((3, 8), F64), ((7,), F64)),
         bad("needs inputs of one dtype", ((8,), F64), ((8,), F32)),
         bad("does not accept input of dtype int64", ((8,), I64), ((8,), I64))],
    ),
    row(
        "vsa.bundle",
        FLOATS,
        [Case("hrr-5x64", (arg((5, 64)),), {}, _bundle, TOL),
         Case("hrr-axis0-3x2x8", (arg((3, 2, 8)),), {"axis": 0}, _bundle, TOL),
         Case("map-7x100", (arg((7, 100), _pm),), {"model": "map"}, _bundle, TOL),
         Case("map-ties-2x4", (arg((2, 4), values([1, 1, -1, -1, 1, -1, 1, -1])),), {"model": "map"}, _bundle, TOL)],
        [bad("hypervector axis", ((3, 8), F64), axis=-1), bad("item axis", ((8,), F64))],
    ),
    row(
        "vsa.permute",
        FLOATS,
        [Case(f"{s}-{'x'.join(map(str, sh))}", (arg(sh),), {"shift": s}, lambda x, shift: _shift(x, shift), tol(0, 0)) for s in (1, -3, 17) for sh in ((1,), (7,), (2, 64))],
        [bad("hypervectors", ((), F64))],
    ),
    row(
        "vsa.inverse_permute",
        FLOATS,
        [Case(f"{s}-{'x'.join(map(str, sh))}", (arg(sh),), {"shift": s}, lambda x, shift: _shift(x, shift, -1),
              tol(0, 0)) for s in (1, -3, 17) for sh in ((1,), (7,), (2, 64))],
        [bad("hypervectors", ((), F64))],
    ),
    row(
        "vsa.similarity",
        FLOATS,
        [Case(f"{'x'.join(map(str, sa))}_{'x'.join(map(str, sb))}", (arg(sa), arg(sb)), {}, _sim, TOL)
         for sa, sb in BIND_SHAPES]
        + [Case("zero", (arg((2, 3), values([0] * 6)), arg((3,))), {}, _sim, TOL)],
        [bad("one dimension d on the last axis", ((3, 8), F64), ((7,), F64))],
    ),
]
