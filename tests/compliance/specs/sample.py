"""sample.token: the exact tokens of the definition (``caramba.ops.sample``'s docstring), from an
independent per-row reference: the SplitMix64 stream in Python ints, the processors written out
like transformers' (a sort per row for top-p, positions removed as torch does)."""

from __future__ import annotations

import numpy as np

from ..harness import BOOL, F64, FLOATS, I32, I64, Case, arg, bad, ints, row, uniform

GOLDEN, MIX1, MIX2, U64 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, (1 << 64) - 1


def _mix(z: int) -> int:
    z &= U64
    z = ((z ^ (z >> 30)) * MIX1) & U64
    z = ((z ^ (z >> 27)) * MIX2) & U64
    return z ^ (z >> 31)


def stream(seed: int, key: int | None, row: int) -> float:
    s = _mix(seed) if key is None else _mix((seed & U64) ^ _mix((key & U64) + GOLDEN))
    return (_mix(s + (row + 1) * GOLDEN) >> 11) * 2.0**-53


def processed(x, seen, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0):
    """One row's float64 logits after the processors (-inf where filtered); None for greedy."""
    x = np.array(x, dtype=np.float64)
    if seen is not None and repetition_penalty != 1.0:
        x[seen] = np.where(x[seen] < 0, x[seen] * repetition_penalty, x[seen] / repetition_penalty)
    if temperature == 0.0:
        return x
    x = x / temperature
    if 0 < top_k < x.size:
        x[x < np.sort(x)[-top_k]] = -np.inf
    if top_p < 1.0:
        order = np.argsort(x, kind="stable")
        e = np.exp(x[order] - x[order][-1])
        remove = np.cumsum(e / e.sum()) <= 1.0 - top_p
        remove[-1] = False
        x[order[remove]] = -np.inf
    if min_p > 0.0:
        e = np.exp(x - x.max())
        pr = e / e.sum()
        x[pr < min_p * pr.max()] = -np.inf
    return x


def reference(logits, *rest, seed=0, **attrs):
    key = next((int(v) for v in rest if v.dtype == np.int64), None)
    seen = next((v for v in rest if v.dtype == np.bool_), None)
    out = []
    for r in range(logits.shape[0]):
        x = processed(logits[r], None if seen is None else seen[r], **attrs)
        if attrs.get("temperature", 1.0) == 0.0:
            out.append(int(np.argmax(x)))
            continue
        w = np.exp(x - x.max())
        c = np.cumsum(w)
        i = int(np.searchsorted(c, stream(seed, key, r) * c[-1], side="right"))
        out.append(min(i, int(np.flatnonzero(w > 0)[-1])))
    return np.array(out, dtype=np.int64)


KEY = arg((), ints(-(2**40), 2**40), I64)
SETTINGS = (
    ("greedy", {"temperature": 0.0}),
    ("t0.7", {"temperature": 0.7}),
    ("k5", {"top_k": 5}),
    ("p0.9", {"top_p": 0.9}),
    ("minp0.1", {"min_p": 0.1}),
    ("all", {"temperature": 0.8, "top_k": 20, "top_p": 0.8, "min_p": 0.05, "repetition_penalty": 1.3}),
)


def _cases():
    out = []
    for shape in ((3, 7), (16, 64), (2, 1000), (1, 1), (0, 5)):
        for tag, attrs in SETTINGS:
            lab = f"{shape[0]}x{shape[1]}-{tag}"
            logits = arg(shape, uniform(-4.0, 4.0))
            out.append(Case(lab, (logits,), {"seed": 5, **attrs}, reference))
            out.append(Case(lab + "-key", (logits, KEY), {"seed": 5, **attrs}, reference))
            out.append(Case(lab + "-key-seen", (logits, KEY, arg(shape, uniform(), BOOL)),
                            {"seed": -3, "repetition_penalty": 1.5, **attrs}, reference))
    # without a key, seen is the second input (told apart by its dtype)
    out.append(Case("4x9-seen", (arg((4, 9), uniform(-4.0, 4.0)), arg((4, 9), uniform(), BOOL)),
                    {"repetition_penalty": 2.0, "temperature": 0.5}, reference))
    return out


ROWS = [
    row(
        "sample.token",
        FLOATS,
        _cases(),
        [
            bad("temperature must be a finite number >= 0", ((2, 5), F64), temperature=-0.5),
            bad("top_k must be >= 0", ((2, 5), F64), top_k=-1),
            bad("top_p must be in \\(0, 1\\]", ((2, 5), F64), top_p=0.0, label="top_p=0"),
            bad("top_p must be in \\(0, 1\\] \\(1 = off\\), got 1.5", ((2, 5), F64), top_p=1.5),
            bad("min_p must be in \\[0, 1\\)", ((2, 5), F64), min_p=1.0),
            bad("repetition_penalty must be a finite number > 0", ((2, 5), F64), repetition_penalty=0.0),
            bad("logits must be \\[batch, vocab\\], got f64\\[10\\]", ((10,), F64)),
            bad("key must be an int64 scalar, got i32\\[\\]", ((2, 5), F64), ((), I32)),
            bad("key must be an int64 scalar, got i64\\[1\\]", ((2, 5), F64), ((1,), I64)),
            bad("seen must be bool\\[2,5\\] like the logits, got bool\\[2,4\\]", ((2, 5), F64), ((), I64), ((2, 4), BOOL)),
            bad("seen must be bool\\[2,5\\] like the logits, got i64\\[2,5\\]", ((2, 5), F64), ((), I64), ((2, 5), I64)),
            bad("takes 1..3 inputs, got 4", ((2, 5), F64), ((), I64), ((2, 5), BOOL), ((), I64)),
        ],
        probe=Case("probe", (arg((2, 5)),), {}),
    ),
]
