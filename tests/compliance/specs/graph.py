"""graph.*: values entering a graph (inputs fed at run time, embedded constants), every dtype."""

from __future__ import annotations

import numpy as np

from ..harness import ALL, F64, SUBJECT, Case, arg, bad, row, tol, uniform
from ._helpers import SHAPES, label

EXACT = tol(0, 0)


def _identity(x):
    return x


def _input_case(shape) -> Case:
    # The node under test is the input x0 itself, returned as the output.
    return Case(label(shape), (arg(shape, uniform(-3, 3, -100, 100)),), {}, _identity, EXACT, build=lambda g, ins, d, p: ins[0])


def _constant_value(shape, d) -> np.ndarray:
    n = int(np.prod(shape))
    if d.is_bool:
        return (np.arange(n) % 3 == 0).reshape(shape)
    vals = (np.arange(n) % 101 - 50) if d.value != "uint8" else np.arange(n) % 251
    if d.is_float:
        vals = vals / 4.0  # exactly representable in every float type
    return vals.reshape(shape).astype(d.numpy)


def _constant_case(shape) -> Case:
    def build_(g, ins, d, precision):
        return g.constant(_constant_value(shape, d), id=SUBJECT)

    return Case(label(shape), (), {}, lambda value: value, EXACT, build=build_)


ROWS = [
    row(
        "graph.input",
        ALL,
        [_input_case(s) for s in SHAPES],
        [
            bad("negative dimension in shape \\(-1,\\)", shape=[-1]),
            bad("missing required attribute 'shape'"),
            bad("unknown dtype 'float8'", shape=[2], dtype="float8"),
            bad("takes 0 inputs, got 1", ((2,), F64), shape=[2]),
        ],
    ),
    row(
        "graph.constant",
        ALL,
        [_constant_case(s) for s in SHAPES],
        [bad("unknown dtype", value=np.array(["a", "b"])), bad("missing required attribute 'value'")],
    ),
]
