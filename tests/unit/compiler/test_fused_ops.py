"""The fused.* op family: type rules re-run each step's rule, the program survives the codec,
and the verifier rejects malformed programs. No backend needed."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import ir, ops
from caramba.errors import GraphError, VerificationError
from caramba.ops import fused as F


def _expr(*steps, out):
    return F.Expr(tuple(F.Step(i, op, ir.get_op(op).version, args, ir.get_op(op).make_attrs(attrs))
                        for i, op, args, attrs in steps), out)


def test_expr_encodes_canonically_and_decodes_back():
    c = ir.get_op("graph.constant").make_attrs({"value": np.array(2.5)})
    e = F.Expr((
        F.Step("two", "graph.constant", 1, (), c),
        F.Step("m", "math.mul", 1, (0, "two"), ir.Attrs()),
        F.Step("g", "activation.gelu", 1, ("m",), ir.get_op("activation.gelu").make_attrs({"approximate": "tanh"})),
    ), "g")
    text = e.encode()
    assert " " not in text and text == F.decode_expr(text).encode()
    back = F.decode_expr(text)
    assert back.steps[0].attrs["value"].shape == () and back.steps[2].attrs["approximate"] == "tanh"
    assert e.as_text() == "gelu(mul(in0, 2.5), approximate='tanh')"


def test_fused_elementwise_type_rule_runs_every_step_rule():
    e = _expr(("a", "math.add", (0, 1), {}), ("s", "reduce.sum", ("a",), {"axes": (1,)}), out="s")
    with caramba.Graph("g") as g:
        x = g.input("x", (4, 3))
        b = g.input("b", (3,))
        y = g.call("fused.elementwise", (x, b), F.expr_attr(e))
    assert y.type == ir.ValueType((4,), "float64")
    with caramba.Graph("g") as g, pytest.raises(GraphError, match="do not broadcast"):
        g.call("fused.elementwise", (g.input("x", (4, 3)), g.input("b", (2,))), F.expr_attr(e))


@pytest.mark.parametrize(
    "steps, out, match",
    [
        ((("a", "math.add", (0, 1), {}),), "a", "input 1 of 1"),
        ((("a", "math.exp", (0,), {}), ("b", "linalg.matmul", ("a", "a"), {})), "b", "cannot be part"),
        ((("s", "reduce.sum", (0,), {}), ("e", "math.exp", ("s",), {})), "e", "cannot be part"),
        ((("a", "math.exp", ("zz",), {}),), "a", "before it is defined"),
        ((("r", "random.uniform", (), {"shape": (2,)}),), "r", "not pure"),
    ],
)
def test_malformed_programs_are_refused(steps, out, match):
    e = _expr(*steps, out=out)
    with caramba.Graph("g") as g, pytest.raises(GraphError, match=match):
        g.call("fused.elementwise", (g.input("x", (2,)),), F.expr_attr(e))


def test_unused_inputs_and_bad_json_are_refused():
    e = _expr(("a", "math.exp", (0,), {}), out="a")
    with caramba.Graph("g") as g, pytest.raises(GraphError, match="never used"):
        g.call("fused.elementwise", (g.input("x", (2,)), g.input("y", (2,))), F.expr_attr(e))
    with caramba.Graph("g") as g, pytest.raises(GraphError, match="malformed"):
        g.call("fused.elementwise", (g.input("x", (2,)),), {"expr": '{"steps": 3}'})


def test_fused_linear_and_layer_norm_residual_type_rules():
    with caramba.Graph("g") as g:
        x, w, b = g.input("x", (5, 4)), g.input("w", (4, 3)), g.input("b", (3,))
        assert ops.fused.linear(x, w, b, activation="gelu").type.shape == (5, 3)
        with pytest.raises(GraphError, match="must broadcast"):
            ops.fused.linear(x, w, g.input("b2", (5, 1, 3)))
        with pytest.raises(GraphError, match="not one of"):
            ops.fused.linear(x, w, b, activation="gelu_erf")
        r = g.input("r", (5, 4))
        y, s = ops.fused.layer_norm_residual(x, r, with_sum=True)
        assert y.type == s.type == x.type
        with pytest.raises(GraphError, match="gamma/beta"):
            ops.fused.layer_norm_residual(x, r, g.input("gm", (3,)))


def test_graph_with_fused_nodes_round_trips_through_the_codec():
    e = _expr(("m", "math.mul", (0, 0), {}), ("e", "math.exp", ("m",), {}), out="e")
    with caramba.Graph("g") as g:
        x = g.input("x", (3,))
        g.output("y", g.call("fused.elementwise", (x,), F.expr_attr(e)))
        g.output("z", g.call("fused.softmax", (x,), {**F.expr_attr(e), "axis": 0}))
    back = ir.loads(ir.dumps(g))
    assert back == g and back.fingerprint() == g.fingerprint()
    ir.verify(back)


def test_verifier_rechecks_a_fused_program_against_recorded_types():
    e = _expr(("m", "math.mul", (0, 0), {}), out="m")
    with caramba.Graph("g") as g:
        y = g.call("fused.elementwise", (g.input("x", (3,)),), F.expr_attr(e))
        g.output("y", y)
    bad = g.rebuilt([g.nodes[0], g.nodes[1].replace(types=(ir.ValueType((4,), "float64"),))])
    with pytest.raises(VerificationError, match="disagree"):
        ir.verify(bad)


def test_patterns_name_exact_and_tanh_gelu_apart():
    assert F.linear_pattern("gelu") != F.linear_pattern("gelu_tanh")
    with pytest.raises(GraphError, match="valid"):
        F.linear_pattern("gelu_approx")
