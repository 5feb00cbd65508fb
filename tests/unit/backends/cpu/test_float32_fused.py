"""float32 in the cpu backend's generated code: ``runtime.exp_f32`` (float32 arithmetic,
branch-free) is within 1 ulp of the correctly rounded exp over the whole float32 range with
IEEE edge cases; fused float32 exp, exact GELU and softmax keep float32 (no float64 result
leaks out) and agree with float64 references (NumPy, PyTorch) to float32 rounding; conv and
pooling graphs in float32 give float32."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import ops
from caramba.compiler import compile_graph

from ...compiler._util import run_feeds

numba = pytest.importorskip("numba")
torch = pytest.importorskip("torch")

from caramba.backends.cpu.fused.runtime import exp_f32  # noqa: E402


@numba.njit(cache=False)
def _exp_all(x, out):
    for i in range(x.size):
        out[i] = exp_f32(x[i])


def _ulps(got: np.ndarray, want64: np.ndarray) -> np.ndarray:
    want32 = want64.astype(np.float32)
    return np.abs(got.astype(np.float64) - want64) / np.spacing(want32).astype(np.float64)


def test_exp_f32_within_one_ulp_everywhere():
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-87.3, 88.7, 400_001, dtype=np.float32),
                        rng.uniform(-1, 1, 100_000).astype(np.float32),
                        rng.standard_normal(100_000).astype(np.float32) * 1e-6])
    out = np.empty_like(x)
    _exp_all(x, out)
    assert out.dtype == np.float32
    assert _ulps(out, np.exp(x.astype(np.float64))).max() <= 1.0


def test_exp_f32_edge_cases():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.72283, 88.7229, 89.0, 1e30, -1e30, -103.0, -104.0, -110.0,
                  -87.5, 1e-45, -1e-45], np.float32)
    out = np.empty_like(x)
    _exp_all(x, out)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(want))
    np.testing.assert_array_equal(out == 0, want == 0)
    finite = np.isfinite(want) & (want > 0)
    # subnormal results: within one unit of the smallest subnormal
    assert np.all(np.abs(out[finite].astype(np.float64) - np.exp(x[finite].astype(np.float64))) <=
                  np.maximum(np.spacing(want[finite]).astype(np.float64), 1.5e-45))


def _fused_ops(runner, g):
    after, _ = compile_graph(g, runner)
    return {n.op for n in after.nodes}


def test_fused_float32_exp_and_gelu_keep_float32(cpu):
    shape = (64, 257)
    x = (np.random.default_rng(1).standard_normal(shape) * 4).astype(np.float32)
    g = caramba.trace(lambda x: ops.exp(x * 0.5) + ops.gelu(x) * 2.0, (shape, "float32"))
    assert "fused.elementwise" in _fused_ops(cpu, g)
    (got,) = run_feeds(cpu, g, [x])
    assert got.dtype == np.float32
    t = torch.from_numpy(x.astype(np.float64))
    want = (torch.exp(t * 0.5) + torch.nn.functional.gelu(t) * 2.0).numpy()
    np.testing.assert_allclose(got, want, rtol=4e-7, atol=1e-6)


def test_fused_float32_softmax_keeps_float32(cpu):
    shape = (33, 65)
    x = (np.random.default_rng(2).standard_normal(shape) * 5).astype(np.float32)
    g = caramba.trace(lambda x: ops.softmax(x * 1.5 + 1.0, axis=0), (shape, "float32"))
    (got,) = run_feeds(cpu, g, [x])
    assert got.dtype == np.float32
    want = torch.softmax(torch.from_numpy(x.astype(np.float64)) * 1.5 + 1.0, dim=0).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


def test_float32_cnn_graph_stays_float32(cpu):
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 3, 12, 12)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = caramba.trace(lambda x, w: ops.avg_pool2d(ops.max_pool2d(ops.relu(ops.conv2d(x, w, padding=(1,))), kernel=(2,)),
                                                  kernel=(2,)), ((2, 3, 12, 12), "float32"), ((4, 3, 3, 3), "float32"))
    (got,) = run_feeds(cpu, g, [x, w])
    assert got.dtype == np.float32
    tf = torch.nn.functional
    want = tf.avg_pool2d(tf.max_pool2d(torch.relu(tf.conv2d(torch.from_numpy(x.astype(np.float64)),
                                                            torch.from_numpy(w.astype(np.float64)), padding=1)), 2), 2)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sdpa_row_softmax_matches_torch_and_keeps_dtype(cpu, dtype):
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 3, 9, 8)).astype(dtype) for _ in range(3))
    keep = rng.random((9, 9)) > 0.3
    keep[0] = False  # a fully masked row: NaN, as NumPy's softmax gives
    g = caramba.trace(lambda q, k, v, m: ops.sdpa(q, k, v, m), *[((2, 3, 9, 8), dtype)] * 3, ((9, 9), "bool"))
    (got,) = run_feeds(cpu, g, [q, k, v, keep])
    assert got.dtype == np.dtype(dtype)
    assert np.all(np.isnan(got[:, :, 0]))
    t = [torch.from_numpy(a.astype(np.float64)) for a in (q, k, v)]
    want = torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=torch.from_numpy(keep)).numpy()
    tol = 2e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(got[:, :, 1:], want[:, :, 1:], rtol=tol, atol=tol)
    gc = caramba.trace(lambda q, k, v: ops.sdpa(q, k, v, causal=True), *[((2, 3, 9, 8), dtype)] * 3)
    (got_c,) = run_feeds(cpu, gc, [q, k, v])
    want_c = torch.nn.functional.scaled_dot_product_attention(*t, is_causal=True).numpy()
    np.testing.assert_allclose(got_c, want_c, rtol=tol, atol=tol)
