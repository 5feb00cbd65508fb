"""The cpu backend's pooling backward (``backends/cpu/pool_grad.py``) and the ``fuse`` patterns that
make it of the nn.max_pool2d / nn.avg_pool2d VJPs (``compiler/fuse_pool.py``): the k*k slices,
compares, wheres and placements become one ``fused.max_pool2d_grad`` / ``fused.avg_pool2d_grad``
node that equals the unfused graph bit for bit (same arithmetic, same order of summation), PyTorch's
autograd, and central finite differences; ties go to the first maximum as the rule says; NaN and
-inf windows; float32 stays float32; other backends keep the chain; hand-written chains in another
order are left alone."""

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

from caramba.backends.cpu import pool_grad  # noqa: E402

# (N, C, H, W, kernel, stride, padding)
CASES = [
    (2, 3, 7, 7, 2, 2, 1),
    (2, 3, 9, 8, 3, 2, 1),  # the ResNet stem's pool, non-square
    (1, 2, 7, 7, 3, 1, 0),  # overlapping windows, stride 1
    (2, 2, 8, 8, 2, 2, 0),  # tiling windows
    (1, 3, 10, 7, 3, 3, 1),  # stride 3: input rows no window reaches
    (3, 1, 5, 5, 4, 1, 2),  # padding of half the kernel
]
IDS = ["x".join(map(str, c)) for c in CASES]
KINDS = {"max": (ops.max_pool2d, torch.nn.functional.max_pool2d, "fused.max_pool2d_grad"),
         "avg": (ops.avg_pool2d, torch.nn.functional.avg_pool2d, "fused.avg_pool2d_grad")}


def _out(case):
    n, c, h, w, k, s, p = case
    return n, c, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1


def _graph(kind, case, dtype):
    *_, k, s, p = case
    pool = KINDS[kind][0]

    def f(x, ct):
        return grad(ops.sum(pool(x, kernel=(k,), stride=(s,), padding=(p,)) * ct), [x])[0]

    return caramba.trace(f, (case[:4], dtype), (_out(case), dtype))


def _data(case, dtype, seed=0, ties=False):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(case[:4])
    if ties:  # few distinct values: windows with several maxima
        x = np.round(x)
    return x.astype(dtype), rng.standard_normal(_out(case)).astype(dtype)


def _torch_dx(kind, case, x, ct):
    *_, k, s, p = case
    tx = torch.tensor(x.astype(np.float64), requires_grad=True)
    f = KINDS[kind][1]
    y = f(tx, k, s, p, count_include_pad=True) if kind == "avg" else f(tx, k, s, p)
    (y * torch.from_numpy(ct.astype(np.float64))).sum().backward()
    return tx.grad.numpy()


def _fused_ops(g, runner):
    after, _ = compile_graph(g, runner)
    return [n.op for n in after.nodes if n.op.startswith("fused.")]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_one_fused_node_equal_to_the_unfused_graph_bitwise(cpu, kind, case, dtype):
    g = _graph(kind, case, dtype)
    assert _fused_ops(g, cpu) == [KINDS[kind][2]]
    x, ct = _data(case, dtype)
    feed = {"x": x, "ct": ct}
    got = run(cpu, g, feed)["out"]
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, run(cpu, g, feed, disable=("fuse",))["out"])
    want = _torch_dx(kind, case, x, ct)
    tol = 1e-12 if dtype == "float64" else 2e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_max_ties_go_to_the_first_maximum(cpu, case):
    """With many equal maxima the first in the window (row-major) takes the cotangent, as
    the rule and PyTorch do."""
    g = _graph("max", case, "float64")
    x, ct = _data(case, "float64", seed=5, ties=True)
    got = run(cpu, g, {"x": x, "ct": ct})["out"]
    np.testing.assert_array_equal(got, run(cpu, g, {"x": x, "ct": ct}, disable=("fuse",))["out"])
    np.testing.assert_allclose(got, _torch_dx("max", case, x, ct), rtol=1e-12, atol=1e-12)


def test_max_nan_and_minus_inf_windows_match_the_rule(cpu):
    """A NaN window passes no cotangent (NaN equals nothing); an all -inf window gives it to its
    first element, or drops it where that is padding: as the unfused graph."""
    case = (1, 1, 6, 6, 3, 2, 1)
    g = _graph("max", case, "float64")
    x, ct = _data(case, "float64", seed=2)
    x[0, 0, 0, 0] = np.nan
    x[0, 0, 3:6, 3:6] = -np.inf
    got = run(cpu, g, {"x": x, "ct": ct})["out"]
    np.testing.assert_array_equal(got, run(cpu, g, {"x": x, "ct": ct}, disable=("fuse",))["out"])


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_finite_differences_float64(cpu, kind):
    case = (1, 2, 6, 5, 3, 2, 1)
    *_, k, s, p = case
    g = _graph(kind, case, "float64")
    x, ct = _data(case, "float64", seed=7)
    got = run(cpu, g, {"x": x, "ct": ct})["out"]
    pool = KINDS[kind][0]
    fwd = cpu.compile(caramba.trace(lambda x, ct: ops.sum(pool(x, kernel=(k,), stride=(s,), padding=(p,)) * ct),
                                    (case[:4], "float64"), (_out(case), "float64")))
    cu = cpu.upload(ct)

    def loss(v):
        return float(fwd.run({"x": cpu.upload(v), "ct": cu})["out"].download())

    h = 1e-6
    num = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        up, dn = x.copy(), x.copy()
        up[idx] += h
        dn[idx] -= h
        num[idx] = (loss(up) - loss(dn)) / (2 * h)
    np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_kernel_split_over_workers_equals_one_block(monkeypatch, kind):
    from caramba.backends.cpu import workers

    case = (4, 32, 34, 34, 3, 2, 1)  # past pool.SPLIT_MIN_READS
    x, ct = _data(case, "float64", seed=3)
    y = torch.nn.functional.max_pool2d(torch.from_numpy(x), 3, 2, 1).numpy()
    outs = []
    for parts in (1, 3):
        monkeypatch.setattr(workers, "count", lambda parts=parts: parts)
        f = pool_grad.pool_grad_kernel(kind == "max", x.shape, ct.shape, (3, 3), (2, 2), (1, 1), np.float64)
        out = np.full((4, 32, 34, 68), np.nan)[..., ::2]  # not C-contiguous: written through a copy
        f(*((x, y, ct) if kind == "max" else (ct,)), out)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], _torch_dx(kind, case, x, ct), rtol=1e-12, atol=1e-13)


def test_bool_masked_cotangent_and_pool_in_one_graph(cpu):
    """A bool mask shapes the cotangent before the pool's VJP (bool, float32 in one graph): the
    fused pool gradient takes the masked value as its input."""
    case = (2, 3, 8, 8, 2, 2, 0)
    x, ct = _data(case, "float32", seed=4)

    def f(x, ct):
        y = ops.max_pool2d(x, kernel=(2,), stride=(2,))
        keep = ct > 0
        return grad(ops.sum(ops.where(keep, y, y * 0.5) * ct), [x])[0]

    g = caramba.trace(f, (case[:4], "float32"), (_out(case), "float32"))
    assert "fused.max_pool2d_grad" in _fused_ops(g, cpu)
    got = run(cpu, g, {"x": x, "ct": ct})["out"]
    np.testing.assert_array_equal(got, run(cpu, g, {"x": x, "ct": ct}, disable=("fuse",))["out"])
    tx = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.max_pool2d(tx, 2, 2)
    tc = torch.from_numpy(ct)
    (torch.where(tc > 0, y, y * 0.5) * tc).sum().backward()
    np.testing.assert_allclose(got, tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_a_sum_in_another_order_is_left_alone(cpu):
    """Placements summed in an order the fused kernel does not follow stay unfused (the kernel's
    result would differ in rounding)."""
    rng = np.random.default_rng(0)
    ct = rng.standard_normal((1, 2, 3, 3))

    def f(ct):
        parts = []
        for i in range(2):
            for j in range(2):
                parts.append(ops.pad(ct, pads=(0, 0, 0, 0, i, 1 - i, j, 1 - j)))
        return (parts[3] + parts[2]) + (parts[1] + parts[0])

    g = caramba.trace(f, ((1, 2, 3, 3), "float64"))
    assert not any(op.startswith("fused.avg") for op in _fused_ops(g, cpu))
    want = sum(np.pad(ct, ((0, 0), (0, 0), (i, 1 - i), (j, 1 - j))) for i in range(2) for j in range(2))
    np.testing.assert_allclose(run(cpu, g, {"ct": ct})["out"], want, rtol=1e-15)


@pytest.mark.parametrize("attrs,ct_shape", [
    ({"kernel": (3, 3), "stride": (2, 2), "padding": (2, 2)}, (1, 1, 4, 4)),  # padding over half the kernel
    ({"kernel": (3,), "stride": (2, 2), "padding": (1, 1)}, (1, 1, 4, 4)),
    ({"kernel": (3, 3), "stride": (0, 2), "padding": (1, 1)}, (1, 1, 4, 4)),
    ({"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1)}, (1, 1, 5, 4)),  # wrong window count
])
def test_type_rules_reject_inconsistent_attributes(attrs, ct_shape):
    from caramba.ir.dtypes import DType
    from caramba.ir.opdef import get_op
    from caramba.ir.types import ValueType

    x, ct = ValueType((1, 1, 7, 7), DType.float64), ValueType(ct_shape, DType.float64)
    mx, av = get_op("fused.max_pool2d_grad"), get_op("fused.avg_pool2d_grad")
    with pytest.raises(GraphError):
        mx.infer((x, ct, ct), mx.make_attrs(attrs))
    with pytest.raises(GraphError):
        av.infer((ct,), av.make_attrs({**attrs, "size": (7, 7)}))
    good = {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1)}
    ok = ValueType((1, 1, 4, 4), DType.float64)
    assert mx.infer((x, ok, ok), mx.make_attrs(good)) == (x,)
    assert av.infer((ok,), av.make_attrs({**good, "size": (7, 7)}))[0].shape == (1, 1, 7, 7)


def test_other_backends_are_not_given_the_fused_nodes():
    pytest.importorskip("jax")
    with compute.new("xla") as xla:
        for kind in ("max", "avg"):
            after, _ = compile_graph(_graph(kind, CASES[0], "float64"), xla)
            assert not any(n.op.startswith("fused.") for n in after.nodes)
