"""The ``fuse`` pass's pooling-backward patterns (``fuse.py`` calls them; only a backend that
declares ``fused.max_pool2d_grad`` / ``fused.avg_pool2d_grad`` gets them).

The VJPs of ``nn.max_pool2d`` and ``nn.avg_pool2d`` (``autodiff/rules/nn.py``) are a left-deep
sum, in row-major kernel order, of k*k placements (dilate + pad: ``place``) of a per-offset
part, cropped by the padding: for the average the part is ``ct * (1/(kh*kw))``; for the maximum
it is ``where(hit_t, ct, 0)``, hit_t being "this offset's element equals the window's maximum
and no earlier offset's did" over compares of the forward output with strided slices of the
(-inf padded) input.

As for convolutions (``fuse_conv.py``) the match is by meaning: every placement, window slice
and the crop are evaluated on index arrays and must move each element exactly where the rule
does, and each hit condition, whatever the spelling of its and / or / not, is evaluated on every
assignment of the k*k compares (a truth table) and must be the rule's "first maximum" test.
A sum in another order or association is left alone (the fused kernel sums in the rule's order,
so the result is the unfused graph's bit for bit).
"""

from __future__ import annotations

import numpy as np

from caramba.compiler.fuse_conv import _back, _index, _run, eval_shape
from caramba.ir.graph import Node, Ref
from caramba.ops import fused as F

POOLS = {"nn.max_pool2d": F.MAX_POOL2D_GRAD, "nn.avg_pool2d": F.AVG_POOL2D_GRAD}
MAX_TAPS = 16  # kernels of more taps are not matched (the truth tables grow as 2**taps)
_LOGIC = frozenset({"math.logical_and", "math.logical_or", "math.logical_not"})


def _place(idx: np.ndarray, full: tuple[int, ...], i: int, j: int, s: tuple[int, int]) -> np.ndarray:
    out = np.zeros(full, idx.dtype)
    ho, wo = idx.shape[2:]
    out[:, :, i:i + (ho - 1) * s[0] + 1:s[0], j:j + (wo - 1) * s[1] + 1:s[1]] = idx
    return out


def _leaves(fuser, top: Node) -> tuple[list[Ref], list[Node]] | None:
    """(the operands of a left-deep chain of single-use adds from ``top``, first addend first
    (the first two in either order); the adds), or None where the chain branches."""
    out: list[Ref] = []
    adds = [top]
    cur = top
    while True:
        a, b = cur.inputs
        inner = [r for r in (a, b) if r.index == 0 and fuser.graph.node(r.node).op == "math.add"
                 and fuser.uses[r.node] == 1 and r.node not in fuser.taken]
        if len(inner) == 2 or len(out) > MAX_TAPS:
            return None
        if not inner:
            out += [a, b]
            return out[::-1], adds
        out.append(b if inner[0] == a else a)
        cur = fuser.graph.node(inner[0].node)
        adds.append(cur)


def _offset(fuser, leaf: Ref) -> tuple[Ref, list[Node], int, int, tuple[int, int], tuple[int, ...]] | None:
    """(part, placement chain, i, j, stride, full shape) of one placed addend."""
    full = fuser.graph.type_of(leaf).shape
    for src, chain in _back(fuser, leaf, shared=True):
        shape = fuser.graph.type_of(src).shape
        if not chain or len(shape) != 4 or shape[:2] != full[:2]:
            continue
        idx = _index(shape)
        got = _run(fuser, chain, idx)
        if got is None:
            continue
        at = [np.argwhere(got == idx[0, 0, a, b]) for a, b in ((0, 0), (min(1, shape[2] - 1), 0), (0, min(1, shape[3] - 1)))]
        if any(len(x) != 1 for x in at):
            continue
        i, j = int(at[0][0][2]), int(at[0][0][3])
        s = (int(at[1][0][2]) - i if shape[2] > 1 else 1, int(at[2][0][3]) - j if shape[3] > 1 else 1)
        if min(s) < 1:
            continue
        try:
            want = _place(idx, full, i, j, s)
        except ValueError:
            continue
        if np.array_equal(got, want):
            return src, chain, i, j, s, full
    return None


def pool_grad(fuser, m) -> list:
    """Sum of placements [+ crop] -> fused.max_pool2d_grad(x, y, ct) / fused.avg_pool2d_grad(ct)."""
    found: list = []
    memo: dict[Ref, tuple | None] = {}
    for top in reversed(fuser.graph.nodes):  # the top of a chain before the adds inside it
        if top.op != "math.add" or top.id in fuser.taken or len(top.types) != 1 or top.types[0].rank != 4:
            continue
        _match(fuser, m, top, found, memo)
    return found


def _match(fuser, m, top: Node, found: list, memo: dict) -> bool:
    chain = _leaves(fuser, top)
    if chain is None or len(chain[0]) > MAX_TAPS:
        return False
    leaves, adds = chain
    placed = []
    for r in leaves:
        if r not in memo:
            memo[r] = _offset(fuser, r)
        if memo[r] is None:
            return False
        placed.append(memo[r])
    kh = max(p[2] for p in placed) + 1
    kw = max(p[3] for p in placed) + 1
    order = [(p[2], p[3]) for p in placed]
    want = [(i, j) for i in range(kh) for j in range(kw)]
    if len(order) != kh * kw or sorted(order[:2]) != want[:2] or order[2:] != want[2:]:
        return False
    stride = placed[0][4]
    part_type = fuser.graph.type_of(placed[0][0])
    if any(p[4] != stride or fuser.graph.type_of(p[0]).shape != part_type.shape for p in placed):
        return False
    full = placed[0][5]
    internal = {n.id: n for p in placed for n in p[1]}
    internal.update({n.id: n for n in adds})
    # the crop: the padding of the forward pass
    root, crops = top, [(top, [])]
    cur = top
    while (u := fuser.sole_user(cur)) is not None and u.op in ("shape.slice", "shape.reshape") and len(u.inputs) == 1:
        crops.append((u, crops[-1][1] + [u]))
        cur = u
    for root, chain in reversed(crops):
        shape = root.types[0].shape
        if len(shape) != 4 or shape[:2] != full[:2] or any((f - s) % 2 or f < s for f, s in zip(full[2:], shape[2:], strict=True)):
            continue
        padding = ((full[2] - shape[2]) // 2, (full[3] - shape[3]) // 2)
        if chain:
            idx = _index(full)
            got = _run(fuser, chain, idx)
            if got is None or not np.array_equal(got, idx[:, :, padding[0]:padding[0] + shape[2], padding[1]:padding[1] + shape[3]]):
                continue
        size = shape[2:]
        ho, wo = part_type.shape[2:]
        if 2 * padding[0] > kh or 2 * padding[1] > kw or (size[0] + 2 * padding[0] - kh) // stride[0] + 1 != ho or (
                size[1] + 2 * padding[1] - kw) // stride[1] + 1 != wo:
            continue
        attrs = {"kernel": (kh, kw), "stride": stride, "padding": padding}
        inner = dict(internal)
        inner.update({n.id: n for n in chain})
        parts = [p[0] for _, p in sorted(zip(order, placed, strict=True))]  # by kernel offset
        if len(set(parts)) == 1:
            got = _avg(fuser, m, root, inner, parts[0], kh * kw, attrs, size, found)
        else:
            got = _max(fuser, m, root, inner, parts, attrs, found)
        if got:
            return True
    return False


def _avg(fuser, m, root, internal, part: Ref, taps: int, attrs, size, found) -> bool:
    mul = m.node(part, "math.mul")
    if mul is None:
        return False
    dtype = root.types[0].dtype.numpy
    for ct_ref, c_ref in m.pairs(mul):
        c = m.const(c_ref)
        if c is None or np.asarray(c, dtype) != np.asarray(1.0 / taps, dtype):
            continue
        if fuser.graph.type_of(ct_ref).shape != fuser.graph.type_of(part).shape:
            continue
        inner = dict(internal)
        inner[mul.id] = mul
        return fuser._emit_grad(F.AVG_POOL2D_GRAD, [root], inner, [ct_ref], {**attrs, "size": size}, found, m)
    return False


def _max(fuser, m, root, internal, parts: list[Ref], attrs, found) -> bool:
    wheres = [m.node(p, "math.where") for p in parts]
    if any(w is None for w in wheres):
        return False
    ct_ref = wheres[0].inputs[1]
    zero = wheres[0].inputs[2]
    if any(w.inputs[1] != ct_ref or w.inputs[2] != zero for w in wheres) or m.const(zero) != 0.0:
        return False
    kh, kw = attrs["kernel"]
    taps = kh * kw
    # the compares: equal(y, window(i, j)) with y the forward max pool of x
    logic: dict[str, Node] = {}
    compares: dict[str, int] = {}
    y_ref = x_ref = None
    stack = [w.inputs[0] for w in wheres]
    while stack:
        r = stack.pop()
        n = fuser.graph.node(r.node)
        if r.index or n.id in fuser.taken:
            return False
        if n.id in logic or n.id in compares:
            continue
        if n.op in _LOGIC:
            logic[n.id] = n
            stack += list(n.inputs)
            continue
        if n.op != "math.equal":
            return False
        hit = _compare(fuser, n, attrs)
        if hit is None or (y_ref is not None and (hit[0], hit[1]) != (y_ref, x_ref)):
            return False
        y_ref, x_ref, t, chain = hit
        compares[n.id] = t
        internal.update({c.id: c for c in chain})
    if sorted(compares.values()) != list(range(taps)):
        return False
    if not _first_hits(fuser, [w.inputs[0] for w in wheres], logic, compares, taps):
        return False
    # the rule's last "taken" update is used by nothing (dead code elimination runs later)
    for i in list(logic) + list(compares):
        for u in fuser.users[i]:
            if u.op in _LOGIC and fuser.uses[u.id] == 0 and u.id not in fuser.taken:
                logic[u.id] = u
    inner = dict(internal)
    inner.update({w.id: w for w in wheres})
    inner.update(logic)
    inner.update({i: fuser.graph.node(i) for i in compares})
    return fuser._emit_grad(F.MAX_POOL2D_GRAD, [root], inner, [x_ref, y_ref, ct_ref], attrs, found, m)


def _compare(fuser, eq: Node, attrs) -> tuple[Ref, Ref, int, list[Node]] | None:
    """(y, x, kernel offset t, window chain) of ``equal(y, window_t(x))`` (either operand order)."""
    kh, kw = attrs["kernel"]
    s, p = attrs["stride"], attrs["padding"]
    for y_ref, w_ref in ((eq.inputs[0], eq.inputs[1]), (eq.inputs[1], eq.inputs[0])):
        pool = fuser.graph.node(y_ref.node)
        if pool.op != "nn.max_pool2d" or y_ref.index:
            continue
        pk = tuple(pool.attrs["kernel"]) * (2 if len(pool.attrs["kernel"]) == 1 else 1)
        ps = pk if pool.attrs["stride"] is None else tuple(pool.attrs["stride"]) * (2 if len(pool.attrs["stride"]) == 1 else 1)
        pp = tuple(pool.attrs["padding"]) * (2 if len(pool.attrs["padding"]) == 1 else 1)
        if (pk, ps, pp) != ((kh, kw), tuple(s), tuple(p)):
            continue
        x_ref = pool.inputs[0]
        x_t = fuser.graph.type_of(x_ref)
        # the window chain from x: [pad with -inf] + strided slice (the pad is shared by all windows)
        chain: list[Node] = []
        cur = w_ref
        while cur != x_ref and cur.index == 0 and len(chain) < 4:
            n = fuser.graph.node(cur.node)
            if n.op not in ("shape.slice", "shape.pad", "shape.reshape") or len(n.inputs) != 1:
                return None
            if n.op == "shape.pad" and (n.attrs["mode"] != "constant" or n.attrs["value"] != float("-inf")):
                return None
            chain.insert(0, n)
            cur = n.inputs[0]
        if cur != x_ref:
            return None
        idx = _index(x_t.shape)
        got = idx
        for n in chain:
            got = eval_shape(n, fuser.graph.type_of(n.inputs[0]), got) if n.op != "shape.pad" else np.pad(
                got, [(n.attrs["pads"][2 * a], n.attrs["pads"][2 * a + 1]) for a in range(got.ndim)])
            if got is None or got.shape != n.types[0].shape:
                return None
        xp = np.pad(idx, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])])
        ho, wo = fuser.graph.type_of(y_ref).shape[2:]
        for t in range(kh * kw):
            i, j = divmod(t, kw)
            if np.array_equal(got, xp[:, :, i:i + (ho - 1) * s[0] + 1:s[0], j:j + (wo - 1) * s[1] + 1:s[1]]):
                return y_ref, x_ref, t, chain
    return None


def _first_hits(fuser, conds: list[Ref], logic: dict[str, Node], compares: dict[str, int], taps: int) -> bool:
    """Every condition t, on every assignment of the compares, is "compare t and no earlier one"."""
    bits = np.arange(1 << taps, dtype=np.int64)
    val: dict[str, np.ndarray] = {i: ((bits >> t) & 1).astype(bool) for i, t in compares.items()}

    def ev(r: Ref) -> np.ndarray:
        if r.node not in val:
            n = logic[r.node]
            a = [ev(x) for x in n.inputs]
            val[r.node] = (~a[0] if n.op == "math.logical_not" else
                           (a[0] & a[1]) if n.op == "math.logical_and" else (a[0] | a[1]))
        return val[r.node]

    for t, c in enumerate(conds):
        want = ((bits >> t) & 1).astype(bool) & ((bits & ((1 << t) - 1)) == 0)
        if not np.array_equal(ev(c), want):
            return False
    return True
