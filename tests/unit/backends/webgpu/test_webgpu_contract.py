"""The webgpu precision contract and runner behaviour: float64 nodes without an opt-in are
refused at lowering under the float32 contract, opted-in nodes run at float32 accuracy, float64
plumbing stays exact where the adapter stores f64, and device-side index checks raise."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import ops
from caramba.compute import build_info, new, parse_spec
from caramba.errors import ConfigError, GraphError, PrecisionError
from caramba.ir.dtypes import DType


def _graph(precision=None):
    with caramba.Graph("contract") as g:
        x = g.input("x", (4, 5))
        g.output("y", ops.gelu(ops.exp(x, name="e", precision=precision), name="act", precision=precision))
    return g


def test_build_info_and_location(gpu):
    info = build_info("webgpu")
    assert info.available and info.location == gpu.location
    assert gpu.location.startswith("webgpu:") or gpu.location == "metal"
    assert "wgpu" in info.versions and "adapter" in info.details


def test_options_are_validated():
    assert parse_spec("webgpu:precision=float32") == ("webgpu", {"precision": "float32"})
    with pytest.raises(ConfigError, match="one of float64, float32"):
        parse_spec("webgpu:precision=float16")
    with pytest.raises(ConfigError, match="valid options: adapter, precision"):
        parse_spec("webgpu:threads=2")


def test_float64_nodes_without_opt_in_are_refused_under_the_float32_contract(gpu32):
    with pytest.raises(PrecisionError) as info:
        gpu32.compile(_graph())
    msg = str(info.value)
    assert "node 'act'" in msg and "precision=float32" in msg  # (exp and gelu fuse into 'act')
    assert gpu32.location in msg
    with pytest.raises(PrecisionError, match="node 'e'"):
        gpu32.compile(_graph(), disable=("fuse",))


def test_opted_in_nodes_run_at_float32_accuracy(gpu32):
    x = np.random.default_rng(0).uniform(-2, 2, (4, 5))
    out = gpu32.execute(_graph(DType.float32), inputs={"x": gpu32.upload(x)})["y"]
    assert out.dtype is DType.float64
    import scipy.special as sc

    e = np.exp(x)
    want = 0.5 * e * sc.erfc(-e / np.sqrt(2))
    got = out.download()
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, want, rtol=1e-12, atol=0)  # really computed at float32


def test_float64_plumbing_is_exact_where_the_adapter_stores_f64(gpu32):
    if not gpu32.emitter.exact_storage:
        pytest.skip("adapter stores float64 as f32")
    x = np.random.default_rng(1).normal(size=(3, 7))
    with caramba.Graph("ident") as g:
        g.output("y", g.input("x", (3, 7)))
    got = gpu32.execute(g, inputs={"x": gpu32.upload(x)})["y"].download()
    np.testing.assert_array_equal(got, x)


def test_float64_runs_in_float64_by_default(gpu):
    if not gpu.emitter.float64:
        pytest.skip("adapter has no shader-f64")
    x = np.random.default_rng(2).uniform(-2, 2, (4, 5))
    cpu = new("cpu")
    ref = cpu.execute(_graph(), inputs={"x": cpu.upload(x)})["y"].download()
    got = gpu.execute(_graph(), inputs={"x": gpu.upload(x)})["y"].download()
    np.testing.assert_allclose(got, ref, rtol=1e-14, atol=0)


def test_bool_and_int_tensors_round_trip(gpu):
    b = np.array([[True, False, True]])
    i = np.array([-(2**40), 3, 2**40], dtype=np.int64)
    assert gpu.upload(b).download().tolist() == b.tolist()
    assert gpu.upload(i).download().tolist() == i.tolist()


def test_index_out_of_range_is_an_error_naming_the_node(gpu):
    with caramba.Graph("gather") as g:
        x = g.input("x", (4,))
        i = g.input("i", (2,), "int64")
        g.output("y", ops.gather(x, i, name="pick"))
    exe = gpu.compile(g)
    ok = exe.run({"x": gpu.upload(np.arange(4.0)), "i": gpu.upload(np.array([-1, 2]))})["y"].download()
    assert ok.tolist() == [3.0, 2.0]
    with pytest.raises(Exception, match="out of range") as info:
        exe.run({"x": gpu.upload(np.arange(4.0)), "i": gpu.upload(np.array([0, 4]))})
    assert "pick" in str(info.value)


def test_unsupported_dtype_is_refused_at_upload(gpu):
    with pytest.raises(Exception, match="cannot hold"):
        gpu.upload(np.zeros(3, dtype=np.float16))


def test_graph_errors_stay_graph_errors():
    with pytest.raises(GraphError):
        with caramba.Graph("bad") as g:
            ops.matmul(g.input("a", (2, 3)), g.input("b", (2, 3)))
