"""The cpu backend's convolution (``backends/cpu/conv.py``: Numba im2col + one BLAS GEMM per
image or per batch): both layouts and the automatic choice agree with PyTorch's conv1d/conv2d
(float64 to 1e-12, float32 to float32 tolerances) on stride, padding, dilation, groups, 1x1,
batch 1, non-square and padding-dominated shapes, non-contiguous inputs and images split over
the workers; gradients (input, weight, bias) match PyTorch's autograd and central finite
differences in float64; the tuner's ``conv_batch_min_pixels`` chooses the layout."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import compute, ops
from caramba.autodiff.api import grad

pytest.importorskip("numba")
torch = pytest.importorskip("torch")

from caramba.backends.cpu import conv  # noqa: E402

# (N, C, H, W, O, k, stride, padding, dilation, groups)
CASES = [
    (2, 3, 9, 7, 4, 3, 1, 1, 1, 1),  # non-square image
    (1, 4, 8, 8, 6, 3, 2, 1, 1, 2),  # batch 1, stride 2, groups
    (2, 6, 10, 9, 6, 3, 2, 2, 2, 3),  # dilation and groups
    (2, 4, 5, 5, 8, 1, 1, 0, 1, 1),  # 1x1 (the input is the columns)
    (3, 4, 7, 6, 4, 1, 2, 0, 1, 4),  # 1x1 stride 2, depthwise
    (2, 3, 11, 11, 5, 5, 3, 2, 2, 1),  # stride 3, dilation 2
    (1, 2, 4, 4, 3, 3, 1, 3, 1, 1),  # padding larger than the kernel's reach
    (2, 3, 3, 3, 2, 3, 1, 0, 1, 1),  # one output pixel
    (2, 3, 16, 16, 8, 7, 2, 3, 1, 1),  # the ResNet stem's form
]


def _torch_conv(x, w, b, s, p, d, g):
    tb = None if b is None else torch.from_numpy(b)
    return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), tb, stride=s, padding=p, dilation=d,
                                      groups=g).numpy()


def _data(case, dtype, seed=0):
    n, c, h, w, o, k, _s, _p, _d, g = case
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, c, h, w)).astype(dtype), rng.standard_normal((o, c // g, k, k)).astype(dtype),
            rng.standard_normal(o).astype(dtype))


@pytest.mark.parametrize("algorithm", ["batched", "flat", "rows", None])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_kernel_matches_torch_float64(case, algorithm):
    x, w, b = _data(case, np.float64)
    *_, _k, s, p, d, g = case
    f = conv.conv_kernel(x.shape, w.shape, (s, s), (p, p), (d, d), g, np.float64, algorithm)
    for bias in (None, b):
        got = f(x, w, bias)
        want = _torch_conv(x, w, bias, s, p, d, g)
        assert got.dtype == np.float64 and got.flags.c_contiguous
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("algorithm", ["batched", "flat", "rows"])
@pytest.mark.parametrize("case", CASES[:4] + CASES[-1:], ids=lambda c: "x".join(map(str, c)))
def test_kernel_float32_stays_float32(case, algorithm):
    x, w, b = _data(case, np.float32)
    *_, _k, s, p, d, g = case
    got = conv.conv_kernel(x.shape, w.shape, (s, s), (p, p), (d, d), g, np.float32, algorithm)(x, w, b)
    assert got.dtype == np.float32
    want = _torch_conv(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), s, p, d, g)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_non_contiguous_input_and_conv1d():
    x, w, _ = _data((2, 3, 9, 8, 4, 3, 1, 1, 1, 1), np.float64)
    xt = np.ascontiguousarray(x.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)  # same values, other strides
    assert not xt.flags.c_contiguous
    for alg in ("batched", "flat", "rows"):
        f = conv.conv_kernel(x.shape, w.shape, (1, 1), (1, 1), (1, 1), 1, np.float64, alg)
        np.testing.assert_array_equal(f(xt, w), f(x, w))
    flat, sn, sc = conv.flat_view(xt)  # read in place: no copy of a transposed view
    assert np.shares_memory(flat, xt) and (sn, sc) == (8 * 9, 2 * 8 * 9)
    every_other = np.random.default_rng(2).standard_normal((2, 6, 9, 8))[:, ::2]  # channel stride 2
    want = _torch_conv(np.ascontiguousarray(every_other), w, None, 1, 1, 1, 1)
    for alg in ("batched", "flat", "rows"):
        got = conv.conv_kernel(every_other.shape, w.shape, (1, 1), (1, 1), (1, 1), 1, np.float64, alg)(every_other, w)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    rng = np.random.default_rng(1)
    x1, w1 = rng.standard_normal((2, 4, 17)), rng.standard_normal((6, 2, 3))
    got = conv.conv_kernel(x1.shape, w1.shape, (2,), (1,), (2,), 2, np.float64)(x1, w1)
    want = torch.nn.functional.conv1d(torch.from_numpy(x1), torch.from_numpy(w1), stride=2, padding=1, dilation=2,
                                      groups=2).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def test_random_configurations_match_torch():
    rng = np.random.default_rng(7)
    for _ in range(40):
        g = int(rng.choice([1, 1, 2, 3]))
        c, o = g * int(rng.integers(1, 4)), g * int(rng.integers(1, 4))
        k, s, d = int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 3))
        p = int(rng.integers(0, 4))
        h, w = int(rng.integers(1, 12)), int(rng.integers(1, 12))
        if h + 2 * p < d * (k - 1) + 1 or w + 2 * p < d * (k - 1) + 1:
            continue
        x, wt = rng.standard_normal((int(rng.integers(1, 4)), c, h, w)), rng.standard_normal((o, c // g, k, k))
        want = _torch_conv(x, wt, None, s, p, d, g)
        for alg in ("batched", "flat", "rows"):
            got = conv.conv_kernel(x.shape, wt.shape, (s, s), (p, p), (d, d), g, np.float64, alg)(x, wt)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=str((x.shape, wt.shape, s, p, d, g, alg)))


def test_layout_follows_the_tuned_threshold(monkeypatch):
    assert conv.layout(64) == "batched" and conv.layout(63) == "flat"
    monkeypatch.setattr(conv, "CONV_BATCH_MIN_PIXELS", 4)
    assert conv.layout(4) == "batched" and conv.layout(3) == "flat"
    assert conv.layout(100, min_pixels=1000) == "flat"
    assert conv.layout(9, taps=256) == "rows"  # a weight gradient's form: the kernel is the cotangent


# ---- through graphs: the backend's kernel, its gradients ---------------------------------------


def _run(runner, g, feeds):
    exe = runner.compile(g)
    outs = exe.run({k: runner.upload(v) for k, v in feeds.items()})
    return {k: t.download() for k, t in outs.items()}


def _conv_loss(s, p, d, g):
    def f(x, w, b, ct):
        y = ops.conv2d(x, w, b, stride=(s,), padding=(p,), dilation=(d,), groups=g)
        return (ops.sum(y * ct), *grad(ops.sum(y * ct), [x, w, b]))

    return f


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[2], CASES[4], CASES[8]], ids=lambda c: "x".join(map(str, c)))
def test_graph_gradients_match_torch_float64(cpu, case):
    *_, _k, s, p, d, g = case
    x, w, b = _data(case, np.float64)
    want_y = _torch_conv(x, w, b, s, p, d, g)
    ct = np.random.default_rng(3).standard_normal(want_y.shape)
    gr = caramba.trace(_conv_loss(s, p, d, g), (x.shape, "float64"), (w.shape, "float64"), (b.shape, "float64"),
                       (ct.shape, "float64"))
    got = _run(cpu, gr, dict(zip([n.id for n in gr.inputs], [x, w, b, ct], strict=True)))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    loss = (torch.nn.functional.conv2d(tx, tw, tb, stride=s, padding=p, dilation=d, groups=g) * torch.from_numpy(ct)).sum()
    loss.backward()
    outs = [got[k] for k in sorted(got)]
    for mine, ref in zip(outs, [loss.detach().numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy()], strict=True):
        np.testing.assert_allclose(mine, ref, rtol=1e-11, atol=1e-11 * max(1.0, np.abs(ref).max()))


def test_graph_gradient_matches_finite_differences(cpu):
    s, p, d, g = 2, 1, 1, 1
    rng = np.random.default_rng(5)
    x, w, b = rng.standard_normal((1, 2, 5, 6)), rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3)
    ct = rng.standard_normal(_torch_conv(x, w, b, s, p, d, g).shape)
    gr = caramba.trace(_conv_loss(s, p, d, g), (x.shape, "float64"), (w.shape, "float64"), (b.shape, "float64"),
                       (ct.shape, "float64"))
    names = [n.id for n in gr.inputs]
    exe = cpu.compile(gr)

    def run(xx, ww, bb):
        outs = exe.run({k: cpu.upload(v) for k, v in zip(names, [xx, ww, bb, ct], strict=True)})
        return [outs[k].download() for k in sorted(outs)]

    _loss, gx, gw, gb = run(x, w, b)
    h = 1e-6
    for which, arr, analytic in ((0, x, gx), (1, w, gw), (2, b, gb)):
        flat = arr.reshape(-1)
        for i in range(0, flat.size, max(1, flat.size // 7)):
            args = [x.copy(), w.copy(), b.copy()]
            args[which].reshape(-1)[i] += h
            up = run(*args)[0]
            args[which].reshape(-1)[i] -= 2 * h
            down = run(*args)[0]
            fd = (up - down) / (2 * h)
            assert abs(fd - analytic.reshape(-1)[i]) <= 1e-6 * max(1.0, abs(fd)), (which, i, fd, analytic.reshape(-1)[i])


def test_images_split_over_workers_agree():
    r = compute.new("cpu:threads=2")
    try:
        case = (4, 16, 32, 32, 32, 3, 1, 1, 1, 1)  # large enough to split the images over 2 workers
        x, w, b = _data(case, np.float64)
        gr = caramba.trace(lambda x, w, b: ops.conv2d(x, w, b, stride=(1,), padding=(1,)), (x.shape, "float64"),
                           (w.shape, "float64"), (b.shape, "float64"))
        got = _run(r, gr, dict(zip([n.id for n in gr.inputs], [x, w, b], strict=True)))
        want = _torch_conv(x, w, b, 1, 1, 1, 1)
        np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    finally:
        r.close()


def test_float32_graph_keeps_float32(cpu):
    x, w, _b = _data(CASES[0], np.float32)
    gr = caramba.trace(lambda x, w: ops.conv2d(x, w, padding=(1,)), (x.shape, "float32"), (w.shape, "float32"))
    got = next(iter(_run(cpu, gr, dict(zip([n.id for n in gr.inputs], [x, w], strict=True))).values()))
    assert got.dtype == np.float32
    want = _torch_conv(x.astype(np.float64), w.astype(np.float64), None, 1, 1, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_tuned_conv_setting_is_applied_and_bounded(monkeypatch):
    from dataclasses import replace

    from caramba.backends.cpu import tuning

    monkeypatch.setenv(tuning.ENV, "defaults")
    tuning.reset()
    try:
        assert conv.CONV_BATCH_MIN_PIXELS == tuning.defaults().conv_batch_min_pixels == 64
        tuning.apply(replace(tuning.defaults(), conv_batch_min_pixels=8))
        assert conv.CONV_BATCH_MIN_PIXELS == 8 and conv.layout(8) == "batched"
        assert "conv_batch_min_pixels 64" in tuning.describe(fresh=True)  # what `caramba backends -v` shows
        for bad in (0, -3, 1.5, "64", 1 << 30):
            with pytest.raises(ValueError, match="conv_batch_min_pixels"):
                tuning.validate({"conv_batch_min_pixels": bad})
    finally:
        tuning.reset()
    assert conv.CONV_BATCH_MIN_PIXELS == 64
