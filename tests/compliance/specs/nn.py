"""nn.*: softmax, normalization, embedding, convolution, pooling, dropout (references by loops)."""

from __future__ import annotations

from dataclasses import replace

import mpmath as mp
import numpy as np
import pytest

from ..harness import (
    ALL,
    F32,
    F64,
    FLOATS,
    I32,
    I64,
    SUBJECT,
    Case,
    Expect,
    arg,
    bad,
    build,
    compare,
    computed_at,
    row,
    tol,
    uniform,
    values,
)
from ..reference import (
    DPS,
    along,
    conv_loop,
    mp_log_softmax,
    mp_normalize,
    mp_softmax,
    per_group,
    pool_loop,
    ravel,
    remap,
    scalars,
)
from ._helpers import INF, label

SOFT = tol(4, 2, float16=(4, 4))
NORM = tol(4, 8, float16=(4, 16))
CONV = tol(1, 8, float16=(1, 32))


def _softmax_ref(fn):
    def ref(x, axis):
        return along(x, axis, fn)

    return ref


def _log_softmax_ref(x, axis):
    # error grows with the magnitude of the logits (x - logsumexp)
    return Expect(along(x, axis, mp_log_softmax), 1.0 + np.abs(x.astype(np.float64)).max(initial=0.0))


def _soft_cases(ref):
    out = []
    for shape, axis, gen in (
        ((1,), -1, uniform(-3, 3)),
        ((7,), -1, uniform(-3, 3)),
        ((64,), 0, uniform(-3, 3)),
        ((1024,), -1, uniform(-3, 3)),
        ((3, 5, 7), 0, uniform(-3, 3)),
        ((3, 5, 7), 1, uniform(-3, 3)),
        ((3, 5, 7), -1, uniform(-3, 3)),
        ((4, 9), -1, uniform(-300, 300)),  # stability: no overflow for large logits
        ((2, 0, 3), -1, uniform(-3, 3)),
    ):
        out.append(Case(f"{label(shape)}-axis={axis}{'-wide' if shape == (4, 9) else ''}", (arg(shape, gen),), {"axis": axis}, ref, SOFT))
    out.append(Case("neg-inf", (arg((2, 3), values([-INF, 0.0, 1.0, -INF, -INF, 5.0])),), {"axis": -1}, ref, SOFT))
    return out


def _norm_ref(center: bool):
    def ref(x, *affine, axis, eps):
        ax = axis % x.ndim

        def fn(xs, idx):
            with mp.workdps(DPS):
                ys = mp_normalize(xs, eps, center)
                g = scalars(affine[0]) if affine else None
                b = scalars(affine[1]) if len(affine) > 1 else None
                return [float(y * (g[i] if g else 1) + (b[i] if b else 0)) for i, y in enumerate(ys)]

        return per_group(x, ax, fn)

    return ref


def _group_norm_ref(x, *affine, num_groups, eps):
    n, c = x.shape[:2]
    cg = c // num_groups
    out = np.empty(x.shape, dtype=np.float64)
    for bi in range(n):
        for g in range(num_groups):
            block = x[bi, g * cg : (g + 1) * cg]
            with mp.workdps(DPS):
                ys = mp_normalize(scalars(block), eps, True)
            ys = np.array([float(y) for y in ys]).reshape(block.shape)
            for ci in range(cg):
                ch = g * cg + ci
                y = ys[ci]
                if affine:
                    y = y * float(affine[0][ch]) + (float(affine[1][ch]) if len(affine) > 1 else 0.0)
                out[bi, ch] = y
    return out


def _norm_cases(op: str, ref, with_beta: bool):
    out = []
    for shape, axis, affine, eps in (
        ((7,), -1, False, None),
        ((1024,), -1, True, None),
        ((3, 5, 7), -1, True, None),
        ((3, 5, 7), 1, True, 1e-3),
        ((3, 5, 7), -3, False, 0.5),
        ((4, 1), -1, False, 1e-5),  # one element per group: centered to 0
        ((64, 64), -1, True, None),
    ):
        ax = axis % len(shape)
        gshape = shape[ax:]
        args = [arg(shape, uniform(-3, 3))]
        if affine:
            args.append(arg(gshape, uniform(0.5, 2)))
            if with_beta:
                args.append(arg(gshape, uniform(-1, 1)))
        attrs = {"axis": axis} | ({} if eps is None else {"eps": eps})
        out.append(Case(f"{label(shape)}-axis={axis}{'-affine' if affine else ''}{'' if eps is None else f'-eps={eps}'}", tuple(args), attrs, ref, NORM))
    if with_beta:
        out.append(Case("gamma-only", (arg((3, 8), uniform(-3, 3)), arg((8,), uniform(0.5, 2))), {}, ref, NORM))
    return out


def _embedding_ref(ids, table):
    v = table.shape[0]
    flat = scalars(ids)
    shape = ids.shape + table.shape[1:]

    def src(i):
        k = flat[ravel(i[: ids.ndim], ids.shape)]
        return (k + v if k < 0 else k,) + i[ids.ndim :]

    return remap(table, shape, src)


def _ids(lo: int, hi: int):
    def gen(rng, d, shape):
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(d.numpy)

    return gen


def _embedding_out_of_range(runner, case, d):
    b = build(case, d)
    exe = runner.compile(b.graph)
    from caramba.errors import CarambaError

    for bad_id in (10, -11):
        ids = np.array([[0, bad_id]], dtype=np.int64)
        with pytest.raises(CarambaError) as info:
            exe.run({"x0": runner.upload(ids), "x1": runner.upload(b.inputs["x1"])})["out"].download()
        assert f"node '{SUBJECT}'" in str(info.value), str(info.value)


def _per(v, nd):
    v = tuple(v)
    return v * nd if len(v) == 1 else v


def _conv_ref(nd):
    def ref(x, w, *bias, stride, padding, dilation, groups):
        return conv_loop(x, w, bias[0] if bias else None, _per(stride, nd), _per(padding, nd), _per(dilation, nd), groups)

    return ref


def _conv_cases(nd: int):
    sp = (9,) if nd == 1 else (7, 6)
    ks = (3,) if nd == 1 else (3, 3)
    out = []
    variants = [
        ("basic", 4, 6, {}, False),
        ("bias", 4, 6, {}, True),
        ("stride2", 4, 6, {"stride": [2]}, False),
        ("pad1", 4, 6, {"padding": [1]}, True),
        ("dil2", 4, 6, {"dilation": [2]}, False),
        ("groups2", 4, 6, {"groups": 2}, True),
        ("depthwise", 4, 4, {"groups": 4, "padding": [1]}, False),
        ("all", 4, 6, {"stride": [2], "padding": [2], "dilation": [2], "groups": 2}, True),
    ]
    if nd == 2:
        variants += [
            ("per-dim", 2, 3, {"stride": [2, 1], "padding": [1, 0], "dilation": [1, 2]}, True),
            ("k1", 3, 5, {}, False),
        ]
    for name, c, o, attrs, bias in variants:
        groups = attrs.get("groups", 1)
        k = (1,) * nd if name == "k1" else ks
        args = [arg((2, c) + sp, uniform(-2, 2)), arg((o, c // groups) + k, uniform(-1, 1))]
        if bias:
            args.append(arg((o,), uniform(-1, 1)))
        out.append(Case(name, tuple(args), attrs, _conv_ref(nd), CONV))
    # kernel exactly covering the input: one output position
    out.append(Case("full-window", (arg((1, 2) + ks, uniform(-2, 2)), arg((3, 2) + ks, uniform(-1, 1))), {}, _conv_ref(nd), CONV))
    return out


def _pool_ref(kind):
    def ref(x, kernel, stride, padding):
        k = _per(kernel, 2)
        return pool_loop(x, k, k if stride is None else _per(stride, 2), _per(padding, 2), kind)

    return ref


def _pool_cases(kind: str):
    return [
        Case(f"{label(s)}-k={k}-s={st}-p={p}", (arg(s, uniform(-3, 3)),), {"kernel": k, "stride": st, "padding": p}, _pool_ref(kind), tol(0, 0) if kind == "max" else tol(2, 2))
        for s, k, st, p in (
            ((2, 3, 8, 8), [2], None, [0]),
            ((2, 3, 7, 9), [3], [1], [1]),
            ((1, 2, 7, 9), [3, 2], [2, 1], [1, 0]),
            ((1, 1, 5, 5), [5], None, [0]),
            ((1, 2, 6, 6), [2], [3], [1]),
            ((1, 1, 1, 1), [1], None, [0]),
        )
    ]


# ---- dropout: statistics and exact scaling -------------------------------------------------------


def _dropout_check(runner, case, d):
    rate = case.attrs["rate"]
    b = build(case, d)
    exe = runner.compile(b.graph)
    x = b.inputs["x0"]
    xt = runner.upload(x)
    has_key = len(case.args) == 2

    def run(key=None):
        ins = {"x0": xt}
        if has_key:
            ins["x1"] = runner.upload(np.array(key, dtype=np.int64))
        return exe.run(ins)["out"].download()

    y1 = run(3)
    assert y1.dtype == x.dtype and y1.shape == x.shape
    np.testing.assert_array_equal(run(3), y1)  # same seed and key: the same mask
    at = computed_at(case, d)  # float32 where the case opted in to it (the float32 contract)
    if rate == 0.0:  # rate 0 is the identity (up to rounding to the precision computed at)
        if at is d:
            np.testing.assert_array_equal(y1, x)
        else:
            compare(y1, x.astype(np.float64), at, tol(1, 0), f"{case.id} identity")
        return
    kept = y1 != 0
    frac = 1.0 - kept.mean()
    sigma = (rate * (1 - rate) / x.size) ** 0.5
    assert abs(frac - rate) < 6 * sigma, f"dropped fraction {frac:.4f} for rate {rate} (n={x.size})"
    want = x.astype(np.float64)[kept] / (1.0 - rate)  # kept elements are scaled by 1/(1 - rate)
    compare(y1[kept], want, at, tol(2, 0), f"{case.id} kept values")
    if has_key:
        assert not np.array_equal(run(4) != 0, kept), "a different key must give a different mask"
    # another seed, same key: a different mask
    other = build(replace(case, attrs={**case.attrs, "seed": case.attrs.get("seed", 0) + 1}), d)
    ins = {"x0": xt} | ({"x1": runner.upload(np.array(3, dtype=np.int64))} if has_key else {})
    assert not np.array_equal(runner.compile(other.graph).run(ins)["out"].download() != 0, kept)


NONZERO = uniform(0.5, 2.0)  # no zeros in x, so output zeros are exactly the dropped elements
ROWS = [
    row("nn.softmax", FLOATS, _soft_cases(_softmax_ref(mp_softmax)), [bad("needs an input of rank >= 1", ((), F64)), bad("axis 2 is out of range for rank 2", ((3, 4), F64), axis=2)]),
    row("nn.log_softmax", FLOATS, _soft_cases(_log_softmax_ref), [bad("does not accept input of dtype int64", ((3,), I64))]),
    row(
        "nn.layer_norm",
        FLOATS,
        _norm_cases("nn.layer_norm", _norm_ref(True), True),
        [
            bad("gamma must have shape \\[5, 7\\] \\(x.shape\\[axis:\\]\\), got \\[7\\]", ((3, 5, 7), F64), ((7,), F64), axis=1),
            bad("beta must have shape \\[7\\]", ((3, 7), F64), ((7,), F64), ((3,), F64)),
            bad("needs inputs of one dtype", ((3, 7), F64), ((7,), F32)),
            bad("takes 1..3 inputs, got 4", ((7,), F64), ((7,), F64), ((7,), F64), ((7,), F64)),
        ],
    ),
    row("nn.rms_norm", FLOATS, _norm_cases("nn.rms_norm", _norm_ref(False), False), [bad("takes 1..2 inputs, got 3", ((7,), F64), ((7,), F64), ((7,), F64))]),
    row(
        "nn.group_norm",
        FLOATS,
        [
            Case(f"{label(s)}-g={g}{'-affine' if aff else ''}", (arg(s, uniform(-3, 3)), *((arg((s[1],), uniform(0.5, 2)), arg((s[1],), uniform(-1, 1))) if aff else ())), {"num_groups": g}, _group_norm_ref, NORM)
            for s, g, aff in (((2, 6, 5), 3, False), ((2, 6, 5), 3, True), ((1, 4, 3, 3), 2, True), ((3, 4), 4, False), ((2, 8, 7), 1, True))
        ]
        + [Case("gamma-only-eps", (arg((2, 4, 3), uniform(-3, 3)), arg((4,), uniform(0.5, 2))), {"num_groups": 2, "eps": 0.1}, _group_norm_ref, NORM)],
        [bad("6 channels do not split into 4 groups", ((2, 6, 5), F64), num_groups=4), bad("needs \\[N, C, ...\\]", ((6,), F64), num_groups=1), bad("gamma/beta must have shape \\[6\\]", ((2, 6, 5), F64), ((5,), F64), num_groups=3)],
    ),
    row(
        "nn.embedding",
        ALL,
        [
            Case(f"ids{label(ishape)}-{idt.short}-table{label(tshape)}", (arg(ishape, _ids(lo, tshape[0] - 1), idt), arg(tshape, uniform(-3, 3, -100, 100))), {}, _embedding_ref, tol(0, 0))
            for ishape, idt, tshape, lo in (((5,), I64, (10, 4), 0), ((2, 3), I32, (7, 3), 0), ((), I64, (5, 8), 0), ((64,), I64, (1024, 2), 0), ((0,), I64, (3, 2), 0), ((4,), I64, (1, 1), 0))
        ]
        + [Case("out-of-range-id", (arg((1, 2), _ids(0, 9), I64), arg((10, 4))), {}, None, tol(0, 0), frozenset({F64}), check=_embedding_out_of_range)],
        [bad("does not accept ids of dtype float64", ((3,), F64), ((4, 2), F64)), bad("table must be \\[vocab, dim\\]", ((3,), I64), ((4,), F64))],
        probe=Case("probe", (arg((3,), _ids(0, 3), I64), arg((4, 2))), {}, _embedding_ref),
    ),
    row(
        "nn.conv1d",
        FLOATS,
        _conv_cases(1),
        [
            bad("4 input channels, groups=3, weight \\[6, 1, 3\\] do not agree", ((2, 4, 9), F64), ((6, 1, 3), F64), groups=3),
            bad("bias must have shape \\[6\\]", ((2, 4, 9), F64), ((6, 4, 3), F64), ((4,), F64)),
            bad("kernel larger than padded input", ((2, 4, 2), F64), ((6, 4, 3), F64)),
            bad("stride must be 1 positive ints", ((2, 4, 9), F64), ((6, 4, 3), F64), stride=[0]),
            bad("needs x \\[N, C, L\\]", ((4, 9), F64), ((6, 4, 3), F64)),
        ],
    ),
    row(
        "nn.conv2d",
        FLOATS,
        _conv_cases(2),
        [
            bad("padding must be 2 positive ints \\(padding may be 0\\), got \\[1, 1, 1\\]", ((1, 2, 5, 5), F64), ((3, 2, 3, 3), F64), padding=[1, 1, 1]),
            bad("needs inputs of one dtype", ((1, 2, 5, 5), F64), ((3, 2, 3, 3), F32)),
        ],
    ),
    row(
        "nn.max_pool2d",
        FLOATS,
        _pool_cases("max"),
        [
            bad("padding \\[2, 2\\] must be at most half the kernel \\[3, 3\\]", ((1, 1, 8, 8), F64), kernel=[3], padding=[2]),
            bad("needs \\[N, C, H, W\\]", ((8, 8), F64), kernel=[2]),
            bad("kernel larger than padded input", ((1, 1, 2, 2), F64), kernel=[3]),
            bad("missing required attribute 'kernel'", ((1, 1, 2, 2), F64)),
        ],
    ),
    row("nn.avg_pool2d", FLOATS, _pool_cases("avg"), [bad("kernel must be 2 positive ints", ((1, 1, 8, 8), F64), kernel=[2, 2, 2])]),
    row(
        "nn.dropout",
        FLOATS,
        [
            Case("rate=0.25-key", (arg((64, 64), NONZERO), arg((), dtype=I64)), {"rate": 0.25, "seed": 7}, check=_dropout_check),
            Case("rate=0.5-nokey", (arg((4096,), NONZERO),), {"rate": 0.5}, check=_dropout_check),
            Case("rate=0.9-key", (arg((3, 5, 7), NONZERO), arg((), dtype=I64)), {"rate": 0.9, "seed": -3}, check=_dropout_check),
            Case("rate=0", (arg((1024,), uniform(-3, 3)), arg((), dtype=I64)), {"rate": 0.0}, check=_dropout_check),
        ],
        [
            bad("rate must be in \\[0, 1\\), got 1.0", ((3,), F64), rate=1.0),
            bad("key must be an int64 scalar", ((3,), F64), ((3,), I64)),
            bad("key must be an int64 scalar", ((3,), F64), ((), I32)),
        ],
    ),
]
