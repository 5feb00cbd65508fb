"""attention.*: scaled dot-product attention and rotary embedding, references in mpmath."""

from __future__ import annotations

from ..harness import BOOL, F32, F64, FLOATS, I64, Case, arg, bad, row, tol, uniform
from ..reference import rope_loop, sdpa_loop
from ._helpers import label

ATT = tol(4, 4, float16=(4, 8))


def _keep_mask(rng, d, shape):
    """Random keep-mask whose first key column is always kept (no fully masked row)."""
    m = rng.random(shape) < 0.6
    m[..., 0] = True
    return m


def _sdpa_ref(q, k, v, *mask, scale, causal):
    return sdpa_loop(q, k, v, mask[0] if mask else None, scale, causal)


def _sdpa_cases():
    cases = []
    for lab, q, k, v, attrs, mask in (
        ("basic", (2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 8), {}, None),
        ("rank2", (5, 4), (7, 4), (7, 3), {}, None),
        ("one", (1, 1), (1, 1), (1, 1), {}, None),
        ("scale", (2, 5, 4), (2, 5, 4), (2, 5, 4), {"scale": 0.3}, None),
        ("causal-square", (2, 2, 6, 4), (2, 2, 6, 4), (2, 2, 6, 4), {"causal": True}, None),
        ("causal-prefix", (1, 3, 4), (1, 7, 4), (1, 7, 5), {"causal": True}, None),
        ("bool-mask", (2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 4), {}, ((5, 6), BOOL)),
        ("bool-mask-bcast", (2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 4), {}, ((2, 1, 5, 6), BOOL)),
        ("float-mask", (2, 5, 4), (2, 6, 4), (2, 6, 3), {}, ((2, 5, 6), None)),
        ("mask-causal", (2, 6, 4), (2, 6, 4), (2, 6, 4), {"causal": True}, ((6, 6), BOOL)),
        ("batch-bcast", (2, 3, 5, 4), (1, 3, 6, 4), (2, 1, 6, 4), {}, None),
        ("long", (1, 32, 8), (1, 32, 8), (1, 32, 8), {"causal": True}, None),
    ):
        args = [arg(q, uniform(-2, 2)), arg(k, uniform(-2, 2)), arg(v, uniform(-2, 2))]
        if mask is not None:
            shape, dt = mask
            args.append(arg(shape, _keep_mask, dt) if dt is BOOL else arg(shape, uniform(-3, 0)))
        cases.append(Case(lab, tuple(args), attrs, _sdpa_ref, ATT))
    return cases


def _rope_ref(x, base, offset, inv_freq, scale):
    return rope_loop(x, base, offset, inv_freq, scale)


# Explicit frequencies, written out so the reference shares nothing with caramba's rope_tables:
# Llama 3.1's scaling (factor 8, low 1, high 4, original 8192, theta 500000) at head_dim 16 keeps
# the four fastest (wavelength < 2048), smooths the fifth and divides the last three by 8.
LLAMA3_16 = (1.0, 0.19392274474868576, 0.03760603093086393, 0.007292664737217109,
             0.0005248461609929547, 3.428102195952591e-05, 6.647869871181235e-06, 1.2891731721515574e-06)
ROPE_SCALED = (
    ("inv-freq", (3, 5, 8), {"inv_freq": (1.0, 0.25, 0.03, 0.002)}),
    ("scale", (2, 6, 4), {"scale": 1.1386, "offset": 4}),
    ("inv-freq-scale-offset", (2, 3, 7, 6), {"inv_freq": (0.9, 0.21, 0.013), "scale": 0.75, "offset": 1000}),
    ("llama3-16", (2, 12, 16), {"inv_freq": LLAMA3_16, "offset": 8000}),
)


ROWS = [
    row(
        "attention.sdpa",
        FLOATS,
        _sdpa_cases(),
        [
            bad("needs q, k, v of one rank >= 2", ((5, 4), F64), ((1, 5, 4), F64), ((1, 5, 4), F64)),
            bad("disagree", ((5, 4), F64), ((6, 3), F64), ((6, 4), F64)),
            bad("disagree", ((5, 4), F64), ((6, 4), F64), ((7, 4), F64)),
            bad("causal needs Tq <= Tk, got 6 > 5", ((6, 4), F64), ((5, 4), F64), ((5, 4), F64), causal=True),
            bad("mask must be bool \\(True keeps\\) or float64 \\(added\\), got int64", ((5, 4), F64), ((6, 4), F64), ((6, 4), F64), ((5, 6), I64)),
            bad("do not broadcast", ((5, 4), F64), ((6, 4), F64), ((6, 4), F64), ((4, 6), BOOL)),
            bad("needs inputs of one dtype", ((5, 4), F64), ((6, 4), F32), ((6, 4), F64)),
        ],
    ),
    row(
        "attention.rope",
        FLOATS,
        [
            Case(f"{label(s)}-{'-'.join(f'{k}={v}' for k, v in a.items()) or 'default'}", (arg(s, uniform(-2, 2)),), a, _rope_ref, ATT)
            for s, a in (((5, 8), {}), ((2, 3, 7, 4), {"offset": 10}), ((1, 2), {}), ((3, 64, 16), {"base": 100.0}), ((2, 0, 4), {}))
        ]
        + [Case(f"{label(s)}-{lab}", (arg(s, uniform(-2, 2)),), a, _rope_ref, ATT) for lab, s, a in ROPE_SCALED],
        [
            bad("with even dim, got \\[5, 7\\]", ((5, 7), F64)),
            bad("needs \\[..., seq, dim\\]", ((8,), F64)),
            bad("inv_freq needs dim/2 = 4 frequencies, got 3", ((5, 8), F64), inv_freq=(1.0, 0.5, 0.25)),
            bad("inv_freq must be finite", ((5, 4), F64), inv_freq=(1.0, float("nan"))),
            bad("scale must be finite and > 0, got 0.0", ((5, 4), F64), scale=0.0),
            bad("scale must be finite and > 0, got inf", ((5, 4), F64), scale=float("inf")),
        ],
    ),
]
