"""The cpu backend's float32 convolution and pooling fast paths (``conv.py``, ``_conv_loops.py``,
``pool.py``): im2col's one-run-per-tap form (stride 1, output as wide as the input) writes the
same columns, bit for bit, as a NumPy gather of the padded input, in both layouts and over image
and channel sub-ranges; the flat and rows layouts (one GEMM with output-channel row blocks,
gathers split over the workers) agree with PyTorch, stay float32 and give the same bits split
or not; max and average pooling (one merge per tap along an output row) keep each window's
row-major order: the first NaN and the first of -0.0 / 0.0 win, exactly as a window loop."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")
torch = pytest.importorskip("torch")

from caramba.backends.cpu import _conv_loops, conv, pool, workers  # noqa: E402


def _np_columns(x, kh, kw, s, p, d):
    """cols[n, (c*kh + i)*kw + j, oy*wo + ox] of x [N, C, H, W] from its zero-padded copy."""
    n, c, h, w = x.shape
    xp = np.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])])
    ho, wo = conv.out_size(h, kh, s[0], p[0], d[0]), conv.out_size(w, kw, s[1], p[1], d[1])
    cols = np.empty((n, c, kh, kw, ho, wo), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i * d[0]:i * d[0] + s[0] * (ho - 1) + 1:s[0],
                                  j * d[1]:j * d[1] + s[1] * (wo - 1) + 1:s[1]]
    return cols.reshape(n, c * kh * kw, ho * wo)


# (x shape, kh, kw, padding, dilation): stride 1 and an output as wide as the input (the one-run
# form), its edges (a padding wider than the kernel's reach, a one-column image, 1x1) and others
WHOLE = [
    ((2, 3, 6, 5), 3, 3, (1, 1), (1, 1)),
    ((1, 2, 4, 4), 5, 5, (2, 2), (1, 1)),
    ((2, 2, 7, 6), 3, 3, (2, 2), (2, 2)),  # dilation 2, padding 2: as wide again
    ((1, 2, 5, 1), 3, 1, (1, 0), (1, 1)),  # one column
    ((2, 2, 3, 3), 1, 1, (0, 0), (1, 1)),
    ((1, 2, 4, 4), 3, 3, (4, 1), (1, 1)),  # rows wholly in the padding
    ((1, 1, 2, 2), 3, 3, (1, 1), (1, 1)),  # ResNet's last stage: 2x2
    ((2, 3, 6, 5), 3, 3, (1, 2), (1, 1)),  # wider than the input: the run form
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", WHOLE, ids=lambda c: str(c))
def test_im2col_columns_bitwise_both_layouts_and_subranges(case, dtype):
    xs, kh, kw, p, d = case
    x = np.random.default_rng(0).standard_normal(xs).astype(dtype)
    x[0, 0, 0, 0] = -0.0
    n, c, h, w = xs
    want = _np_columns(x, kh, kw, (1, 1), p, d)
    pix = want.shape[2]
    ho, wo = conv.out_size(h, kh, 1, p[0], d[0]), conv.out_size(w, kw, 1, p[1], d[1])
    xf = x.reshape(-1)
    for n0, n1, c0, cg in ((0, n, 0, c), (n - 1, n, c - 1, 1)):
        rr = cg * kh * kw
        sub = want[n0:n1, c0 * kh * kw:c0 * kh * kw + rr]
        batched = np.full((n1 - n0, rr, pix), 7, dtype)  # every element written
        _conv_loops.im2col(xf, c * h * w, h * w, h, w, batched.reshape(-1), pix, rr * pix, n0, n1, c0, cg,
                           kh, kw, 1, 1, p[0], p[1], d[0], d[1], ho, wo, dtype(0))
        assert batched.tobytes() == sub.tobytes()
        flat = np.full((rr, n1 - n0, pix), 7, dtype)
        _conv_loops.im2col(xf, c * h * w, h * w, h, w, flat.reshape(-1), (n1 - n0) * pix, pix, n0, n1, c0, cg,
                           kh, kw, 1, 1, p[0], p[1], d[0], d[1], ho, wo, dtype(0))
        assert flat.tobytes() == np.ascontiguousarray(sub.transpose(1, 0, 2)).tobytes()


# ResNet-18's deep layers and their shapes' edges: (x shape, out channels, k, stride, padding)
DEEP = [
    ((3, 16, 4, 4), 24, 3, 1, 1),  # flat
    ((3, 16, 2, 2), 24, 3, 1, 1),  # rows: more taps than output pixels
    ((2, 8, 4, 4), 16, 3, 2, 1),  # rows, stride 2
    ((2, 8, 4, 4), 16, 1, 2, 0),  # 1x1 stride 2
]


@pytest.mark.parametrize("algorithm", ["flat", "rows", None])
@pytest.mark.parametrize("case", DEEP, ids=lambda c: str(c))
def test_split_gathers_match_torch_and_unsplit_bits(case, algorithm, monkeypatch):
    xs, o, k, s, p = case
    rng = np.random.default_rng(1)
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal((o, xs[1], k, k)) / np.sqrt(xs[1] * k * k)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    whole = conv.conv_kernel(xs, w.shape, (s, s), (p, p), (1, 1), 1, np.float32, algorithm)(x, w, b)
    monkeypatch.setattr(conv, "GATHER_SPLIT_MIN", 1)  # the gathers on two workers, however small
    monkeypatch.setattr(workers, "count", lambda: 2)  # (pytest-xdist workers keep one thread)
    calls, run = [], workers.run
    monkeypatch.setattr(workers, "run", lambda fn, ranges: (calls.append(ranges), run(fn, ranges)))
    split = conv.conv_kernel(xs, w.shape, (s, s), (p, p), (1, 1), 1, np.float32, algorithm)(x, w, b)
    assert any(len(r) == 2 for r in calls)  # split in two
    assert split.dtype == np.float32 and whole.dtype == np.float32
    assert split.tobytes() == whole.tobytes()
    want = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)),
                                      torch.from_numpy(b.astype(np.float64)), stride=s, padding=p).numpy()
    np.testing.assert_allclose(split, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_split_gathers_with_groups_and_a_transposed_input(monkeypatch):
    monkeypatch.setattr(conv, "GATHER_SPLIT_MIN", 1)
    monkeypatch.setattr(workers, "count", lambda: 2)
    rng = np.random.default_rng(2)
    x = np.ascontiguousarray(rng.standard_normal((6, 3, 4, 4)).astype(np.float32)).transpose(1, 0, 2, 3)  # [3, 6, 4, 4]
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    want = torch.nn.functional.conv2d(torch.from_numpy(np.ascontiguousarray(x).astype(np.float64)),
                                      torch.from_numpy(w.astype(np.float64)), padding=1, groups=2).numpy()
    for alg in ("flat", "rows"):
        got = conv.conv_kernel(x.shape, w.shape, (1, 1), (1, 1), (1, 1), 2, np.float32, alg)(x, w)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _window_loop(x, is_max, k, s, p):
    """Pooling as a window-by-window loop in row-major order (the reference semantics)."""
    n, c, h, w = x.shape
    ho, wo = (h + 2 * p[0] - k[0]) // s[0] + 1, (w + 2 * p[1] - k[1]) // s[1] + 1
    out = np.empty((n, c, ho, wo), x.dtype)
    for a in range(n):
        for b in range(c):
            for oy in range(ho):
                for ox in range(wo):
                    m = x.dtype.type(-np.inf) if is_max else x.dtype.type(0)
                    for iy in range(oy * s[0] - p[0], oy * s[0] - p[0] + k[0]):
                        for ix in range(ox * s[1] - p[1], ox * s[1] - p[1] + k[1]):
                            if 0 <= iy < h and 0 <= ix < w:
                                v = x[a, b, iy, ix]
                                if is_max:
                                    if v > m or (v != v and m == m):
                                        m = v
                                else:
                                    m = x.dtype.type(m + v)
                    out[a, b, oy, ox] = m if is_max else x.dtype.type(m / x.dtype.type(k[0] * k[1]))
    return out


POOLS = [((2, 3, 9, 7), (3, 3), (2, 2), (1, 1)), ((1, 2, 6, 6), (2, 2), (2, 2), (0, 0)),
         ((1, 2, 7, 8), (3, 2), (1, 3), (1, 1)), ((1, 1, 5, 5), (5, 5), (1, 1), (2, 2))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("is_max", [True, False])
@pytest.mark.parametrize("case", POOLS, ids=lambda c: str(c))
def test_pool_matches_a_window_loop_bit_for_bit(case, is_max, dtype):
    xs, k, s, p = case
    rng = np.random.default_rng(3)
    x = rng.standard_normal(xs).astype(dtype)
    x[rng.random(xs) < 0.2] = 0.0
    x[rng.random(xs) < 0.2] = -0.0
    x[rng.random(xs) < 0.05] = -np.inf
    if is_max:  # NaNs with different payloads: the window's first one wins
        nan2 = np.frombuffer(np.array(np.nan, dtype).tobytes(), dtype=np.uint64 if dtype == np.float64 else np.uint32)[0] | 1
        x.reshape(-1)[rng.random(x.size) < 0.03] = np.nan
        x.reshape(-1)[rng.random(x.size) < 0.03] = np.array(nan2).view(dtype)
    ho, wo = (xs[2] + 2 * p[0] - k[0]) // s[0] + 1, (xs[3] + 2 * p[1] - k[1]) // s[1] + 1
    got = pool.pool_kernel(is_max, xs, k, s, p, (*xs[:2], ho, wo), np.dtype(dtype))(x)
    assert got.dtype == dtype
    assert got.tobytes() == _window_loop(x, is_max, k, s, p).tobytes()
    t = torch.from_numpy(x)
    want = (torch.nn.functional.max_pool2d(t, k, s, p) if is_max
            else torch.nn.functional.avg_pool2d(t, k, s, p, count_include_pad=True)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # NaN where PyTorch has NaN


def test_max_pool_keeps_the_first_signed_zero():
    x = np.array([[[[-0.0, 0.0], [0.0, -0.0]]]], np.float32)
    got = pool.pool_kernel(True, x.shape, (2, 2), (1, 1), (0, 0), (1, 1, 1, 1), np.dtype(np.float32))(x)
    assert np.signbit(got[0, 0, 0, 0])
    got = pool.pool_kernel(True, x[..., ::-1].shape, (2, 2), (1, 1), (0, 0), (1, 1, 1, 1),
                           np.dtype(np.float32))(np.ascontiguousarray(x[..., ::-1]))
    assert not np.signbit(got[0, 0, 0, 0])


@pytest.mark.parametrize("swap_max", [0, 1 << 18], ids=["ct_at_cols_T", "cols_at_ct_T"])
@pytest.mark.parametrize("case", [((3, 4, 6, 6), 5, 3, 1, 1, 1), ((2, 6, 5, 5), 4, 3, 2, 1, 2)], ids=str)
def test_weight_grad_split_gather_matches_torch_and_unsplit_bits(case, swap_max, monkeypatch):
    from caramba.backends.cpu import conv_grad

    monkeypatch.setattr(conv_grad, "WEIGHT_GRAD_SWAP_MAX", swap_max)  # both orders of the product
    xs, o, k, s, p, g = case
    rng = np.random.default_rng(4)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((o, xs[1] // g, k, k)).astype(np.float32)
    tx, tw = torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)).requires_grad_()
    y = torch.nn.functional.conv2d(tx, tw, stride=s, padding=p, groups=g)
    ct = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.from_numpy(ct.astype(np.float64)))
    outs = []
    monkeypatch.setattr(workers, "count", lambda: 2)
    for split_min in (1 << 40, 1):
        monkeypatch.setattr(conv, "GATHER_SPLIT_MIN", split_min)
        out = np.empty(w.shape, np.float32)
        conv_grad.conv_weight_grad_kernel(xs, ct.shape, (k, k), (s, s), (p, p), (1, 1), g, np.float32)(x, ct, out)
        outs.append(out)
    assert outs[0].tobytes() == outs[1].tobytes()
    want = tw.grad.numpy()
    np.testing.assert_allclose(outs[1], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_an_unsplit_batched_convolution_leaves_openblas_at_one_thread():
    """A small per-image convolution runs its products on one BLAS thread whatever count the
    last product left: OpenBLAS's own pool, once woken, spins against the cpu workers."""
    from caramba.backends.cpu import blas

    policy = blas._policy()
    if policy is None:
        pytest.skip("BLAS is not an OpenBLAS caramba controls here")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4, 9, 9)).astype(np.float32)
    w = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
    kern = conv.conv_kernel(x.shape, w.shape, (1, 1), (1, 1), (1, 1), 1, np.float32, "batched")
    before = policy.get()
    try:
        policy.set(2)  # as a large product left it
        kern(x, w)
        assert policy.get() == 1  # NumPy's OpenBLAS, the one caramba's products call
    finally:
        policy.set(before)
        policy.sync()
