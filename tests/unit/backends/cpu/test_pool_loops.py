"""The cpu backend's pooling loops (``backends/cpu/pool.py``): max and average pooling agree with
PyTorch (max exactly, average to rounding) over kernel, stride and padding variants, float32
and float64, batch 1, windows hanging over the padding, NaN and -inf inputs, planes split over
the workers; gradients through the graph match PyTorch's autograd and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import compute, ops
from caramba.autodiff.api import grad

pytest.importorskip("numba")
torch = pytest.importorskip("torch")

from caramba.backends.cpu import pool  # noqa: E402

# (x shape, kernel, stride, padding)
CASES = [
    ((2, 3, 8, 8), (2, 2), (2, 2), (0, 0)),
    ((2, 3, 9, 7), (3, 3), (2, 2), (1, 1)),  # ResNet's max pool on an odd, non-square image
    ((1, 2, 5, 6), (3, 2), (1, 2), (1, 0)),  # batch 1, rectangular window, stride 1
    ((2, 2, 4, 4), (4, 4), (4, 4), (0, 0)),  # one window
    ((1, 1, 3, 3), (3, 3), (1, 1), (1, 1)),  # every window touches the padding
    ((2, 2, 7, 7), (2, 3), (3, 1), (1, 1)),
]


def _torch_pool(x, is_max, k, s, p):
    t = torch.from_numpy(x)
    if is_max:
        return torch.nn.functional.max_pool2d(t, k, s, p).numpy()
    return torch.nn.functional.avg_pool2d(t, k, s, p, count_include_pad=True).numpy()


def _out_shape(xs, k, s, p):
    return (*xs[:2], (xs[2] + 2 * p[0] - k[0]) // s[0] + 1, (xs[3] + 2 * p[1] - k[1]) // s[1] + 1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("is_max", [True, False])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_pool_matches_torch(case, is_max, dtype):
    xs, k, s, p = case
    x = np.random.default_rng(0).standard_normal(xs).astype(dtype)
    f = pool.pool_kernel(is_max, xs, k, s, p, _out_shape(xs, k, s, p), dtype)
    got, want = f(x), _torch_pool(x, is_max, k, s, p)
    assert got.dtype == dtype and got.shape == want.shape
    if is_max:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=4 * np.finfo(dtype).eps, atol=4 * np.finfo(dtype).eps)


def test_max_pool_nan_and_inf():
    x = np.zeros((1, 1, 4, 4))
    x[0, 0, 0, 1] = np.nan
    x[0, 0, 3, 3] = -np.inf
    x[0, 0, 2, 2] = np.inf
    x[0, 0, 1, 0] = 5.0  # a larger value after the NaN in the same window: NaN still wins
    f = pool.pool_kernel(True, x.shape, (2, 2), (2, 2), (0, 0), (1, 1, 2, 2), np.float64)
    np.testing.assert_array_equal(f(x), _torch_pool(x, True, (2, 2), (2, 2), (0, 0)))
    all_neg_inf = np.full((1, 1, 2, 2), -np.inf)
    g = pool.pool_kernel(True, all_neg_inf.shape, (2, 2), (1, 1), (1, 1), (1, 1, 3, 3), np.float64)
    assert np.all(g(all_neg_inf) == -np.inf)


def test_unsupported_dtype_falls_back_to_numpy():
    assert pool.pool_kernel(True, (1, 1, 4, 4), (2, 2), (2, 2), (0, 0), (1, 1, 2, 2), np.int64) is None


def _graph_and_grads(runner, is_max, x, ct, k, s, p):
    op = ops.max_pool2d if is_max else ops.avg_pool2d

    def f(x, ct):
        y = op(x, kernel=k, stride=s, padding=p)
        return y, grad(ops.sum(y * ct), [x])[0]

    g = caramba.trace(f, (x.shape, str(x.dtype)), (ct.shape, str(ct.dtype)))
    exe = runner.compile(g)
    outs = exe.run({n.id: runner.upload(v) for n, v in zip(g.inputs, [x, ct], strict=True)})
    return [outs[k].download() for k in sorted(outs)]


@pytest.mark.parametrize("is_max", [True, False])
@pytest.mark.parametrize("case", CASES[:3], ids=str)
def test_graph_forward_and_gradient_match_torch(cpu, case, is_max):
    xs, k, s, p = case
    rng = np.random.default_rng(1)
    x = rng.standard_normal(xs)
    ct = rng.standard_normal(_out_shape(xs, k, s, p))
    y, gx = _graph_and_grads(cpu, is_max, x, ct, k, s, p)
    tx = torch.tensor(x, requires_grad=True)
    ty = (torch.nn.functional.max_pool2d(tx, k, s, p) if is_max
          else torch.nn.functional.avg_pool2d(tx, k, s, p, count_include_pad=True))
    (ty * torch.from_numpy(ct)).sum().backward()
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-13, atol=1e-14)


def test_avg_pool_gradient_matches_finite_differences(cpu):
    rng = np.random.default_rng(2)
    x, k, s, p = rng.standard_normal((1, 2, 5, 5)), (3, 3), (2, 2), (1, 1)
    ct = rng.standard_normal(_out_shape(x.shape, k, s, p))
    _, gx = _graph_and_grads(cpu, False, x, ct, k, s, p)
    h = 1e-6

    def loss(xx):
        return float(np.sum(_torch_pool(xx, False, k, s, p) * ct))

    for i in range(0, x.size, 3):
        up, down = x.copy(), x.copy()
        up.reshape(-1)[i] += h
        down.reshape(-1)[i] -= h
        fd = (loss(up) - loss(down)) / (2 * h)
        assert abs(fd - gx.reshape(-1)[i]) <= 1e-7 * max(1.0, abs(fd))


def test_planes_split_over_workers_agree():
    r = compute.new("cpu:threads=2")
    try:
        xs, k, s, p = (4, 32, 32, 32), (3, 3), (2, 2), (1, 1)  # past pool.SPLIT_MIN_READS
        x = np.random.default_rng(3).standard_normal(xs).astype(np.float32)
        for is_max in (True, False):
            op = ops.max_pool2d if is_max else ops.avg_pool2d
            g = caramba.trace(lambda x, op=op: op(x, kernel=k, stride=s, padding=p), (xs, "float32"))
            outs = r.compile(g).run({g.inputs[0].id: r.upload(x)})
            got = next(iter(outs.values())).download()
            np.testing.assert_allclose(got, _torch_pool(x, is_max, k, s, p), rtol=1e-6, atol=1e-6)
    finally:
        r.close()
