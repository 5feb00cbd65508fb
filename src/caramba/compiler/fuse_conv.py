"""The ``fuse`` pass's convolution-backward pattern (``fuse.py`` calls it; only a backend that
declares ``fused.conv_transpose`` gets it).

The VJP of ``nn.conv1d`` / ``nn.conv2d`` (``autodiff/rules/nn.py``) writes the input gradient
as a stride-1, unpadded convolution of the cotangent *dilated* by the stride (zeros inserted by
expand / pad / reshape / slice) and padded fully, with the kernel transposed within each group
and flipped (reshape / transpose / reshape / flip), then crops the padding (slice). That is a
transposed convolution, ``fused.conv_transpose(ct, w)``, which a backend computes as
``w^T @ cotangent columns`` scattered back into the input (col2im) without the inserted zeros.

Matching is by meaning, not by spelling: the chains of shape ops between the cotangent and the
convolution's input, between the weight and its kernel, and between the convolution and the
result are evaluated on index arrays (each element its own number, 0 for a padded zero) and
must place every element exactly where the dilate / pad, transpose / flip and crop put it.
Whatever order canonicalize leaves the shape ops in, a match computes the same values; a
chain that does anything else (another stride, a crop that is not the padding) is left alone.
"""

from __future__ import annotations

from math import prod

import numpy as np

from caramba.ir.graph import Node, Ref
from caramba.ops import fused as F
from caramba.ops.shape import slice_plan

SHAPE_OPS = frozenset({"shape.reshape", "shape.pad", "shape.slice", "shape.transpose", "shape.flip"})
CONVS = {"nn.conv1d": 1, "nn.conv2d": 2}
# index arrays larger than this are not built (a chain this large is matched nowhere today)
MAX_ELEMENTS = 1 << 26


def eval_shape(node: Node, in_type, arr: np.ndarray) -> np.ndarray | None:
    """``node`` (one of ``SHAPE_OPS``) applied to the index array ``arr``; None where the op
    is not a plain data movement (a pad that is not zeros)."""
    a = node.attrs
    if node.op == "shape.reshape":
        return arr.reshape(node.types[0].shape)
    if node.op == "shape.transpose":
        perm = a["perm"]
        return np.transpose(arr, None if perm is None else tuple(p % arr.ndim for p in perm))
    if node.op == "shape.flip":
        axes = a["axes"]
        return np.flip(arr, axis=None if axes is None else tuple(x % arr.ndim for x in axes))
    if node.op == "shape.slice":
        out = arr
        for ax, p in enumerate(slice_plan(in_type, a)):
            if p != (0, arr.shape[ax], 1):
                out = np.take(out, np.arange(*p), axis=ax)
        return out
    if node.op == "shape.pad":
        if a["mode"] != "constant" or a["value"] != 0.0:
            return None
        pads = a["pads"]
        return np.pad(arr, [(pads[2 * i], pads[2 * i + 1]) for i in range(arr.ndim)])
    return None


def _back(fuser, ref: Ref, shared: bool = False) -> list[tuple[Ref, list[Node]]]:
    """The cut points of the chain of single-use shape ops ending at ``ref``, farthest first
    (the longest chain that matches is taken: a cut inside the dilation would leave its
    zeros in): (the value where the chain starts, the chain's nodes from there to ``ref``).
    ``shared``: the chain may pass through values with other users (the caller checks that
    they are all inside what it replaces)."""
    out: list[tuple[Ref, list[Node]]] = [(ref, [])]
    chain: list[Node] = []
    cur = ref
    while cur.index == 0:
        n = fuser.graph.node(cur.node)
        if n.op not in SHAPE_OPS or n.id in fuser.taken or (fuser.uses[n.id] != 1 and not shared) or len(n.inputs) != 1:
            break
        chain.insert(0, n)
        cur = n.inputs[0]
        out.append((cur, list(chain)))
    return out[::-1]


def _run(fuser, chain: list[Node], arr: np.ndarray) -> np.ndarray | None:
    for n in chain:
        arr = eval_shape(n, fuser.graph.type_of(n.inputs[0]), arr)
        if arr is None or arr.shape != n.types[0].shape:
            return None
    return arr


def _index(shape: tuple[int, ...]) -> np.ndarray | None:
    size = prod(shape)
    if size > MAX_ELEMENTS:
        return None
    return np.arange(1, size + 1, dtype=np.int64).reshape(shape)


def _kernel_of(w: np.ndarray, groups: int, nd: int) -> np.ndarray:
    """The VJP's kernel for the input gradient: w [O, C/g, *K] transposed within each group to
    [C, O/g, *K] and flipped along the kernel axes."""
    o, cg = w.shape[:2]
    ks = w.shape[2:]
    t = w.reshape((groups, o // groups, cg) + ks).transpose((0, 2, 1) + tuple(range(3, 3 + nd)))
    return np.flip(t.reshape((groups * cg, o // groups) + ks), axis=tuple(range(2, 2 + nd)))


def _dilated(ct: np.ndarray, shape: tuple[int, ...], edge: tuple[int, ...], stride: tuple[int, ...]) -> np.ndarray:
    """ct dilated by ``stride`` and placed from ``edge`` in zeros of ``shape``."""
    out = np.zeros(shape, ct.dtype)
    index = (slice(None), slice(None)) + tuple(
        slice(e, e + (n - 1) * s + 1, s) for e, n, s in zip(edge, ct.shape[2:], stride, strict=True))
    out[index] = ct
    return out


def _strides(ct: np.ndarray, got: np.ndarray, full, edge, nd) -> tuple[int, ...] | None:
    """The stride along each axis, read from where the chain put the cotangent's second element
    along it (any stride that leaves the cotangent inside ``full`` where it has one element)."""
    out = []
    for i in range(nd):
        n = ct.shape[2 + i]
        if n == 1:
            out.append(max(1, full[i] - edge[i]))
            continue
        at = np.argwhere(got == ct[(0, 0) + tuple(1 if j == i else 0 for j in range(nd))])
        if len(at) != 1:
            return None
        out.append(int(at[0][2 + i]) - edge[i])
    return tuple(out) if all(s >= 1 for s in out) else None


def conv_transpose(fuser, m) -> list:
    """nn.conv*(dilate/pad(ct), flip/transpose(w)) [+ crop] -> fused.conv_transpose(ct, w)."""
    found: list = []
    for conv in fuser.graph.nodes:
        nd = CONVS.get(conv.op)
        if nd is None or conv.id in fuser.taken or len(conv.inputs) != 2 or len(conv.types) != 1:
            continue
        a = conv.attrs
        if set(a["stride"]) != {1} or set(a["padding"]) != {0}:
            continue
        dil = tuple(a["dilation"]) * nd if len(a["dilation"]) == 1 else tuple(a["dilation"])
        groups = a["groups"]
        x_t, k_t = (fuser.graph.type_of(r) for r in conv.inputs)
        prod_x = fuser.graph.node(conv.inputs[0].node)
        if prod_x.op not in SHAPE_OPS or x_t.size > MAX_ELEMENTS:
            continue  # a plain convolution: nothing was dilated or padded
        _match_one(fuser, m, conv, nd, dil, groups, x_t, k_t, found)
    return found


def _match_one(fuser, m, conv, nd, dil, groups, x_t, k_t, found) -> bool:
    ch, og = k_t.shape[:2]
    ks = k_t.shape[2:]
    o = og * groups
    n_img = x_t.shape[0]
    full = conv.types[0].shape[2:]
    edge = tuple(d * (k - 1) for d, k in zip(dil, ks, strict=True))
    if ch % groups:
        return False
    cg = ch // groups
    # the kernel: w [O, C/g, *K] -> [C, O/g, *K] flipped
    kernel = None
    for w_ref, w_chain in _back(fuser, conv.inputs[1]):
        if fuser.graph.type_of(w_ref).shape != (o, cg) + ks:
            continue
        idx = _index((o, cg) + ks)
        got = _run(fuser, w_chain, idx)
        if got is not None and np.array_equal(got, _kernel_of(idx, groups, nd)):
            kernel = (w_ref, w_chain)
            break
    if kernel is None:
        return False
    # the result: the convolution's output, cropped by the padding
    outs = [(conv, [])]
    cur = conv
    while True:
        u = fuser.sole_user(cur)
        if u is None or u.op not in SHAPE_OPS or len(u.inputs) != 1:
            break
        outs.append((u, outs[-1][1] + [u]))
        cur = u
    for root, out_chain in reversed(outs):
        shape = root.types[0].shape
        if len(shape) != nd + 2 or shape[:2] != (n_img, ch):
            continue
        size = shape[2:]
        pad2 = [f - s for f, s in zip(full, size, strict=True)]
        if any(p < 0 or p % 2 for p in pad2):
            continue
        padding = tuple(p // 2 for p in pad2)
        if out_chain:
            idx = _index(conv.types[0].shape)
            got = _run(fuser, out_chain, idx)
            crop = idx[(slice(None), slice(None)) + tuple(slice(p, p + s) for p, s in zip(padding, size, strict=True))]
            if got is None or not np.array_equal(got, crop):
                continue
        for ct_ref, d_chain in _back(fuser, conv.inputs[0]):
            ct_shape = fuser.graph.type_of(ct_ref).shape
            if not d_chain or len(ct_shape) != nd + 2 or ct_shape[:2] != (n_img, o):
                continue
            idx = _index(ct_shape)
            got = _run(fuser, d_chain, idx)
            stride = None if got is None else _strides(idx, got, full, edge, nd)
            if stride is None or any(F.conv_out_size(size[i], ks[i], stride[i], padding[i], dil[i]) != ct_shape[2 + i]
                                     for i in range(nd)):
                continue
            try:
                want = _dilated(idx, x_t.shape, edge, stride)
            except ValueError:  # the cotangent does not fit where this stride puts it
                continue
            if not np.array_equal(got, want):
                continue
            internal = {n.id: n for n in (*d_chain, *kernel[1], conv, *out_chain)}
            attrs = {"stride": stride, "padding": padding, "dilation": dil, "groups": groups, "size": size}
            if fuser._emit_grad(F.CONV_TRANSPOSE, [root], internal, [ct_ref, kernel[0]], attrs, found, m):
                return True
    return False


def conv_weight_grad(fuser, m) -> list:
    """The weight-gradient chain of the nn.conv1d / nn.conv2d VJP: a convolution of x with batch
    and channel roles swapped (reshape / transpose / reshape) by the cotangent as its kernel
    (transpose), its stride and dilation traded, cropped to the kernel and transposed back
    -> fused.conv_weight_grad(x, ct) (with the forward convolution's attributes)."""
    found: list = []
    for conv in fuser.graph.nodes:
        nd = CONVS.get(conv.op)
        if nd is None or conv.id in fuser.taken or len(conv.inputs) != 2 or len(conv.types) != 1:
            continue
        if fuser.graph.node(conv.inputs[1].node).op not in SHAPE_OPS:
            continue  # the kernel is not a rearranged cotangent
        _match_weight(fuser, m, conv, nd, found)
    return found


def _own(fuser, chain: list[Node]) -> list[Node]:
    """The end of ``chain`` after its last node with another user."""
    out: list[Node] = []
    for n in reversed(chain):
        if fuser.uses[n.id] != 1:
            break
        out.append(n)
    return out


def _per(v, nd):
    return tuple(v) * nd if len(v) == 1 else tuple(v)


def _match_weight(fuser, m, conv, nd, found) -> bool:
    a = conv.attrs
    stride_c, pad, dil_c = (_per(a[k], nd) for k in ("stride", "padding", "dilation"))
    groups = a["groups"]
    k_t = fuser.graph.type_of(conv.inputs[1])
    sp = tuple(range(2, 2 + nd))
    cut = None
    for ct_ref, k_chain in _back(fuser, conv.inputs[1], shared=True):
        ct_shape = fuser.graph.type_of(ct_ref).shape
        if not k_chain or len(ct_shape) != nd + 2 or (ct_shape[1], ct_shape[0]) + ct_shape[2:] != k_t.shape:
            continue
        idx = _index(ct_shape)
        got = _run(fuser, k_chain, idx)
        if got is not None and np.array_equal(got, idx.transpose((1, 0) + sp)):
            cut = (ct_ref, k_chain, ct_shape)
            break
    if cut is None:
        return False
    ct_ref, k_chain, ct_shape = cut
    n, o = ct_shape[:2]
    x_in = None
    for x_ref, x_chain in _back(fuser, conv.inputs[0], shared=True):
        x_shape = fuser.graph.type_of(x_ref).shape
        if not x_chain or len(x_shape) != nd + 2 or x_shape[0] != n or x_shape[1] % groups:
            continue
        cg = x_shape[1] // groups
        idx = _index(x_shape)
        got = _run(fuser, x_chain, idx)
        want = idx.reshape((n, groups, cg) + x_shape[2:]).transpose((2, 1, 0) + tuple(range(3, 3 + nd)))
        if got is not None and np.array_equal(got, want.reshape((cg, groups * n) + x_shape[2:])):
            x_in = (x_ref, x_chain, x_shape)
            break
    if x_in is None or o % groups:
        return False
    x_ref, x_chain, x_shape = x_in
    cg = x_shape[1] // groups
    outs = [(conv, [])]
    cur = conv
    while (u := fuser.sole_user(cur)) is not None and u.op in SHAPE_OPS and len(u.inputs) == 1:
        outs.append((u, outs[-1][1] + [u]))
        cur = u
    full = conv.types[0].shape
    for root, out_chain in reversed(outs):
        shape = root.types[0].shape
        if not out_chain or len(shape) != nd + 2 or shape[:2] != (o, cg) or any(k > f for k, f in zip(shape[2:], full[2:], strict=True)):
            continue
        ks = shape[2:]
        idx = _index(full)
        got = _run(fuser, out_chain, idx)
        want = idx[(slice(None), slice(None)) + tuple(slice(0, k) for k in ks)].transpose((1, 0) + sp)
        if got is None or not np.array_equal(got, want):
            continue
        # the forward convolution: stride and dilation trade places
        if any(F.conv_out_size(x_shape[2 + i], ks[i], dil_c[i], pad[i], stride_c[i]) != ct_shape[2 + i] for i in range(nd)):
            continue
        # a rearranged x or ct that CSE shares with another convolution's gradient stays (with
        # what it is made of) for that one: only the chain's single-use end is replaced
        internal = {nd_.id: nd_ for nd_ in (*_own(fuser, x_chain), *_own(fuser, k_chain), conv, *out_chain)}
        attrs = {"stride": dil_c, "padding": pad, "dilation": stride_c, "groups": groups, "kernel": ks}
        if fuser._emit_grad(F.CONV_WEIGHT_GRAD, [root], internal, [x_ref, ct_ref], attrs, found, m):
            return True
    return False
