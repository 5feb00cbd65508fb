"""Codegen without a device: the emitters' spelling, kernel text per language, launch plans and
buffer lifetimes, and the 2/pi table."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import caramba
from caramba import ops
from caramba.backends.codegen import CudaEmitter, WgslEmitter, generate
from caramba.backends.codegen.plan import make_plan
from caramba.backends.codegen.two_over_pi import TWO_OVER_PI_24
from caramba.ir.dtypes import DType


def _node_and_types(g, op):
    node = next(n for n in g.nodes if n.op == op)
    return node, tuple(g.type_of(r) for r in node.inputs)


def _add_graph(shape_a=(4, 6), shape_b=(6,), dtype="float64"):
    with caramba.Graph("add") as g:
        g.output("y", ops.add(g.input("a", shape_a, dtype), g.input("b", shape_b, dtype)))
    return g


def test_two_over_pi_chunks_match_mpmath():
    mpmath.mp.prec = 2000
    t = 2 / mpmath.pi
    for i, chunk in enumerate(TWO_OVER_PI_24):
        t *= 2**24
        want = int(mpmath.floor(t))
        t -= want
        assert chunk == want, f"chunk {i}"


def test_same_kernel_in_both_languages():
    node, ins = _node_and_types(_add_graph(), "math.add")
    cuda = generate(node, ins, CudaEmitter()).kernels[0]
    wgsl = generate(node, ins, WgslEmitter()).kernels[0]
    assert 'extern "C" __global__' in cuda.source and "const double* __restrict__ in0" in cuda.source
    assert "@compute @workgroup_size(64)" in wgsl.source and "array<f64>" in wgsl.source
    assert cuda.groups == wgsl.groups == 1 and cuda.workgroup == wgsl.workgroup == 64
    # CUDA bakes sizes into the text; WGSL reads them from the params buffer
    assert "% 6" in cuda.source and not cuda.values
    assert "cb_p[" in wgsl.source and 6 in wgsl.values and 24 in wgsl.values


def test_wgsl_kernels_are_shared_across_shapes_cuda_kernels_are_not():
    srcs = {}
    for shape in ((4, 6), (7, 9), (2, 3)):
        node, ins = _node_and_types(_add_graph(shape, shape[-1:]), "math.add")
        srcs[shape] = (generate(node, ins, WgslEmitter()).kernels[0], generate(node, ins, CudaEmitter()).kernels[0])
    assert len({w.source for w, _ in srcs.values()}) == 1
    assert len({c.source for _, c in srcs.values()}) == 3


def test_float32_contract_demotes_compute_not_storage():
    node, ins = _node_and_types(_add_graph(), "math.add")
    k = generate(node, ins, WgslEmitter(float64=False, store64=True)).kernels[0]
    assert "array<f64>" in k.source and "f32(in0[" in k.source and "= f64(" in k.source
    k32 = generate(node, ins, WgslEmitter(float64=False, int64=False, store64=False)).kernels[0]
    assert "f64" not in k32.source


def test_exact_gelu_uses_erfc_in_both_languages():
    with caramba.Graph("gelu") as g:
        g.output("y", ops.gelu(g.input("x", (5,))))
    node, ins = _node_and_types(g, "activation.gelu")
    assert "erfc(" in generate(node, ins, CudaEmitter()).kernels[0].source
    w = generate(node, ins, WgslEmitter()).kernels[0].source
    assert "cb_erfc_f64(" in w and "fn cb_erfc_f64" in w and "tanh" not in w


def test_matmul_is_cublas_on_cuda_and_a_tiled_kernel_in_wgsl():
    with caramba.Graph("mm") as g:
        g.output("y", g.input("a", (5, 7)) @ g.input("b", (7, 3)))
    node, ins = _node_and_types(g, "linalg.matmul")
    assert generate(node, ins, CudaEmitter()).steps[0].name == "gemm"
    k = generate(node, ins, WgslEmitter()).kernels[0]
    assert "workgroupBarrier" in k.source and k.workgroup == 256


def test_plan_views_lifetimes_and_read_after_write():
    with caramba.Graph("plan") as g:
        x = g.input("x", (2, 6))
        s = g.variable("s", (3, 4), init="zeros")
        a = ops.exp(x, name="a")
        r = ops.reshape(a, shape=(3, 4), name="r")
        b = ops.add(r, s, name="b")
        g.write("s", b)
        g.output("y", ops.mul(g.read("s"), 2.0, name="c"))
    plan = make_plan(g, WgslEmitter())
    ops_ = [st.node.op for st in plan.steps]
    assert ops_[:3] == ["math.exp", "shape.reshape", "math.add"]
    steps = {st.node.id: st for st in plan.steps}
    assert plan.root[steps["r"].outputs[0]] == steps["a"].outputs[0]  # reshape is a view
    assert steps["r"].program.kernels == []
    assert steps["a"].outputs[0] in steps["b"].release  # dead after its view's last reader
    read_after_write = next(n for n in g.nodes if n.op == "state.read" and n.id != "s" and plan.root.get(n.outputs[0]) != n.outputs[0])
    assert plan.root[read_after_write.outputs[0]] == steps["b"].outputs[0]
    assert steps["b"].outputs[0] not in steps["c"].release  # written to state: pinned


@pytest.mark.parametrize("emitter", [CudaEmitter(), WgslEmitter()], ids=["cuda", "wgsl"])
def test_literals_are_exact(emitter):
    assert float(emitter.lit(0.1, DType.float64).rstrip("lf")) == 0.1
    assert emitter.lit(np.float32(0.1), DType.float32).startswith(repr(float(np.float32(0.1))))
    assert "-9223372036854775807" in emitter.lit(-(2**63), DType.int64)
    assert emitter.inf(DType.float64) != emitter.nan(DType.float64)
