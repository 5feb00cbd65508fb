"""shape.*: data movement, checked element by element against explicit index maps (exact)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..harness import ALL, BOOL, F32, F64, I32, I64, NUMERIC, SUBJECT, Case, arg, bad, ints, row, tol, uniform
from ..reference import ravel, remap, scalars, unravel
from ._helpers import label

EXACT = tol(0, 0)
GEN = uniform(-3, 3, -100, 100)


def _norm(a: int, n: int) -> int:
    return a % n if n else 0


def case(lab: str, shapes, attrs: Any, ref, gens=None, dtypes=None, fixed=None) -> Case:
    """Shape-op case: data args of the case dtype (or ``fixed`` dtypes per position)."""
    args = []
    for i, s in enumerate(shapes):
        fd = (fixed or {}).get(i)
        g = (gens or {}).get(i, GEN)
        args.append(arg(s, g, fd))
    return Case(lab, tuple(args), attrs, ref, EXACT, None if dtypes is None else frozenset(dtypes))


# ---- reshape / transpose / expand / squeeze ----------------------------------------------------


def _reshape_ref(x, shape):
    shape = list(shape)
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1]))
        shape[shape.index(-1)] = x.size // known
    return remap(x, shape, lambda i: unravel(ravel(i, shape), x.shape))


def _transpose_ref(x, perm):
    perm = tuple(reversed(range(x.ndim))) if perm is None else tuple(_norm(p, x.ndim) for p in perm)
    out_shape = tuple(x.shape[p] for p in perm)

    def src(i):
        j = [0] * x.ndim
        for k, p in enumerate(perm):
            j[p] = i[k]
        return tuple(j)

    return remap(x, out_shape, src)


def _same_order_ref(out_shape_fn):
    """expand_dims / squeeze: same elements in the same order, new shape."""

    def ref(x, axes):
        shape = out_shape_fn(x.shape, axes)
        return remap(x, shape, lambda i: unravel(ravel(i, shape), x.shape))

    return ref


def _expand_shape(shape, axes):
    rank = len(shape) + len(axes)
    ax = {a % rank for a in axes}
    it = iter(shape)
    return tuple(1 if i in ax else next(it) for i in range(rank))


def _squeeze_shape(shape, axes):
    if axes is None:
        return tuple(s for s in shape if s != 1)
    ax = {a % len(shape) for a in axes}
    return tuple(s for i, s in enumerate(shape) if i not in ax)


# ---- concat / split / slice / pad ----------------------------------------------------------------


def _concat_ref(*xs, axis):
    ax = _norm(axis, xs[0].ndim)
    out_shape = list(xs[0].shape)
    out_shape[ax] = sum(x.shape[ax] for x in xs)
    out = np.empty(out_shape, dtype=xs[0].dtype)
    for idx in np.ndindex(*out_shape):
        k = idx[ax]
        for x in xs:
            if k < x.shape[ax]:
                out[idx] = x[idx[:ax] + (k,) + idx[ax + 1 :]]
                break
            k -= x.shape[ax]
    return out


def _split_ref(x, axis, sizes, num):
    ax = _norm(axis, x.ndim)
    if sizes is None:
        sizes = [x.shape[ax] // num] * num
    outs, start = [], 0
    for s in sizes:
        shape = x.shape[:ax] + (s,) + x.shape[ax + 1 :]
        outs.append(remap(x, shape, lambda i, st=start: i[:ax] + (i[ax] + st,) + i[ax + 1 :]))
        start += s
    return tuple(outs)


def _python_slice_indices(s: int, e: int, st: int, n: int) -> list[int]:
    """Python slice semantics, written out: negative indices wrap once, then clamp."""
    if s < 0:
        s += n
    if e < 0:
        e += n
    if st > 0:
        s, e = min(max(s, 0), n), min(max(e, 0), n)
        return list(range(s, e, st))
    s, e = min(max(s, -1), n - 1), min(max(e, -1), n - 1)
    return list(range(s, e, st))


def _slice_ref(x, starts, ends, axes, steps):
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    picks = [list(range(n)) for n in x.shape]
    for s, e, a, st in zip(starts, ends, axes, steps):
        picks[_norm(a, x.ndim)] = _python_slice_indices(s, e, st, x.shape[_norm(a, x.ndim)])
    shape = tuple(len(p) for p in picks)
    return remap(x, shape, lambda i: tuple(picks[k][i[k]] for k in range(x.ndim)))


def _pad_src(k: int, n: int, mode: str) -> int | None:
    if 0 <= k < n:
        return k
    if mode == "constant":
        return None
    if mode == "edge":
        return 0 if k < 0 else n - 1
    # reflect about the edge element without repeating it: -1 -> 1, n -> n - 2
    period = 2 * (n - 1)
    k = abs(k) % period if period else 0
    return k if k < n else period - k


def _pad_ref(x, pads, mode, value):
    lo = pads[0::2]
    shape = tuple(d + pads[2 * i] + pads[2 * i + 1] for i, d in enumerate(x.shape))

    def src(i):
        j = tuple(_pad_src(i[k] - lo[k], x.shape[k], mode) for k in range(x.ndim))
        return None if any(v is None for v in j) else j

    fill = np.array(value).astype(x.dtype)  # the pad value converted like math.cast does
    if x.dtype.kind in "iu":
        fill = np.array(int(value), dtype=x.dtype)
    elif x.dtype == np.bool_:
        fill = np.array(value != 0)
    return remap(x, shape, src, fill)


# ---- broadcast / gather / scatter / iota / upsample / heads / last / flip --------------------------


def _broadcast_ref(x, shape):
    off = len(shape) - x.ndim
    return remap(x, shape, lambda i: tuple(0 if x.shape[k] == 1 else i[k + off] for k in range(x.ndim)))


def _gather_ref(x, idx, axis):
    ax = _norm(axis, x.ndim)
    n = x.shape[ax]
    shape = x.shape[:ax] + idx.shape + x.shape[ax + 1 :]
    flat = scalars(idx)

    def src(i):
        sub = i[ax : ax + idx.ndim]
        k = flat[ravel(sub, idx.shape)] if idx.ndim else flat[0]
        k = k + n if k < 0 else k
        return i[:ax] + (k,) + i[ax + idx.ndim :]

    return remap(x, shape, src)


def _scatter_ref(x, idx, upd, axis):
    ax = _norm(axis, x.ndim)
    n = x.shape[ax]
    out = np.array(x.tolist() if x.dtype.kind in "iu" else x.astype(np.float64).tolist(), dtype=object).reshape(x.shape)
    flat = scalars(idx)
    for i in np.ndindex(*upd.shape):
        sub = i[ax : ax + idx.ndim]
        k = flat[ravel(sub, idx.shape)] if idx.ndim else flat[0]
        k = k + n if k < 0 else k
        j = i[:ax] + (k,) + i[ax + idx.ndim :]
        v = upd[i]
        out[j] = out[j] + (int(v) if x.dtype.kind in "iu" else float(v))
    return out


def _iota_ref(shape, axis, dtype):
    ax = _norm(axis, len(shape))
    return np.array([i[ax] if i else 0 for i in np.ndindex(*shape)], dtype=object).reshape(shape)


def _upsample_ref(x, scales):
    k = x.ndim - len(scales)
    shape = x.shape[:k] + tuple(d * s for d, s in zip(x.shape[k:], scales))
    return remap(x, shape, lambda i: i[:k] + tuple(i[k + j] // s for j, s in enumerate(scales)))


def _heads_ref(x, num_heads):
    b, s, d = x.shape
    h = num_heads
    return remap(x, (b, h, s, d // h), lambda i: (i[0], i[2], i[1] * (d // h) + i[3]))


def _merge_ref(x):
    b, h, s, d = x.shape
    return remap(x, (b, s, h * d), lambda i: (i[0], i[2] // d, i[1], i[2] % d))


def _last_ref(x):
    shape = x.shape[:-2] + x.shape[-1:]
    return remap(x, shape, lambda i: i[:-1] + (x.shape[-2] - 1, i[-1]))


def _flip_ref(x, axes):
    ax = set(range(x.ndim)) if axes is None else {_norm(a, x.ndim) for a in axes}
    return remap(x, x.shape, lambda i: tuple(x.shape[k] - 1 - v if k in ax else v for k, v in enumerate(i)))


def _idx_gen(lo: int, hi: int):
    def gen(rng, d, shape):
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(d.numpy)

    return gen


def _gather_cases():
    out = []
    for xs, ishape, axis, lo, hi, idt in (
        ((7,), (5,), 0, 0, 6, I64),
        ((1024,), (64,), 0, -1024, 1023, I64),
        ((3, 5, 7), (2, 3), 1, -5, 4, I64),
        ((3, 5, 7), (4,), -1, 0, 6, I32),
        ((3, 5, 7), (), 0, -3, 2, I64),
        ((4, 3), (0,), 0, 0, 3, I32),
        ((1,), (3,), 0, -1, 0, I64),
    ):
        out.append(
            case(f"{label(xs)}-idx{label(ishape)}-axis={axis}-{idt.short}", (xs, ishape), {"axis": axis}, _gather_ref, {1: _idx_gen(lo, hi)}, fixed={1: idt})
        )
    return out


def _gather_out_of_range(runner, case_, d):
    """An index outside the axis is an error when the graph runs, naming the node."""
    from caramba.errors import CarambaError

    from ..harness import build

    b = build(case_, d)
    exe = runner.compile(b.graph)
    import pytest

    for bad_index in (7, -8):
        idx = np.array([0, bad_index, 1], dtype=np.int64)
        with pytest.raises(CarambaError) as info:
            exe.run({"x0": runner.upload(b.inputs["x0"]), "x1": runner.upload(idx)}).popitem()[1].download()
        assert f"node '{SUBJECT}'" in str(info.value), str(info.value)


def _scatter_cases():
    out = []
    for xs, ishape, axis, lo, hi, idt in (
        ((7,), (5,), 0, 0, 6, I64),
        ((7,), (12,), 0, 0, 2, I64),  # repeats accumulate
        ((3, 5, 7), (2, 3), 1, -5, 4, I64),
        ((3, 5, 7), (4,), -1, 0, 6, I32),
        ((4, 3), (0,), 0, 0, 3, I64),
        ((64,), (1024,), 0, -64, 63, I64),
        ((5,), (), 0, -5, 4, I64),  # a 0-d index (the gradient of a gather with one): a 0-d update
        ((3, 4), (), 1, -4, 3, I64),
    ):
        ax = axis % len(xs)
        ushape = xs[:ax] + ishape + xs[ax + 1 :]
        out.append(
            Case(
                f"{label(xs)}-idx{label(ishape)}-axis={axis}-{idt.short}",
                (arg(xs, ints(-3, 3)), arg(ishape, _idx_gen(lo, hi), idt), arg(ushape, ints(-2, 2))),
                {"axis": axis},
                _scatter_ref,
                EXACT,  # small integers: every dtype adds them exactly
            )
        )
    return out


def _slice_rows_ref(x, starts, axis, size):
    ax = _norm(axis, x.ndim)
    shape = x.shape[:ax] + (size,) + x.shape[ax + 1 :]
    s = scalars(starts)
    return remap(x, shape, lambda i: i[:ax] + (s[i[0]] + i[ax],) + i[ax + 1 :])


def _update_rows_ref(x, upd, starts, axis):
    ax = _norm(axis, x.ndim)
    u = upd.shape[ax]
    s = scalars(starts)
    out = x.copy()
    for i in np.ndindex(*x.shape):
        j = i[ax] - s[i[0]]
        if 0 <= j < u:
            out[i] = upd[i[:ax] + (j,) + i[ax + 1 :]]
    return out


# (x shape, axis, slice/update size, start range, starts dtype)
_ROWS_SHAPES = (((2, 3, 8, 4), 2, 1, (0, 7), I64), ((2, 3, 8, 4), 2, 3, (0, 5), I64), ((3, 7), 1, 7, (0, 0), I32),
                ((1, 2, 16, 3), -2, 5, (0, 11), I64), ((4, 6, 2), 1, 2, (0, 4), I32))


def _rows_out_of_range(op: str):
    def check(runner, case_, d):
        """A start whose slice leaves the axis is an error when the graph runs, naming the node."""
        import pytest

        from caramba.errors import CarambaError

        from ..harness import build

        b = build(case_, d)
        exe = runner.compile(b.graph)
        feed = {k: runner.upload(v) for k, v in b.inputs.items()}
        name = [k for k, v in b.inputs.items() if v.dtype == np.int64][-1]
        for bad_start in (-1, 6):  # axis 8, size 3: starts must be in [0, 5]
            feed[name] = runner.upload(np.array([0, bad_start], dtype=np.int64))
            with pytest.raises(CarambaError) as info:
                exe.run(feed).popitem()[1].download()
            assert f"node '{SUBJECT}'" in str(info.value) or "out of range" in str(info.value), str(info.value)

    return check


ROWS = [
    row(
        "shape.reshape",
        ALL,
        [
            case(f"{label(s)}->{label(t)}", (s,), {"shape": t}, _reshape_ref)
            for s, t in (((2, 3, 4), (4, 6)), ((2, 3, 4), (-1,)), ((6,), (2, -1)), ((), (1, 1)), ((1,), ()), ((0, 3), (3, 0)), ((1024,), (8, -1, 4)), ((3, 5, 7), (7, 5, 3)))
        ],
        [
            bad("at most one -1", ((6,), F64), shape=[-1, -1]),
            bad("\\[2, 3\\] \\(6 elements\\) cannot become \\[4\\]", ((2, 3), F64), shape=[4]),
            bad("bad dimension", ((6,), F64), shape=[-2, -3]),
            bad("cannot infer -1", ((6,), F64), shape=[4, -1]),
        ],
    ),
    row(
        "shape.transpose",
        ALL,
        [
            case(f"{label(s)}-perm={p}", (s,), {"perm": p}, _transpose_ref)
            for s, p in (((3, 5, 7), None), ((3, 5, 7), (1, 0, 2)), ((3, 5, 7), (-1, 0, 1)), ((7,), None), ((), None), ((2, 0, 3), (2, 0, 1)), ((64, 16), (1, 0)))
        ],
        [bad("is not a permutation of 3 axes", ((2, 3, 4), F64), perm=[0, 0, 1]), bad("is not a permutation", ((2, 3), F64), perm=[0])],
    ),
    row(
        "shape.expand_dims",
        ALL,
        [case(f"{label(s)}-axes={a}", (s,), {"axes": a}, _same_order_ref(_expand_shape)) for s, a in (((3, 5), (0,)), ((3, 5), (-1,)), ((3, 5), (0, 2)), ((), (0,)), ((7,), (1, 0)), ((0, 2), (1,)))],
        [bad("axis 3 is out of range for rank 3", ((2, 3), F64), axes=[3]), bad("repeated axis", ((2, 3), F64), axes=[0, -4])],
    ),
    row(
        "shape.squeeze",
        ALL,
        [case(f"{label(s)}-axes={a}", (s,), {"axes": a}, _same_order_ref(_squeeze_shape)) for s, a in (((1, 3, 1, 5), None), ((1, 3, 1, 5), (2,)), ((1, 3, 1, 5), (-4, -2)), ((1,), None), ((7,), None), ((0, 1), (-1,)))],
        [bad("axes \\[1\\] of \\[2, 3\\] do not have size 1", ((2, 3), F64), axes=[1])],
    ),
    row(
        "shape.concat",
        ALL,
        [
            case(f"{'+'.join(map(label, ss))}-axis={a}", ss, {"axis": a}, _concat_ref)
            for ss, a in (
                (((2, 3), (4, 3)), 0),
                (((2, 3), (2, 5), (2, 1)), 1),
                (((2, 3, 4), (2, 3, 1)), -1),
                (((7,),), 0),
                (((1024,), (64,), (1,)), 0),
                (((0, 3), (2, 3)), 0),
            )
        ],
        [
            bad("differ off-axis", ((2, 3), F64), ((3, 3), F64), axis=1),
            bad("cannot concatenate scalars", ((), F64), ((), F64)),
            bad("needs inputs of one dtype", ((2,), F64), ((2,), F32)),
            bad("axis 2 is out of range for rank 2", ((2, 3), F64), ((2, 3), F64), axis=2),
        ],
    ),
    row(
        "shape.split",
        ALL,
        [
            case(f"{label(s)}-axis={a}-sizes={sz}-num={n}", (s,), {"axis": a, "sizes": sz, "num": n}, _split_ref)
            for s, a, sz, n in (
                ((6,), 0, (1, 2, 3), None),
                ((6,), 0, None, 3),
                ((2, 6, 3), 1, (0, 4, 2), None),
                ((2, 6, 3), -1, None, 3),
                ((1024,), 0, None, 4),
                ((3, 5, 7), -3, (1, 2), None),
                ((7,), 0, None, 1),
            )
        ],
        [
            bad("exactly one of sizes= or num=", ((6,), F64)),
            bad("exactly one of sizes= or num=", ((6,), F64), sizes=[3, 3], num=2),
            bad("sizes \\[2, 2\\] do not add up to axis size 6", ((6,), F64), sizes=[2, 2]),
            bad("does not split into 4 equal parts", ((6,), F64), num=4),
            bad("cannot split a scalar", ((), F64), num=1),
        ],
    ),
    row(
        "shape.slice",
        ALL,
        [
            case(f"{label(s)}-{lab}", (s,), attrs, lambda x, **a: _slice_ref(x, a["starts"], a["ends"], a["axes"], a["steps"]))
            for s, lab, attrs in (
                ((7,), "1:5", {"starts": [1], "ends": [5]}),
                ((7,), "neg", {"starts": [-5], "ends": [-1]}),
                ((7,), "clamped", {"starts": [-100], "ends": [100]}),
                ((7,), "step2", {"starts": [0], "ends": [7], "steps": [2]}),
                ((7,), "reversed", {"starts": [6], "ends": [-8], "steps": [-1]}),
                ((7,), "rev-step", {"starts": [-1], "ends": [0], "steps": [-3]}),
                ((7,), "empty", {"starts": [5], "ends": [2]}),
                ((3, 5, 7), "axis1", {"starts": [1], "ends": [4], "axes": [1]}),
                ((3, 5, 7), "neg-axis-rev", {"starts": [5], "ends": [1], "axes": [-1], "steps": [-2]}),
                ((3, 5, 7), "multi", {"starts": [2, 0, -2], "ends": [0, 5, 100], "axes": [0, 1, 2], "steps": [-1, 2, 1]}),
                ((1024,), "strided", {"starts": [3], "ends": [1000], "steps": [7]}),
                ((2, 0, 3), "zero-axis", {"starts": [0], "ends": [1], "axes": [2]}),
            )
        ],
        [
            bad("one entry per sliced axis", ((7,), F64), starts=[0, 1], ends=[2]),
            bad("step must not be 0", ((7,), F64), starts=[0], ends=[2], steps=[0]),
            bad("axis 0 sliced twice", ((7, 2), F64), starts=[0, 1], ends=[2, 3], axes=[0, -2]),
            bad("axis 2 is out of range", ((7, 2), F64), starts=[0], ends=[2], axes=[2]),
        ],
    ),
    row(
        "shape.pad",
        ALL,
        [
            case(f"{label(s)}-{m}-{p}-v={v}", (s,), {"pads": p, "mode": m, "value": v}, _pad_ref)
            for s, p, m, v in (
                ((7,), (2, 3), "constant", 0.0),
                ((3, 5), (1, 0, 0, 2), "constant", 1.0),
                ((3, 5, 7), (0, 0, 1, 1, 2, 0), "constant", 2.0),
                ((3, 5), (2, 2, 4, 1), "reflect", 0.0),
                ((3, 5), (2, 2, 4, 1), "edge", 0.0),
                ((1, 4), (3, 0, 0, 0), "edge", 0.0),
                ((7,), (6, 6), "reflect", 0.0),
                ((0, 2), (1, 1, 0, 0), "constant", 1.0),
                ((), (), "constant", 0.0),
                ((7,), (0, 0), "reflect", 0.0),
            )
        ]
        + [case("fractional-value", ((3,),), {"pads": (1, 1), "value": -1.5}, _pad_ref, dtypes={F64, F32})],
        [
            bad("needs 2\\*rank=4 non-negative pads", ((2, 3), F64), pads=[1, 1]),
            bad("needs 2\\*rank=2 non-negative pads", ((2,), F64), pads=[-1, 1]),
            bad("mode reflect: pad \\(3, 0\\) too large for axis 0 of size 3", ((3,), F64), pads=[3, 0], mode="reflect"),
            bad("mode edge: pad \\(1, 0\\) too large for axis 0 of size 0", ((0,), F64), pads=[1, 0], mode="edge"),
            bad("'mode' \\(str\\): 'wrap' is not one of 'constant', 'reflect', 'edge'", ((3,), F64), pads=[1, 0], mode="wrap"),
        ],
    ),
    row(
        "shape.broadcast_to",
        ALL,
        [case(f"{label(s)}->{label(t)}", (s,), {"shape": t}, _broadcast_ref) for s, t in (((3, 1), (2, 3, 4)), ((), (5,)), ((1,), (0,)), ((7,), (7,)), ((1, 1), (64, 16)), ((5, 1, 3), (5, 4, 3)))],
        [bad("\\[3\\] does not broadcast to \\[4\\]", ((3,), F64), shape=[4]), bad("does not broadcast to \\[3\\]", ((1, 3), F64), shape=[3])],
    ),
    row(
        "shape.gather",
        ALL,
        [*_gather_cases(), Case("out-of-range-index", (arg((7,), GEN), arg((3,), _idx_gen(0, 6), I64)), {"axis": 0}, None, EXACT, frozenset({F64}), check=_gather_out_of_range)],
        [
            bad("does not accept indices of dtype float64", ((3,), F64), ((2,), F64)),
            bad("gather from a scalar", ((), F64), ((2,), I64)),
            bad("axis 1 is out of range for rank 1", ((3,), F64), ((2,), I64), axis=1),
        ],
    ),
    row(
        "shape.scatter_add",
        NUMERIC,
        _scatter_cases(),
        [
            bad("updates must be float64\\[3, 2\\]", ((3, 4), F64), ((2,), I64), ((3, 3), F64), axis=1),
            bad("does not accept indices of dtype int8", ((3,), F64), ((2,), "int8"), ((2,), F64)),
            bad("does not accept input of dtype bool", ((3,), BOOL), ((2,), I64), ((2,), BOOL)),
        ],
    ),
    row(
        "shape.slice_rows",
        ALL,
        [*(case(f"{label(xs)}-axis={ax}-size={n}-{sd.short}", (xs, xs[:1]), {"axis": ax, "size": n}, _slice_rows_ref,
                {1: _idx_gen(*lohi)}, fixed={1: sd}) for xs, ax, n, lohi, sd in _ROWS_SHAPES),
         Case("out-of-range-start", (arg((2, 3, 8, 4), GEN), arg((2,), _idx_gen(0, 5), I64)), {"axis": 2, "size": 3},
              None, EXACT, frozenset({F64}), check=_rows_out_of_range("shape.slice_rows"))],
        [
            bad("axis 0 holds the rows", ((3, 4), F64), ((3,), I64), axis=0, size=2),
            bad("starts must be \\[3\\]", ((3, 4), F64), ((2,), I64), size=2),
            bad("size 5 must be in \\[1, 4\\]", ((3, 4), F64), ((3,), I64), size=5),
            bad("does not accept starts of dtype float64", ((3, 4), F64), ((3,), F64), size=2),
            bad("needs rows", ((4,), F64), ((4,), I64), axis=0, size=1),
        ],
    ),
    row(
        "shape.update_rows",
        ALL,
        [*(case(f"{label(xs)}-axis={ax}-size={n}-{sd.short}",
                (xs, xs[:ax % len(xs)] + (n,) + xs[ax % len(xs) + 1:], xs[:1]), {"axis": ax}, _update_rows_ref,
                {2: _idx_gen(*lohi)}, fixed={2: sd}) for xs, ax, n, lohi, sd in _ROWS_SHAPES),
         Case("out-of-range-start", (arg((2, 3, 8, 4), GEN), arg((2, 3, 3, 4), GEN), arg((2,), _idx_gen(0, 5), I64)),
              {"axis": 2}, None, EXACT, frozenset({F64}), check=_rows_out_of_range("shape.update_rows"))],
        [
            bad("update must be float64\\[3, 4\\]", ((3, 4), F64), ((3, 5), F64), ((3,), I64)),
            bad("update must be float64\\[3, 4\\]", ((3, 4), F64), ((2, 2), F64), ((3,), I64)),
            bad("axis 0 holds the rows", ((3, 4), F64), ((3, 4), F64), ((3,), I64), axis=0),
            bad("starts must be \\[3\\]", ((3, 4), F64), ((3, 2), F64), ((1,), I64)),
        ],
    ),
    row(
        "shape.iota",
        ALL - {BOOL},
        [
            Case(f"{label(s)}-axis={a}", (), (lambda d, s=s, a=a: {"shape": s, "axis": a, "dtype": d}), lambda **k: _iota_ref(k["shape"], k["axis"], k["dtype"]), EXACT)
            for s, a in (((5,), 0), ((3, 4), 1), ((2, 3, 4), -1), ((0, 3), 0), ((1,), 0), ((100,), 0), ((), 0))
        ],
        [bad("does not accept dtype of dtype bool", shape=[3], dtype="bool"), bad("axis 1 is out of range for rank 1", shape=[3], axis=1)],
    ),
    row(
        "shape.upsample_nearest",
        ALL,
        [case(f"{label(s)}-scales={sc}", (s,), {"scales": sc}, _upsample_ref) for s, sc in (((3, 4), (2,)), ((1, 2, 3, 2), (2, 3)), ((3, 4), (1, 1)), ((7,), (3,)), ((2, 0), (2,)))],
        [bad("scales \\[2, 2\\] for a rank-1 input", ((3,), F64), scales=[2, 2]), bad("scales \\[0\\]", ((3,), F64), scales=[0])],
    ),
    row(
        "shape.view_as_heads",
        ALL,
        [case(f"{label(s)}-h={h}", (s,), {"num_heads": h}, _heads_ref) for s, h in (((2, 5, 12), 3), ((1, 1, 4), 4), ((3, 7, 8), 1), ((2, 0, 6), 2))],
        [bad("d_model divisible by 5", ((2, 3, 12), F64), num_heads=5), bad("needs \\[batch, seq, d_model\\]", ((3, 12), F64), num_heads=3)],
    ),
    row(
        "shape.merge_heads",
        ALL,
        [case(label(s), (s,), {}, _merge_ref) for s in ((2, 3, 5, 4), (1, 1, 1, 1), (2, 4, 7, 1), (1, 2, 0, 3))],
        [bad("needs \\[batch, heads, seq, head_dim\\]", ((2, 3, 4), F64))],
    ),
    row(
        "shape.last_token",
        ALL,
        [case(label(s), (s,), {}, _last_ref) for s in ((2, 5, 3), (1, 4), (3, 1, 2), (2, 3, 0))],
        [bad("with seq >= 1", ((2, 0, 3), F64)), bad("needs \\[..., seq, features\\]", ((4,), F64))],
    ),
    row(
        "shape.flip",
        ALL,
        [case(f"{label(s)}-axes={a}", (s,), {"axes": a}, _flip_ref) for s, a in (((7,), None), ((3, 5, 7), (0,)), ((3, 5, 7), (-1,)), ((3, 5, 7), (0, 2)), ((), None), ((1024,), None), ((2, 0), (1,)))],
        [bad("axis 3 is out of range for rank 3", ((2, 3, 4), F64), axes=[3])],
    ),
]
