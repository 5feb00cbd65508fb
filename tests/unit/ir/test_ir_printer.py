"""The text form of graphs (what --explain and verifier errors show)."""

from __future__ import annotations

from caramba import ir, ops
from caramba.ir.printer import excerpt, format_node


def _graph():
    with ir.Graph("p") as g:
        x = g.input("x", (4, 8))
        w = g.variable("fc.w", (8, 3), "float64", "zeros")
        y = ops.gelu(x @ w, precision="float32")
        _, b = ops.split(x, sizes=[3, 5], axis=1)
        g.output("y", y)
        g.output("b", b)
    return g


def test_print_graph():
    text = ir.print_graph(_graph())
    assert text == "\n".join(
        [
            "graph p(x: f64[4,8]) {",
            "    state fc.w: f64[8,3] = zeros",
            "    %read_1 = state.read() {dtype=float64, name='fc.w', shape=[8, 3]} : f64[8,3]",
            "    %matmul_1 = linalg.matmul(%x, %read_1) : f64[4,3]",
            "    %gelu_1 = activation.gelu(%matmul_1) {approximate='none'} @precision=float32 : f64[4,3]",
            "    %split_1, %split_1#1 = shape.split(%x) {axis=1, num=None, sizes=[3, 5]} : f64[4,3], f64[4,5]",
            "    return {y: %gelu_1, b: %split_1#1}",
            "}",
        ]
    )
    g = _graph()
    assert str(g) == g.as_text() == text
    assert repr(g) == "<Graph 'p': 5 nodes, outputs ['y', 'b']>"


def test_nodes_without_outputs_and_versions():
    with ir.Graph() as g:
        w = g.variable("w", (2,))
        wr = g.write("w", w)
    assert format_node(wr) == "state.write(%read_1) {name='w'}"
    assert format_node(wr.replace(version=3)) == "state.write@v3(%read_1) {name='w'}"


def test_constants_print_small_arrays_inline():
    import numpy as np

    with ir.Graph() as g:
        c = g.constant(np.array([1.0, 2.0]), id="c")
        big = g.constant(np.zeros((3, 4), dtype=np.float32), id="big")
    assert format_node(c.node) == "%c = graph.constant() {value=array([1.0, 2.0], float64)} : f64[2]"
    assert format_node(big.node) == "%big = graph.constant() {value=array(<float32[3, 4]>)} : f32[3,4]"


def test_excerpt_marks_the_node_with_context():
    lines = excerpt(_graph(), "gelu_1", context=1).splitlines()
    assert lines == [
        "    %matmul_1 = linalg.matmul(%x, %read_1) : f64[4,3]",
        ">>  %gelu_1 = activation.gelu(%matmul_1) {approximate='none'} @precision=float32 : f64[4,3]",
        "    %split_1, %split_1#1 = shape.split(%x) {axis=1, num=None, sizes=[3, 5]} : f64[4,3], f64[4,5]",
    ]
    assert excerpt(_graph(), "nope") == ""
