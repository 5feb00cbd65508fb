"""The fused cpu sdpa kernel (``kernels/attention.py`` + ``_attention_loops.py``): agrees with
PyTorch's float64 attention (causal and not, Tq < Tk, several block sizes and thread splits),
keeps float32 float32, equals the unfused NumPy path, gives NaN rows as the unfused graph does,
and its gradients (the autodiff rule's graph) agree with finite differences in float64."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import ops
from caramba.autodiff.api import grad
from caramba.backends.cpu.kernels import attention as att

from ...compiler._util import run, run_feeds

numba = pytest.importorskip("numba")
torch = pytest.importorskip("torch")


def _torch_sdpa(q, k, v, causal, scale=None):
    t = [torch.from_numpy(a.astype(np.float64)) for a in (q, k, v)]
    if not causal or q.shape[-2] == k.shape[-2]:
        return torch.nn.functional.scaled_dot_product_attention(*t, is_causal=causal, scale=scale).numpy()
    tq, tk = q.shape[-2], k.shape[-2]  # caramba aligns the causal mask bottom-right (KV cache)
    keep = torch.from_numpy(np.tril(np.ones((tq, tk), dtype=bool), k=tk - tq))
    return torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=keep, scale=scale).numpy()


CASES = [((2, 3), 9, 9, 8, 8, True), ((2, 3), 9, 9, 8, 5, False), ((4,), 5, 17, 16, 16, True),
         ((3, 2), 33, 33, 4, 12, True), ((), 7, 7, 3, 3, True), ((1, 2), 1, 6, 8, 8, True)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + f"-{c[1]}-{c[2]}-{c[5]}")
def test_fused_sdpa_matches_torch(cpu, dtype, case):
    batch, tq, tk, d, dv, causal = case
    rng = np.random.default_rng(sum(batch) + tq + tk)
    q = (rng.standard_normal((*batch, tq, d)) * 2).astype(dtype)
    k = (rng.standard_normal((*batch, tk, d)) * 2).astype(dtype)
    v = rng.standard_normal((*batch, tk, dv)).astype(dtype)
    g = caramba.trace(lambda q, k, v: ops.sdpa(q, k, v, causal=causal),
                      (q.shape, dtype), (k.shape, dtype), (v.shape, dtype))
    (got,) = run_feeds(cpu, g, [q, k, v])
    assert got.dtype == np.dtype(dtype) and got.shape == (*batch, tq, dv)
    tol = 3e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(got, _torch_sdpa(q, k, v, causal), rtol=tol, atol=tol)


def _node(causal, scale, shapes, dtype):
    from caramba.ir.dtypes import dtype as as_dtype
    from caramba.ir.types import ValueType

    class N:
        attrs = {"causal": causal, "scale": scale}

    return N(), [ValueType(s, as_dtype(dtype)) for s in shapes]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("block", [1, 7, 1 << 15])
@pytest.mark.parametrize("path", ["native", "numpy"])
def test_fused_equals_unfused_and_splits(monkeypatch, dtype, block, path):
    """Any block size and a forced two-way worker split give the unfused kernel's result, on
    the native helpers (``_attention_native``) and on the NumPy path."""
    from caramba.backends.cpu import workers
    from caramba.backends.cpu.kernels import _attention_native

    rng = np.random.default_rng(5)
    shapes = [(3, 4, 20, 8), (3, 4, 24, 8), (3, 4, 24, 6)]
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in shapes)
    node, ins = _node(True, 0.3, shapes, dtype)
    monkeypatch.setattr(att, "BLOCK_SCORES", block)
    monkeypatch.setattr(att, "SPLIT_FLOPS", 0.0)
    monkeypatch.setattr(_attention_native, "SPLIT_FLOPS", 0.0)
    monkeypatch.setattr(workers, "count", lambda: 2)
    if path == "numpy":
        monkeypatch.setattr(att, "_native", lambda *a: None)
    elif att._native((3, 4), 20, 24, 8, 6, np.dtype(dtype), 0.3, True) is None:
        pytest.skip("no native attention here (needs NumPy's ILP64 OpenBLAS and the native helpers)")
    fused = att._fused_sdpa(*ins, 0.3, True)
    assert fused is not None
    got = fused(q, k, v)
    unfused = att._sdpa(node, ins + [ins[0].__class__((20, 24), ins[0].dtype.__class__.bool)])
    keep = np.ones((20, 24), dtype=bool)
    want = unfused(q, k, v, keep)  # the NumPy path (a mask input disables fusion)
    tol = 2e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(got, _torch_sdpa(q, k, v, True, 0.3), rtol=tol, atol=tol)
    node2, ins2 = _node(True, 0.3, shapes[:2], dtype)
    p = att._attention_probs(node2, ins2)(q, k)
    keep2 = np.tril(np.ones((20, 24), dtype=bool), k=4)
    want_p = torch.softmax(torch.from_numpy(np.where(keep2, q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)
                                                     * np.float64(np.dtype(dtype).type(0.3)), -np.inf)), -1).numpy()
    np.testing.assert_allclose(p, want_p, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_sdpa_nan_and_inf_rows(cpu, dtype):
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((1, 2, 6, 4)).astype(dtype) for _ in range(3))
    q[0, 0, 3, 0] = np.nan  # row 3 of head 0: NaN scores -> NaN output
    k[0, 1, 0, :] = np.inf  # head 1: +inf score in column 0 -> inf - inf: NaN where it is kept
    g = caramba.trace(lambda q, k, v: ops.sdpa(q, k, v, causal=True), *[((1, 2, 6, 4), dtype)] * 3)
    (got,) = run_feeds(cpu, g, [q, k, v])
    node, ins = _node(True, None, [(1, 2, 6, 4)] * 3, dtype)
    with np.errstate(all="ignore"):
        want = att._sdpa(node, ins + [ins[0].__class__((6, 6), ins[0].dtype.__class__.bool)])(
            q, k, v, np.ones((6, 6), dtype=bool))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=2e-6, atol=2e-6)


def test_fused_sdpa_gradients_finite_differences(cpu):
    """The gradient graph (autodiff's rule over the fused forward) against central differences
    of the fused forward, and against PyTorch's autograd."""
    rng = np.random.default_rng(7)
    shape = (2, 2, 5, 3)
    q, k, v, w = (rng.standard_normal(shape) for _ in range(4))

    def f(q, k, v, w):
        return ops.sum(ops.sdpa(q, k, v, causal=True) * w)

    g = caramba.trace(lambda q, k, v, w: grad(f(q, k, v, w), [q, k, v]), *[(shape, "float64")] * 4)
    outs = run(cpu, g, {n.id: a for n, a in zip(g.inputs, (q, k, v, w), strict=True)})
    got = [outs[k_] for k_ in sorted(outs, key=lambda s: (len(s), s))]
    fwd = cpu.compile(caramba.trace(f, *[(shape, "float64")] * 4))
    ids = [n.id for n in fwd.graph.inputs] if hasattr(fwd, "graph") else None

    def loss(*arrs):
        out = fwd.run({i: cpu.upload(a) for i, a in zip(ids, (*arrs, w), strict=True)})
        return float(next(iter(out.values())).download())

    ts = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    (torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=True) * torch.from_numpy(w)).sum().backward()
    h = 1e-6
    for which, arr in enumerate((q, k, v)):
        num = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            plus, minus = list((q, k, v)), list((q, k, v))
            plus[which], minus[which] = arr.copy(), arr.copy()
            plus[which][idx] += h
            minus[which][idx] -= h
            num[idx] = (loss(*plus) - loss(*minus)) / (2 * h)
        np.testing.assert_allclose(got[which], num, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(got[which], ts[which].grad.numpy(), rtol=1e-12, atol=1e-13)


# ---- fused.attention_probs: the probabilities sdpa's VJP recomputes (compiler/fuse.py) -------


def _sdpa_grads(causal):
    def f(q, k, v, w):
        return grad(ops.sum(ops.sdpa(q, k, v, causal=causal) * w), [q, k, v])

    return f


def _torch_grads(q, k, v, w, causal):
    ts = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in (q, k, v)]
    tq, tk = q.shape[-2], k.shape[-2]
    mask = torch.from_numpy(np.tril(np.ones((tq, tk), dtype=bool), k=tk - tq)) if causal else None
    out = torch.nn.functional.scaled_dot_product_attention(*ts, attn_mask=mask)
    (out * torch.from_numpy(w.astype(np.float64))).sum().backward()
    return [t.grad.numpy() for t in ts]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("tq,tk", [(6, 6), (4, 9), (40, 40)])
def test_attention_probs_fused_in_backward_matches_torch_and_unfused(cpu, dtype, causal, tq, tk):
    from caramba.compiler import compile_graph

    rng = np.random.default_rng(tq * 31 + tk)
    qs, ks = (2, 3, tq, 8), (2, 3, tk, 8)
    q, w = (rng.standard_normal(qs).astype(dtype) for _ in range(2))
    k, v = (rng.standard_normal(ks).astype(dtype) for _ in range(2))
    g = caramba.trace(_sdpa_grads(causal), (qs, dtype), (ks, dtype), (ks, dtype), (qs, dtype))
    after, _ = compile_graph(g, cpu)
    # the probabilities once: recomputed by fused.attention_probs, or shared with a forward sdpa
    # the graph keeps (fused.sdpa_probs)
    assert {"fused.attention_probs", "fused.sdpa_probs"} & {n.op for n in after.nodes}
    assert "nn.softmax" not in {n.op for n in after.nodes}
    feed = {n.id: a for n, a in zip(g.inputs, (q, k, v, w), strict=True)}
    got = run(cpu, g, feed)
    unfused = run(cpu, g, feed, disable=("fuse",))
    keys = sorted(got, key=lambda s: (len(s), s))
    tol = 2e-5 if dtype == "float32" else 1e-12
    for key, want in zip(keys, _torch_grads(q, k, v, w, causal), strict=True):
        assert got[key].dtype == np.dtype(dtype)
        scale = np.abs(want).max()
        np.testing.assert_allclose(got[key], want, rtol=tol, atol=tol * scale)
        np.testing.assert_allclose(got[key], unfused[key], rtol=tol, atol=tol * scale)


def test_attention_probs_not_fused_for_other_masks(cpu):
    """A where with a mask that is not sdpa's causal tril stays what it was (and still runs)."""
    from caramba.compiler import compile_graph

    shape = (2, 5, 4)
    keep = np.triu(np.ones((5, 5), dtype=bool))

    def f(q, k):
        s = ops.matmul(q, ops.transpose(k, perm=(0, 2, 1))) * 0.5
        return ops.softmax(ops.where(s.graph.constant(keep), s, s.graph.constant(np.asarray(-np.inf))), axis=-1)

    g = caramba.trace(f, (shape, "float64"), (shape, "float64"))
    after, _ = compile_graph(g, cpu)
    assert "fused.attention_probs" not in {n.op for n in after.nodes}
    rng = np.random.default_rng(8)
    q, k = rng.standard_normal(shape), rng.standard_normal(shape)
    (got,) = run(cpu, g, {g.inputs[0].id: q, g.inputs[1].id: k}).values()
    s = np.where(keep, q @ k.transpose(0, 2, 1) * 0.5, -np.inf)
    want = torch.softmax(torch.from_numpy(s), -1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("scale", [0.7, -0.7])
@pytest.mark.parametrize("numba_on", [True, False])
def test_attention_probs_kernel_scales_and_fallback(monkeypatch, scale, numba_on):
    """The kernel itself: a negative scale (no fold into the max), and the NumPy path without Numba."""
    from caramba.backends.cpu import fused

    rng = np.random.default_rng(9)
    q, k = rng.standard_normal((3, 7, 5)), rng.standard_normal((3, 9, 5))
    node, ins = _node(True, scale, [q.shape, k.shape], "float64")
    if not numba_on:
        monkeypatch.setattr(fused, "available", lambda: False)
    got = att._attention_probs(node, ins)(q, k)
    keep = np.tril(np.ones((7, 9), dtype=bool), k=2)
    want = torch.softmax(torch.from_numpy(np.where(keep, q @ k.transpose(0, 2, 1) * scale, -np.inf)), -1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


def test_attention_probs_type_rule_rejects_bad_inputs():
    from caramba.errors import GraphError
    from caramba.ir.dtypes import DType
    from caramba.ir.opdef import get_op
    from caramba.ir.types import ValueType

    op = get_op("fused.attention_probs")
    attrs = op.make_attrs({"scale": 1.0, "causal": True})
    ok = op.infer((ValueType((2, 3, 4), DType.float32), ValueType((2, 5, 4), DType.float32)), attrs)
    assert tuple(ok) == (ValueType((2, 3, 5), DType.float32),)
    for q, k in [((2, 6, 4), (2, 5, 4)), ((2, 3, 4), (3, 5, 4)), ((2, 3, 4), (2, 5, 3)), ((4,), (4,))]:
        with pytest.raises(GraphError):
            op.infer((ValueType(q, DType.float32), ValueType(k, DType.float32)), attrs)
    with pytest.raises(GraphError):
        op.infer((ValueType((3, 4), DType.int64), ValueType((3, 4), DType.int64)), attrs)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("causal", [True, False])
def test_training_graph_computes_probabilities_once(cpu, dtype, causal):
    """Loss and gradients in one graph: the forward sdpa and the VJP's recomputed probabilities
    become one fused.sdpa_probs; loss and gradients agree with PyTorch and the unfused graph."""
    from caramba.compiler import compile_graph

    rng = np.random.default_rng(11)
    shape = (2, 3, 12, 8)
    q, k, v, w = (rng.standard_normal(shape).astype(dtype) for _ in range(4))

    def f(q, k, v, w):
        loss = ops.sum(ops.sdpa(q, k, v, causal=causal) * w)
        return (loss, *grad(loss, [q, k, v]))

    g = caramba.trace(f, *[(shape, dtype)] * 4)
    after, _ = compile_graph(g, cpu)
    ops_after = [n.op for n in after.nodes]
    assert ops_after.count("fused.sdpa_probs") == 1
    assert "attention.sdpa" not in ops_after and "fused.attention_probs" not in ops_after
    feed = {n.id: a for n, a in zip(g.inputs, (q, k, v, w), strict=True)}
    got = run(cpu, g, feed)
    unfused = run(cpu, g, feed, disable=("fuse",))
    keys = sorted(got, key=lambda s: (len(s), s))
    ts = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in (q, k, v)]
    loss = (torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=causal) * torch.from_numpy(w.astype(np.float64))).sum()
    loss.backward()
    wants = [loss.detach().numpy(), *(t.grad.numpy() for t in ts)]
    tol = 2e-5 if dtype == "float32" else 1e-12
    for key, want in zip(keys, wants, strict=True):
        assert got[key].dtype == np.dtype(dtype)
        scale = np.abs(want).max()
        np.testing.assert_allclose(got[key], want, rtol=tol, atol=tol * scale)
        np.testing.assert_allclose(got[key], unfused[key], rtol=tol, atol=tol * scale)



def _native_or_skip(*args):
    run = att._native(*args)
    if run is None:
        pytest.skip("no native attention here (needs NumPy's ILP64 OpenBLAS and the native helpers)")
    return run


def _reference_sdpa(q, k, v, scale, causal):
    """float64 NumPy: where(mask, q @ k^T * scale, -inf), softmax, @ v (NaN for fully masked rows)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) * scale
    tq, tk = s.shape[-2:]
    if causal:
        s = np.where(np.tril(np.ones((tq, tk), dtype=bool), k=tk - tq), s, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
    return p @ v, p


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("layout", ["heads_view", "contiguous_3d", "five_d", "broadcast_free_copy"])
def test_native_attention_reads_strided_operands(monkeypatch, dtype, layout):
    """Heads seen through a transpose (not copied), 3-D and 5-D batches, a non-unit column
    stride (copied first): the output and probabilities match float64 NumPy; split or not."""
    from caramba.backends.cpu import workers
    from caramba.backends.cpu.kernels import _attention_native

    monkeypatch.setattr(_attention_native, "SPLIT_FLOPS", 0.0)
    monkeypatch.setattr(workers, "count", lambda: 2)
    rng = np.random.default_rng(21)
    if layout == "heads_view":  # [B, T, H, D] projections seen as [B, H, T, D]
        q, k, v = (rng.standard_normal((2, 9, 3, 5)).astype(dtype).transpose(0, 2, 1, 3) for _ in range(3))
    elif layout == "contiguous_3d":
        q, k, v = (rng.standard_normal((4, 9, 5)).astype(dtype) for _ in range(3))
    elif layout == "five_d":
        q, k, v = (rng.standard_normal((2, 2, 3, 9, 5)).astype(dtype) for _ in range(3))
    else:  # every other column: BLAS cannot read it in place
        q, k, v = (rng.standard_normal((2, 3, 9, 10)).astype(dtype)[..., ::2] for _ in range(3))
    batch = q.shape[:-2]
    run = _native_or_skip(batch, 9, 9, 5, 5, np.dtype(dtype), 0.4, True)
    out, p = np.empty(batch + (9, 5), dtype), np.empty(batch + (9, 9), dtype)
    run(q, k, v, out, p)
    want_out, want_p = _reference_sdpa(q, k, v, float(np.dtype(dtype).type(0.4)), True)
    tol = 3e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(p, want_p, rtol=tol, atol=tol)
    np.testing.assert_allclose(out, want_out, rtol=tol, atol=tol)
    assert out.dtype == p.dtype == np.dtype(dtype)


def test_native_attention_more_queries_than_keys_gives_nan_rows_like_the_unfused_graph():
    """Causal with Tq > Tk: the first rows keep no key; softmax over all -inf is NaN (as the
    unfused where + softmax), the other rows are exact."""
    rng = np.random.default_rng(4)
    q, k, v = rng.standard_normal((2, 7, 3)), rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 4, 2))
    run = _native_or_skip((2,), 7, 4, 3, 2, np.dtype("float64"), 0.5, True)
    out, p = np.empty((2, 7, 2)), np.empty((2, 7, 4))
    run(q, k, v, out, p)
    want_out, want_p = _reference_sdpa(q, k, v, 0.5, True)
    np.testing.assert_array_equal(np.isnan(p), np.isnan(want_p))
    assert np.isnan(p[:, :3]).all() and not np.isnan(p[:, 3:]).any()
    np.testing.assert_allclose(p[:, 3:], want_p[:, 3:], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(out[:, 3:], want_out[:, 3:], rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("keep_probs", [True, False])
def test_native_attention_same_bits_when_the_helpers_are_busy(monkeypatch, keep_probs):
    """When another split call holds the helpers, the same blocks run on the calling thread
    (scratch rows included): the same bits as the split run."""
    from caramba.backends.cpu import workers
    from caramba.backends.cpu.kernels import _attention_native

    monkeypatch.setattr(_attention_native, "SPLIT_FLOPS", 0.0)
    if workers.count() < 2:
        pytest.skip("one worker: nothing is split")
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((6, 4, 16, 8)).astype("float32") for _ in range(3))
    run = _native_or_skip((6, 4), 16, 16, 8, 8, np.dtype("float32"), 0.35, True)

    def once():
        out, p = np.empty((6, 4, 16, 8), np.float32), np.empty((6, 4, 16, 16), np.float32)
        run(q, k, v, out, p if keep_probs else None)
        return out

    split = once()
    assert workers._RUNNING.acquire(blocking=False)
    try:
        in_turn = once()
    finally:
        workers._RUNNING.release()
    assert np.array_equal(split, in_turn)
