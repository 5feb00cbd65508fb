"""The xla backend: resident jax.Arrays, scoped float64, state, checks, lowering refusals."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("jax")

import caramba
from caramba import compute, ops
from caramba.errors import (
    CarambaError,
    ConfigError,
    RunnerClosed,
    StateError,
    TransferError,
    UnsupportedOperation,
)


@pytest.fixture(scope="module")
def xla():
    r = compute.new("xla")
    yield r
    r.close()


@pytest.fixture(scope="module")
def cpu():
    r = compute.new("cpu")
    yield r
    r.close()


def run(r, g, **inputs):
    outs = r.execute(g, None, {k: r.upload(v) for k, v in inputs.items()})
    return {k: v.download() for k, v in outs.items()}


def test_build_info_does_not_import_jax():
    code = (
        "import sys; from caramba.compute import build_info; i = build_info('xla');"
        "print(i.available, 'jax' in sys.modules, 'jaxlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False", "False"]


def test_location_and_round_trip_of_every_dtype(xla):
    assert xla.location == "xla:cpu"
    for d in ("float64", "float32", "float16", "int64", "int32", "int8", "uint8", "bool"):
        a = (np.arange(6).reshape(2, 3) % 3).astype(d)
        t = xla.upload(a)
        assert t.location == "xla:cpu" and t.shape == (2, 3) and t.dtype.value == d
        back = t.download()
        assert back.dtype == a.dtype and np.array_equal(back, a)
    scalar = xla.upload(np.float64(2.5))
    assert scalar.shape == () and scalar.download() == 2.5


def test_upload_copies_the_host_array(xla):
    a = np.ones(4)
    t = xla.upload(a)
    a[0] = 7.0
    assert t.download()[0] == 1.0


def test_float64_without_touching_global_jax_config(xla):
    import jax

    before = jax.config.jax_enable_x64
    g = caramba.trace(lambda x: ops.exp(x) * 3.0, ((5,), "float64"))
    x = np.linspace(-1, 1, 5)
    y = run(xla, g, x=x)["out"]
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, np.exp(x) * 3.0, rtol=1e-15)
    assert jax.config.jax_enable_x64 == before


def test_cpu_runs_on_jax_cpu_client_by_default(xla):
    """The shared client runs a program's independent parts concurrently (train steps)."""
    import jax

    assert xla.device == jax.devices("cpu")[0]
    assert xla.upload(np.arange(4.0)).array.devices() == {jax.devices("cpu")[0]}


def test_sync_runs_on_a_client_of_its_own():
    """``xla:sync``: caramba's synchronous CPU client; JAX's default devices and settings stay the user's."""
    import jax

    before = (jax.devices("cpu"), jax.config.read("jax_cpu_enable_async_dispatch"))
    xs = compute.new("xla:sync")
    try:
        t = xs.upload(np.arange(4.0))
        out = run(xs, caramba.trace(lambda x: x + 1.0, ((4,), "float64")), x=np.arange(4.0))["out"]
        assert out.tolist() == [1.0, 2.0, 3.0, 4.0]
        assert t.array.devices() == {xs.device} and xs.device.client is not jax.devices("cpu")[0].client
        assert (jax.devices("cpu"), jax.config.read("jax_cpu_enable_async_dispatch")) == before
        user = jax.numpy.arange(3.0) * 2  # the user's own JAX still runs on its default device
        assert user.devices() == {jax.devices("cpu")[0]}
    finally:
        xs.close()
    with pytest.raises(CarambaError, match="sync option is for the cpu platform"):
        compute.new("xla:cuda,sync")


def test_without_a_private_client_the_shared_one_is_used_and_said(monkeypatch):
    import jax
    from jax._src.lib import xla_client

    from caramba.backends.xla import runner as xr

    def missing(**_):
        raise AttributeError("no make_cpu_client")

    shared = jax.devices("cpu")[0]  # JAX's own client first: it is made with make_cpu_client too
    monkeypatch.setattr(xla_client, "make_cpu_client", missing)
    with pytest.warns(RuntimeWarning, match="xla:sync runs on JAX's shared CPU client.*no make_cpu_client"):
        assert xr._sync_cpu_device.__wrapped__() == shared


def test_dense_gelu_matches_cpu(xla, cpu):
    g = caramba.trace(lambda x, w, b: ops.gelu(x @ w + b), ((8, 16), "float64"), ((16, 4), "float64"), ((4,), "float64"))
    rng = np.random.default_rng(0)
    ins = {"x": rng.standard_normal((8, 16)), "w": rng.standard_normal((16, 4)), "b": rng.standard_normal(4)}
    np.testing.assert_allclose(run(xla, g, **ins)["out"], run(cpu, g, **ins)["out"], rtol=1e-13, atol=1e-15)


def _counter():
    with caramba.Graph("step") as g:
        w = g.variable("w", (3,), init="zeros")
        x = g.input("x", (3,))
        g.write("w", w + x)
        g.output("before", w)
    return g


def test_state_stays_resident_between_runs(xla):
    r = compute.new("xla")
    try:
        exe = r.compile(_counter())
        x = r.upload(np.ones(3))
        first = exe.run({"x": x})["before"]
        for _ in range(3):
            out = exe.run({"x": x})
        assert np.array_equal(first.download(), np.zeros(3))
        assert np.array_equal(out["before"].download(), np.full(3, 3.0))
        assert np.array_equal(r.state["w"].download(), np.full(3, 4.0))
        assert r.state["w"].location == "xla:cpu"
    finally:
        r.close()


def test_donated_state_invalidates_old_handles():
    r = compute.new("xla:cpu,donate")
    try:
        exe = r.compile(_counter())
        x = r.upload(np.ones(3))
        exe.run({"x": x})
        old = r.state["w"]
        exe.run({"x": x})
        assert np.array_equal(r.state["w"].download(), np.full(3, 2.0))
        if old.array.is_deleted():  # donation is a hint XLA may decline
            with pytest.raises(StateError, match="donated"):
                old.download()
    finally:
        r.close()


def test_gather_out_of_range_is_an_error_naming_the_node(xla):
    with caramba.Graph("ga") as g:
        x = g.input("x", (5,))
        i = g.input("i", (2,), "int64")
        g.output("y", ops.gather(x, i, name="pick"))
    assert run(xla, g, x=np.arange(5.0), i=np.array([-1, 2]))["y"].tolist() == [4.0, 2.0]
    with pytest.raises(CarambaError, match="out of range") as info:
        run(xla, g, x=np.arange(5.0), i=np.array([5, 2]))
    assert info.value.node == "pick"


def test_tensors_of_another_runner_are_refused(xla, cpu):
    g = caramba.trace(lambda x: x * 2.0, ((3,), "float64"))
    with pytest.raises(TransferError, match="lives on cpu"):
        xla.execute(g, None, {"x": cpu.upload(np.ones(3))})
    with pytest.raises(TransferError):
        xla.state["w"] = cpu.upload(np.ones(3))


def test_unclaimed_dtype_is_refused_at_lowering(xla):
    # bfloat16 is not claimed: refused before anything runs, naming node, op and backend
    g = caramba.trace(lambda x: ops.exp(x), ((3,), "bfloat16"))
    with pytest.raises(UnsupportedOperation, match="does not take bfloat16") as info:
        xla.compile(g)
    assert info.value.backend == "xla:cpu" and info.value.op is not None


def test_capability_table_is_the_lowering_table(xla):
    from caramba.backends.xla.capabilities import PLUMBING
    from caramba.backends.xla.lowering import RULES

    assert set(xla.capabilities.ops) == set(RULES) | set(PLUMBING)
    assert set(RULES) <= set(caramba.ir.all_ops())


def test_graphs_differing_only_in_names_share_one_compilation(xla):
    from caramba.backends.xla import runner as xr

    def build(name, node):
        with caramba.Graph(name) as g:
            x = g.input(f"in_{name}", (4,))
            g.output(f"out_{name}", ops.tanh(x, name=node) * 0.25)
        return g

    a, b = xla.compile(build("a", "t1")), xla.compile(build("b", "t2"))
    assert a._core is b._core
    assert run(xla, build("b", "t2"), in_b=np.zeros(4))["out_b"].tolist() == [0.0] * 4
    assert xr.structure_key(build("a", "t1")) == xr.structure_key(build("c", "t9"))


def test_random_is_reproducible_per_seed_and_key(xla):
    with caramba.Graph("rng") as g:
        k = g.input("k", (), "int64")
        g.output("u", ops.uniform(k, shape=(1000,), seed=3))
    a = run(xla, g, k=np.int64(1))["u"]
    b = run(xla, g, k=np.int64(1))["u"]
    c = run(xla, g, k=np.int64(2))["u"]
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert 0.0 <= a.min() and a.max() < 1.0 and abs(a.mean() - 0.5) < 0.05


def test_closed_runner_refuses_use():
    r = compute.new("xla")
    t = r.upload(np.ones(2))
    r.close()
    r.close()
    with pytest.raises(RunnerClosed):
        t.download()
    with pytest.raises(RunnerClosed):
        r.upload(np.ones(2))


def test_platform_options():
    with pytest.raises(ConfigError, match="one platform option"):
        compute.new("xla:cpu,cuda")
    with pytest.raises(ConfigError, match="unknown option 'gpu'"):
        compute.new("xla:gpu")


def test_wait_blocks_until_ready(xla):
    t = xla.upload(np.ones(3))
    assert t.wait() is t



def _mlp_step(batch=8, sizes=(4, 6, 3)):
    from caramba.train import MLP, Adam, TrainStep, cross_entropy

    model = MLP(list(sizes), activation=lambda h: ops.gelu(h, approximate="none"))
    return TrainStep(model, lambda m, x, y: cross_entropy(m(x), y), Adam(1e-2),
                     {"x": ((batch, sizes[0]), "float64"), "y": ((batch,), "int64")})


def _trainer(r, step, seed=0):
    from caramba.train import Trainer

    trainer = Trainer(step, r)
    rng = np.random.default_rng(seed)
    for name, p in step.model.parameters().items():
        r.state[name] = r.upload(rng.standard_normal(p.type.shape) * 0.5)
    return trainer


def test_donated_state_writes_reuse_their_own_buffers():
    # JAX pairs donated arguments with results by shape, in order: every write must land in
    # its own state's buffer (a bias's buffer handed to an Adam moment makes XLA copy).
    import re

    r = compute.new("xla:donate")
    try:
        exe = _trainer(r, _mlp_step(sizes=(4, 6, 6, 3))).executable(("loss",))  # two biases of one shape
        text = exe._compiled.as_text()
        aliases = {int(o): int(p) for o, p in re.findall(r"\{(\d+)\}: \((\d+), \{\}, may-alias\)", text)}
        n_in, names = len(exe._in_names), exe._state_names
        want = {i: n_in + names.index(name) for i, name in enumerate(exe._writes)}
        assert len(want) == 19  # 6 parameters, their 12 Adam moments and the step counter
        assert aliases == want
        # the labels are checked on the host before the step: the step does not report them
        assert exe._host_checks and len(exe._compiled.out_info) == len(want) + 1  # + the loss
    finally:
        r.close()


def test_bad_label_under_donation_keeps_the_state():
    r = compute.new("xla:donate")
    try:
        exe = _trainer(r, _mlp_step()).executable(("loss",))
        x = r.upload(np.random.default_rng(1).standard_normal((8, 4)))
        exe.run({"x": x, "y": r.upload(np.arange(8) % 3)})
        before = {name: r.state[name].download() for name in r.state}
        with pytest.raises(CarambaError, match="labels outside .*state unchanged"):
            exe.run({"x": x, "y": r.upload(np.array([0, 1, 2, 3, 0, 1, 2, 0]))})
        after = {name: r.state[name].download() for name in r.state}  # still readable: not lost
        assert after.keys() == before.keys()
        for name, value in before.items():
            np.testing.assert_array_equal(after[name], value, err_msg=name)
        exe.run({"x": x, "y": r.upload(np.arange(8) % 3)})  # and training goes on from there
    finally:
        r.close()


def test_gelu_quotient_is_phi_and_keeps_the_division_at_zero_and_inf(xla, cpu):
    # xla answers gelu(x) / x with the forward's Phi(x) (shared with the gradient): the same
    # numbers as the division, NaN where the division is NaN.
    g = caramba.trace(lambda x: ops.gelu(x) / x, ((12,), "float64"))
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, -3.0, -0.5, 0.25, 2.0, 9.0, -30.0])
    got, ref = run(xla, g, x=x)["out"], run(cpu, g, x=x)["out"]
    assert np.isnan(got[:5]).all() and np.isnan(ref[:5]).all()
    np.testing.assert_allclose(got[5:], ref[5:], rtol=1e-13, atol=0)  # as dense+gelu above: the erfc tails differ
    np.testing.assert_allclose(got[5], 0.5, rtol=1e-15)


@pytest.mark.parametrize("spec", ["xla", "xla:donate", "xla:sync"])
def test_a_run_after_good_runs_still_checks_everything(spec, cpu):
    # repeated runs skip re-checking what cannot have changed, and a graph that donates nothing
    # starts before its checks: anything new is checked in full, and a refused run stores nothing
    from caramba.errors import GraphError

    xla, other = compute.new(spec), compute.new(spec)
    cross = compute.new("xla" if spec == "xla:sync" else "xla:sync")  # the other CPU client
    try:
        exe = xla.compile(_counter())
        x = xla.upload(np.ones(3))
        for _ in range(2):
            exe.run({"x": x})
        for feed, error, match in [
            ({"x": cpu.upload(np.ones(3))}, TransferError, "lives on cpu"),
            ({"x": other.upload(np.ones(3))}, TransferError, "lives on another xla:cpu runner"),
            ({"x": cross.upload(np.ones(3))}, TransferError, "lives on another xla:cpu runner"),
            ({"x": xla.upload(np.ones(4))}, GraphError, "declares"),
            ({"x": xla.upload(np.ones(3, np.float32))}, GraphError, "declares"),
            ({"x": x, "y": x}, GraphError, "unexpected"),
            ({}, GraphError, "missing"),
            (None, GraphError, "missing"),
        ]:
            with pytest.raises(error, match=match):
                exe.run(feed)
            assert xla.state["w"].download().tolist() == [2.0, 2.0, 2.0]
        xla.state["w"] = xla.upload(np.ones(2))  # the state changed under the executable
        with pytest.raises(StateError, match="declares"):
            exe.run({"x": x})
        xla.state["w"] = xla.upload(np.zeros(3))
        assert exe.run({"x": x})["before"].download().tolist() == [0.0, 0.0, 0.0]
        assert exe.run({"x": x})["before"].download().tolist() == [1.0, 1.0, 1.0]
        other_w = other.upload(np.zeros(3))
        with pytest.raises(TransferError):
            xla.state["w"] = other_w
        del xla.state["w"]  # state removed under the executable: created again from its init
        assert exe.run({"x": x})["before"].download().tolist() == [0.0, 0.0, 0.0]
    finally:
        xla.close()
        other.close()
        cross.close()


def test_a_pure_graph_rerun_on_the_direct_entry_still_checks_everything(cpu):
    # a graph with one result and no state: after its first run it is called through JAX's C++
    # entry (no Compiled.__call__) and its one result comes back bare; every wrong feed is still
    # refused with caramba's error, and a good feed after them gives the right numbers
    from caramba.errors import GraphError

    xla, other = compute.new("xla"), compute.new("xla")
    try:
        g = caramba.trace(lambda x: ops.exp(x) * 2.0, ((3,), "float64"))
        exe = xla.compile(g)
        x = xla.upload(np.array([0.0, 1.0, -1.0]))
        want = exe.run({"x": x})["out"].download()  # XLA's exp: within an ulp of NumPy's
        np.testing.assert_allclose(want, 2.0 * np.exp([0.0, 1.0, -1.0]), rtol=4e-16, atol=0)
        for _ in range(3):
            np.testing.assert_array_equal(exe.run({"x": x})["out"].download(), want)
        assert exe._direct and exe._single
        gone = xla.upload(np.ones(3))
        gone.array.delete()  # as a donated buffer is
        for feed, error, match in [
            ({"x": np.ones(3)}, TransferError, "not a tensor"),
            ({"x": cpu.upload(np.ones(3))}, TransferError, "lives on cpu"),
            ({"x": other.upload(np.ones(3))}, TransferError, "lives on another xla:cpu runner"),
            ({"x": xla.upload(np.ones(4))}, GraphError, "declares"),
            ({"x": xla.upload(np.ones(3, np.float32))}, GraphError, "declares"),
            ({"x": x, "y": x}, GraphError, "unexpected"),
            ({"y": x}, GraphError, "missing"),
            (None, GraphError, "missing"),
            ({"x": gone}, CarambaError, "no longer exists"),
        ]:
            with pytest.raises(error, match=match):
                exe.run(feed)
        y = xla.upload(np.array([2.0, 3.0, 4.0]))
        np.testing.assert_allclose(exe.run({"x": y})["out"].download(), 2.0 * np.exp([2.0, 3.0, 4.0]), rtol=4e-16, atol=0)
        other.close()
        np.testing.assert_array_equal(exe.run({"x": x})["out"].download(), want)
        xla.close()
        with pytest.raises(RunnerClosed):
            exe.run({"x": x})
    finally:
        xla.close()
        other.close()


def test_labels_are_checked_for_every_new_batch_under_donation():
    r = compute.new("xla:donate")
    try:
        exe = _trainer(r, _mlp_step()).executable(("loss",))
        x = r.upload(np.zeros((8, 4)))
        good = r.upload(np.arange(8) % 3)
        for _ in range(2):
            exe.run({"x": x, "y": good})
        with pytest.raises(CarambaError, match="labels outside"):
            exe.run({"x": x, "y": r.upload(np.full(8, -1))})
        exe.run({"x": x, "y": good})
    finally:
        r.close()


def test_closed_runner_refuses_a_run_and_a_wait():
    r = compute.new("xla")
    exe = r.compile(_counter())
    out = exe.run({"x": r.upload(np.ones(3))})["before"]
    r.close()
    with pytest.raises(RunnerClosed):
        out.wait()
    with pytest.raises(RunnerClosed):
        exe.run({"x": out})


@pytest.mark.parametrize("rows", [8, 600], ids=["shared-with-gradient", "recomputed"])
def test_gelu_gradient_matches_cpu_either_side_of_the_sharing_limit(xla, cpu, rows):
    # small inputs share erfc's exp and Phi with the gradient, large ones (> GELU_SHARE_BYTES)
    # recompute the exp from gelu(x) / x: the same numbers either way
    from caramba.autodiff import grad
    from caramba.backends.xla.lowering import GELU_SHARE_BYTES

    assert (rows * 256 * 8 > GELU_SHARE_BYTES) == (rows == 600)
    with caramba.Graph("g") as g:
        x = g.input("x", (rows, 256))
        y = ops.gelu(x)
        g.output("y", y)
        g.output("dx", grad((y * y).sum(), x))
    x = np.random.default_rng(3).standard_normal((rows, 256)) * 4
    x[0, :4] = [0.0, -40.0, 40.0, -6.0]
    got, ref = run(xla, g, x=x), run(cpu, g, x=x)
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(got["dx"], ref["dx"], rtol=1e-12, atol=1e-300)


def test_computed_indices_under_donation_are_checked_before_the_step():
    # indices the graph computes cannot be read on the host: a checks-only program runs first
    r = compute.new("xla:donate")
    try:
        with caramba.Graph("acc") as g:
            w = g.variable("w", (5,), init="zeros")
            i = g.input("i", (2,), "int64")
            picked = ops.gather(w, i + 1, name="pick")  # computed indices
            g.write("w", w + 1.0)
            g.output("y", picked)
        exe = r.compile(g)
        assert exe._host_checks is None and exe._preflight is not None
        exe.run({"i": r.upload(np.array([0, 2]))})
        with pytest.raises(CarambaError, match="out of range.*state unchanged") as info:
            exe.run({"i": r.upload(np.array([4, 0]))})
        assert info.value.node == "pick"
        assert r.state["w"].download().tolist() == [1.0] * 5  # one good step; the bad one never ran
        assert exe.run({"i": r.upload(np.array([1, 1]))})["y"].download().tolist() == [1.0, 1.0]
    finally:
        r.close()
