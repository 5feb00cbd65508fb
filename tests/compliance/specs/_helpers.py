"""Case constructors shared by the family tables (sizes, broadcasting, IEEE special values)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..harness import DEFAULT, FLOATS, Case, Gen, Tol, arg, values

# Elementwise ops run on every edge size plus odd and empty shapes.
SHAPES: tuple[tuple[int, ...], ...] = ((), (1,), (7,), (64,), (1024,), (3, 5, 7), (0,), (2, 0, 3))

# Binary elementwise: equal shapes, then NumPy broadcasting of every kind.
BIN_SHAPES: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((), ()),
    ((1,), (1,)),
    ((7,), (7,)),
    ((64,), (64,)),
    ((1024,), (1024,)),
    ((3, 5, 7), (3, 5, 7)),
    ((3, 1), (1, 4)),
    ((2, 3, 4), (4,)),
    ((), (5,)),
    ((5, 1, 3), (4, 1)),
    ((2, 1, 7), (3, 7)),
    ((0, 3), (1, 3)),
)

NAN, INF = math.nan, math.inf


def label(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


def sized(
    ref: Callable[..., Any],
    gen: Gen = DEFAULT,
    tol: Tol = Tol(),
    attrs: Any = None,
    shapes: Iterable[tuple[int, ...]] = SHAPES,
    dtypes: Iterable[Any] | None = None,
    prefix: str = "",
) -> list[Case]:
    """One unary case per shape."""
    ds = None if dtypes is None else frozenset(dtypes)
    return [Case(prefix + label(s), (arg(s, gen),), attrs or {}, ref, tol, ds) for s in shapes]


def pairs(
    ref: Callable[..., Any],
    gen: Gen | tuple[Gen, Gen] = DEFAULT,
    tol: Tol = Tol(),
    attrs: Any = None,
    shapes: Iterable[tuple[tuple[int, ...], tuple[int, ...]]] = BIN_SHAPES,
    dtypes: Iterable[Any] | None = None,
    prefix: str = "",
) -> list[Case]:
    """One binary case per shape pair (equal shapes and broadcasting)."""
    g0, g1 = gen if isinstance(gen, tuple) else (gen, gen)
    ds = None if dtypes is None else frozenset(dtypes)
    return [
        Case(f"{prefix}{label(a)}_{label(b)}", (arg(a, g0), arg(b, g1)), attrs or {}, ref, tol, ds)
        for a, b in shapes
    ]


def specials(inputs: Sequence[float], expected: Sequence[float], attrs: Any = None, label_: str = "ieee", tol: Tol = Tol()) -> Case:
    """IEEE special values (NaN, +-inf, zeros, overflow) with their required results (floats only)."""
    assert len(inputs) == len(expected)
    want = np.array(expected, dtype=np.float64)
    return Case(label_, (arg(len(inputs), values(inputs)),), attrs or {}, lambda *xs, **a: want, tol, FLOATS)


def specials2(pairs_: Sequence[tuple[float, float, float]], label_: str = "ieee", tol: Tol = Tol()) -> Case:
    """Binary IEEE specials: (x, y, expected) triples (floats only)."""
    xs, ys, zs = zip(*pairs_)
    want = np.array(zs, dtype=np.float64)
    n = len(xs)
    return Case(label_, (arg(n, values(xs)), arg(n, values(ys))), {}, lambda *a, **k: want, tol, FLOATS)
