"""cpu kernels for shape.* (views where NumPy gives them; nothing is mutated in place)."""

from __future__ import annotations

import numpy as np

from caramba.backends.cpu.kernels import ANY, NUM, kernel
from caramba.errors import CarambaError
from caramba.ops._define import norm_axes, norm_axis
from caramba.ops.shape import slice_plan, split_sizes


@kernel("shape.reshape", ANY)
def _reshape(node, ins):
    shape = node.types[0].shape
    return lambda x: x.reshape(shape)


@kernel("shape.transpose", ANY)
def _transpose(node, ins):
    perm = node.attrs["perm"]
    perm = tuple(norm_axis(p, ins[0].rank) for p in perm) if perm is not None else None
    return lambda x: np.transpose(x, perm)


@kernel("shape.concat", ANY)
def _concat(node, ins):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    return lambda *xs: np.concatenate(xs, axis=axis)


@kernel("shape.split", ANY)
def _split(node, ins):
    axis, sizes = split_sizes(ins[0], node.attrs)
    if len(sizes) == 1:  # one output: the runner expects the array itself, not a 1-tuple
        return lambda x: x
    bounds = np.cumsum(sizes)[:-1].tolist()
    return lambda x: tuple(np.split(x, bounds, axis=axis))


@kernel("shape.slice", ANY)
def _slice(node, ins):
    # slice.indices() spells "run past index 0" as stop=-1, which NumPy would read as "the last
    # element": give NumPy None there instead.
    index = tuple(slice(s, None if e < 0 else e, st) for s, e, st in slice_plan(ins[0], node.attrs))
    return lambda x: x[index]


@kernel("shape.pad", ANY)
def _pad(node, ins):
    p = node.attrs["pads"]
    widths = [(p[2 * i], p[2 * i + 1]) for i in range(ins[0].rank)]
    mode = node.attrs["mode"]
    if not any(p):  # nothing to pad (also the only legal pad of a scalar)
        return lambda x: x
    if mode == "constant":
        value = np.array(node.attrs["value"]).astype(ins[0].dtype.numpy)
        return lambda x: np.pad(x, widths, mode="constant", constant_values=value)
    return lambda x: np.pad(x, widths, mode=mode)


@kernel("shape.broadcast_to", ANY)
def _broadcast_to(node, ins):
    shape = node.types[0].shape
    return lambda x: np.broadcast_to(x, shape)


@kernel("shape.expand_dims", ANY)
def _expand_dims(node, ins):
    shape = node.types[0].shape
    return lambda x: x.reshape(shape)


@kernel("shape.squeeze", ANY)
def _squeeze(node, ins):
    shape = node.types[0].shape
    return lambda x: x.reshape(shape)


class IndexOutOfRange(CarambaError):
    """An index fed to gather/scatter/embedding is outside the indexed axis."""


def _check_indices(idx, n: int, what: str) -> None:
    if idx.size and (idx.min() < -n or idx.max() >= n):
        bad = idx[(idx < -n) | (idx >= n)].ravel()[:5].tolist()
        raise IndexOutOfRange(f"{what}: indices {bad} out of range for an axis of size {n}")


@kernel("shape.gather", ANY)
def _gather(node, ins):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    n = ins[0].shape[axis]

    def gather(x, idx):
        _check_indices(idx, n, f"shape.gather node '{node.id}'")
        return np.take(x, idx, axis=axis)

    return gather


@kernel("shape.scatter_add", NUM)
def _scatter_add(node, ins):
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    n = ins[0].shape[axis]
    lead = (slice(None),) * axis

    rows = _scatter_rows(ins[0], axis)

    def scatter_add(x, idx, upd):
        _check_indices(idx, n, f"shape.scatter_add node '{node.id}'")
        out = x.copy()
        if rows is not None:  # the same adds in the same order as np.add.at (_scatter_loops.py)
            p, s = rows[1]
            rows[0](out.reshape(p, n, s), idx.reshape(-1).astype(np.int64, copy=False),
                    np.ascontiguousarray(upd).reshape(p, idx.size, s))
            return out
        np.add.at(out, lead + (idx,), upd)
        return out

    return scatter_add


def _scatter_rows(x_t, axis: int):
    """(``_scatter_loops.scatter_add_rows``, (P, S)) for a float ``x`` where Numba is installed,
    else None (``np.add.at``)."""
    import math

    from caramba.backends.cpu import fused

    if x_t.dtype.numpy not in (np.float32, np.float64) or not fused.available():
        return None
    from caramba.backends.cpu.kernels._scatter_loops import scatter_add_rows

    return scatter_add_rows, (math.prod(x_t.shape[:axis]), math.prod(x_t.shape[axis + 1:]))


def _check_starts(starts, n: int, size: int, what: str) -> None:
    if starts.size and (starts.min() < 0 or starts.max() > n - size):
        bad = starts[(starts < 0) | (starts > n - size)].ravel()[:5].tolist()
        raise IndexOutOfRange(f"{what}: starts {bad} out of range: {size} positions from each must fit an axis "
                              f"of size {n} (starts in [0, {n - size}])")


def _rows_index(axis: int, start: int, size: int) -> tuple:
    return (slice(None),) * (axis - 1) + (slice(start, start + size),)


@kernel("shape.slice_rows", ANY)
def _slice_rows(node, ins):
    axis, size = norm_axis(node.attrs["axis"], ins[0].rank), node.attrs["size"]
    n, shape, what = ins[0].shape[axis], node.types[0].shape, f"shape.slice_rows node '{node.id}'"

    def slice_rows(x, starts):
        _check_starts(starts, n, size, what)
        out = np.empty(shape, x.dtype)
        for b, s in enumerate(starts.tolist()):
            out[b] = x[b][_rows_index(axis, s, size)]
        return out

    return slice_rows


def update_rows_kernel(node, ins, in_place: bool):
    """``shape.update_rows``; with ``in_place`` the kernel writes into ``x`` itself when NumPy
    lets it (the cpu runner asks for it only when x is the state this result replaces and
    nothing else reads x; a read-only x, e.g. an uploaded tensor, is copied once)."""
    axis = norm_axis(node.attrs["axis"], ins[0].rank)
    n, u, what = ins[0].shape[axis], ins[1].shape[axis], f"shape.update_rows node '{node.id}'"

    def update_rows(x, upd, starts):
        _check_starts(starts, n, u, what)
        out = x if in_place and x.flags.writeable else x.copy()
        for b, s in enumerate(starts.tolist()):
            out[b][_rows_index(axis, s, u)] = upd[b]
        return out

    return update_rows


@kernel("shape.update_rows", ANY)
def _update_rows(node, ins):
    return update_rows_kernel(node, ins, in_place=False)


@kernel("shape.iota", NUM)
def _iota(node, ins):
    t = node.types[0]
    axis = norm_axis(node.attrs["axis"], t.rank)
    if t.rank == 0:  # a scalar iota is 0
        value = np.zeros((), dtype=t.dtype.numpy)
    else:
        view = [1] * t.rank
        view[axis] = t.shape[axis]
        value = np.ascontiguousarray(np.broadcast_to(np.arange(t.shape[axis]).reshape(view), t.shape).astype(t.dtype.numpy))
    value.setflags(write=False)
    return lambda: value


@kernel("shape.upsample_nearest", ANY)
def _upsample(node, ins):
    scales = node.attrs["scales"]
    k = ins[0].rank - len(scales)

    def upsample(x):
        for i, s in enumerate(scales):
            if s != 1:
                x = np.repeat(x, s, axis=k + i)
        return x

    return upsample


@kernel("shape.view_as_heads", ANY)
def _view_as_heads(node, ins):
    b, s, d = ins[0].shape
    h = node.attrs["num_heads"]
    return lambda x: x.reshape(b, s, h, d // h).transpose(0, 2, 1, 3)


@kernel("shape.merge_heads", ANY)
def _merge_heads(node, ins):
    b, h, s, d = ins[0].shape
    return lambda x: x.transpose(0, 2, 1, 3).reshape(b, s, h * d)


@kernel("shape.last_token", ANY)
def _last_token(node, ins):
    return lambda x: x[..., -1, :]


@kernel("shape.flip", ANY)
def _flip(node, ins):
    axes = norm_axes(node.attrs["axes"], ins[0].rank)
    return lambda x: np.flip(x, axis=axes)
