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
from caramba.ir.dtypes import DType, rank_of_precision

from .conftest import BACKEND_PARAMS
from .harness import Case, arg, run_case, tol, uniform
from .reference import mp_unary

F64, F32 = DType.float64, DType.float32


def _gelu_graph(shape=(3, 4), dtype=F64, name="contract", precision=None):
    with ir.Graph(name) as g:
        x = g.input("x", shape, dtype)
        g.output("y", ops.gelu(ops.mul(x, 2.0, precision=precision), name="act", precision=precision))
    return g


def _opt_in(runner, *op_ids: str) -> DType | None:
    """The precision opt-in float64 nodes of these ops need on ``runner``: None where it
    computes them at float64, else what it computes them at (a float32-contract backend, e.g.
    ``webgpu:precision=float32``, refuses them without it; see test_float32_contract_*)."""
    caps = runner.capabilities
    if all(caps.offers(op, F64) for op in op_ids):
        return None
    return min((caps.precision_for(op) for op in op_ids), key=rank_of_precision)


def _gelu_for(runner, shape=(3, 4), name="contract"):
    """The float64 gelu graph, opted in where ``runner`` computes it below float64, so the
    contract tests below test their own contract (transfers, inputs, close...) on every backend."""
    return _gelu_graph(shape, F64, name, _opt_in(runner, "math.mul", "activation.gelu"))


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
    exe = runner.compile(_gelu_for(runner))
    with pytest.raises(TransferError, match="input 'x' is a ndarray, not a tensor") as info:
        exe.run({"x": np.ones((3, 4))})
    assert runner.location in str(info.value) and "upload" in str(info.value)


def test_tensor_of_another_runner_is_a_transfer_error(runner, backend):
    other = compute.new(backend)
    try:
        t = other.upload(np.ones((3, 4)))
        with pytest.raises(TransferError, match="input 'x' lives on another .* runner"):
            runner.compile(_gelu_for(runner)).run({"x": t})
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


def test_upload_and_download_never_alias_at_any_size(runner):
    """A tensor never aliases the caller's array, either way. Many sizes: a runtime that aliases
    suitably aligned host memory (XLA's CPU client does) would do it for some of them only."""
    for n in range(1, 40):
        a = np.ones(n)
        t = runner.upload(a)
        a[0] = 7.0
        back = t.download()
        assert back[0] == 1.0, f"upload of a [{n}] array aliased the host array"
        back[-1] = 5.0
        assert t.download()[-1] == 1.0, f"download of a [{n}] tensor aliased the tensor"


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
    exe = runner.compile(_gelu_for(runner))
    with pytest.raises(GraphError, match=match):
        exe.run({k: runner.upload(v) for k, v in feed.items()})


def test_inputs_are_checked_after_good_runs_too(backend):
    # Backends may skip re-checking the same tensors, or start the work before checking (xla):
    # whatever comes after good runs is refused as on a first run, and the state is unchanged.
    r, other = compute.new(backend), compute.new(backend)
    try:
        precision = _opt_in(r, "math.add")
        with ir.Graph("acc") as g:
            w = g.variable("acc.w", (3, 4), "float64", "zeros")
            x = g.input("x", (3, 4), "float64")
            g.write("acc.w", ops.add(w, x, precision=precision))
            g.output("before", w)
        exe = r.compile(g)
        x = r.upload(np.ones((3, 4)))
        for _ in range(2):
            exe.run({"x": x})
        refused = [
            ({"x": other.upload(np.ones((3, 4)))}, TransferError, "input 'x' lives on another .* runner"),
            ({"x": np.ones((3, 4))}, TransferError, "not a tensor"),
            ({"x": r.upload(np.ones((4, 3)))}, GraphError, "declares f64\\[3,4\\]"),
            ({"x": x, "z": x}, GraphError, "unexpected \\['z'\\]"),
            ({}, GraphError, "missing \\['x'\\]"),
        ]
        for feed, error, match in refused:
            with pytest.raises(error, match=match):
                exe.run(feed)
            np.testing.assert_array_equal(r.state["acc.w"].download(), np.full((3, 4), 2.0))
        assert exe.run({"x": x})["before"].download()[0, 0] == 2.0
        np.testing.assert_array_equal(r.state["acc.w"].download(), np.full((3, 4), 3.0))
    finally:
        r.close()
        other.close()


def test_stateless_reruns_are_checked_too(backend):
    # A graph without state rerun on the same tensors may go straight to its kernels (cpu):
    # another feed after good runs is refused as on a first run, and each run's outputs are
    # its own (an earlier result is not overwritten by a later run).
    r, other = compute.new(backend), compute.new(backend)
    try:
        d = _float_for(r, "math.exp")
        with ir.Graph("pure") as g:
            x = g.input("x", (3, 4), d)
            g.output("y", ops.exp(x))
        exe = r.compile(g)
        x0 = r.upload(np.zeros((3, 4), d.numpy))
        first = [exe.run({"x": x0})["y"] for _ in range(3)]
        assert len({id(t) for t in first}) == 3
        refused = [
            ({"x": other.upload(np.zeros((3, 4), d.numpy))}, TransferError, "input 'x' lives on another .* runner"),
            ({"x": np.zeros((3, 4), d.numpy)}, TransferError, "not a tensor"),
            ({"x": r.upload(np.zeros((4, 3), d.numpy))}, GraphError, "\\[3,4\\]"),
            ({"x": x0, "z": x0}, GraphError, "unexpected \\['z'\\]"),
            ({}, GraphError, "missing \\['x'\\]"),
            (None, GraphError, "missing \\['x'\\]"),
        ]
        for feed, error, match in refused:
            with pytest.raises(error, match=match):
                exe.run(feed)
        x1 = r.upload(np.ones((3, 4), d.numpy))
        later = exe.run({"x": x1})["y"]
        again = exe.run({"x": x1})["y"]
        for t in first:
            np.testing.assert_array_equal(t.download(), np.ones((3, 4)))
        np.testing.assert_allclose(later.download(), np.full((3, 4), np.e), rtol=1e-6)
        np.testing.assert_array_equal(again.download(), later.download())
        r.close()
        with pytest.raises(RunnerClosed):
            exe.run({"x": x1})
    finally:
        r.close()
        other.close()


def test_outputs_are_resident_tensors(runner):
    out = _run(runner, _gelu_for(runner), x=np.ones((3, 4)))
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
    a, b = _gelu_for(runner, name="cache"), _gelu_for(runner, name="cache")
    assert runner.compile(a) is runner.compile(b)  # equal graphs: one executable
    assert runner.compile(_gelu_for(runner, shape=(2, 2), name="cache")) is not runner.compile(a)


def test_kernel_errors_name_the_node(runner):
    with ir.Graph("oob") as g:
        x = g.input("x", (4,))
        i = g.input("i", (2,), "int64")
        g.output("y", ops.gather(x, i, name="pick", precision=_opt_in(runner, "shape.gather")))
    exe = runner.compile(g)
    with pytest.raises(CarambaError, match="node 'pick'"):
        exe.run({"x": runner.upload(np.zeros(4)), "i": runner.upload(np.array([0, 9]))})["y"].download()


# ---- state ---------------------------------------------------------------------------------------


def test_state_persists_and_is_shared_between_executables(fresh_runner):
    r = fresh_runner
    with ir.Graph("step") as g:
        w = g.variable("m.w", (2,), "float64", "external")
        g.write("m.w", ops.mul(w, 2.0, precision=_opt_in(r, "math.mul")))
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
    g = _gelu_for(r)
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


# ---- the precision contract on the runner under test (DESIGN §1.3) --------------------------------------


def _exp_half_graph(precision_half=None, precision_exp=None):
    with ir.Graph("contract_f64") as g:
        x = g.input("x", (64,), F64)
        h = ops.mul(x, 0.5, name="half", precision=precision_half)
        g.output("h", h)  # an output of its own: not fused into the exp, so lowering sees two nodes
        g.output("y", ops.exp(h, name="e", precision=precision_exp))
    return g


def test_float64_nodes_without_opt_in_are_refused_and_opted_in_nodes_run(runner):
    """On a backend that computes float64 below float64 (``webgpu:precision=float32``, an
    adapter without shader-f64) lowering refuses every float64 node that does not opt in, with a
    PrecisionError naming each node and the backend, before anything runs; with the opt-in the
    nodes run and match at the precision computed. A backend computing float64 at float64 runs
    the graph as it is, at float64 tolerance; an opt-in to float32 is legal there too."""
    import mpmath as mp

    from .harness import compare

    caps = runner.capabilities
    for op in ("math.mul", "math.exp"):
        if F64 not in caps.dtypes(op):
            pytest.skip(f"{runner.location} does not claim {op} at float64 (test_ops checks the refusal)")
    x = np.random.default_rng(7).uniform(-3, 3, 64).astype(np.float32).astype(np.float64)  # exact in f32
    with mp.workdps(40):
        want = np.array([float(mp.exp(mp.mpf(v) / 2)) for v in x])
    low = _opt_in(runner, "math.mul", "math.exp")

    def run(g):
        out = runner.execute(g, inputs={"x": runner.upload(x)})
        assert all(t.dtype is F64 and t.location == runner.location for t in out.values())
        np.testing.assert_array_equal(out["h"].download(), x / 2)  # exact at either precision
        return out["y"].download()

    if low is None:
        compare(run(_exp_half_graph()), want, F64, tol(4, 1), "float64 graph")
        compare(run(_exp_half_graph("float32", "float32")), want, F32, tol(4, 1), "opted in to float32")
        return
    # the float32 contract: no opt-in -> refused at lowering, naming both nodes
    with pytest.raises(PrecisionError) as info:
        runner.compile(_exp_half_graph())
    msg = str(info.value)
    assert "2 problem(s)" in msg and runner.location in msg, msg
    assert f"node 'half' (math.mul): math.mul needs float64 precision; {runner.location} computes it at {low.value}" in msg, msg
    assert f"node 'e' (math.exp): math.exp needs float64 precision; {runner.location} computes it at {low.value}" in msg, msg
    assert f"opt in with precision={low.value}" in msg, msg
    # one node opted in: the other is still refused, and only it
    with pytest.raises(PrecisionError) as info:
        runner.compile(_exp_half_graph(precision_half=low))
    msg = str(info.value)
    assert "1 problem(s)" in msg and "node 'e'" in msg and "node 'half'" not in msg, msg
    # both opted in: runs, float64 values computed at the opted-in precision
    compare(run(_exp_half_graph(low, low)), want, low, tol(4, 1), f"opted in to {low.value}")


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
        # not vacuous at the opted-in precision either: a wrong result still fails
        wrong = Case("sin-vs-cos", (arg((64,), uniform(-3, 3)),), {}, mp_unary(mp.cos), tol(4, 1), op="math.sin")
        with pytest.raises(AssertionError, match="out of tolerance"):
            run_case(r, wrong, F64)
        # ... and so does a backend that runs a refused node instead of refusing it
        lax = dataclasses.replace(r.capabilities, precision={"*": F64})
        with pytest.raises(AssertionError, match="compiled nodes below their required precision without an opt-in"):
            with _lowering_with(r, lax):
                run_case(r, case, F64)
    finally:
        r.close()


def _lowering_with(runner, caps):
    """Context: ``runner`` compiles against ``caps`` while the harness reads its declared ones
    (a backend whose lowering does not enforce what it declares)."""
    import contextlib

    @contextlib.contextmanager
    def ctx():
        declared = runner.capabilities
        original = type(runner).compile

        def compile_(self, graph, targets=None, **kw):
            self.capabilities = caps
            try:
                return original(self, graph, targets, **kw)
            finally:
                self.capabilities = declared

        runner.compile = compile_.__get__(runner)
        try:
            yield
        finally:
            del runner.compile

    return ctx()


def test_harness_judges_what_lowering_receives():
    """A no-op the pipeline removes (cast to the same dtype, identity transpose) asks nothing of
    the backend, so a float32-contract runner runs it exactly without an opt-in; a real float64
    compute node next to it is still refused."""
    r = compute.new("cpu")
    try:
        r.capabilities = dataclasses.replace(r.capabilities, precision=F32_BACKEND)
        ident = Case("same-dtype", (arg((7,), uniform(-3, 3)),), {"dtype": F64}, lambda x, **a: x, tol(0, 0), op="math.cast")
        run_case(r, ident, F64)  # no PrecisionError expected, and exact
        with ir.Graph("noop_then_exp") as g:
            x = g.input("x", (7,), F64)
            g.output("y", ops.exp(ops.transpose(ops.cast(x, dtype=F64)), name="e"))
        with pytest.raises(PrecisionError, match="1 problem\\(s\\)") as info:
            r.compile(g)
        assert "node 'e'" in str(info.value)
    finally:
        r.close()


def test_harness_batches_keep_failures_on_their_case():
    """Claimed cases of a row run as one graph; a wrong result fails only its own case, and a
    case that fails when run (an index out of range) is found by running the batch's members
    alone, so the error names its node and the others still pass."""
    import mpmath as mp

    from caramba.errors import CarambaError

    from .harness import values

    sin_ok = Case("ok", (arg((64,), uniform(-3, 3)),), {}, mp_unary(mp.sin), tol(4, 1), op="math.sin")
    sin_bad = Case("bad", (arg((7,), uniform(-3, 3)),), {}, mp_unary(mp.cos), tol(4, 1), op="math.sin")
    take = lambda x, i, **a: x[i]
    ok = Case("ok", (arg((4,)), arg((2,), values([0, 3]), "int64")), {}, take, tol(0, 0), op="shape.gather")
    oob = Case("oob", (arg((4,)), arg((2,), values([0, 9]), "int64")), {}, take, tol(0, 0), op="shape.gather")
    with compute.new("cpu") as r:
        run_case(r, sin_ok, F64, (sin_ok, sin_bad))
        with pytest.raises(AssertionError, match="math.sin\\[bad\\] output out .* out of tolerance"):
            run_case(r, sin_bad, F64, (sin_ok, sin_bad))
        with pytest.raises(CarambaError, match="node 'under_test'"):
            run_case(r, oob, F64, (ok, oob))
        run_case(r, ok, F64, (ok, oob))

