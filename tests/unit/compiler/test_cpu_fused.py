"""The cpu backend's generated kernels agree with its NumPy kernels.

- Every scalar template (op x dtype the cpu declares fusable) against that op's cpu kernel,
  on random values and IEEE specials, in one generated kernel per dtype (compile time stays
  bounded).
- Kernel text is tested without Numba: shape-generic, broadcasting baked into indices.
- End to end: fused graphs (broadcasting, 0-d and empty shapes, reductions in both loop
  forms, softmax and layer norm along any axis, linear of several ranks, views and read-only
  inputs) give the unfused results, and the memory plan holds across runs.
"""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import ir, ops
from caramba.backends.cpu import fused as cpu_fused
from caramba.backends.cpu.fused import codegen
from caramba.backends.cpu.fused.scalar import CTOR, TABLE, cast
from caramba.backends.cpu.kernels import KERNELS
from caramba.compute import new
from caramba.ir.dtypes import DType
from caramba.ir.types import ValueType
from caramba.ops import fused as F

from ._util import assert_close, check_plan, run, unoptimized

needs_numba = pytest.mark.skipif(not cpu_fused.available(), reason="numba is not installed")

F64, F32, I64, I32, B = DType.float64, DType.float32, DType.int64, DType.int32, DType.bool

# (op, attrs, arity, [dtypes]) cases for the template test; dtypes = those the table declares
CASES = [
    ("math.clamp", {"min": -1.0, "max": 1.5}, 1),
    ("activation.leaky_relu", {"alpha": 0.2}, 1),
    ("activation.gelu", {"approximate": "none"}, 1),
    ("activation.gelu", {"approximate": "tanh"}, 1),
    ("activation.elu", {"alpha": 0.7}, 1),
    ("activation.softplus", {"beta": 2.0}, 1),
    ("math.cast", {"dtype": "float32"}, 1),
    ("math.cast", {"dtype": "float64"}, 1),
    ("math.cast", {"dtype": "bool"}, 1),
]
SKIP = {"math.clamp", "activation.leaky_relu", "activation.gelu", "activation.elu", "activation.softplus",
        "math.cast", "shape.broadcast_to", "math.where", "math.logical_and", "math.logical_or", "math.logical_not"}
for _op in TABLE:
    if _op not in SKIP:
        CASES.append((_op, {}, 2 if ir.get_op(_op).arity == 2 else 1))


def _values(d: DType, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if d.is_float:
        v = rng.uniform(-3, 3, n)
        v[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-310, 40.0, -40.0]
        return v.astype(d.numpy)
    return rng.integers(-50, 50, n).astype(d.numpy)


def _template_kernel(d: DType, cases):
    """One kernel evaluating every case's template on (a, b) into a row of ``out`` (dtype d),
    ``outb`` (bool results) or ``outf`` (the other float type, for casts)."""
    lines = ["@njit(cache=True, error_model='numpy')", "def kernel(a, b, out, outb, outf):",
             "    for i in range(a.shape[0]):", "        x = a[i]", "        y = b[i]"]
    rows = []
    for op, attrs, arity in cases:
        step = F.Step("s", op, ir.get_op(op).version, (0, 1)[:arity], ir.get_op(op).make_attrs(attrs))
        ins = [ValueType((), d)] * arity
        out_t = ir.get_op(op).infer(tuple(ins), step.attrs)[0]
        text = cast(TABLE[op].emit(step, ["x", "y"][:arity], ins, out_t), out_t.dtype)
        target = "out" if out_t.dtype == d else ("outb" if out_t.dtype is B else "outf")
        lines.append(f"        {target}[{len(rows)}, i] = {text}")
        rows.append((op, attrs, arity, out_t.dtype, step, target))
    return codegen.HEADER.format(what="template test") + "\n".join(lines) + "\n", rows


@needs_numba
@pytest.mark.parametrize("d", [F64, F32, I64, I32], ids=lambda d: d.short)
def test_every_scalar_template_matches_the_cpu_kernel(d):
    from caramba.backends.cpu.fused import jit

    cases = [c for c in CASES if d in TABLE[c[0]].dtypes and (c[0] != "math.cast" or d.is_float)]
    src, rows = _template_kernel(d, cases)
    kernel = jit.load(src)
    n = 257
    a, b = _values(d, n, 1), _values(d, n, 2)
    other = F32 if d is F64 else F64
    arrays = {"out": np.zeros((len(rows), n), d.numpy), "outb": np.zeros((len(rows), n), np.bool_),
              "outf": np.zeros((len(rows), n), other.numpy)}
    with np.errstate(all="ignore"):
        kernel(a, b, arrays["out"], arrays["outb"], arrays["outf"])
    for i, (op, attrs, arity, od, step, target) in enumerate(rows):
        node = ir.Node("n", op, (), step.attrs, (ValueType((n,), od),))
        ref_fn = KERNELS[op](node, (ValueType((n,), d),) * arity)
        with np.errstate(all="ignore"):
            want = np.asarray(ref_fn(*(a, b)[:arity]))
        got = arrays[target][i]
        if od.is_float:
            tol = 4e-15 if od is F64 and d is F64 else 4e-6
            assert_close(got, want.astype(od.numpy), tol, what=f"{op} {attrs} on {d}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{op} {attrs} on {d}")


def test_kernel_text_is_shape_generic_with_broadcast_indices():
    e = F.Expr((F.Step("m", "math.mul", 1, (0, 1), ir.Attrs()),), "m")
    k1 = codegen.elementwise(e, [ValueType((4, 3), F64), ValueType((3,), F64)], ValueType((4, 3), F64))
    k2 = codegen.elementwise(e, [ValueType((400, 30), F64), ValueType((30,), F64)], ValueType((400, 30), F64))
    assert k1.source == k2.source  # sizes never appear in the text: one compiled kernel serves both
    assert "x1 = in1[i1]" in k1.source and "x0 = in0[i0, i1]" in k1.source
    k3 = codegen.elementwise(e, [ValueType((4, 3), F64), ValueType((4, 1), F64)], ValueType((4, 3), F64))
    assert "x1 = in1[i0, 0]" in k3.source
    big = codegen.elementwise(e, [ValueType((1024, 1024), F64)] * 2, ValueType((1024, 1024), F64))
    assert big.parallel and not k1.parallel and big.split == 1024
    assert "def kernel(in0, in1, out, lo, hi):" in big.source and "for i0 in range(lo, hi):" in big.source
    assert "prange" not in big.source and "parallel=" not in big.source  # serial: blocks run on cpu workers


def test_in_place_kernel_reads_its_output_array():
    e = F.Expr((F.Step("m", "math.mul", 1, (0, 1), ir.Attrs()),), "m")
    k = codegen.elementwise(e, [ValueType((4, 3), F64), ValueType((3,), F64)], ValueType((4, 3), F64), in_place=True)
    assert "def kernel(in1, out):" in k.source and "    in0 = out\n" in k.source and k.n_inputs == 1
    with pytest.raises(caramba.errors.UnsupportedOperation, match="in place needs input 0"):
        codegen.elementwise(e, [ValueType((3,), F64), ValueType((3,), F64)], ValueType((4, 3), F64), in_place=True)


def test_reduction_kernels_use_pairwise_rows_or_ordered_accumulation():
    e = F.Expr((F.Step("m", "math.exp", 1, (0,), ir.Attrs()),
                F.Step("s", "reduce.sum", 1, ("m",), ir.get_op("reduce.sum").make_attrs({"axes": (1,)}))), "s")
    rows = codegen.elementwise(e, [ValueType((4, 5), F64)], ValueType((4,), F64))
    assert "pairwise_sum(row" in rows.source
    e0 = F.Expr((e.steps[0], F.Step("s", "reduce.sum", 1, ("m",), ir.get_op("reduce.sum").make_attrs({"axes": (0,)}))), "s")
    cols = codegen.elementwise(e0, [ValueType((4, 5), F64)], ValueType((5,), F64))
    assert "out[i1] = out[i1] + t0" in cols.source


@pytest.fixture(scope="module")
def runner():
    r = new("cpu")
    yield r
    r.close()


def _check(runner, g, inputs, expect_fused=True):
    exe = runner.compile(g)
    if expect_fused and cpu_fused.available():
        assert any(n.op.startswith("fused.") for n in exe.graph.nodes), exe.graph
    got = run(runner, g, inputs)
    want = unoptimized(runner, g, inputs)
    for k in want:
        assert_close(got[k], want[k], 1e-12, what=k)
    if exe.plan is not None:
        check_plan(exe.graph, exe.plan, runner.capabilities.buffers)
    return exe


RNG = np.random.default_rng(7)


@needs_numba
@pytest.mark.parametrize(
    "shapes",
    [((), ()), ((5,), ()), ((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)), ((0, 3), (3,)), ((1, 7), (7,)), ((3, 1), (1, 4)),
     ((512, 512), ()), ((512, 512), (1, 1))],  # the last two: parallel kernels with loop-invariant inputs
    ids=str,
)
def test_elementwise_shapes(runner, shapes):
    a, b = shapes
    with caramba.Graph("g") as g:
        x, y = g.input("x", a), g.input("y", b)
        g.output("o", ops.tanh(x * 2.0 + y) - ops.exp(y))
    _check(runner, g, {"x": RNG.uniform(-2, 2, a), "y": RNG.uniform(-2, 2, b)})


@needs_numba
@pytest.mark.parametrize("axes, keep", [((-1,), True), ((0,), False), ((0, 2), True), (None, False), ((1,), False)])
@pytest.mark.parametrize("red", [ops.sum, ops.mean, ops.max, ops.min, ops.prod])
def test_fused_reductions(runner, red, axes, keep):
    with caramba.Graph("g") as g:
        x = g.input("x", (5, 6, 40))
        g.output("o", red(ops.sin(x) * 0.9 + 0.1, axes=axes, keepdims=keep))
    _check(runner, g, {"x": RNG.uniform(-2, 2, (5, 6, 40))})


@needs_numba
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_fused_softmax_any_axis(runner, axis):
    with caramba.Graph("g") as g:
        x, m = g.input("x", (3, 4, 50)), g.input("m", (4, 50))
        g.output("o", ops.softmax(x * 0.5 + m, axis=axis))
    _check(runner, g, {"x": RNG.uniform(-5, 5, (3, 4, 50)), "m": RNG.uniform(-1, 1, (4, 50))})


@needs_numba
@pytest.mark.parametrize("axis, affine", [(-1, 2), (-1, 0), (1, 1), (-2, 2)])
def test_fused_layer_norm_residual(runner, axis, affine):
    shape = (3, 4, 33)
    with caramba.Graph("g") as g:
        x, r = g.input("x", shape), g.input("r", shape)
        norm = shape[axis % 3:]
        extra = [g.input(f"p{i}", norm) for i in range(affine)]
        s = x + r
        g.output("y", ops.layer_norm(s, *extra, axis=axis))
        g.output("z", s * 2.0)
    inputs = {"x": RNG.standard_normal(shape), "r": RNG.standard_normal(shape)}
    inputs.update({f"p{i}": RNG.standard_normal(shape[axis % 3:]) for i in range(affine)})
    exe = _check(runner, g, inputs)
    assert any(n.op == "fused.layer_norm_residual" for n in exe.graph.nodes)


@needs_numba
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", [(3, 4, 33), (16, 64, 64), (8, 2100)])  # the last two split over the workers
def test_fused_layer_norm_residual_has_the_bits_of_the_add_and_the_row_kernel(runner, dtype, shape):
    """The fused residual norm runs the layer_norm row kernel on s = x + r: the same bits as the
    add followed by nn.layer_norm's own row kernel (the graph compiled without the fuse pass)."""
    with caramba.Graph("g") as g:
        x, r = g.input("x", shape, dtype), g.input("r", shape, dtype)
        gm, bt = g.input("gm", shape[-1:], dtype), g.input("bt", shape[-1:], dtype)
        g.output("y", ops.layer_norm(x + r, gm, bt))
    rng = np.random.default_rng(3)
    inputs = {k: (rng.standard_normal(v) * 3).astype(dtype) for k, v in
              {"x": shape, "r": shape, "gm": shape[-1:], "bt": shape[-1:]}.items()}
    fused, apart = runner.compile(g), runner.compile(g, disable=("fuse",))
    assert any(n.op == "fused.layer_norm_residual" for n in fused.graph.nodes)
    assert {n.op for n in apart.graph.nodes} >= {"math.add", "nn.layer_norm"}
    tensors = {k: runner.upload(v) for k, v in inputs.items()}
    got, want = fused.run(tensors)["y"].download(), apart.run(tensors)["y"].download()
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.dtype(dtype)


@needs_numba
@pytest.mark.parametrize("xs, ws, bs", [((7, 5), (5, 3), (3,)), ((2, 7, 5), (5, 3), (3,)), ((5,), (5, 3), (3,)), ((4, 5), (5, 3), (4, 3))])
@pytest.mark.parametrize("act", [None, ops.relu, ops.silu, ops.tanh, lambda v: ops.gelu(v, approximate="tanh")])
def test_fused_linear(runner, xs, ws, bs, act):
    with caramba.Graph("g") as g:
        x, w, b = g.input("x", xs), g.input("w", ws), g.input("b", bs)
        y = x @ w + b
        g.output("y", act(y) if act else y)
    exe = _check(runner, g, {"x": RNG.standard_normal(xs), "w": RNG.standard_normal(ws), "b": RNG.standard_normal(bs)})
    assert [n.op for n in exe.graph.nodes if n.op != "graph.input"] == ["fused.linear"]


@needs_numba
def test_views_and_readonly_inputs_reach_fused_kernels(runner):
    with caramba.Graph("g") as g:
        x = g.input("x", (6, 4))
        t = ops.transpose(x)  # a non-contiguous view of a read-only input
        g.output("o", ops.exp(t * 0.5) + ops.broadcast_to(g.constant(np.arange(6.0)), shape=(4, 6)))
        g.output("p", ops.sin(x[::2, 1:] * 3.0) - 1.0)
    _check(runner, g, {"x": RNG.standard_normal((6, 4))})


@needs_numba
def test_outputs_survive_later_runs_and_state_never_aliases_the_arena(runner):
    with caramba.Graph("g") as g:
        g.variable("s", (4, 8), init="zeros")
        x = g.input("x", (4, 8))
        a = ops.exp(x) * 2.0  # placed in the arena (not visible)
        bsum = a + x
        g.write("s", ops.reshape(bsum * 3.0, shape=(4, 8)))  # a view of a buffer-kernel output
        g.output("y", ops.sin(bsum) + 1.0)
        g.output("z", ops.transpose(a * x))  # a view: its storage must not be reused either
    exe = runner.compile(g)
    check_plan(exe.graph, exe.plan, runner.capabilities.buffers)
    x1, x2 = RNG.standard_normal((4, 8)), RNG.standard_normal((4, 8))
    first = exe.run({"x": runner.upload(x1)})
    s1 = runner.state["s"].download()
    snapshot = {k: v.download() for k, v in first.items()}
    exe.run({"x": runner.upload(x2)})
    for k, v in first.items():
        np.testing.assert_array_equal(v.download(), snapshot[k])
    a1 = np.exp(x1) * 2.0
    np.testing.assert_allclose(s1, (a1 + x1) * 3.0, rtol=1e-14)
    np.testing.assert_allclose(snapshot["z"], (a1 * x1).T, rtol=1e-14)


def test_without_a_plan_kernels_allocate(runner):
    with caramba.Graph("g") as g:
        x = g.input("x", (3,))
        g.output("y", ops.exp(x) * 2.0 + 1.0)
    exe = runner.compile(g, disable=("memory",))
    assert exe.plan is None
    np.testing.assert_allclose(exe.run({"x": runner.upload(np.ones(3))})["y"].download(), np.exp(1) * 2 + 1)


@needs_numba
def test_generated_source_is_cached_on_disk(runner, tmp_path, monkeypatch):
    from caramba.backends.cpu.fused import jit

    monkeypatch.setenv("CARAMBA_CACHE_DIR", str(tmp_path))
    e = F.Expr((F.Step("m", "math.cos", 1, (0,), ir.Attrs()), F.Step("n", "math.neg", 1, ("m",), ir.Attrs())), "n")
    k = codegen.elementwise(e, [ValueType((3,), F64)], ValueType((3,), F64))
    fn = jit.load(k.source + "# cache test\n")
    files = list((tmp_path / "numba").glob("k_*.py"))
    assert len(files) == 1 and files[0].read_text().endswith("# cache test\n")
    out = np.empty(3)
    fn(np.zeros(3), out)
    np.testing.assert_array_equal(out, -np.ones(3))
    assert jit.load(k.source + "# cache test\n") is fn  # once per process
    assert CTOR[F64] == "np.float64"


@needs_numba
def test_branch_free_erfc_and_exp_are_as_accurate_as_libm():
    """Within 4 ulps of libm everywhere, specials included, and within 2 ulps of mpmath."""
    import math

    import scipy.special as sc
    from numba import njit

    from caramba.backends.cpu.fused.runtime import erfc_fast, exp_fast

    @njit(error_model="numpy")
    def both(x, o1, o2):
        for i in range(x.shape[0]):
            o1[i] = erfc_fast(x[i])
            o2[i] = exp_fast(x[i])

    rng = np.random.default_rng(3)
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-300, 0.84375, 1.25, 2.857142857142857, -6.0, 28.0, -28.0,
                709.7, -745.0, 710.0, -746.0, 26.0]
    x = np.concatenate([rng.standard_normal(1 << 16) * 3, rng.uniform(-30, 30, 1 << 15), rng.uniform(-745, 709, 1 << 14), specials])
    e, p = np.empty_like(x), np.empty_like(x)
    both(x, e, p)
    with np.errstate(all="ignore"):
        for got, want in ((e, np.array([math.erfc(v) for v in x])), (p, np.exp(x))):
            assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
            ok = np.isfinite(want) & (np.abs(want) > 1e-300)
            ulps = np.abs(got[ok] - want[ok]) / np.spacing(np.abs(want[ok]))
            assert ulps.max() <= 4, ulps.max()
    assert np.max(np.abs(e - sc.erfc(x))[np.isfinite(x)]) < 1e-15
    # against the truth (mpmath at 40 digits), where libm is itself up to 2 ulps off
    import mpmath

    mpmath.mp.dps = 40
    xs = np.concatenate([rng.uniform(-27.5, 27.5, 3000), rng.standard_normal(3000) * 2])
    truth = np.array([float(mpmath.erfc(mpmath.mpf(float(v)))) for v in xs])
    got = np.empty_like(xs)
    both(xs, got, np.empty_like(xs))
    ok = truth > 1e-300
    assert (np.abs(got - truth) / np.spacing(truth))[ok].max() <= 2
    # exp_fast is what fused kernels use for every float64 exp: within 1 ulp of the truth
    xs = np.concatenate([rng.uniform(-745, 709, 3000), rng.uniform(-5, 5, 3000)])
    truth = np.array([float(mpmath.exp(mpmath.mpf(float(v)))) for v in xs])
    got = np.empty_like(xs)
    both(xs, np.empty_like(xs), got)
    ok = truth > 1e-300
    assert (np.abs(got - truth) / np.spacing(truth))[ok].max() <= 1


@needs_numba
@pytest.mark.parametrize("axis", [-1, 0])
def test_spelled_out_softmax_becomes_one_fused_softmax(runner, axis):
    with caramba.Graph("g") as g:
        x = g.input("x", (6, 40))
        e = ops.exp(x - ops.max(x, axes=[axis], keepdims=True))
        g.output("p", e / ops.sum(e, axes=[axis], keepdims=True))
    exe = _check(runner, g, {"x": RNG.uniform(-30, 30, (6, 40))})
    assert [n.op for n in exe.graph.nodes if n.op != "graph.input"] == ["fused.softmax"]
    with caramba.Graph("h") as h:  # the exp is needed elsewhere too: not a softmax to replace
        x = h.input("x", (6, 40))
        e = ops.exp(x - ops.max(x, axes=[-1], keepdims=True))
        h.output("p", e / ops.sum(e, axes=[-1], keepdims=True))
        h.output("e", e)
    assert not any(n.op == "fused.softmax" for n in runner.compile(h).graph.nodes)


@needs_numba
def test_softmax_prologue_with_a_bool_mask(runner):
    with caramba.Graph("g") as g:
        s = g.input("s", (2, 5, 5))
        mask = g.input("m", (5, 5), "bool")
        g.output("p", ops.softmax(ops.where(mask, s * 0.5, g.constant(-np.inf)), axis=-1))
    exe = _check(runner, g, {"s": RNG.standard_normal((2, 5, 5)), "m": np.tril(np.ones((5, 5), bool))})
    assert any(n.op == "fused.softmax" for n in exe.graph.nodes)


def test_fusion_checks_every_input_dtype_of_a_softmax_prologue():
    from caramba.backends.cpu.capabilities import cpu_capabilities
    from caramba.compiler import compile_for

    from ._util import with_caps

    if not cpu_fused.available():
        pytest.skip("numba is not installed")
    caps = cpu_capabilities()
    floats_only = with_caps(caps, ops={**caps.ops, "fused.softmax": frozenset({F64, F32})})
    with caramba.Graph("g") as g:
        s = g.input("s", (2, 5, 5))
        mask = g.input("m", (5, 5), "bool")
        g.output("p", ops.softmax(ops.where(mask, s * 0.5, g.constant(-np.inf)), axis=-1))
    out, report = compile_for(g, floats_only, "cpu")  # must not raise: the softmax stays unfused
    assert not any(n.op == "fused.softmax" for n in out.nodes)
    assert any("fused.softmax for bool" in d for s_ in report.stages for d in s_.diagnostics)


@needs_numba
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_program_over_scalars_runs_on_the_reference_kernels(runner, dtype, monkeypatch):
    """A fused program whose every value is 0-d (a clip factor: norm, sqrt, divide, compare,
    select) is run step by step on the cpu reference kernels: nothing is compiled for it, and
    its bits are the unfused graph's, NaN and infinities included."""
    from caramba.backends.cpu.fused import jit

    with caramba.Graph("clip") as g:
        a, b = g.input("a", (), dtype), g.input("b", (), dtype)
        norm = ops.sqrt(a * a + b * b)
        scale = 1.0 / (norm + 1e-6)
        g.output("o", ops.where(scale < 1.0, scale, ops.exp(-ops.abs(b))) * 2.0)
    monkeypatch.setattr(jit, "load", lambda *a, **k: pytest.fail("a 0-d program compiled a kernel"))
    exe = runner.compile(g)
    assert [n.op for n in exe.graph.nodes if n.op.startswith("fused.")] == ["fused.elementwise"]
    for va, vb in [(3.0, 4.0), (0.1, -0.2), (0.0, 0.0), (np.nan, 1.0), (np.inf, 2.0), (-1e30, 7.5), (2.0, -np.inf)]:
        inputs = {"a": np.array(va, dtype), "b": np.array(vb, dtype)}
        got = run(runner, g, inputs)["o"]
        want = unoptimized(runner, g, inputs)["o"]
        assert got.dtype == want.dtype == np.dtype(dtype) and got.shape == ()
        assert got.tobytes() == want.tobytes(), (va, vb, got, want)
