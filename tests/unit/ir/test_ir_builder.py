"""The graph builder: context, inputs, operators, lifting, op functions, multi-output, state."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from caramba import ir, ops
from caramba.errors import GraphError, StateError
from caramba.ir import DType, Graph, Ref, ValueType


def test_builder_context_and_current_graph():
    with pytest.raises(GraphError, match="no graph is being built"):
        ir.current_graph()
    with Graph("outer") as g:
        assert ir.current_graph() is g
        with Graph("inner") as h:
            assert ir.current_graph() is h
        assert ir.current_graph() is g
    with pytest.raises(GraphError, match="no graph is being built"):
        ir.current_graph()


def test_inputs_are_nodes_named_by_the_user():
    with Graph("g") as g:
        x = g.input("x", (4, 8))
        i = g.input("ids", [3], "int64")
    assert [n.id for n in g.inputs] == ["x", "ids"]
    assert x.type == ValueType((4, 8), DType.float64) and i.dtype is DType.int64
    assert x.shape == (4, 8) and x.ndim == 2 and x.node.op == "graph.input"
    with g, pytest.raises(GraphError, match="duplicate node ID 'x'"):
        g.input("x", (1,))


@pytest.mark.parametrize(
    "expr, op",
    [
        (lambda x, y: x + y, "math.add"),
        (lambda x, y: x - y, "math.sub"),
        (lambda x, y: x * y, "math.mul"),
        (lambda x, y: x / y, "math.div"),
        (lambda x, y: x**y, "math.pow"),
        (lambda x, y: x @ y, "linalg.matmul"),
        (lambda x, y: x < y, "math.less"),
        (lambda x, y: x <= y, "math.less_equal"),
        (lambda x, y: x > y, "math.greater"),
        (lambda x, y: x >= y, "math.greater_equal"),
        (lambda x, y: -x, "math.neg"),
        (lambda x, y: abs(x), "math.abs"),
        (lambda x, y: x.T, "shape.transpose"),
        (lambda x, y: x.reshape(9), "shape.reshape"),
        (lambda x, y: x.reshape((1, 9)), "shape.reshape"),
        (lambda x, y: x.astype("float32"), "math.cast"),
        (lambda x, y: x.sum(), "reduce.sum"),
        (lambda x, y: x.mean(axes=[0], keepdims=True), "reduce.mean"),
    ],
)
def test_python_operators_build_one_op(expr, op):
    with Graph() as g:
        x, y = g.input("x", (3, 3)), g.input("y", (3, 3))
        v = expr(x, y)
    assert v.node.op == op and v.node is g.nodes[-1]
    assert len(g.nodes) == 3


def test_scalars_lift_to_constants_of_the_values_dtype():
    with Graph() as g:
        x = g.input("x", (3,), "float32")
        y = 2 * x + np.float64(1.5)
        z = 1.0 - x
    consts = [n for n in g.nodes if n.op == "graph.constant"]
    assert [c.types[0] for c in consts] == [ValueType((), DType.float32)] * 3
    assert y.dtype is DType.float32 and z.node.inputs[1] == x.ref  # reversed operand order kept
    with g:
        w = x + [1.0, 2.0, 3.0]
    assert w.node.op == "math.add" and g.node(w.node.inputs[1].node).attrs["value"].dtype == np.float32
    with g, pytest.raises(GraphError, match="cannot use str as a graph value"):
        x + "a"


def test_values_have_no_truth_value():
    with Graph() as g:
        x = g.input("x", (3,))
        with pytest.raises(GraphError, match="no truth value.*ops.where"):
            if x > 0:
                pass


def test_op_functions_name_precision_and_optional_inputs():
    with Graph() as g:
        x = g.input("x", (2, 4))
        y = ops.gelu(x, name="act", precision="float32", approximate="tanh")
        n = ops.layer_norm(x, None, None)  # trailing None inputs are dropped
    assert y.node.id == "act" and y.node.precision is DType.float32 and y.node.attrs["approximate"] == "tanh"
    assert len(n.node.inputs) == 1
    assert ops.gelu.__name__ == "gelu" and "erf" in ops.gelu.__doc__ and ops.gelu.opdef.id == "activation.gelu"
    with g, pytest.raises(GraphError, match="precision must be a float type, got int32") as info:
        ops.relu(x, precision="int32", name="r")
    assert "node 'r'" in str(info.value)
    with g, pytest.raises(GraphError, match="no graph value among the inputs"):
        ops.add(1.0, 2.0)
    with g, pytest.raises(GraphError, match="unknown op 'math.addd'; did you mean 'math.add'"):
        g.apply("math.addd", [x, x])


def test_inputs_must_belong_to_the_graph():
    with Graph("a") as a:
        x = a.input("x", (2,))
    with Graph("b") as b:
        y = b.input("y", (2,))
        with pytest.raises(GraphError, match="input belongs to another graph"):
            b.call("math.add", [x, y])
        with pytest.raises(GraphError, match="wrap constants with g.constant"):
            b.call("math.add", [y, np.ones(2)])


def test_errors_name_the_node_and_leave_the_graph_unchanged():
    with Graph() as g:
        x = g.input("x", (3,))
        y = g.input("y", (4,))
        before = list(g.nodes)
        with pytest.raises(GraphError) as info:
            ops.add(x, y, name="bad_add")
    msg = str(info.value)
    assert "shapes [3] and [4] do not broadcast" in msg and "node 'bad_add'" in msg and "op math.add" in msg
    assert g.nodes == before and not g.has_node("bad_add")


def test_multi_output_ops_return_tuples():
    with Graph() as g:
        x = g.input("x", (6,))
        a, b, c = ops.split(x, num=3)
    assert a.ref == Ref(a.node.id, 0) and c.ref == Ref(a.node.id, 2) and str(c.ref) == f"%{a.node.id}#2"
    assert b.shape == (2,)
    with pytest.raises(GraphError, match="node has 3 outputs, pick one"):
        _ = a.node.type
    with pytest.raises(GraphError, match="refers to output 3 of a 3-output node"):
        g.type_of(Ref(a.node.id, 3))


def test_fresh_ids_count_per_op():
    with Graph() as g:
        x = g.input("x", (2,))
        ids = [ops.exp(x).node.id for _ in range(2)] + [ops.sin(x).node.id]
    assert ids == ["exp_1", "exp_2", "sin_1"]
    with g:
        g.apply("math.exp", [x], id="exp_4")
        assert ops.exp(x).node.id == "exp_3" and ops.exp(x).node.id == "exp_5"


def test_nodes_are_immutable_and_graphs_are_rebuilt():
    with Graph("g") as g:
        x = g.input("x", (2,))
        y = ops.exp(x)
        g.output("y", y)
    node = y.node
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.op = "math.log"  # type: ignore[misc]
    changed = node.replace(op="math.log")
    assert node.op == "math.exp" and changed.op == "math.log"
    h = g.rebuilt([g.nodes[0], changed])
    assert h is not g and h.node(node.id).op == "math.log" and h.outputs == g.outputs
    assert g.copy() == g and h != g
    assert g.users()["x"] == [node]


def test_state_declarations():
    with Graph() as g:
        w = g.variable("fc.w", (2, 3), "float32", "zeros")
        assert w.node.op == "state.read" and w.node.attrs["name"] == "fc.w"
        g.variable("fc.w", (2, 3), "float32", "zeros")  # same declaration again is fine
        with pytest.raises(StateError, match="declared twice with different types"):
            g.variable("fc.w", (2, 4), "float32")
        with pytest.raises(StateError, match="state 'nope' is not declared"):
            g.read("nope")
        with pytest.raises(GraphError, match="init must be zeros, ones or external"):
            g.variable("v", (1,), "float64", "random")
        wr = g.write("fc.w", w * 2.0)
    assert wr.types == () and wr.effect is ir.Effect.state_write
    assert g.state["fc.w"].init == "zeros"


def test_output_must_name_an_existing_value():
    with Graph() as g:
        g.input("x", (2,))
        with pytest.raises(GraphError, match="no node 'y'"):
            g.output("out", Ref("y"))


def test_required_precision():
    with Graph() as g:
        x = g.input("x", (2,), "float32")
        i = g.input("i", (2,), "int32")
        a = ops.exp(x)
        b = ops.exp(x, precision="float64")
        c = ops.less(i, i)
    assert a.node.required_precision() is DType.float32
    assert b.node.required_precision() is DType.float64
    assert c.node.required_precision() is DType.bool  # no float involved: its own dtype
