"""The backend contract every runner keeps: transfers, close, inputs, state, caching, and the
precision/legality rules lowering enforces from capabilities alone."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from caramba import compute, ir, ops
from caramba.compiler.pipeline import compile_for
from caramba.compute import Capabilities, Tensor
from caramba.errors import (
    CarambaError,
    ConfigError,
    GraphError,
    PrecisionError,
    RunnerClosed,
    StateError,
    TransferError,
    UnsupportedOperation,
)
from caramba.ir.dtypes import DType

from .conftest import BACKEND_PARAMS
from .harness import Case, arg, run_case, tol, uniform
from .reference import mp_unary

F64, F32 = DType.float64, DType.float32


def _gelu_graph(shape=(3, 4), dtype=F64, name="contract"):
    with ir.Graph(name) as g:
        x = g.input("x", shape, dtype)
        g.output("y", ops.gelu(x * 2.0, name="act"))
    return g


def _run(runner, g, **inputs):
    return runner.execute(g, inputs={k: runner.upload(v) for k, v in inputs.items()})


# ---- discovery -----------------------------------------------------------------------------


def test_every_registered_backend_is_a_parameter_or_skipped_with_its_reason():
    ids = {p.id for p in BACKEND_PARAMS}
    selected = os.environ.get("CARAMBA_COMPLIANCE_BACKENDS")
    for name in compute.BACKENDS:
        if selected and name not in selected.split(","):
            continue
        assert any(i == name or i.startswith(name + ":") for i in ids), f"backend {name} is not in the suite"
    for p in BACKEND_PARAMS:
        for m in p.marks:
            if m.name == "skip":
                info = compute.build_info(p.id)
                assert not info.available and info.reason in m.kwargs["reason"]


# ---- transfers ---------------------------------------------------------------------------------


def test_host_array_as_input_is_a_transfer_error(runner):
    exe = runner.compile(_gelu_graph())
    with pytest.raises(TransferError, match="input 'x' is a ndarray, not a tensor") as info:
        exe.run({"x": np.ones((3, 4))})
    assert runner.location in str(info.value) and "upload" in str(info.value)


def test_tensor_of_another_runner_is_a_transfer_error(runner, backend):
    other = compute.new(backend)
    try:
        t = other.upload(np.ones((3, 4)))
        with pytest.raises(TransferError, match="input 'x' lives on"):
            runner.compile(_gelu_graph()).run({"x": t})
        with pytest.raises(TransferError):
            runner.state["contract.w"] = t
    finally:
        other.close()


def test_state_must_be_set_with_a_tensor(runner):
    with pytest.raises(TransferError, match="state 'contract.w' is a ndarray"):
        runner.state["contract.w"] = np.zeros(3)
    assert "contract.w" not in runner.state


def test_upload_takes_host_data_only(runner):
    t = runner.upload(np.arange(3.0))
    with pytest.raises(TransferError, match="upload takes host data"):
        runner.upload(t)


def test_no_implicit_conversion_to_numpy(runner):
    t = runner.upload(np.arange(3.0))
    with pytest.raises(TransferError, match="download"):
        np.asarray(t)


def test_upload_and_download_copy(runner):
    a = np.arange(6.0).reshape(2, 3)
    t = runner.upload(a)
    a[0, 0] = 100.0  # the tensor took a copy
    got = t.download()
    assert got[0, 0] == 0.0 and t.shape == (2, 3) and t.dtype is F64 and t.location == runner.location
    got[0, 1] = 100.0  # and download gives one
    np.testing.assert_array_equal(t.download(), np.arange(6.0).reshape(2, 3))
    f = runner.upload(np.array([1, 2], dtype=np.int32)).download_float64()
    assert f.dtype == np.float64 and f.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("value", [np.float64(2.5), np.array(3, dtype=np.int64), True])
def test_scalars_upload_as_rank_0(runner, value):
    t = runner.upload(value)
    assert t.shape == () and t.download().shape == ()


def test_upload_with_dtype_converts(runner):
    t = runner.upload([1, 2, 3], dtype="float32")
    assert t.dtype is F32 and t.download().dtype == np.float32


# ---- inputs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "feed, match",
    [
        ({}, "inputs are \\['x'\\]; missing \\['x'\\]"),
        ({"x": np.ones((3, 4)), "z": np.ones(1)}, "unexpected \\['z'\\]"),
        ({"x": np.ones((4, 3))}, "input 'x' is f64\\[4,3\\] but the graph declares f64\\[3,4\\]"),
        ({"x": np.ones((3, 4), dtype=np.float32)}, "input 'x' is f32\\[3,4\\] but the graph declares f64\\[3,4\\]"),
    ],
)
def test_wrong_inputs_are_refused_before_running(runner, feed, match):
    exe = runner.compile(_gelu_graph())
    with pytest.raises(GraphError, match=match):
        exe.run({k: runner.upload(v) for k, v in feed.items()})


def test_outputs_are_resident_tensors(runner):
    out = _run(runner, _gelu_graph(), x=np.ones((3, 4)))
    assert set(out) == {"y"}
    y = out["y"]
    assert isinstance(y, Tensor) and y.location == runner.location and y.shape == (3, 4) and y.dtype is F64


def _float_for(runner, *op_ids: str) -> DType:
    """float64 where the backend claims (and computes) these ops at it, else float32."""
    caps = runner.capabilities
    for d in (F64, F32):
        if all(d in caps.dtypes(op) and caps.offers(op, d) for op in op_ids):
            return d
    raise AssertionError(f"{runner.location} claims none of {op_ids} in float64 or float32")


def test_targets_select_outputs(runner):
    d = _float_for(runner, "math.exp", "math.sin")
    with ir.Graph("two") as g:
        x = g.input("x", (3,), d)
        g.output("a", ops.exp(x))
        g.output("b", ops.sin(x))
    out = runner.execute(g, ["b"], {"x": runner.upload(np.zeros(3, dtype=d.numpy))})
    assert set(out) == {"b"}
    np.testing.assert_array_equal(out["b"].download(), np.zeros(3))
    with pytest.raises(ConfigError, match="unknown target"):
        runner.compile(g, ["c"])


def test_compile_is_cached_by_graph_content(runner):
    a, b = _gelu_graph(name="cache"), _gelu_graph(name="cache")
    assert runner.compile(a) is runner.compile(b)  # equal graphs: one executable
    assert runner.compile(_gelu_graph(shape=(2, 2), name="cache")) is not runner.compile(a)


def test_kernel_errors_name_the_node(runner):
    with ir.Graph("oob") as g:
        x = g.input("x", (4,))
        i = g.input("i", (2,), "int64")
        g.output("y", ops.gather(x, i, name="pick"))
    exe = runner.compile(g)
    with pytest.raises(CarambaError, match="node 'pick'"):
        exe.run({"x": runner.upload(np.zeros(4)), "i": runner.upload(np.array([0, 9]))})["y"].download()


# ---- state ---------------------------------------------------------------------------------------


def test_state_persists_and_is_shared_between_executables(fresh_runner):
    r = fresh_runner
    with ir.Graph("step") as g:
        w = g.variable("m.w", (2,), "float64", "external")
        g.write("m.w", w * 2.0)
        g.output("w", w)
    with ir.Graph("peek") as p:
        p.output("w", p.variable("m.w", (2,), "float64", "external"))
    with pytest.raises(StateError, match="state 'm.w' .* is not set"):
        r.execute(g)
    r.state["m.w"] = r.upload(np.array([1.0, 3.0]))
    step = r.compile(g)
    seen = [step.run()["w"].download().tolist() for _ in range(3)]
    assert seen == [[1.0, 3.0], [2.0, 6.0], [4.0, 12.0]]
    np.testing.assert_array_equal(r.execute(p)["w"].download(), [8.0, 24.0])
    assert "m.w" in r.state and list(r.state) == ["m.w"] and len(r.state) == 1


def test_state_init_zeros_and_ones_are_made_on_the_device(fresh_runner):
    r = fresh_runner
    with ir.Graph("init") as g:
        g.output("z", g.variable("z", (2, 2), "float32", "zeros"))
        g.output("o", g.variable("o", (3,), "int64", "ones"))
    out = r.execute(g)
    np.testing.assert_array_equal(out["z"].download(), np.zeros((2, 2), np.float32))
    np.testing.assert_array_equal(out["o"].download(), np.ones(3, np.int64))
    assert out["o"].dtype is DType.int64 and r.state["z"].location == r.location


def test_state_of_the_wrong_type_is_refused(fresh_runner):
    r = fresh_runner
    with ir.Graph("typed") as g:
        g.output("w", g.variable("w", (2,), "float64"))
    r.state["w"] = r.upload(np.zeros(3))
    with pytest.raises(StateError, match="holds f64\\[3\\] but the graph declares f64\\[2\\]"):
        r.execute(g)


def test_state_write_of_the_wrong_type_is_a_graph_error():
    with ir.Graph("bad") as g:
        g.variable("w", (2,), "float64")
        with pytest.raises(GraphError, match="state.write of f32\\[2\\] into state 'w' declared f64\\[2\\]"):
            g.write("w", g.input("x", (2,), "float32"), id="wr")
        with pytest.raises(StateError, match="state 'v' is not declared"):
            g.write("v", g.input("y", (2,)))


def test_missing_state_name_is_a_state_error(fresh_runner):
    with pytest.raises(StateError, match="no state 'nope'"):
        fresh_runner.state["nope"]


# ---- close ----------------------------------------------------------------------------------------


def test_close_is_idempotent_and_final(fresh_runner):
    r = fresh_runner
    g = _gelu_graph()
    exe = r.compile(g)
    t = r.upload(np.ones((3, 4)))
    out = exe.run({"x": t})["y"]
    r.close()
    r.close()  # idempotent
    assert r.closed
    for call in (
        lambda: r.upload(np.ones(2)),
        lambda: r.compile(g),
        lambda: r.execute(g, inputs={"x": t}),
        lambda: exe.run({"x": t}),
        lambda: out.download(),
        lambda: t.download(),
    ):
        with pytest.raises(RunnerClosed, match="closed"):
            call()
    with pytest.raises(RunnerClosed):
        r.state["w"] = t


def test_runner_is_a_context_manager(backend):
    with compute.new(backend) as r:
        r.upload(np.ones(1))
    assert r.closed
    with pytest.raises(RunnerClosed):
        r.upload(np.ones(1))


# ---- legality and the precision contract (capabilities only; no device needed) -----------------------


def _caps(precision: dict, ops_: dict | None = None) -> Capabilities:
    plumbing = {op: frozenset(DType) for op in ("graph.input", "graph.constant", "state.read", "state.write")}
    table = {**plumbing, **(ops_ or {"activation.gelu": frozenset({F64, F32}), "math.mul": frozenset({F64, F32})})}
    return Capabilities(ops=table, precision=precision)


F32_BACKEND = {"*": F32, "graph": F64, "state": F64}  # computes in float32, holds float64 data


def test_float64_nodes_need_float64_precision():
    with pytest.raises(PrecisionError) as info:
        compile_for(_gelu_graph(), _caps(F32_BACKEND), "fake:f32")
    msg = str(info.value)
    assert "node 'act' (activation.gelu): activation.gelu needs float64 precision; fake:f32 computes it at float32" in msg
    assert "opt in with precision=float32" in msg
    assert "2 problem(s)" in msg  # every violation in one report (the mul too)


def test_precision_opt_in_per_node():
    with ir.Graph("opt_in") as g:
        x = g.input("x", (3,))
        g.output("y", ops.gelu(ops.mul(x, x, precision="float32"), name="act", precision="float32"))
    lowered, _ = compile_for(g, _caps(F32_BACKEND), "fake:f32")
    assert lowered.node("act").precision is F32


def test_float32_graphs_run_anywhere():
    lowered, _ = compile_for(_gelu_graph(dtype=F32), _caps(F32_BACKEND), "fake:f32")
    ir.verify(lowered)


def test_precision_per_family_and_op():
    caps = _caps({"*": F64, "activation": F32})
    with ir.Graph("mixed") as g:
        x = g.input("x", (3,))
        g.output("y", ops.gelu(x * x, name="act"))
    with pytest.raises(PrecisionError, match="1 problem\\(s\\)") as info:
        compile_for(g, caps, "fake:mixed")
    assert "node 'act'" in str(info.value)
    ok = _caps({"*": F64, "activation": F32, "activation.gelu": F64})
    compile_for(g, ok, "fake:mixed")


def test_unsupported_op_and_dtype_are_named():
    caps = _caps({"*": F64}, {"math.mul": frozenset({F32})})
    with pytest.raises(UnsupportedOperation) as info:
        compile_for(_gelu_graph(), caps, "fake:small")
    msg = str(info.value)
    assert "fake:small has no kernel for activation.gelu" in msg
    assert "math.mul on fake:small does not take float64 (takes float32)" in msg
    assert "node 'act'" in msg


def test_state_is_refused_by_a_stateless_backend():
    caps = dataclasses.replace(_caps({"*": F64}), state=False)
    with ir.Graph("st") as g:
        g.output("w", g.variable("w", (2,)))
    with pytest.raises(UnsupportedOperation, match="cannot hold resident state"):
        compile_for(g, caps, "fake:stateless")


# ---- the harness itself: not vacuous, and ready for float32-contract variants ------------------------


def test_harness_rejects_a_wrong_result(runner):
    import mpmath as mp

    wrong = Case("sin-vs-cos", (arg((64,), uniform(-3, 3)),), {}, mp_unary(mp.cos), tol(4, 1), op="math.sin")
    with pytest.raises(AssertionError, match="out of tolerance"):
        run_case(runner, wrong, _float_for(runner, "math.sin"))


def test_harness_runs_a_float32_contract_variant():
    """A runner that computes at float32 (e.g. webgpu without shader-f64): float64 cases must be
    refused with PrecisionError, then run with the opt-in at float32 tolerance."""
    import mpmath as mp

    r = compute.new("cpu")
    try:
        r.capabilities = dataclasses.replace(r.capabilities, precision=F32_BACKEND)
        case = Case("exp", (arg((64,), uniform(-3, 3)),), {}, mp_unary(mp.exp), tol(4, 1), op="math.exp")
        run_case(r, case, F64)
        run_case(r, case, F32)
    finally:
        r.close()
