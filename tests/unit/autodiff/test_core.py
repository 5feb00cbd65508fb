"""The reverse-mode transform: results, naming, and the errors it raises."""

from __future__ import annotations

import numpy as np
import pytest

from caramba import autodiff, compute, ir, ops
from caramba.autodiff import RULES, MissingVJP, NotDifferentiable
from caramba.errors import GraphError


@pytest.fixture(scope="module")
def cpu():
    r = compute.new("cpu")
    yield r
    r.close()


def run(runner, g, **inputs):
    out = runner.execute(g, inputs={k: runner.upload(v) for k, v in inputs.items()})
    return {k: t.download() for k, t in out.items()}


def test_every_differentiable_op_has_a_rule():
    missing = sorted(k for k, v in ir.all_ops().items() if v.differentiable and k not in RULES)
    assert not missing, f"differentiable ops without a VJP rule: {missing}"
    stray = sorted(k for k in RULES if k not in ir.all_ops())
    assert not stray, f"VJP rules for unknown ops: {stray}"


def test_grad_of_a_small_model(cpu):
    rng = np.random.default_rng(0)
    X, W, B = rng.standard_normal((5, 3)), rng.standard_normal((3, 2)), rng.standard_normal(2)
    with ir.Graph() as g:
        x = g.input("x", (5, 3))
        w = g.variable("w", (3, 2))
        b = g.variable("b", (2,))
        loss = ops.mean(ops.tanh(x @ w + b) ** 2.0)
        value, (dw, db, dx) = autodiff.value_and_grad(loss, ["w", "b", x])
        for k, v in {"loss": value, "dw": dw, "db": db, "dx": dx}.items():
            g.output(k, v)
    cpu.state["w"], cpu.state["b"] = cpu.upload(W), cpu.upload(B)
    got = run(cpu, g, x=X)
    t = np.tanh(X @ W + B)
    d = 2 * t * (1 - t * t) / t.size
    np.testing.assert_allclose(got["loss"], np.mean(t**2), rtol=1e-15)
    np.testing.assert_allclose(got["dw"], X.T @ d, rtol=1e-13)
    np.testing.assert_allclose(got["db"], d.sum(0), rtol=1e-13)
    np.testing.assert_allclose(got["dx"], d @ W.T, rtol=1e-13)


def test_backward_nodes_are_named_after_their_forward_node_and_keep_its_origin():
    origin = ir.Origin(file="model.yml", line=7, col=3)
    with ir.Graph() as g:
        x = g.input("x", (4,))
        y = ops.exp(x, name="act", origin=origin)
        autodiff.grad(y.sum(), x)
    backward = [n for n in g.nodes if n.id.startswith("d.act.")]
    assert backward and all(n.origin == origin for n in backward)
    ir.verify(g)


def test_state_name_sums_over_every_read(cpu):
    with ir.Graph() as g:
        x = g.input("x", (3,))
        w1 = g.variable("w", (3,))
        w2 = g.read("w")  # the same parameter used twice (weight tying)
        loss = (x * w1).sum() + (w2 * w2).sum()
        g.output("dw", autodiff.grad(loss, "w"))
    W, X = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
    cpu.state["w"] = cpu.upload(W)
    np.testing.assert_allclose(run(cpu, g, x=X)["dw"], X + 2 * W)


def test_unrelated_inputs_get_zeros_of_their_type(cpu):
    with ir.Graph() as g:
        x = g.input("x", (2, 3))
        z = g.input("z", (4,))
        dz, dx = autodiff.grad(ops.sum(x * 2.0), [z, x])
        g.output("dz", dz)
        g.output("dx", dx)
    got = run(cpu, g, x=np.ones((2, 3)), z=np.ones(4))
    assert got["dz"].shape == (4,) and not got["dz"].any()
    np.testing.assert_array_equal(got["dx"], np.full((2, 3), 2.0))


def test_multi_output_op_fills_missing_cotangents_with_zeros(cpu):
    with ir.Graph() as g:
        x = g.input("x", (6,))
        a, _, c = ops.split(x, num=3)
        g.output("dx", autodiff.grad((a * 3.0).sum() + c.sum(), x))
    np.testing.assert_array_equal(run(cpu, g, x=np.arange(6.0))["dx"], [3, 3, 0, 0, 1, 1])


def test_gradient_through_non_differentiable_op_is_an_error():
    with ir.Graph() as g:
        x = g.input("x", (3, 4))
        idx = ops.argmax(x, axis=-1)
        y = ops.cast(idx, dtype="float64").sum()
        with pytest.raises(NotDifferentiable, match="integer and bool values have no gradient"):
            autodiff.grad(y, x)
        rounded = ops.floor(x).sum()
        with pytest.raises(NotDifferentiable, match=r"math.floor, which is not differentiable") as info:
            autodiff.grad(rounded, x)
        assert "node 'floor_1'" in str(info.value)


def test_masks_and_indices_do_not_carry_gradients():
    with ir.Graph() as g:
        x = g.input("x", (3, 4))
        y = ops.where(x > 0.0, x, x * 0.1)  # the comparison gets no cotangent
        picked = ops.gather(y, ops.argmax(x, axis=-1), axis=1)
        autodiff.grad(picked.sum(), x)
    ir.verify(g)


def test_wrt_integer_value_is_an_error():
    with ir.Graph() as g:
        i = g.input("i", (3,), "int64")
        x = g.input("x", (3,))
        y = (x * ops.cast(i, dtype="float64")).sum()
        with pytest.raises(NotDifferentiable, match="only float values have gradients"):
            autodiff.grad(y, i)


def test_output_must_be_a_float_scalar_for_grad():
    with ir.Graph() as g:
        x = g.input("x", (3,))
        with pytest.raises(GraphError, match="grad needs a scalar output"):
            autodiff.grad(x * 2.0, x)


def test_unknown_state_name_lists_candidates():
    with ir.Graph() as g:
        w = g.variable("layer.weight", (2,))
        with pytest.raises(GraphError, match="did you mean 'layer.weight'"):
            autodiff.grad(w.sum(), "layer.weigth")


def test_missing_rule_is_a_named_error(monkeypatch):
    monkeypatch.delitem(RULES, "math.exp")
    with ir.Graph() as g:
        x = g.input("x", (3,))
        with pytest.raises(MissingVJP, match="no VJP rule for math.exp"):
            autodiff.grad(ops.exp(x).sum(), x)


def test_grad_graph_and_vjp_graph(cpu):
    with ir.Graph("f") as f:
        x = f.input("x", (3,))
        w = f.variable("w", (3,))
        f.output("y", x * w)
        f.output("s", (x * w).sum())
    gg = autodiff.grad_graph(f, "s", ["x", "w"])
    vg = autodiff.vjp_graph(f, ["y"], ["x"])
    assert f.outputs.keys() == {"y", "s"}  # the original is untouched
    assert {"grad.x", "grad.w"} <= gg.outputs.keys()
    assert "cotangent.y" in {n.id for n in vg.inputs}
    cpu.state["w"] = cpu.upload(np.array([1.0, 2.0, 3.0]))
    got = run(cpu, gg, x=np.array([4.0, 5.0, 6.0]))
    np.testing.assert_array_equal(got["grad.x"], [1, 2, 3])
    np.testing.assert_array_equal(got["grad.w"], [4, 5, 6])
    got = run(cpu, vg, x=np.array([4.0, 5.0, 6.0]), **{"cotangent.y": np.array([1.0, 0.0, 2.0])})
    np.testing.assert_array_equal(got["grad.x"], [1, 0, 6])


def test_second_order_gradients(cpu):
    with ir.Graph() as g:
        x = g.input("x", (4,))
        dx = autodiff.grad((x * x * x).sum(), x)
        g.output("ddx", autodiff.grad(dx.sum(), x))
    np.testing.assert_allclose(run(cpu, g, x=np.array([1.0, -2.0, 0.5, 3.0]))["ddx"], [6, -12, 3, 18])


@pytest.mark.parametrize("b_shape", [(4, 6), (1, 4, 6)])
def test_shared_weight_gradient_is_one_product_over_the_flattened_rows(cpu, b_shape):
    """A weight shared by every leading index of a batched ``a @ w`` gets its gradient as one
    [K, rows] @ [rows, N] product (as PyTorch computes it), not a product per leading index
    followed by a sum; the values are the exact sum within float64 rounding."""
    rng = np.random.default_rng(3)
    X, W, C = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal(b_shape), rng.standard_normal((2, 3, 5, 6))
    with ir.Graph() as g:
        x = g.input("x", X.shape)
        w = g.input("w", W.shape)
        c = g.input("c", C.shape)
        dx, dw = autodiff.grad(ops.sum(ops.matmul(x, w) * c), [x, w])
        g.output("dx", dx)
        g.output("dw", dw)
    grad_nodes = [n for n in g.nodes if n.id.startswith("d.")]
    products = [n for n in grad_nodes if n.op == "linalg.matmul"]
    w_product = [n for n in products if len(g.type_of(n.outputs[0]).shape) == 2]
    assert len(w_product) == 1 and not any(n.op == "reduce.sum" and g.type_of(n.inputs[0]).shape[-2:] == (4, 6)
                                           for n in grad_nodes)
    got = run(cpu, g, x=X, w=W, c=C)
    want_dw = np.einsum("abik,abin->kn", X, C).reshape(W.shape)
    np.testing.assert_allclose(got["dw"], want_dw, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(got["dx"], C @ np.swapaxes(W.reshape(4, 6), -1, -2), rtol=1e-13)
