"""NumPy-style basic indexing on graph values, lowered to shape.slice / shape.squeeze."""

from __future__ import annotations

from typing import Any

from caramba.errors import GraphError


def getitem(v: Any, index: Any) -> Any:
    """``x[1:3, ::2]``, ``x[..., 0]``, ``x[None]``: ints, slices, Ellipsis and None."""
    if not isinstance(index, tuple):
        index = (index,)
    n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise GraphError("an index can contain at most one Ellipsis")
    if n_real > v.ndim:
        raise GraphError(f"too many indices ({n_real}) for a value of rank {v.ndim}")
    expanded: list[Any] = []
    for i in index:
        if i is Ellipsis:
            expanded.extend([slice(None)] * (v.ndim - n_real))
        else:
            expanded.append(i)
    while sum(1 for i in expanded if i is not None) < v.ndim:
        expanded.append(slice(None))

    starts, ends, steps, axes, squeeze, newaxes = [], [], [], [], [], []
    axis = 0
    out_pos = 0
    for i in expanded:
        if i is None:
            newaxes.append(out_pos)
            out_pos += 1
            continue
        dim = v.shape[axis]
        if isinstance(i, slice):
            s, e, st = i.indices(dim)
            if e < 0:  # only for negative steps: "run past index 0", spelled so it wraps there
                e -= dim
            if (s, e, st) != (0, dim, 1):
                starts.append(s), ends.append(e), steps.append(st), axes.append(axis)
            out_pos += 1
        elif isinstance(i, int):
            k = i + dim if i < 0 else i
            if not 0 <= k < dim:
                raise GraphError(f"index {i} is out of bounds for axis {axis} of size {dim}")
            starts.append(k), ends.append(k + 1), steps.append(1), axes.append(axis)
            squeeze.append(axis)
        else:
            raise GraphError(
                f"unsupported index {i!r}: use ints, slices, None and ...; "
                "gather with ops.gather(x, indices, axis)"
            )
        axis += 1

    g = v.graph
    out = v
    if axes:
        out = g.call("shape.slice", (out,), {"starts": starts, "ends": ends, "steps": steps, "axes": axes})
    if squeeze:
        out = g.call("shape.squeeze", (out,), {"axes": squeeze})
    for pos in newaxes:
        out = g.call("shape.expand_dims", (out,), {"axes": [pos]})
    return out
