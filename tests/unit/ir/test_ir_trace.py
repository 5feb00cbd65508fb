"""caramba.trace: a Python function on graph values becomes a Graph."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import ir, ops
from caramba.errors import GraphError
from caramba.ir import DType, ValueType


def mlp(x, w):
    return ops.gelu(x @ w)


def test_trace_names_inputs_after_parameters():
    g = caramba.trace(mlp, ((4, 8), "float32"), ((8, 3), "float32"))
    assert g.name == "mlp"
    assert [(n.id, n.types[0]) for n in g.inputs] == [
        ("x", ValueType((4, 8), DType.float32)),
        ("w", ValueType((8, 3), DType.float32)),
    ]
    assert list(g.outputs) == ["out"] and ir.verify(g) is g
    assert [n.op for n in g.nodes[2:]] == ["linalg.matmul", "activation.gelu"]


def test_trace_refuses_what_the_builder_refuses():
    with pytest.raises(GraphError, match="needs inputs of one dtype"):
        caramba.trace(mlp, (4, 8), ((8, 3), "float32"))


@pytest.mark.parametrize(
    "spec, want",
    [
        (ValueType((2,), DType.int32), ValueType((2,), DType.int32)),
        (np.zeros((3, 1), dtype=np.float16), ValueType((3, 1), DType.float16)),
        ((5, 2), ValueType((5, 2), DType.float64)),
        (((5,), DType.bool), ValueType((5,), DType.bool)),
        ([7], ValueType((7,), DType.float64)),
    ],
)
def test_input_specs(spec, want):
    g = caramba.trace(lambda a: a, spec)
    assert g.inputs[0].types[0] == want


def test_return_forms():
    g = caramba.trace(lambda a: (ops.exp(a), ops.sin(a)), (2,))
    assert list(g.outputs) == ["out0", "out1"]
    g = caramba.trace(lambda a: {"e": ops.exp(a), "s": ops.sin(a)}, (2,), name="named")
    assert list(g.outputs) == ["e", "s"] and g.name == "named"
    with pytest.raises(GraphError, match="returned int, expected graph values"):
        caramba.trace(lambda a: 3, (2,))
    with pytest.raises(GraphError, match="returned str where a graph value was expected"):
        caramba.trace(lambda a: (a, "x"), (2,))


def test_variadic_functions_get_positional_names():
    g = caramba.trace(lambda *xs: xs[0] + xs[1], (2,), (2,))
    assert [n.id for n in g.inputs] == ["x0", "x1"]


def test_bad_spec():
    with pytest.raises(GraphError, match="cannot read an input spec"):
        caramba.trace(lambda a: a, "float64")


def test_traced_graph_runs():
    g = caramba.trace(mlp, (2, 3), (3, 2))
    x, w = np.ones((2, 3)), np.full((3, 2), 0.5)
    with caramba.compute.new("cpu") as r:
        y = r.execute(g, inputs={"x": r.upload(x), "w": r.upload(w)})["out"].download()
    assert y.shape == (2, 2) and np.all(y > 1.0)
