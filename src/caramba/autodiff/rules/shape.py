"""VJP rules for shape.*: every one is another data movement (slice <-> pad, gather <->
scatter_add, split <-> concat, reshape <-> reshape)."""

from __future__ import annotations

from caramba import ops
from caramba.autodiff.rules import rule
from caramba.autodiff.rules._util import call, reshape, sum_axes, unbroadcast, zeros
from caramba.ops._define import norm_axes, norm_axis
from caramba.ops.shape import slice_plan, split_sizes


def pad(x, pads, mode="constant"):
    if not any(pads):
        return x
    return call(x, "shape.pad", (x,), pads=tuple(pads), mode=mode)


def dilate(x, axis: int, step: int):
    """Insert ``step - 1`` zeros between neighbours along ``axis`` (length n -> (n-1)*step + 1)."""
    n = x.shape[axis]
    if step == 1 or n == 0:
        return x
    y = ops.expand_dims(x, axes=(axis + 1,))  # [..., n, 1, ...]
    pads = [0] * (2 * y.ndim)
    pads[2 * (axis + 1) + 1] = step - 1
    y = pad(y, pads)  # [..., n, step, ...]
    y = reshape(y, x.shape[:axis] + (n * step,) + x.shape[axis + 1 :])
    return ops.slice(y, starts=(0,), ends=((n - 1) * step + 1,), axes=(axis,))


def place(ct, shape, plan):
    """Adjoint of ``x[plan]`` (Python slices per axis): put ``ct`` back into zeros of ``shape``."""
    if any(len(range(*p)) == 0 for p in plan):
        return zeros(ct, shape)
    flips = tuple(ax for ax, (_, _, step) in enumerate(plan) if step < 0)
    if flips:
        ct = ops.flip(ct, axes=flips)
    pads = []
    for ax, (start, stop, step) in enumerate(plan):
        n = len(range(start, stop, step))
        first = start if step > 0 else start + (n - 1) * step
        ct = dilate(ct, ax, abs(step))
        span = (n - 1) * abs(step) + 1
        pads += [first, shape[ax] - first - span]
    return pad(ct, pads)


@rule("shape.reshape")
def reshape_(c, ct):
    return (reshape(ct, c.x[0].shape),)


@rule("shape.transpose")
def transpose(c, ct):
    r = c.x[0].ndim
    perm = c.attrs["perm"]
    perm = [norm_axis(p, r) for p in perm] if perm is not None else list(reversed(range(r)))
    inverse = [0] * r
    for i, p in enumerate(perm):
        inverse[p] = i
    return (ops.transpose(ct, perm=tuple(inverse)),)


@rule("shape.concat")
def concat(c, ct):
    axis = norm_axis(c.attrs["axis"], ct.ndim)
    out, start = [], 0
    for i, x in enumerate(c.x):
        n = x.shape[axis]
        out.append(ops.slice(ct, starts=(start,), ends=(start + n,), axes=(axis,)) if c.needs[i] else None)
        start += n
    return tuple(out)


@rule("shape.split")
def split(c, *cts):
    axis, _ = split_sizes(c.x[0].type, c.attrs)
    return (cts[0] if len(cts) == 1 else ops.concat(*cts, axis=axis),)


@rule("shape.slice")
def slice_(c, ct):
    x = c.x[0]
    return (place(ct, x.shape, slice_plan(x.type, c.attrs)),)


@rule("shape.pad")
def pad_(c, ct):
    x = c.x[0]
    pads = c.attrs["pads"]
    mode = c.attrs["mode"]
    r = x.ndim
    if mode == "constant":
        starts = tuple(pads[2 * i] for i in range(r))
        ends = tuple(pads[2 * i] + x.shape[i] for i in range(r))
        return (ops.slice(ct, starts=starts, ends=ends, axes=tuple(range(r))),)
    # reflect/edge: per axis, fold the padded borders back onto the positions they copy.
    for ax in range(r):
        lo, hi, d = pads[2 * ax], pads[2 * ax + 1], x.shape[ax]
        if not (lo or hi):
            continue
        center = ops.slice(ct, starts=(lo,), ends=(lo + d,), axes=(ax,))
        for side, n in (("lo", lo), ("hi", hi)):
            if n == 0:
                continue
            start = 0 if side == "lo" else lo + d
            part = ops.slice(ct, starts=(start,), ends=(start + n,), axes=(ax,))
            z = [0] * (2 * r)
            if mode == "edge":
                part = sum_axes(part, (ax,), keepdims=True)
                z[2 * ax + (1 if side == "lo" else 0)] = d - 1
            else:  # reflect: output j < lo copies x[lo - j]; output lo + d + j copies x[d - 2 - j]
                part = ops.flip(part, axes=(ax,))
                z[2 * ax], z[2 * ax + 1] = (1, d - 1 - n) if side == "lo" else (d - 1 - n, 1)
            center = center + pad(part, z)
        ct = center
    return (ct,)


@rule("shape.broadcast_to")
def broadcast_to(c, ct):
    return (unbroadcast(ct, c.x[0].shape),)


@rule("shape.expand_dims")
def expand_dims(c, ct):
    return (reshape(ct, c.x[0].shape),)


@rule("shape.squeeze")
def squeeze(c, ct):
    return (reshape(ct, c.x[0].shape),)


@rule("shape.gather")
def gather(c, ct):
    x, idx = c.x
    return (ops.scatter_add(zeros(ct, x.shape), idx, ct, axis=c.attrs["axis"]), None)


@rule("shape.scatter_add")
def scatter_add(c, ct):
    _, idx, _ = c.x
    return (
        ct if c.needs[0] else None,
        None,
        ops.gather(ct, idx, axis=c.attrs["axis"]) if c.needs[2] else None,
    )


@rule("shape.upsample_nearest")
def upsample_nearest(c, ct):
    x = c.x[0]
    scales = c.attrs["scales"]
    k = x.ndim - len(scales)
    split = x.shape[:k]
    for d, s in zip(x.shape[k:], scales, strict=True):
        split += (d, s)
    axes = tuple(k + 2 * i + 1 for i in range(len(scales)))
    return (reshape(sum_axes(reshape(ct, split), axes), x.shape),)


@rule("shape.view_as_heads")
def view_as_heads(c, ct):
    return (ops.merge_heads(ct),)


@rule("shape.merge_heads")
def merge_heads(c, ct):
    return (ops.view_as_heads(ct, num_heads=c.x[0].shape[1]),)


@rule("shape.last_token")
def last_token(c, ct):
    x = c.x[0]
    y = ops.expand_dims(ct, axes=(x.ndim - 2,))
    pads = [0] * (2 * x.ndim)
    pads[2 * (x.ndim - 2)] = x.shape[-2] - 1
    return (pad(y, pads),)


@rule("shape.flip")
def flip(c, ct):
    return (ops.flip(ct, axes=norm_axes(c.attrs["axes"], ct.ndim)),)


@rule("shape.slice_rows")
def slice_rows(c, ct):
    x, starts = c.x
    return (ops.update_rows(zeros(ct, x.shape), ct, starts, axis=c.attrs["axis"]), None)


@rule("shape.update_rows")
def update_rows(c, ct):
    _, upd, starts = c.x
    axis = c.attrs["axis"]
    return (
        ops.update_rows(ct, zeros(ct, upd.shape), starts, axis=axis) if c.needs[0] else None,
        ops.slice_rows(ct, starts, axis=axis, size=upd.shape[norm_axis(axis, len(upd.shape))]) if c.needs[1] else None,
        None,
    )
