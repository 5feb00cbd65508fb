"""The cpu backend's transposed convolution (``backends/cpu/conv_grad.py``) and the ``fuse`` pattern
that makes it of the nn.conv1d / nn.conv2d VJP (``compiler/fuse_conv.py``): the input gradient
becomes one ``fused.conv_transpose`` node for every stride, padding, dilation and groups, and
equals PyTorch's autograd (float64 to 1e-12, float32 within float32 rounding), the unfused graph,
and central finite differences; the kernel's layouts agree with each other and with PyTorch;
chains that are not the VJP's are left alone; other backends keep the chain."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import compute, ops
from caramba.autodiff.api import grad
from caramba.compiler import compile_graph
from caramba.errors import GraphError

from ...compiler._util import run

pytest.importorskip("numba")
torch = pytest.importorskip("torch")

from caramba.backends.cpu import conv_grad  # noqa: E402

# (N, C, H, W, O, k, stride, padding, dilation, groups)
CASES = [
    (2, 3, 9, 7, 4, 3, 1, 1, 1, 1),  # stride 1, padded, non-square
    (1, 4, 8, 8, 6, 3, 2, 1, 1, 2),  # stride 2, groups
    (2, 6, 10, 9, 6, 3, 2, 2, 2, 3),  # dilation and groups, odd sizes
    (3, 4, 7, 6, 4, 1, 2, 0, 1, 4),  # 1x1 stride 2, depthwise
    (2, 3, 11, 11, 5, 5, 3, 2, 2, 1),  # stride 3, dilation 2 (input rows no output reaches)
    (2, 3, 3, 3, 2, 3, 1, 0, 1, 1),  # one output pixel
    (2, 3, 16, 16, 8, 7, 2, 3, 1, 1),  # the ResNet stem's form
    (2, 4, 12, 12, 8, 3, 2, 1, 1, 1),  # a ResNet downsampling block's form
]
IDS = ["x".join(map(str, c)) for c in CASES]


def _data(case, dtype, seed=0):
    n, c, h, w, o, k, s, p, d, g = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((o, c // g, k, k)).astype(dtype)
    ho = (h + 2 * p - d * (k - 1) - 1) // s + 1
    wo = (w + 2 * p - d * (k - 1) - 1) // s + 1
    ct = rng.standard_normal((n, o, ho, wo)).astype(dtype)
    return x, wt, ct


def _torch_dx(case, x, w, ct):
    *_, s, p, d, g = case
    tx = torch.tensor(x.astype(np.float64), requires_grad=True)
    y = torch.nn.functional.conv2d(tx, torch.from_numpy(w.astype(np.float64)), stride=s, padding=p, dilation=d, groups=g)
    (y * torch.from_numpy(ct.astype(np.float64))).sum().backward()
    return tx.grad.numpy()


def _graph(case, dtype, nd=2, wrt=0):
    """The gradient of sum(conv(x, w) * ct) with respect to x (``wrt`` 0) or w (1)."""
    *_, s, p, d, g = case
    conv = ops.conv2d if nd == 2 else ops.conv1d

    def f(x, w, ct):
        return grad(ops.sum(conv(x, w, stride=(s,), padding=(p,), dilation=(d,), groups=g) * ct), [(x, w)[wrt]])[0]

    x, w, ct = _data(case, dtype)
    if nd == 1:
        x, w, ct = x[:, :, 0], w[:, :, 0], ct[:, :, 0]
    return caramba.trace(f, (x.shape, dtype), (w.shape, dtype), (ct.shape, dtype)), {"x": x, "w": w, "ct": ct}


def _feed(g, arrays):
    return dict(zip([n.id for n in g.inputs], arrays.values(), strict=True))


def _ops(graph, runner):
    after, _ = compile_graph(graph, runner)
    return [n.op for n in after.nodes]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_input_gradient_is_one_fused_node_matching_torch_and_unfused_float64(cpu, case):
    g, data = _graph(case, "float64")
    kinds = _ops(g, cpu)
    assert kinds.count("fused.conv_transpose") == 1 and "nn.conv2d" not in kinds, kinds
    feed = _feed(g, data)
    got = run(cpu, g, feed)["out"]
    want = _torch_dx(case, data["x"], data["w"], data["ct"])
    unfused = run(cpu, g, feed, disable=("fuse",))["out"]
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * scale)
    np.testing.assert_allclose(got, unfused, rtol=1e-12, atol=1e-12 * scale)


@pytest.mark.parametrize("case", CASES[:3] + CASES[-1:], ids=IDS[:3] + IDS[-1:])
def test_input_gradient_float32_stays_float32(cpu, case):
    g, data = _graph(case, "float32")
    assert "fused.conv_transpose" in _ops(g, cpu)
    got = run(cpu, g, _feed(g, data))["out"]
    assert got.dtype == np.float32
    want = _torch_dx(case, data["x"], data["w"], data["ct"])
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("case", [CASES[1], CASES[2], CASES[4]], ids=[IDS[1], IDS[2], IDS[4]])
def test_conv1d_input_gradient(cpu, case):
    g, data = _graph(case, "float64", nd=1)
    assert "fused.conv_transpose" in _ops(g, cpu)
    got = run(cpu, g, _feed(g, data))["out"]
    *_, s, p, d, gr = case
    tx = torch.tensor(data["x"], requires_grad=True)
    y = torch.nn.functional.conv1d(tx, torch.from_numpy(data["w"]), stride=s, padding=p, dilation=d, groups=gr)
    (y * torch.from_numpy(data["ct"])).sum().backward()
    np.testing.assert_allclose(got, tx.grad.numpy(), rtol=1e-12, atol=1e-12 * tx.grad.abs().max().item())


@pytest.mark.parametrize("algorithm", ["batched", "flat"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_kernel_layouts_match_torch(case, algorithm):
    n, c, h, w, _o, _k, s, p, d, g = case
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 2e-5)):
        x, wt, ct = _data(case, dtype, seed=1)
        f = conv_grad.conv_transpose_kernel(ct.shape, wt.shape, (h, w), (s, s), (p, p), (d, d), g, dtype, algorithm)
        out = np.full((n, c, h, w), np.nan, dtype)  # every element must be written
        f(ct, wt, out)
        want = _torch_dx(case, x, wt, ct)
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.abs(want).max())
        strided = np.full((n, c, h, w * 2), np.nan, dtype)[..., ::2]  # an output that is not C-contiguous
        f(ct[..., ::1], wt, strided)
        np.testing.assert_allclose(strided, out, rtol=0, atol=0)


@pytest.mark.parametrize("algorithm", ["batched", "flat"])
def test_kernel_splits_images_over_workers_like_one_thread(monkeypatch, algorithm):
    """A call large enough to be split over the cpu workers gives the one-block result bitwise
    (each image is computed by the same GEMM and scatter either way; the flat layout's blocks
    scatter their images' part of one batch-wide GEMM)."""
    from caramba.backends.cpu import workers

    case = (4, 16, 16, 16, 32, 3, 2, 1, 1, 1)
    x, wt, ct = _data(case, np.float64, seed=2)
    args = (ct.shape, wt.shape, (16, 16), (2, 2), (1, 1), (1, 1), 1, np.float64, algorithm)
    monkeypatch.setattr(workers, "count", lambda: 1)
    one = np.empty(x.shape)
    conv_grad.conv_transpose_kernel(*args)(ct, wt, one)
    monkeypatch.setattr(workers, "count", lambda: 3)
    split = np.empty(x.shape)
    conv_grad.conv_transpose_kernel(*args)(ct, wt, split)
    np.testing.assert_array_equal(split, one)
    np.testing.assert_allclose(one, _torch_dx(case, x, wt, ct), rtol=1e-12, atol=1e-12 * np.abs(one).max())


@pytest.mark.parametrize("wrt,name,fused", [(0, "x", "fused.conv_transpose"), (1, "w", "fused.conv_weight_grad")])
def test_finite_differences_float64(cpu, wrt, name, fused):
    """Central differences of the forward loss against the fused input and weight gradients
    (stride 2, padding, dilation 2, groups 2)."""
    case = (2, 4, 7, 6, 4, 3, 2, 1, 2, 2)
    *_, s, p, d, gr = case
    g, data = _graph(case, "float64", wrt=wrt)
    assert fused in _ops(g, cpu)
    got = run(cpu, g, _feed(g, data))["out"]
    fwd = caramba.trace(lambda x, w, ct: ops.sum(ops.conv2d(x, w, stride=(s,), padding=(p,), dilation=(d,), groups=gr) * ct),
                        (data["x"].shape, "float64"), (data["w"].shape, "float64"), (data["ct"].shape, "float64"))
    exe = cpu.compile(fwd)
    fixed = {k: cpu.upload(v) for k, v in data.items() if k != name}

    def loss(v):
        return float(exe.run({**fixed, name: cpu.upload(v)})["out"].download())

    h = 1e-6
    num = np.zeros_like(data[name])
    for idx in np.ndindex(num.shape):
        up, dn = data[name].copy(), data[name].copy()
        up[idx] += h
        dn[idx] -= h
        num[idx] = (loss(up) - loss(dn)) / (2 * h)
    np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-7)


def test_input_weight_and_bias_gradients_together(cpu):
    """With the weight and bias gradients asked for too, the input and weight gradients become
    one fused node each (the bias gradient stays a sum); all three match PyTorch."""
    case = (2, 4, 10, 10, 6, 3, 2, 1, 1, 1)
    x, w, ct = _data(case, np.float64)
    b = np.linspace(-1, 1, 6)

    def f(x, w, b, ct):
        return grad(ops.sum(ops.conv2d(x, w, b, stride=(2,), padding=(1,)) * ct), [x, w, b])

    g = caramba.trace(f, (x.shape, "float64"), (w.shape, "float64"), (b.shape, "float64"), (ct.shape, "float64"))
    kinds = _ops(g, cpu)
    assert kinds.count("fused.conv_transpose") == 1 and kinds.count("fused.conv_weight_grad") == 1, kinds
    got = run(cpu, g, _feed(g, {"x": x, "w": w, "b": b, "ct": ct}))
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    (torch.nn.functional.conv2d(tx, tw, tb, stride=2, padding=1) * torch.from_numpy(ct)).sum().backward()
    for k, t in enumerate((tx, tw, tb)):
        np.testing.assert_allclose(got[f"out{k}"], t.grad.numpy(), rtol=1e-12, atol=1e-12 * t.grad.abs().max().item())


def test_a_convolution_that_is_not_the_vjp_is_left_alone(cpu):
    """A forward convolution of a padded input with a plain kernel (stride 1, no padding of its
    own: the form the pattern starts from) is not a transposed convolution and stays as it was."""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 3, 6, 6)), rng.standard_normal((4, 3, 3, 3))

    def f(x, w):
        return ops.conv2d(ops.pad(x, pads=(0, 0, 0, 0, 2, 2, 2, 2)), w)

    g = caramba.trace(f, (x.shape, "float64"), (w.shape, "float64"))
    kinds = _ops(g, cpu)
    assert "fused.conv_transpose" not in kinds and "nn.conv2d" in kinds
    got = run(cpu, g, {"x": x, "w": w})["out"]
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=2).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def test_a_transposed_convolution_written_by_hand_is_matched_by_meaning(cpu):
    """The VJP's chain spelled with other shape ops in another order (dilation by a strided
    slice's adjoint, one pad for both edges) computes the same values and is matched too."""
    rng = np.random.default_rng(4)
    ct, w = rng.standard_normal((2, 4, 4, 4)), rng.standard_normal((4, 3, 3, 3))

    def f(ct, w):
        z = ops.reshape(ct, shape=(2, 4, 4, 1, 4, 1))
        z = ops.pad(z, pads=(0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1))
        z = ops.slice(ops.reshape(z, shape=(2, 4, 8, 8)), starts=(0, 0), ends=(7, 7), axes=(2, 3))
        z = ops.pad(z, pads=(0, 0, 0, 0, 2, 2, 2, 2))  # full padding: dx of a stride-2, pad-0 conv of 9x9
        k = ops.flip(ops.transpose(w, perm=(1, 0, 2, 3)), axes=(2, 3))
        return ops.conv2d(z, k)

    g = caramba.trace(f, (ct.shape, "float64"), (w.shape, "float64"))
    assert "fused.conv_transpose" in _ops(g, cpu)
    got = run(cpu, g, {"ct": ct, "w": w})["out"]
    want = torch.nn.functional.conv_transpose2d(torch.from_numpy(ct), torch.from_numpy(w), stride=2).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    np.testing.assert_allclose(got, run(cpu, g, {"ct": ct, "w": w}, disable=("fuse",))["out"], rtol=1e-12,
                               atol=1e-12 * np.abs(want).max())


def _rejects(op, ins, bad_attrs, good_attrs, want):
    """The type rule of ``op`` raises GraphError for ``bad_attrs`` and gives shape ``want`` for ``good_attrs``."""
    from caramba.ir.dtypes import DType
    from caramba.ir.opdef import get_op
    from caramba.ir.types import ValueType

    opdef = get_op(op)
    types = tuple(ValueType(s, DType.float64) for s in ins)
    with pytest.raises(GraphError):
        opdef.infer(types, opdef.make_attrs(bad_attrs))
    assert opdef.infer(types, opdef.make_attrs(good_attrs))[0].shape == want


@pytest.mark.parametrize("attrs", [
    {"stride": (0, 1), "padding": (0, 0), "dilation": (1, 1), "size": (5, 5)},
    {"stride": (1, 1), "padding": (-1, 0), "dilation": (1, 1), "size": (5, 5)},
    {"stride": (1,), "padding": (0, 0), "dilation": (1, 1), "size": (5, 5)},
    {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "size": (9, 9)},
    {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "size": (5, 5), "groups": 3},
])
def test_type_rule_rejects_inconsistent_attributes(attrs):
    _rejects("fused.conv_transpose", ((1, 4, 3, 3), (4, 2, 3, 3)), attrs,
             {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "size": (5, 5)}, (1, 2, 5, 5))


def test_other_backends_are_not_given_the_fused_node():
    pytest.importorskip("jax")
    g, _ = _graph(CASES[1], "float64")
    with compute.new("xla") as xla:
        after, _ = compile_graph(g, xla)
        assert not any(n.op.startswith("fused.") for n in after.nodes)


# ---- the weight gradient: fused.conv_weight_grad --------------------------------------------


def _torch_dw(case, x, w, ct, nd=2):
    *_, s, p, d, g = case
    tw = torch.tensor(w.astype(np.float64), requires_grad=True)
    conv = torch.nn.functional.conv2d if nd == 2 else torch.nn.functional.conv1d
    y = conv(torch.from_numpy(x.astype(np.float64)), tw, stride=s, padding=p, dilation=d, groups=g)
    (y * torch.from_numpy(ct.astype(np.float64))).sum().backward()
    return tw.grad.numpy()


def _wgraph(case, dtype, nd=2):
    return _graph(case, dtype, nd, wrt=1)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_weight_gradient_is_one_fused_node_matching_torch_and_unfused_float64(cpu, case):
    g, data = _wgraph(case, "float64")
    kinds = _ops(g, cpu)
    assert kinds.count("fused.conv_weight_grad") == 1 and "nn.conv2d" not in kinds, kinds
    feed = _feed(g, data)
    got = run(cpu, g, feed)["out"]
    want = _torch_dw(case, data["x"], data["w"], data["ct"])
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * scale)
    np.testing.assert_allclose(got, run(cpu, g, feed, disable=("fuse",))["out"], rtol=1e-12, atol=1e-12 * scale)


@pytest.mark.parametrize("case", CASES[1:3] + CASES[-2:], ids=IDS[1:3] + IDS[-2:])
def test_weight_gradient_float32_and_conv1d(cpu, case):
    g, data = _wgraph(case, "float32")
    assert "fused.conv_weight_grad" in _ops(g, cpu)
    got = run(cpu, g, _feed(g, data))["out"]
    assert got.dtype == np.float32
    want = _torch_dw(case, data["x"], data["w"], data["ct"])
    np.testing.assert_allclose(got, want, rtol=3e-5, atol=3e-5 * np.abs(want).max())
    g1, d1 = _wgraph(case, "float64", nd=1)
    assert "fused.conv_weight_grad" in _ops(g1, cpu)
    want1 = _torch_dw(case, d1["x"], d1["w"], d1["ct"], nd=1)
    np.testing.assert_allclose(run(cpu, g1, _feed(g1, d1))["out"], want1, rtol=1e-12, atol=1e-12 * np.abs(want1).max())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_weight_gradient_kernel_matches_torch(case):
    *_, k, s, p, d, g = case
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 3e-5)):
        x, wt, ct = _data(case, dtype, seed=1)
        f = conv_grad.conv_weight_grad_kernel(x.shape, ct.shape, (k, k), (s, s), (p, p), (d, d), g, dtype)
        out = np.full(wt.shape, np.nan, dtype)
        f(x, ct, out)
        want = _torch_dw(case, x, wt, ct)
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.abs(want).max())
        strided = np.full(wt.shape[:-1] + (2 * k,), np.nan, dtype)[..., ::2]
        f(np.asfortranarray(x), ct, strided)  # a non-C-contiguous input and output
        np.testing.assert_allclose(strided, out, rtol=tol, atol=tol * np.abs(want).max())


def test_two_convolutions_of_one_input_share_its_rearrangement(cpu):
    """A ResNet downsampling block convolves one input twice (3x3/2 and 1x1/2): CSE shares the
    rearranged input of the two weight gradients, and both still become fused nodes."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 8, 8))
    w1, w2 = rng.standard_normal((6, 4, 3, 3)), rng.standard_normal((6, 4, 1, 1))
    ct = rng.standard_normal((2, 6, 4, 4))

    def f(x, w1, w2, ct):
        y = ops.conv2d(x, w1, stride=(2,), padding=(1,)) + ops.conv2d(x, w2, stride=(2,))
        return grad(ops.sum(y * ct), [w1, w2])

    g = caramba.trace(f, (x.shape, "float64"), (w1.shape, "float64"), (w2.shape, "float64"), (ct.shape, "float64"))
    assert _ops(g, cpu).count("fused.conv_weight_grad") == 2
    got = run(cpu, g, {"x": x, "w1": w1, "w2": w2, "ct": ct})
    tw1, tw2 = torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
    tx = torch.from_numpy(x)
    y = torch.nn.functional.conv2d(tx, tw1, stride=2, padding=1) + torch.nn.functional.conv2d(tx, tw2, stride=2)
    (y * torch.from_numpy(ct)).sum().backward()
    np.testing.assert_allclose(got["out0"], tw1.grad.numpy(), rtol=1e-12, atol=1e-12 * tw1.grad.abs().max().item())
    np.testing.assert_allclose(got["out1"], tw2.grad.numpy(), rtol=1e-12, atol=1e-12 * tw2.grad.abs().max().item())


@pytest.mark.parametrize("attrs", [
    {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "kernel": (4, 3)},  # does not give the cotangent
    {"stride": (1, 1), "padding": (0, 0), "dilation": (1,), "kernel": (3, 3)},
    {"stride": (1, 1), "padding": (0, 0), "dilation": (0, 1), "kernel": (3, 3)},
    {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "kernel": (3, 3), "groups": 3},
])
def test_weight_gradient_type_rule_rejects_inconsistent_attributes(attrs):
    _rejects("fused.conv_weight_grad", ((1, 4, 5, 5), (1, 6, 3, 3)), attrs,
             {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "kernel": (3, 3), "groups": 2}, (6, 2, 3, 3))


def test_float16_keeps_the_unfused_chain(cpu):
    """The cpu backend declares the fused convolution gradients for float32 and float64 only:
    a float16 graph keeps the VJP's chain (and still computes the gradients)."""
    case = CASES[1]
    g, data = _graph(case, "float16")
    kinds = _ops(g, cpu)
    assert not any(k in kinds for k in ("fused.conv_transpose", "fused.conv_weight_grad"))
    got = run(cpu, g, _feed(g, data))["out"]
    assert got.dtype == np.float16
    want = _torch_dx(case, data["x"], data["w"], data["ct"])
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


@pytest.mark.parametrize("shape", [(8, 16, 16, 16, 32), (8, 64, 8, 8, 64)], ids=["batched", "flat"])
def test_gradients_on_a_two_thread_runner(shape):
    """Large enough to be split over two cpu workers (both layouts of the input gradient): the
    input and weight gradients of a 3x3/2 convolution still match PyTorch."""
    n, c, h, w, o = shape
    rng = np.random.default_rng(6)
    x, wt = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c, 3, 3))
    ct = rng.standard_normal((n, o, h // 2, w // 2))

    def f(x, w, ct):
        return grad(ops.sum(ops.conv2d(x, w, stride=(2,), padding=(1,)) * ct), [x, w])

    g = caramba.trace(f, (x.shape, "float64"), (wt.shape, "float64"), (ct.shape, "float64"))
    with compute.new("cpu:threads=2") as two:
        kinds = _ops(g, two)
        assert "fused.conv_transpose" in kinds and "fused.conv_weight_grad" in kinds
        got = run(two, g, {"x": x, "w": wt, "ct": ct})
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(wt, requires_grad=True)
    (torch.nn.functional.conv2d(tx, tw, stride=2, padding=1) * torch.from_numpy(ct)).sum().backward()
    for k, t in enumerate((tx, tw)):
        np.testing.assert_allclose(got[f"out{k}"], t.grad.numpy(), rtol=1e-12, atol=1e-12 * t.grad.abs().max().item())
