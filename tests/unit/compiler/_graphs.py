"""Random graphs for property tests (hypothesis): elementwise chains with broadcasting,
reductions, softmax, layer norm with residuals, matmul + bias + activation, identities the
simplifier removes, duplicates CSE merges, dead values, and state."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import strategies as st

import caramba
from caramba import ops

SHAPES = [(5,), (3, 4), (2, 3, 4), (6, 8), (1, 7), ()]


def _bshapes(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Shapes that broadcast to ``shape`` (itself, trailing suffixes, size-1 axes)."""
    out = [shape, shape[1:], tuple(1 if i == 0 else s for i, s in enumerate(shape))]
    if len(shape) >= 2:
        out.append(shape[:-1] + (1,))
    return list(dict.fromkeys(out))


UNARY: list[tuple[str, Callable]] = [
    ("tanh", ops.tanh), ("sin", ops.sin), ("sigmoid", ops.sigmoid), ("gelu", ops.gelu),
    ("gelu_tanh", lambda v: ops.gelu(v, approximate="tanh")), ("relu", ops.relu), ("silu", ops.silu),
    ("abs", ops.abs), ("neg", ops.neg), ("square", ops.square), ("exp_tanh", lambda v: ops.exp(ops.tanh(v))),
    ("erf", ops.erf), ("softplus", ops.softplus), ("elu", ops.elu), ("cos", ops.cos), ("half", lambda v: v * 0.5),
    ("clamp", lambda v: ops.clamp(v, min=-1.0, max=1.5)), ("rsqrt1", lambda v: ops.rsqrt(ops.square(v) + 1.0)),
    ("log1p_abs", lambda v: ops.log1p(ops.abs(v))), ("floor", ops.floor),
]
BINARY: list[tuple[str, Callable]] = [
    ("add", ops.add), ("sub", ops.sub), ("mul", ops.mul), ("max", ops.maximum), ("min", ops.minimum),
    ("div", lambda a, b: a / (ops.abs(b) + 1.0)),
    ("where", lambda a, b: ops.where(a > b, a, b * 2.0)),
]
IDENTITY: list[tuple[str, Callable]] = [
    ("mul1", lambda v: v * 1.0), ("add0", lambda v: v + 0.0), ("sub0", lambda v: v - 0.0),
    ("negneg", lambda v: ops.neg(ops.neg(v))), ("tt", lambda v: ops.transpose(ops.transpose(v))),
    ("rr", lambda v: v.reshape(-1).reshape(v.shape)), ("cast", lambda v: ops.cast(v, dtype="float64")),
    ("div1", lambda v: v / 1.0),
]


@st.composite
def graphs(draw, with_state: bool = True):
    """(graph, host inputs) for a random float64 graph."""
    shape = draw(st.sampled_from(SHAPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    g = caramba.Graph("random")
    values = []
    inputs = {}
    with g:
        for i in range(draw(st.integers(1, 3))):
            s = draw(st.sampled_from(_bshapes(shape))) if i else shape
            inputs[f"x{i}"] = rng.uniform(-2, 2, s)
            values.append(g.input(f"x{i}", s))
        if with_state and draw(st.booleans()):
            v = g.variable("acc", shape, init="zeros")
            values.append(v)
        full = [v for v in values if v.shape == shape]
        for _ in range(draw(st.integers(1, 10))):
            kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "identity", "dup", "reduce", "norm", "linear"]))
            a = draw(st.sampled_from(values))
            if kind == "unary":
                v = draw(st.sampled_from(UNARY))[1](a)
            elif kind == "binary":
                b = draw(st.sampled_from(values))
                v = draw(st.sampled_from(BINARY))[1](a, b)
            elif kind == "identity":
                v = draw(st.sampled_from(IDENTITY))[1](a)
            elif kind == "dup" and a.node.op not in ("graph.input", "state.read", "graph.constant") and a.node.effect.value == "pure":
                n = a.node  # recompute the same thing: CSE merges it
                v = g.call(n.op, [g.value(r) for r in n.inputs], dict(n.attrs))
                if isinstance(v, tuple):
                    v = v[0]
            elif kind == "reduce" and a.ndim >= 1:
                red = draw(st.sampled_from([ops.sum, ops.mean, ops.max]))
                axes = draw(st.sampled_from([[-1], [0], None]))
                v = red(a * 0.5 + 1.0, axes=axes, keepdims=True)
            elif kind == "norm" and a.ndim >= 1 and a.shape[-1] > 1:
                b = draw(st.sampled_from([x for x in values if x.shape == a.shape] or [a]))
                if draw(st.booleans()):
                    v = ops.layer_norm(a + b)
                else:
                    v = ops.softmax(a * 0.5 + b, axis=-1)
            elif kind == "linear" and a.ndim == 2:
                k = a.shape[-1]
                w = g.constant(rng.uniform(-1, 1, (k, k)))
                bias = g.constant(rng.uniform(-1, 1, (k,)))
                act = draw(st.sampled_from([None, ops.relu, ops.gelu, ops.silu, ops.tanh]))
                v = a @ w + bias
                v = act(v) if act else v
            else:
                continue
            values.append(v)
            if v.shape == shape:
                full.append(v)
        n_out = draw(st.integers(1, 3))
        picks = draw(st.lists(st.sampled_from(values[len(inputs):] or values), min_size=1, max_size=n_out))
        for i, v in enumerate(picks):
            g.output(f"y{i}", v)
        if "acc" in g.state:
            g.write("acc", draw(st.sampled_from(full)))
    return g, inputs
