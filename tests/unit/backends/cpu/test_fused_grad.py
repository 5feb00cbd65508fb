"""The cpu backend's fused backward row kernels (``fused/rows_grad.py``): the VJP chains of
layer_norm, rms_norm, softmax and log_softmax become one ``fused.*_grad`` node (``compiler/fuse.py``)
and match PyTorch's autograd (float64), the unfused graph, and central finite differences, on one
row, odd widths, [N, 1], several normalized axes, and rows split over the workers."""

from __future__ import annotations

import numpy as np
import pytest

import caramba
from caramba import compute, ops
from caramba.autodiff.api import grad
from caramba.compiler import compile_graph

from ...compiler._util import run

pytest.importorskip("numba")
torch = pytest.importorskip("torch")


# (shape, axis): one row, odd widths, [N, 1], two normalized axes, a 3-d batch, and rows that
# are split over the workers (64 x 1100: past codegen.PARALLEL_MIN_WORK; 300 x 40: blocks of more
# than the 128 rows each block sums dgamma/dbeta over before adding them to its partial row)
SHAPES = [((1, 7), -1), ((5, 13), -1), ((6, 1), -1), ((3, 4, 9), -2), ((2, 3, 130), -1), ((64, 1100), -1), ((300, 40), -1)]


def _loss_fn(kind: str, axis: int):
    """f(x, [gamma], [beta], w) -> grads of sum(op(x) * w) with respect to x (and the affine inputs)."""

    def f(x, *rest):
        *aff, w = rest
        return grad(ops.sum(_fwd(kind, x, aff, axis) * w), [x, *aff])

    return f


def _torch_grads(kind, x, aff, w, axis):
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ta = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in aff]
    dims = tuple(range(axis % x.ndim, x.ndim))
    if kind == "layer_norm":
        y = torch.nn.functional.layer_norm(tx, x.shape[axis % x.ndim:], *(ta + [None, None])[:2], eps=1e-5)
    elif kind == "rms_norm":
        y = tx * torch.rsqrt(tx.pow(2).mean(dim=dims, keepdim=True) + 1e-6)
        if ta:
            y = y * ta[0]
    elif kind == "softmax":
        y = torch.softmax(tx, dim=-1)
    else:
        y = torch.log_softmax(tx, dim=-1)
    (y * torch.tensor(w, dtype=torch.float64)).sum().backward()
    return [tx.grad.numpy()] + [a.grad.numpy() for a in ta]


def _case(kind, shape, axis, affine, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    tail = shape[axis % len(shape):]
    aff = [rng.uniform(0.5, 2, tail).astype(dtype), rng.uniform(-1, 1, tail).astype(dtype)][:affine]
    w = rng.standard_normal(shape).astype(dtype)
    return x, aff, w


def _graph(kind, shape, axis, affine, dtype):
    tail = shape[axis % len(shape):]
    return caramba.trace(_loss_fn(kind, axis), (shape, dtype), *[(tail, dtype)] * affine, (shape, dtype))


def _inputs(g, values):
    return dict(zip([n.id for n in g.inputs], values, strict=True))


KINDS = [("layer_norm", 0), ("layer_norm", 1), ("layer_norm", 2), ("rms_norm", 0), ("rms_norm", 1), ("softmax", 0),
         ("log_softmax", 0)]
FUSED = {"layer_norm": "fused.layer_norm_grad", "rms_norm": "fused.rms_norm_grad", "softmax": "fused.softmax_grad",
         "log_softmax": "fused.log_softmax_grad"}


def _axis_for(kind, axis):
    return axis if kind in ("layer_norm", "rms_norm") else -1


@pytest.mark.parametrize("kind,affine", KINDS)
@pytest.mark.parametrize("shape,axis", SHAPES)
def test_fused_grad_matches_torch_and_unfused_float64(cpu, kind, affine, shape, axis):
    axis = _axis_for(kind, axis)
    g = _graph(kind, shape, axis, affine, "float64")
    after, _ = compile_graph(g, cpu)
    assert FUSED[kind] in {n.op for n in after.nodes}, [n.op for n in after.nodes]
    x, aff, w = _case(kind, shape, axis, affine, "float64")
    feed = _inputs(g, [x, *aff, w])
    got = run(cpu, g, feed)
    unfused = run(cpu, g, feed, disable=("fuse",))
    want = _torch_grads(kind, x, aff, w, axis)
    for k, ref in enumerate(want):
        scale = max(1.0, float(np.max(np.abs(ref))))
        np.testing.assert_allclose(got[f"out{k}"], ref, rtol=1e-12, atol=1e-12 * scale)
        np.testing.assert_allclose(got[f"out{k}"], unfused[f"out{k}"], rtol=1e-12, atol=1e-13 * scale)


@pytest.mark.parametrize("kind,affine", KINDS)
@pytest.mark.parametrize("shape,axis", [((5, 13), -1), ((64, 1100), -1)])
def test_fused_grad_float32_stays_float32_within_tolerance(cpu, kind, affine, shape, axis):
    g = _graph(kind, shape, axis, affine, "float32")
    after, _ = compile_graph(g, cpu)
    assert FUSED[kind] in {n.op for n in after.nodes}
    x, aff, w = _case(kind, shape, axis, affine, "float32", seed=3)
    got = run(cpu, g, _inputs(g, [x, *aff, w]))
    want = _torch_grads(kind, x.astype(np.float64), [a.astype(np.float64) for a in aff], w.astype(np.float64), axis)
    for k, ref in enumerate(want):
        assert got[f"out{k}"].dtype == np.float32
        # dgamma/dbeta sum over rows: their rounding grows with the row count
        tol = 2e-6 * (1 if k == 0 else np.sqrt(ref.size and x.size // ref.size))
        scale = float(np.max(np.abs(ref)))
        np.testing.assert_allclose(got[f"out{k}"], ref, rtol=tol * 8, atol=tol * 8 * scale)


@pytest.mark.parametrize("kind,affine", [("layer_norm", 2), ("rms_norm", 1), ("softmax", 0), ("log_softmax", 0)])
def test_fused_grad_matches_finite_differences(cpu, kind, affine):
    """Central differences of the forward graph (float64) against the fused gradient."""
    shape = (3, 5)
    g = _graph(kind, shape, -1, affine, "float64")
    x, aff, w = _case(kind, shape, -1, affine, "float64", seed=7)
    got = run(cpu, g, _inputs(g, [x, *aff, w]))

    fwd = caramba.trace(lambda x, *r: ops.sum(_fwd(kind, x, r[:-1], -1) * r[-1]), (shape, "float64"),
                        *[(shape[-1:], "float64")] * affine, (shape, "float64"))

    def loss(xv, av):
        return float(run(cpu, fwd, _inputs(fwd, [xv, *av, w]))["out"])

    vals = [x, *aff]
    h = 1e-6
    for k, v in enumerate(vals):
        num = np.zeros_like(v)
        for idx in np.ndindex(v.shape):
            up = [a.copy() for a in vals]
            dn = [a.copy() for a in vals]
            up[k][idx] += h
            dn[k][idx] -= h
            num[idx] = (loss(up[0], up[1:]) - loss(dn[0], dn[1:])) / (2 * h)
        np.testing.assert_allclose(got[f"out{k}"], num, rtol=1e-6, atol=1e-7)


def _fwd(kind, x, aff, axis):
    if kind == "layer_norm":
        return ops.layer_norm(x, *aff, axis=axis, eps=1e-5)
    if kind == "rms_norm":
        return ops.rms_norm(x, *aff, axis=axis, eps=1e-6)
    return ops.softmax(x, axis=-1) if kind == "softmax" else ops.log_softmax(x, axis=-1)


@pytest.mark.parametrize("outside", [False, True])
def test_chain_with_an_outside_user_is_not_fused(cpu, outside):
    """The softmax VJP written out by hand fuses; with its inner sum also a graph output it
    stays as it was (that value must exist anyway), and both compute the same."""
    shape = (4, 6)

    def f(y, ct):
        s = ops.sum(ct * y, axes=(-1,), keepdims=True)
        dx = y * (ct - s)
        return (dx, s) if outside else dx

    g = caramba.trace(f, (shape, "float64"), (shape, "float64"))
    after, _ = compile_graph(g, cpu)
    assert ("fused.softmax_grad" in {n.op for n in after.nodes}) is not outside
    rng = np.random.default_rng(0)
    y, ct = rng.uniform(0, 1, shape), rng.standard_normal(shape)
    got = run(cpu, g, _inputs(g, [y, ct]))
    dx = got["out0"] if outside else got["out"]
    np.testing.assert_allclose(dx, y * (ct - (ct * y).sum(-1, keepdims=True)), rtol=1e-13, atol=1e-15)


def test_other_backends_are_not_given_the_fused_grad():
    """Only a backend that declares fused.softmax_grad gets it: xla (no fusions) keeps the chain."""
    pytest.importorskip("jax")
    shape = (4, 6)
    g = _graph("softmax", shape, -1, 0, "float64")
    with compute.new("xla") as xla:
        after, _ = compile_graph(g, xla)
        assert not any(n.op.startswith("fused.") for n in after.nodes)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_split_norm_grad_gives_the_same_bits_when_the_helpers_are_busy(dtype):
    """Rows split over the workers sum dgamma/dbeta per block; when another split call holds the
    helpers, the same blocks run on the calling thread in turn: the same partial rows, the same
    bits."""
    from caramba.backends.cpu import workers
    from caramba.backends.cpu.fused.rows_grad import norm_grad
    from caramba.ir.types import ValueType

    if workers.count() < 2:
        pytest.skip("one worker: nothing is split")
    shape = (64, 1100)  # past codegen.PARALLEL_MIN_WORK
    run_grad = norm_grad(ValueType(shape, dtype), 1, 1e-5, True, True, True, True)
    rng = np.random.default_rng(11)
    x, ct = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    gamma = rng.standard_normal(shape[1:]).astype(dtype)

    def once():
        outs = [np.empty(shape, dtype), np.empty(shape[1:], dtype), np.empty(shape[1:], dtype)]
        run_grad(x, ct, gamma, *outs)
        return outs

    split = once()
    assert workers._RUNNING.acquire(blocking=False)  # as if another split call were running
    try:
        in_turn = once()
    finally:
        workers._RUNNING.release()
    for a, b in zip(split, in_turn, strict=True):
        assert np.array_equal(a, b)
    want_dbeta = ct.sum(axis=0)
    np.testing.assert_allclose(split[2], want_dbeta, rtol=1e-4 if dtype == "float32" else 1e-12, atol=1e-3 if dtype == "float32" else 1e-10)
