"""Per-pass behaviour: canonicalize, cse, simplify, dce, schedule and the pipeline itself.

Passes run here on capability tables, with no runner: they are target-independent or read
only Capabilities."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import ir, ops
from caramba.backends.cpu.capabilities import cpu_capabilities
from caramba.compiler import PIPELINE, PassContext, compile_for, optional_stages, stage_names
from caramba.compiler.canonicalize import canonicalize
from caramba.compiler.cse import cse
from caramba.compiler.dce import dce
from caramba.compiler.schedule import schedule
from caramba.compiler.simplify import simplify
from caramba.errors import ConfigError
from caramba.ir.types import Effect

CAPS = cpu_capabilities(fusion=False)


def _ctx(g, caps=CAPS):
    from caramba.backends.cpu.fold import evaluate  # what a cpu runner hands the pipeline

    return PassContext(caps, "cpu", tuple(g.outputs), evaluate=evaluate)


def _ops(g):
    return [n.op for n in g.nodes if n.op not in ("graph.input",)]


def test_pipeline_is_the_documented_order():
    assert [s.name for s in PIPELINE] == [
        "verify", "canonicalize", "cse", "simplify", "fuse", "dce", "memory", "schedule", "lower", "verify",
    ]
    assert set(optional_stages()) == set(stage_names()) - {"verify", "lower"}
    assert all(s.why for s in PIPELINE)


def test_disabling_unknown_or_required_passes_is_an_error():
    with caramba.Graph("g") as g:
        g.output("y", g.input("x", (2,)) + 1.0)
    with pytest.raises(ConfigError, match="unknown pass"):
        compile_for(g, CAPS, "cpu", disable=["fusion"])
    with pytest.raises(ConfigError, match="cannot be disabled"):
        compile_for(g, CAPS, "cpu", disable=["lower"])
    _, report = compile_for(g, CAPS, "cpu", disable=optional_stages())
    assert [s.name for s in report.stages if s.skipped] == optional_stages()


def test_targets_select_outputs_before_the_pipeline():
    with caramba.Graph("g") as g:
        x = g.input("x", (2,))
        g.output("a", ops.exp(x))
        g.output("b", ops.sin(x))
    out, _ = compile_for(g, CAPS, "cpu", targets=["b"])
    assert list(out.outputs) == ["b"] and "math.exp" not in _ops(out)
    with pytest.raises(ConfigError, match="unknown target"):
        compile_for(g, CAPS, "cpu", targets=["c"])


# ---- canonicalize --------------------------------------------------------------------------


def test_canonicalize_normalizes_attributes():
    with caramba.Graph("g") as g:
        x = g.input("x", (2, 3, 4))
        g.output("a", x.sum(axes=-1))
        g.output("b", ops.softmax(x, axis=-2))
        g.output("c", ops.transpose(x))
        g.output("d", ops.squeeze(ops.expand_dims(x, axes=[0]), axes=[0]))
        g.output("e", x.reshape(-1, 4))
    out = canonicalize(g, _ctx(g)).graph
    by_op = {n.op: n for n in out.nodes}
    assert by_op["reduce.sum"].attrs["axes"] == (2,)
    assert by_op["nn.softmax"].attrs["axis"] == 1
    assert by_op["shape.transpose"].attrs["perm"] == (2, 1, 0)
    assert "shape.squeeze" not in by_op and "shape.expand_dims" not in by_op
    assert all(n.attrs["shape"].count(-1) == 0 for n in out.nodes if n.op == "shape.reshape")
    ir.verify(out)


def test_canonicalize_orders_commutative_inputs_so_cse_merges_them():
    with caramba.Graph("g") as g:
        x, y = g.input("x", (3,)), g.input("y", (3,))
        g.output("a", ops.mul(y, x))
        g.output("b", ops.mul(x, y))
        g.output("c", 2.0 * x)
    out = cse(canonicalize(g, _ctx(g)).graph, _ctx(g)).graph
    muls = [n for n in out.nodes if n.op == "math.mul"]
    assert len(muls) == 2
    assert out.outputs["a"] == out.outputs["b"]
    const_mul = next(n for n in muls if out.node(n.inputs[1].node).op == "graph.constant")
    assert out.node(const_mul.inputs[0].node).op == "graph.input"  # constant second


def test_canonicalize_folds_tiny_constant_expressions_only():
    with caramba.Graph("g") as g:
        x = g.input("x", (3,))
        c = ops.exp(g.constant(np.array([0.0, 1.0, 2.0]))) * 2.0
        big = ops.exp(g.constant(np.zeros(1000)))
        g.output("y", x + c)
        g.output("z", big)
    out = canonicalize(g, _ctx(g)).graph
    folded = out.node(out.node(out.outputs["y"].node).inputs[1].node)
    assert folded.op == "graph.constant" and "folded" in folded.origin.note
    np.testing.assert_array_equal(folded.attrs["value"], np.exp([0.0, 1.0, 2.0]) * 2.0)
    assert out.node(out.outputs["z"].node).op == "math.exp"  # 1000 elements: not tiny


# ---- cse ------------------------------------------------------------------------------------


def test_cse_merges_pure_duplicates():
    with caramba.Graph("g") as g:
        x = g.input("x", (3,))
        g.output("a", ops.exp(x) + ops.exp(x))
    out = cse(g, _ctx(g))
    assert out.changed and sum(n.op == "math.exp" for n in out.graph.nodes) == 1


def test_cse_never_merges_effectful_nodes():
    with caramba.Graph("g") as g:
        g.variable("s", (3,), init="zeros")
        r1 = g.read("s")
        r2 = g.read("s")
        u1 = ops.uniform(shape=(3,), seed=1)
        u2 = ops.uniform(shape=(3,), seed=1)
        d1 = ops.dropout(r1, rate=0.5, seed=3)
        d2 = ops.dropout(r1, rate=0.5, seed=3)
        step = g.constant(np.array(1, dtype=np.int64))
        c1 = g.call("train.checkpoint.save", (step, r1), {"path": "/tmp/x", "names": "s"})
        c2 = g.call("train.checkpoint.save", (step, r1), {"path": "/tmp/x", "names": "s"})
        g.write("s", r1 + 1.0)
        g.write("s", r1 + 1.0)
        g.output("y", r1 + r2 + u1 + u2 + d1 + d2)
        g.output("c", ops.logical_and(c1, c2))
    out = cse(g, _ctx(g)).graph
    for op in ("state.read", "random.uniform", "nn.dropout", "train.checkpoint.save", "state.write"):
        count = sum(n.op == op for n in g.nodes)
        assert count >= 2 and sum(n.op == op for n in out.nodes) == count, op
    assert all(ir.get_op(op).effect is not Effect.pure for op in ("nn.dropout", "train.checkpoint.save"))


# ---- simplify -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda x: x * 1.0,
        lambda x: 1.0 * x,
        lambda x: x * np.ones(3),
        lambda x: x + 0.0,
        lambda x: x - 0.0,
        lambda x: x / 1.0,
        lambda x: x**1.0,
        lambda x: ops.neg(ops.neg(x)),
        lambda x: ops.transpose(ops.transpose(x)),
        lambda x: x.reshape(6).reshape(2, 3),
        lambda x: ops.squeeze(ops.expand_dims(x, axes=[1]), axes=[1]),
        lambda x: ops.cast(x, dtype="float64"),
        lambda x: ops.maximum(x, x),
        lambda x: ops.broadcast_to(x, shape=(2, 3)),
        lambda x: ops.clamp(x),
        lambda x: x[:, :] + 0.0,
    ],
)
def test_simplify_removes_identities(build):
    with caramba.Graph("g") as g:
        x = g.input("x", (2, 3))
        g.output("y", build(x))
    out = dce(simplify(canonicalize(g, _ctx(g)).graph, _ctx(g)).graph, _ctx(g)).graph
    ir.verify(out)
    assert _ops(out) == [] and out.outputs["y"] == ir.Ref("x")


def test_simplify_idempotent_and_lossless_cast_roundtrip():
    with caramba.Graph("g") as g:
        x = g.input("x", (3,), "float32")
        g.output("a", ops.cast(ops.cast(x, dtype="float64"), dtype="float32"))
        g.output("b", ops.abs(ops.abs(x)))
    out = dce(simplify(g, _ctx(g)).graph, _ctx(g)).graph
    assert out.outputs["a"] == ir.Ref("x") and _ops(out) == ["math.abs"]


def test_simplify_keeps_non_identities():
    with caramba.Graph("g") as g:
        x = g.input("x", (3,))
        g.output("a", x * 0.0)  # NaN * 0 is NaN
        g.output("b", x - x)  # inf - inf is NaN
        g.output("c", x * np.ones((2, 3)))  # broadcasts x to a larger shape
        g.output("d", ops.cast(ops.cast(x, dtype="float32"), dtype="float64"))  # rounds
    out = simplify(canonicalize(g, _ctx(g)).graph, _ctx(g))
    assert not out.changed


def test_transposes_compose_into_one():
    with caramba.Graph("g") as g:
        x = g.input("x", (2, 3, 4))
        g.output("y", ops.transpose(ops.transpose(x, perm=[1, 0, 2]), perm=[0, 2, 1]))
    out = dce(simplify(g, _ctx(g)).graph, _ctx(g)).graph
    (t,) = [n for n in out.nodes if n.op == "shape.transpose"]
    assert t.attrs["perm"] == (1, 2, 0) and t.types[0].shape == (3, 4, 2)


# ---- dce ------------------------------------------------------------------------------------


def test_dce_removes_dead_pure_nodes_and_keeps_every_effect():
    with caramba.Graph("g") as g:
        g.variable("s", (3,), init="zeros")
        x = g.input("x", (3,))
        unused_in = g.input("unused", (3,))
        r = g.read("s")
        ops.exp(x)  # dead
        ops.uniform(shape=(3,), seed=1)  # random: an effect, kept
        g.write("s", r + x)
        step = g.constant(np.array(1, dtype=np.int64))
        g.call("train.checkpoint.save", (step, r), {"path": "/tmp/ck", "names": "s"})
        g.output("y", x * 2.0)
    out = dce(g, _ctx(g)).graph
    kept = _ops(out)
    assert "math.exp" not in kept
    for op in ("state.read", "state.write", "random.uniform", "train.checkpoint.save", "math.add"):
        assert op in kept, op
    assert out.has_node(unused_in.ref.node)


# ---- schedule -------------------------------------------------------------------------------


def test_schedule_keeps_effects_in_program_order_and_annotates_costs():
    with caramba.Graph("g") as g:
        g.variable("a", (8,), init="zeros")
        g.variable("b", (8,), init="zeros")
        x = g.input("x", (8,))
        ra = g.read("a")
        g.write("a", ra + x)
        rb = g.read("b")
        g.write("b", rb * x)
        g.output("y", ops.exp(x) + ops.sin(x))
    ctx = _ctx(g)
    out = schedule(g, ctx).graph
    eff = [n.id for n in out.nodes if n.effect is not Effect.pure]
    assert eff == [n.id for n in g.nodes if n.effect is not Effect.pure]
    sched = ctx.artifacts["schedule"]
    assert sched.costs["exp_1"].flops > 0 and sched.flops > 0 and sched.bytes > 0
    assert sched.peak_after <= sched.peak_before


def test_schedule_lowers_peak_memory_when_it_can():
    # Two independent chains, written interleaved: running one chain to the end first frees
    # its big intermediates before the other starts.
    with caramba.Graph("g") as g:
        x = g.input("x", (1000,))
        a1 = ops.exp(x)
        b1 = ops.sin(x)
        a2 = ops.tanh(a1)
        b2 = ops.cos(b1)
        a3 = a2.sum()
        b3 = b2.sum()
        g.output("y", a3 + b3)
    ctx = _ctx(g)
    res = schedule(g, ctx)
    sched = ctx.artifacts["schedule"]
    assert res.changed and sched.peak_after < sched.peak_before
    ir.verify(res.graph)


def test_the_compiler_imports_no_backend_and_folds_with_the_runners_evaluator():
    """Layering: constant folding evaluates through ``PassContext.evaluate`` (a runner's
    ``evaluate_constant``); without one nothing is folded, and importing the compiler loads no
    backend module."""
    import subprocess
    import sys

    code = ("import sys, caramba.compiler, caramba.compiler.pipeline, caramba.compiler.canonicalize; "
            "print([m for m in sys.modules if m.startswith('caramba.backends')])")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    with caramba.Graph("fold") as g:
        x = g.input("x", (2,))
        g.output("y", x + ops.exp(g.constant(np.array([0.0, 1.0]))))
    folded = canonicalize(g, _ctx(g)).graph
    assert "math.exp" not in _ops(folded)
    unfolded = canonicalize(g, PassContext(CAPS, "cpu", tuple(g.outputs))).graph
    assert "math.exp" in _ops(unfolded)
