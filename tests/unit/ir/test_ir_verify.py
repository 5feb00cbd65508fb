"""The verifier: each broken invariant is reported naming the node, with printed IR around it."""

from __future__ import annotations

import pytest

from caramba import ir, ops
from caramba.errors import VerificationError
from caramba.ir import DType, Graph, Node, Ref, StateDecl, ValueType


def _graph() -> Graph:
    with Graph("v") as g:
        x = g.input("x", (2, 3))
        w = g.variable("w", (3, 4), "float64", "zeros")
        h = ops.matmul(x, w, name="mm")
        y = ops.relu(h, name="act")
        g.output("y", y)
    return g


def _swap(g: Graph, node_id: str, **changes) -> Graph:
    return g.rebuilt([n.replace(**changes) if n.id == node_id else n for n in g.nodes])


def test_a_built_graph_verifies():
    g = _graph()
    assert ir.verify(g) is g


@pytest.mark.parametrize(
    "mutate, node, match",
    [
        (lambda g: _swap(g, "act", op="activation.relux"), "act", "unknown op 'activation.relux'"),
        (lambda g: _swap(g, "act", version=2), "act", "op version 2 but this caramba implements version 1"),
        (lambda g: _swap(g, "act", inputs=(Ref("mm"), Ref("mm"))), "act", "activation.relu takes 1 inputs, got 2"),
        (lambda g: _swap(g, "act", types=(ValueType((2, 4), DType.float32),)), "act", "recorded types \\['f32\\[2,4\\]'\\] disagree with inferred \\['f64\\[2,4\\]'\\]"),
        (lambda g: _swap(g, "act", inputs=(Ref("ghost"),)), "act", "input %ghost refers to a missing node \\(cycle or dangling edge\\)"),
        (lambda g: _swap(g, "mm", inputs=(Ref("x"), Ref("act"))), "mm", "input %act refers to a later node"),
        (lambda g: _swap(g, "act", inputs=(Ref("mm", 1),)), "act", "names output 1 of a 1-output node"),
        (lambda g: _swap(g, "act", precision=DType.int32), "act", "precision int32 is not a float type"),
        (lambda g: _swap(g, "mm", attrs=ir.Attrs({"bogus": 1})), "mm", "unknown attribute 'bogus' for linalg.matmul"),
    ],
)
def test_broken_invariants_name_the_node(mutate, node, match):
    g = mutate(_graph())
    with pytest.raises(VerificationError, match=match) as info:
        ir.verify(g)
    err = info.value
    assert err.node == node
    text = str(err)
    assert f"node '{node}'" in text
    marked = [line for line in text.splitlines() if line.startswith(">>")]
    assert len(marked) == 1 and f"%{node}" in marked[0]  # the excerpt marks the bad node
    assert "graph v(" in text or "    " in text  # and shows lines around it


def test_non_canonical_attributes():
    g = _graph()
    bad = _swap(g, "act", op="activation.leaky_relu", attrs=ir.Attrs({}))
    with pytest.raises(VerificationError, match="missing required|not canonical|alpha"):
        ir.verify(bad)
    g2 = _graph()
    with g2:
        z = ops.leaky_relu(g2.value("act"), alpha=0.5, name="lr")
        g2.output("z", z)
    ir.verify(g2)
    tampered = _swap(g2, "lr", attrs=ir.Attrs({"alpha": 1}))  # an int where the canonical form is a float
    ir.verify(tampered)  # normalizes to the same canonical value: 1 == 1.0
    assert tampered.node("lr").attrs == ir.Attrs({"alpha": 1.0})


def test_duplicate_ids():
    g = _graph()
    dup = g.rebuilt(g.nodes)
    dup.nodes.append(g.node("act"))  # bypassing append's own duplicate check
    with pytest.raises(VerificationError, match="duplicate node ID") as info:
        ir.verify(dup)
    assert info.value.node == "act"


def test_state_rules():
    g = _graph()
    undeclared = g.rebuilt(g.nodes, state={})
    with pytest.raises(VerificationError, match="state 'w' is not declared"):
        ir.verify(undeclared)
    retyped = g.rebuilt(g.nodes, state={"w": StateDecl("w", ValueType((3, 4), DType.float32), "zeros")})
    with pytest.raises(VerificationError, match="state 'w' is f32\\[3,4\\] but node uses f64\\[3,4\\]"):
        ir.verify(retyped)


def test_outputs_must_exist():
    g = _graph()
    bad = g.rebuilt(g.nodes, outputs={"y": Ref("nope")})
    with pytest.raises(VerificationError, match="output 'y' refers to missing value %nope"):
        ir.verify(bad)
    bad = g.rebuilt(g.nodes, outputs={"y": Ref("act", 2)})
    with pytest.raises(VerificationError, match="output 'y' refers to missing value %act#2"):
        ir.verify(bad)


def test_context_names_the_passes_before():
    g = _swap(_graph(), "act", op="activation.relux")
    with pytest.raises(VerificationError, match="\\(after canonicalize -> cse\\)"):
        ir.verify(g, context="canonicalize -> cse")


def test_origin_travels_into_the_error():
    g = _graph()
    origin = ir.Origin("model.yml", 12, 5, "topology.act", "repeat 2")
    bad = _swap(g, "act", op="activation.relux", origin=origin)
    with pytest.raises(VerificationError, match="at model.yml:12:5 \\(topology.act\\) \\[repeat 2\\]"):
        ir.verify(bad)


def test_nodes_compare_without_origin():
    n = Node("a", "math.exp", (Ref("x"),), ir.Attrs(), (ValueType((1,), DType.float64),))
    assert n == n.replace(origin=ir.Origin("f.yml", 1))
