"""The fuse pass: what fuses, and every reason a fusion is refused (undeclared pattern, dtype,
precision, exact vs approximate GELU, no Numba). Runs the pass on capability tables; no
kernel is compiled here."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import caramba
from caramba import ir, ops
from caramba.backends.cpu import fused as cpu_fused
from caramba.backends.cpu.capabilities import cpu_capabilities
from caramba.compiler import PassContext, compile_for
from caramba.compiler.fuse import fuse
from caramba.ir.dtypes import DType
from caramba.ops import fused as F

from ._util import only_fusions, with_caps

pytestmark = pytest.mark.skipif(not cpu_fused.available(), reason="numba is not installed: the cpu backend declares no fusions")


@pytest.fixture(scope="module")
def caps():
    return cpu_capabilities()


def _fuse(g, caps):
    ctx = PassContext(caps, "cpu", tuple(g.outputs))
    res = fuse(g, ctx)
    ir.verify(res.graph)
    return res


def _fused(g):
    return [n for n in g.nodes if n.op.startswith("fused.")]


def _mlp_layer(act, dtype="float64"):
    with caramba.Graph("layer") as g:
        x = g.input("x", (8, 4), dtype)
        w = g.input("w", (4, 5), dtype)
        b = g.input("b", (5,), dtype)
        y = x @ w + b
        g.output("y", act(y) if act else y)
    return g


@pytest.mark.parametrize(
    "act, name",
    [
        (None, "none"),
        (ops.relu, "relu"),
        (ops.gelu, "gelu"),
        (lambda v: ops.gelu(v, approximate="tanh"), "gelu_tanh"),
        (ops.silu, "silu"),
        (ops.tanh, "tanh"),
    ],
)
def test_linear_fuses_matmul_bias_activation(caps, act, name):
    res = _fuse(_mlp_layer(act), caps)
    (node,) = _fused(res.graph)
    assert node.op == "fused.linear" and node.attrs["activation"] == name
    assert [n.op for n in res.graph.nodes if n.op != "graph.input"] == ["fused.linear"]
    # The fused node keeps the ID of the value it computes and names what it replaced.
    assert node.id == res.graph.outputs["y"].node
    assert "matmul_1" in node.origin.note


def _gelu_modes(graph) -> list[str]:
    """The ``approximate`` attribute of every GELU, whether a node or a step of a fused program."""
    modes = [n.attrs["approximate"] for n in graph.nodes if n.op == "activation.gelu"]
    for n in graph.nodes:
        if n.op == "fused.elementwise":
            modes += [s.attrs["approximate"] for s in F.decode_expr(n.attrs["expr"]).steps if s.op == "activation.gelu"]
    return sorted(modes)


def test_exact_and_tanh_gelu_are_never_interchanged(caps):
    exact_only = only_fusions(caps, lambda p, d: p != F.linear_pattern("gelu_tanh"))
    res = _fuse(_mlp_layer(lambda v: ops.gelu(v, approximate="tanh")), exact_only)
    linear = next(n for n in res.graph.nodes if n.op == "fused.linear")
    # matmul + bias fused, the tanh GELU not folded in (it may not become the exact form); it
    # stays a GELU of its own (alone, or as the one step of an elementwise kernel)
    assert linear.attrs["activation"] == "none"
    assert _gelu_modes(res.graph) == ["tanh"]
    assert any("fused.linear:gelu_tanh" in d for d in res.diagnostics)

    tanh_only = only_fusions(caps, lambda p, d: p != F.linear_pattern("gelu"))
    res = _fuse(_mlp_layer(ops.gelu), tanh_only)
    assert _gelu_modes(res.graph) == ["none"]

    # Inside an elementwise program the GELU keeps its own attribute.
    with caramba.Graph("g") as g:
        x = g.input("x", (16,))
        g.output("y", ops.gelu(x * 2.0, approximate="tanh") + ops.gelu(x))
    (node,) = _fused(_fuse(g, caps).graph)
    steps = F.decode_expr(node.attrs["expr"]).steps
    assert sorted(s.attrs["approximate"] for s in steps if s.op == "activation.gelu") == ["none", "tanh"]


def test_elementwise_chain_with_broadcast_and_reduction_becomes_one_node(caps):
    with caramba.Graph("g") as g:
        x = g.input("x", (4, 6))
        b = g.input("b", (6,))
        y = ops.exp(x * 0.5 + b) - x
        g.output("s", ops.broadcast_to(b, shape=(4, 6)) * 2.0 + y)
        g.output("m", (y * y).mean(axes=-1))
    res = _fuse(g, caps)
    fused = _fused(res.graph)
    assert [n.op for n in fused] == ["fused.elementwise"] * 3
    e = [F.decode_expr(n.attrs["expr"]) for n in fused]
    assert any(ex.reduction is not None and ex.reduction.op == "reduce.mean" for ex in e)
    assert any("shape.broadcast_to" in [s.op for s in ex.steps] for ex in e)
    # y feeds both outputs: it is computed once (a node of its own), not duplicated
    assert any(n.id == "sub_1" for n in res.graph.nodes)


def test_values_used_outside_a_chain_end_it(caps):
    with caramba.Graph("g") as g:
        x = g.input("x", (10,))
        a = ops.exp(x) + 1.0
        g.output("a", a)
        g.output("b", ops.sin(a) * 2.0)
    fused = _fused(_fuse(g, caps).graph)
    assert [n.id for n in fused] == ["mul_1", "add_1"] or sorted(n.id for n in fused) == ["add_1", "mul_1"]


def test_a_single_node_is_not_fused(caps):
    with caramba.Graph("g") as g:
        x = g.input("x", (10,))
        g.output("a", ops.exp(x))
        g.output("b", ops.softmax(x))
        g.output("c", ops.layer_norm(x))
    res = _fuse(g, caps)
    assert not res.changed and not _fused(res.graph)


def test_layer_norm_residual_and_softmax_fuse(caps):
    with caramba.Graph("g") as g:
        x, r = g.input("x", (3, 8)), g.input("r", (3, 8))
        gamma, beta = g.input("gamma", (8,)), g.input("beta", (8,))
        s = x + r
        g.output("y", ops.layer_norm(s, gamma, beta))
        g.output("s", s)  # the residual stream is needed too: a second output
        g.output("p", ops.softmax(x * 0.5 + r, axis=-1))
    res = _fuse(g, caps)
    by_op = {n.op: n for n in _fused(res.graph)}
    ln = by_op["fused.layer_norm_residual"]
    assert ln.attrs["with_sum"] and len(ln.types) == 2
    assert res.graph.outputs["s"] == ir.Ref(ln.id, 1)
    sm = by_op["fused.softmax"]
    assert [s.op for s in F.decode_expr(sm.attrs["expr"]).steps] == ["graph.constant", "math.mul", "math.add"]


def test_nothing_fuses_when_the_backend_declares_nothing(caps):
    g = _mlp_layer(ops.gelu)
    res = _fuse(g, with_caps(caps, fusions=frozenset()))
    assert not res.changed and res.diagnostics == ["cpu declares no fusions"]


def test_without_numba_the_cpu_backend_declares_no_fusion(monkeypatch):
    monkeypatch.setattr(cpu_fused, "numba_status", lambda: (False, "numba does not import"))
    caps = cpu_capabilities()
    assert not caps.fusions and not any(op.startswith("fused.") for op in caps.ops)
    out, _ = compile_for(_mlp_layer(ops.gelu), caps, "cpu")
    assert not _fused(out)


def test_fusion_is_refused_for_undeclared_dtypes(caps):
    f64_only = only_fusions(caps, lambda p, d: d is not DType.float32)
    for g in (_mlp_layer(ops.gelu, "float32"),):
        res = _fuse(g, f64_only)
        assert not _fused(res.graph)
        assert any("for float32" in d for d in res.diagnostics)
    # float16 has no fused cpu kernel at all
    with caramba.Graph("g") as g:
        x = g.input("x", (4,), "float16")
        g.output("y", ops.exp(x) * 2.0)
    res = _fuse(g, caps)
    assert not _fused(res.graph) and any("float16" in d for d in res.diagnostics)


def test_fusion_is_refused_when_a_member_op_is_undeclared(caps):
    no_exp = only_fusions(caps, lambda p, d: p != F.elementwise_pattern("math.exp"))
    with caramba.Graph("g") as g:
        x = g.input("x", (8,))
        g.output("y", ops.exp(x * 2.0) + 1.0)
    res = _fuse(g, no_exp)
    # exp stays a node; what is around it still fuses where it can
    assert any(n.op == "math.exp" for n in res.graph.nodes)
    for n in _fused(res.graph):
        assert "math.exp" not in [s.op for s in F.decode_expr(n.attrs["expr"]).steps]


def test_fusion_is_refused_when_precision_would_change(caps):
    # A backend computing math at float64 but fused kernels at float32 must not fuse math.
    lower = with_caps(caps, precision={"*": DType.float64, "fused": DType.float32})
    res = _fuse(_mlp_layer(ops.relu), lower)
    assert not _fused(res.graph)
    assert any("precision would change" in d for d in res.diagnostics)
    # Members opting in to different precisions are not merged either.
    with caramba.Graph("g") as g:
        x = g.input("x", (8,))
        a = ops.exp(x, precision="float32")
        g.output("y", ops.sin(a))
    res = _fuse(g, caps)
    assert not _fused(res.graph)


def test_a_precision_opt_in_is_kept_on_the_fused_node(caps):
    with caramba.Graph("g") as g:
        x = g.input("x", (8,))
        a = ops.exp(x, precision="float32")
        g.output("y", ops.sin(a, precision="float32"))
    (node,) = _fused(_fuse(g, caps).graph)
    assert node.precision is DType.float32


def test_effects_are_never_fused(caps):
    with caramba.Graph("g") as g:
        g.variable("s", (8,), init="zeros")
        x = g.input("x", (8,))
        u = ops.uniform(shape=(8,), seed=1)
        d = ops.dropout(x * 2.0, rate=0.5, seed=2)
        g.write("s", g.read("s") + u)
        g.output("y", d + 1.0)
    res = _fuse(g, caps)
    for n in _fused(res.graph):
        assert all(ir.get_op(s.op).effect is ir.Effect.pure for s in F.decode_expr(n.attrs["expr"]).steps)
    for op in ("random.uniform", "nn.dropout", "state.write", "state.read"):
        assert any(n.op == op for n in res.graph.nodes), op


def test_every_declared_pattern_has_a_generator():
    """The cpu declares exactly what codegen can emit: no declared fusion without a kernel."""
    from caramba.backends.cpu.fused.scalar import REDUCTIONS, TABLE
    from caramba.backends.cpu.kernels import DTYPES as KERNEL_TABLE

    def has_kernel(op, d=None):  # generated (FACTORIES) or written by hand in the kernel table
        return op in cpu_fused.FACTORIES or (op in KERNEL_TABLE and (d is None or d in KERNEL_TABLE[op]))

    caps = cpu_capabilities()
    for pattern, d in caps.fusions:
        if pattern.startswith("fused.elementwise:"):
            op = pattern.split(":", 1)[1]
            assert d in (TABLE[op].dtypes if op in TABLE else REDUCTIONS[op]), (pattern, d)
        else:
            assert has_kernel(pattern.split(":")[0], d), pattern
    for op, dtypes in cpu_fused.fusion_capabilities()[0].items():
        assert has_kernel(op) and dtypes


def test_fused_graphs_survive_the_codec(caps):
    g = _mlp_layer(ops.gelu)
    out, _ = compile_for(g, caps, "cpu")
    back = ir.loads(ir.dumps(out))
    assert back == out
    ir.verify(back)
    assert dataclasses.asdict(back.nodes[-1].origin) == dataclasses.asdict(out.nodes[-1].origin)


def test_scalar_constants_are_embedded_and_big_constants_are_inputs(caps):
    with caramba.Graph("g") as g:
        x = g.input("x", (2, 3))
        g.output("y", ops.exp(x * 3.0) + np.arange(3.0))
    (node,) = _fused(_fuse(g, caps).graph)
    e = F.decode_expr(node.attrs["expr"])
    assert len(node.inputs) == 2 and sum(s.op == "graph.constant" for s in e.steps) == 1


def test_a_cpu_runner_without_numba_runs_everything_unfused(monkeypatch):
    from caramba.backends.cpu.runner import CpuRunner

    monkeypatch.setattr(cpu_fused, "numba_status", lambda: (False, "numba does not import"))
    with CpuRunner() as runner:
        assert not runner.capabilities.fusions
        g = _mlp_layer(ops.gelu)
        exe = runner.compile(g)
        assert not _fused(exe.graph) and exe.plan is not None and exe.plan.slots
        rng = np.random.default_rng(0)
        x, w, b = rng.standard_normal((8, 4)), rng.standard_normal((4, 5)), rng.standard_normal(5)
        y = exe.run({"x": runner.upload(x), "w": runner.upload(w), "b": runner.upload(b)})["y"].download()
        import scipy.special as sc

        z = x @ w + b
        np.testing.assert_allclose(y, 0.5 * z * sc.erfc(-z / np.sqrt(2)), rtol=1e-14)


def test_a_chain_over_constants_alone_compiles_with_canonicalize_disabled():
    """``exp(constant) * -1.0`` without constant folding: no fused node with no inputs (the
    verifier refused it); every optional pass may be disabled (docs/compiler.md)."""
    import numpy as np

    from caramba import compute, ops
    from caramba.ir.graph import Graph

    with Graph("consts") as g:
        x = g.input("x", (3,))
        c = ops.exp(g.constant(np.array([0.0, 1.0, 2.0]))) * -1.0
        g.output("c", c)  # the chain alone is an output: it cannot hide inside x's chain
        g.output("y", x + c)
    r = compute.new("cpu")
    try:
        exe = r.compile(g, disable=("canonicalize",))
        out = exe.run({"x": r.upload(np.ones(3))})
        np.testing.assert_allclose(out["c"].download(), -np.exp([0.0, 1.0, 2.0]), rtol=1e-15)
        np.testing.assert_allclose(out["y"].download(), 1.0 - np.exp([0.0, 1.0, 2.0]), rtol=1e-15)
    finally:
        r.close()
