"""fuse: merge nodes into the fused forms of ``caramba.ops.fused`` — only where the backend's
Capabilities declare that fused form legal for every dtype involved, and only when the fused
node is computed at the same precision as each node it replaces.

Patterns, tried in this order (a node joins at most one fused node):

1. ``linear``: matmul [+ bias] [+ relu | gelu | gelu_tanh | silu | tanh] -> ``fused.linear``
   (the longest declared form; exact and tanh GELU are different patterns, never swapped);
2. ``layer_norm_residual``: layer_norm(x + r, ...) -> ``fused.layer_norm_residual`` (with the
   sum as a second output when something else uses it);
3. ``softmax``: softmax(elementwise prologue) -> ``fused.softmax``, and the spelled-out form
   exp(x - max(x)) / sum(exp(x - max(x))) (keepdims, one axis) -> ``fused.softmax(x)``;
4. ``norm_grad`` and ``softmax_grad``: the VJP chains the autodiff rules of nn.layer_norm,
   nn.rms_norm, nn.softmax and nn.log_softmax emit (as canonicalize leaves them) ->
   ``fused.layer_norm_grad`` / ``fused.rms_norm_grad`` (dx, plus dgamma / dbeta where the graph
   sums them) and ``fused.softmax_grad`` / ``fused.log_softmax_grad``. Matched here rather than
   emitted by the rules: a rule does not know its backend, and the chain is what every backend
   runs and what differentiates again;
   ``conv_grad`` and ``pool_grad`` do the same for the nn.conv1d / nn.conv2d and
   nn.max_pool2d / nn.avg_pool2d VJPs (``fuse_conv.py``, ``fuse_pool.py``: matched by meaning on
   index arrays and truth tables) -> ``fused.conv_transpose``, ``fused.conv_weight_grad``,
   ``fused.max_pool2d_grad``, ``fused.avg_pool2d_grad``;
5. ``elementwise``: chains of elementwise ops (broadcasts and scalar constants included),
   optionally ending in one reduction -> ``fused.elementwise``.

A fused node keeps the ID of the node whose value it computes; its origin note and its
program steps name every node it replaced. Nothing is fused that has a user outside the
fused node (its value would have to exist anyway), and at least two nodes are merged, or
one elementwise op costly enough (``SOLO_FLOPS``, e.g. exact GELU) that the backend's
generated kernel beats its library call.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from math import prod

import numpy as np

from caramba.compiler.passes import PassContext, PassResult
from caramba.compute.capabilities import Capabilities
from caramba.errors import VerificationError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Graph, Node, Origin, Ref
from caramba.ir.opdef import get_op
from caramba.ir.types import Effect, ValueType
from caramba.ops import fused as F
from caramba.ops._define import norm_axes
from caramba.ops.cost import elementwise_flops

# One elementwise op of at least this cost per element (ops.cost's weights) is fused
# alone: a generated kernel for it is vectorized and split over threads where the backend's
# library kernel is not (cpu exact GELU [256,1024] float64: 5.0 ms with SciPy's erfc, 1.8 ms).
SOLO_FLOPS = 12


def _touched(graph: Graph, node: Node) -> set[DType]:
    return {t.dtype for t in node.types} | {graph.type_of(r).dtype for r in node.inputs}


def _note(root: Node, replaced: Iterable[str]) -> Origin:
    ids = [i for i in replaced if i != root.id]
    shown = ", ".join(ids[:12]) + (f", ... {len(ids) - 12} more" if len(ids) > 12 else "")
    o = root.origin or Origin()
    note = f"fused {shown}" + (f"; {o.note}" if o.note else "")
    return Origin(o.file, o.line, o.col, o.path, note)


@dataclass
class Fusion:
    """One fused node: the replacement, the nodes it replaces, and value renames."""

    node: Node
    replaced: list[str]
    subst: dict[Ref, Ref] = field(default_factory=dict)


class Fuser:
    def __init__(self, graph: Graph, caps: Capabilities) -> None:
        self.caps = caps
        self.refusals: dict[str, str] = {}
        self.reset(graph)

    def reset(self, graph: Graph) -> None:
        self.graph = graph
        self.pos = {n.id: i for i, n in enumerate(graph.nodes)}
        self.uses: dict[str, int] = {n.id: 0 for n in graph.nodes}
        for n in graph.nodes:
            for r in n.inputs:
                self.uses[r.node] += 1
        for r in graph.outputs.values():
            self.uses[r.node] += 1
        self.users = graph.users()
        self.taken: set[str] = set()

    # ---- legality ------------------------------------------------------------------------
    def refuse(self, key: str, reason: str) -> None:
        """Record why a fusion was refused (once per kind of reason)."""
        self.refusals.setdefault(key, reason)

    def declared(self, pattern: str, dtypes: Iterable[DType], where: Node) -> bool:
        missing = ", ".join(sorted(d.value for d in dtypes if not self.caps.can_fuse(pattern, d)))
        if missing:
            self.refuse(f"{pattern}/{missing}", f"backend declares no {pattern} for {missing} (first at '{where.id}')")
            return False
        return True

    def supports(self, fused_op: str, dtypes: Iterable[DType], where: Node) -> bool:
        missing = ", ".join(sorted(d.value for d in set(dtypes) - self.caps.dtypes(fused_op)))
        if missing:
            self.refuse(f"{fused_op}/{missing}", f"backend has no {fused_op} for {missing} (first at '{where.id}')")
            return False
        return True

    def same_precision(self, fused_op: str, members: list[Node]) -> DType | bool | None:
        """The members' common required-precision opt-in (None: none), or False if fusing would
        change the precision any member is computed at."""
        opt_ins = {m.precision for m in members}
        if len(opt_ins) > 1:
            self.refuse(f"opt-in/{members[-1].id}", f"'{members[-1].id}': members opt in to different precisions")
            return False
        fp = self.caps.precision_for(fused_op)
        for m in members:
            mp = self.caps.precision_for(m.op)
            if mp != fp:
                self.refuse(f"precision/{m.op}/{fused_op}",
                            f"{m.op} is computed at {mp} but {fused_op} at {fp}: precision would change (first at '{m.id}')")
                return False
        return opt_ins.pop()

    # ---- structure -----------------------------------------------------------------------
    def sole_user(self, node: Node) -> Node | None:
        """The one node using ``node``'s (only) value once, if nothing else uses it."""
        if len(node.types) != 1 or self.uses[node.id] != 1 or node.id in self.taken or len(self.users[node.id]) != 1:
            return None
        user = self.users[node.id][0]
        return None if user.id in self.taken else user

    def element_ok(self, node: Node, size: int) -> bool:
        """Can ``node`` be a step of a fused elementwise program over ``size`` elements?"""
        if node.id in self.taken or len(node.types) != 1 or node.effect is not Effect.pure:
            return False
        opdef = get_op(node.op)
        if "elementwise" not in opdef.traits and node.op not in F.BROADCASTS:
            return False
        if node.types[0].size != size:  # smaller values stay separate: no recomputation
            return False
        return self.declared(F.elementwise_pattern(node.op), _touched(self.graph, node), node)

    def grow(self, root: Node, size: int, members: set[str]) -> set[str]:
        """Add producers of ``members`` that can join and have no user outside them."""
        inside: dict[str, int] = {}
        heap: list[tuple[int, str]] = []

        def push(node: Node) -> None:
            for r in node.inputs:
                inside[r.node] = inside.get(r.node, 0) + 1
                heapq.heappush(heap, (-self.pos[r.node], r.node))

        for m in members:
            push(self.graph.node(m))
        while heap:
            _, pid = heapq.heappop(heap)
            if pid in members:
                continue
            p = self.graph.node(pid)
            # Every user of p is later than p and was considered first (max-heap on position),
            # so "all uses inside" is final here.
            if inside.get(pid, 0) != self.uses[pid] or p.precision != root.precision:
                continue
            if not self.element_ok(p, size):
                continue
            members.add(pid)
            push(p)
        return members

    def program(self, member_ids: set[str], out: str) -> tuple[F.Expr, list[Ref]]:
        """The fused program of ``member_ids`` (in program order) and its external inputs."""
        members = sorted((self.graph.node(i) for i in member_ids), key=lambda n: self.pos[n.id])
        inputs: list[Ref] = []
        index: dict[Ref, int] = {}
        steps: list[F.Step] = []
        consts: set[str] = set()
        for m in members:
            args: list[F.Arg] = []
            for r in m.inputs:
                if r.node in member_ids:
                    args.append(r.node)
                    continue
                prod = self.graph.node(r.node)
                if prod.op == "graph.constant" and prod.attrs["value"].size == 1:
                    if r.node not in consts:
                        consts.add(r.node)
                        steps.append(F.Step(r.node, prod.op, prod.version, (), prod.attrs))
                    args.append(r.node)
                    continue
                if r not in index:
                    index[r] = len(inputs)
                    inputs.append(r)
                args.append(index[r])
            steps.append(F.Step(m.id, m.op, m.version, tuple(args), m.attrs))
        return F.Expr(tuple(steps), out), inputs

    def make(self, op: str, root: Node, inputs: list[Ref], attrs: dict, types: tuple[ValueType, ...],
             precision: DType | None, replaced: Iterable[str]) -> Node:
        opdef = get_op(op)
        canon = opdef.make_attrs(attrs)
        in_types = tuple(self.graph.type_of(r) for r in inputs)
        if tuple(opdef.infer(in_types, canon)) != types:  # a bug in a pattern, not in the graph
            raise VerificationError(f"fuse: {op} would change the types of '{root.id}'", node=root.id, op=op)
        return Node(root.id, op, tuple(inputs), canon, types, opdef.version, precision, _note(root, replaced))

    # ---- patterns ------------------------------------------------------------------------
    def linear(self) -> list[Fusion]:
        found = []
        for mm in self.graph.nodes:
            if mm.op != "linalg.matmul" or mm.id in self.taken:
                continue
            chain, cur, bias, act = [mm], mm, None, "none"
            u = self.sole_user(cur)
            if u is not None and u.op == "math.add" and u.types == cur.types and u.inputs.count(Ref(cur.id)) == 1:
                bias = next(r for r in u.inputs if r != Ref(cur.id))
                chain.append(u)
                cur = u
                u = self.sole_user(cur)
            name = _activation(u) if u is not None and u.inputs == (Ref(cur.id),) else None
            if name is not None:
                chain.append(u)
                act = name
            # The longest declared form: with the activation, else bias only.
            for n_keep, activation in ((len(chain), act), (2 if bias is not None else 0, "none")):
                if n_keep < 2:
                    continue
                part = chain[:n_keep]
                d = _touched(self.graph, mm)
                if not self.declared(F.linear_pattern(activation), d, part[-1]) or not self.supports("fused.linear", d, part[-1]):
                    continue
                prec = self.same_precision("fused.linear", part)
                if prec is False:
                    continue
                inputs = list(mm.inputs) + ([bias] if bias is not None else [])
                node = self.make("fused.linear", part[-1], inputs, {"activation": activation}, part[-1].types, prec,
                                 [n.id for n in part])
                found.append(Fusion(node, [n.id for n in part]))
                self.taken.update(n.id for n in part)
                break
        return found

    def layer_norm_residual(self) -> list[Fusion]:
        found = []
        for ln in self.graph.nodes:
            if ln.op != "nn.layer_norm" or ln.id in self.taken:
                continue
            s = self.graph.node(ln.inputs[0].node)
            if s.op != "math.add" or s.id in self.taken or ln.inputs[1:].count(ln.inputs[0]):
                continue
            a, b = s.inputs
            if not (self.graph.type_of(a) == self.graph.type_of(b) == s.types[0]):
                continue
            others = [u for u in self.users[s.id] if u.id != ln.id]
            if any(self.pos[u.id] < self.pos[ln.id] for u in others):
                continue  # the sum is needed before the norm: it stays a node of its own
            with_sum = self.uses[s.id] > 1
            d = _touched(self.graph, ln) | _touched(self.graph, s)
            if not self.declared(F.LAYER_NORM_RESIDUAL, d, ln) or not self.supports(F.LAYER_NORM_RESIDUAL, d, ln):
                continue
            prec = self.same_precision(F.LAYER_NORM_RESIDUAL, [s, ln])
            if prec is False:
                continue
            attrs = {"axis": ln.attrs["axis"], "eps": ln.attrs["eps"], "with_sum": with_sum}
            types = ln.types * 2 if with_sum else ln.types
            node = self.make(F.LAYER_NORM_RESIDUAL, ln, [a, b, *ln.inputs[1:]], attrs, types, prec, [s.id, ln.id])
            subst = {Ref(s.id): Ref(ln.id, 1)} if with_sum else {}
            found.append(Fusion(node, [s.id, ln.id], subst))
            self.taken.update((s.id, ln.id))
        return found

    def attention_probs(self) -> list[Fusion]:
        """softmax(where(causal tril, (q @ swap_last(k)) * scale, -inf)) (the probabilities sdpa's
        VJP recomputes; the where absent without a causal mask) -> fused.attention_probs(q, k)."""
        found = []
        for sm in self.graph.nodes:
            if sm.op != "nn.softmax" or sm.id in self.taken or len(sm.types) != 1:
                continue
            rank = sm.types[0].rank
            if rank < 2 or sm.attrs["axis"] % rank != rank - 1:
                continue
            chain = [sm]
            node = self.graph.node(sm.inputs[0].node)
            causal = node.op == "math.where"
            if causal:
                keep, s_ref, fill = node.inputs
                if self.const(fill) != float("-inf") or not self._is_causal_keep(keep, sm.types[0].shape):
                    continue
                chain.append(node)
                node = self.graph.node(s_ref.node)
            if node.op != "math.mul":
                continue
            mm_ref, scale_ref = node.inputs
            scale = self.const(scale_ref)
            chain.append(node)
            mm = self.graph.node(mm_ref.node)
            if scale is None or mm.op != "linalg.matmul":
                continue
            chain.append(mm)
            q_ref, kt_ref = mm.inputs
            kt = self.graph.node(kt_ref.node)
            if kt.op != "shape.transpose" or tuple(kt.attrs["perm"]) != (*range(rank - 2), rank - 1, rank - 2):
                continue
            q_t, k_t = self.graph.type_of(q_ref), self.graph.type_of(kt.inputs[0])
            if (q_t.shape[:-2] != k_t.shape[:-2] or q_t.dtype != sm.types[0].dtype or q_t.rank != rank
                    or any(n.id in self.taken for n in chain)
                    or any(self.uses[n.id] != 1 or len(n.types) != 1 for n in chain[1:])
                    or len({n.precision for n in chain}) != 1):
                continue
            if not (self.declared(F.ATTENTION_PROBS, {q_t.dtype}, sm) and self.supports(F.ATTENTION_PROBS, {q_t.dtype}, sm)):
                continue
            replaced = [n.id for n in chain] + ([kt.id] if self.uses[kt.id] == 1 else [])
            replaced.sort(key=self.pos.__getitem__)
            node = self.make(F.ATTENTION_PROBS, sm, [q_ref, kt.inputs[0]], {"scale": scale, "causal": causal},
                             sm.types, sm.precision, replaced)
            found.append(Fusion(node, replaced))
            self.taken.update(replaced)
        return found

    def sdpa_probs(self) -> list[Fusion]:
        """attention.sdpa(q, k, v) and fused.attention_probs(q, k) of the same q, k, scale and mask
        (a training graph: the VJP recomputes the forward's probabilities) -> one
        fused.sdpa_probs(q, k, v) in the sdpa's place, its second output the probabilities."""
        found = []
        sdpas: dict[tuple[Ref, Ref], list[Node]] = {}
        for n in self.graph.nodes:
            if n.op == "attention.sdpa" and len(n.inputs) == 3 and n.id not in self.taken:
                sdpas.setdefault((n.inputs[0], n.inputs[1]), []).append(n)
        for p in self.graph.nodes:
            if p.op != F.ATTENTION_PROBS or p.id in self.taken:
                continue
            dt = p.types[0].dtype.numpy
            for s in sdpas.get((p.inputs[0], p.inputs[1]), ()):
                d = self.graph.type_of(s.inputs[0]).shape[-1]
                scale = s.attrs["scale"] if s.attrs["scale"] is not None else 1.0 / np.sqrt(d)
                if (s.id in self.taken or bool(s.attrs["causal"]) != bool(p.attrs["causal"])
                        or dt.type(scale) != dt.type(p.attrs["scale"]) or self.pos[s.id] > self.pos[p.id]
                        or s.precision != p.precision or not self.declared(F.SDPA_PROBS, {p.types[0].dtype}, s)
                        or not self.supports(F.SDPA_PROBS, {p.types[0].dtype}, s)):
                    continue
                node = self.make(F.SDPA_PROBS, s, list(s.inputs), {"scale": p.attrs["scale"], "causal": p.attrs["causal"]},
                                 (s.types[0], p.types[0]), s.precision, [s.id, p.id])
                found.append(Fusion(node, [s.id, p.id], {Ref(p.id, 0): Ref(s.id, 1)}))
                self.taken.update((s.id, p.id))
                break
        return found

    def const(self, ref: Ref) -> float | None:
        """The value of a one-element float constant, else None."""
        n = self.graph.node(ref.node)
        if n.op != "graph.constant" or n.attrs["value"].size != 1 or not n.types[0].dtype.is_float:
            return None
        return float(n.attrs["value"].reshape(()))

    def _is_causal_keep(self, ref: Ref, shape: tuple[int, ...]) -> bool:
        """Is ``ref`` the bool constant tril(ones(Tq, Tk), Tk - Tq) of sdpa's causal mask?"""
        n = self.graph.node(ref.node)
        tq, tk = shape[-2], shape[-1]
        if n.op != "graph.constant" or n.types[0].dtype is not DType.bool or n.types[0].shape != (tq, tk):
            return False
        return bool(np.array_equal(n.attrs["value"], np.tril(np.ones((tq, tk), dtype=bool), k=tk - tq)))

    def softmax(self) -> list[Fusion]:
        found = []
        for sm in self.graph.nodes:
            if sm.op != "nn.softmax" or sm.id in self.taken:
                continue
            p = self.graph.node(sm.inputs[0].node)
            size = p.types[0].size if p.types else -1
            if self.sole_user(p) is not sm or p.precision != sm.precision or not self.element_ok(p, size):
                continue
            if not self.declared(F.SOFTMAX, _touched(self.graph, sm), sm):
                continue
            members = self.grow(p, size, {p.id})
            prec = self.same_precision(F.SOFTMAX, [self.graph.node(m) for m in members] + [sm])
            if prec is False:
                continue
            expr, inputs = self.program(members, p.id)
            # the prologue's inputs (e.g. a bool mask) are inputs of the fused node too
            if not self.supports(F.SOFTMAX, {self.graph.type_of(r).dtype for r in inputs} | {sm.types[0].dtype}, sm):
                continue
            replaced = sorted(members | {sm.id}, key=self.pos.__getitem__)
            node = self.make(F.SOFTMAX, sm, inputs, {"expr": expr.encode(), "axis": sm.attrs["axis"]}, sm.types, prec, replaced)
            found.append(Fusion(node, replaced))
            self.taken.update(replaced)
        return found

    def decomposed_softmax(self) -> list[Fusion]:
        """exp(x - max(x, a)) / sum(exp(x - max(x, a)), a) (keepdims) -> fused.softmax(x)."""
        found = []
        for div in self.graph.nodes:
            if div.op != "math.div" or div.id in self.taken:
                continue
            e, s = (self.graph.node(r.node) for r in div.inputs)
            if e.op != "math.exp" or s.op != "reduce.sum" or s.inputs != (Ref(e.id),) or self.uses[e.id] != 2:
                continue
            sub = self.graph.node(e.inputs[0].node)
            if sub.op != "math.sub" or len(sub.inputs) != 2:
                continue
            x, mref = sub.inputs
            mx = self.graph.node(mref.node)
            if mx.op != "reduce.max" or mx.inputs != (x,):
                continue
            rank = div.types[0].rank
            axes = {n.id: _axes(n, rank) for n in (s, mx)}
            if len(axes[s.id]) != 1 or axes[s.id] != axes[mx.id] or not (s.attrs["keepdims"] and mx.attrs["keepdims"]):
                continue
            chain = [mx, sub, e, s, div]
            if (any(n.id in self.taken for n in chain) or self.graph.type_of(x) != div.types[0]
                    or any(self.uses[n.id] != 1 for n in (mx, sub, s))):
                continue
            d = _touched(self.graph, div)
            if not self.declared(F.SOFTMAX, d, div) or not self.supports(F.SOFTMAX, d, div):
                continue
            prec = self.same_precision(F.SOFTMAX, chain)
            if prec is False:
                continue
            attrs = {"expr": F.Expr((), 0).encode(), "axis": axes[s.id][0]}
            replaced = [n.id for n in chain]
            found.append(Fusion(self.make(F.SOFTMAX, div, [x], attrs, div.types, prec, replaced), replaced))
            self.taken.update(replaced)
        return found

    # ---- backward chains of the row ops (autodiff/rules/nn.py) ------------------------------
    def _emit_grad(self, op: str, outs: list[Node], internal: dict[str, Node], inputs: list[Ref], attrs: dict,
                   found: list[Fusion], m: _GradMatch) -> bool:
        """One fused grad node for the chain ``internal`` computing ``outs`` (in the op's output
        order), if the backend declares it, nothing outside uses the chain's inner values, and
        the node can take the place of the last output."""
        ids = {o.id for o in outs}
        if any(i in self.taken for i in internal) or not m.closed(internal, ids):
            return False
        root = max(outs, key=lambda n: self.pos[n.id])
        if any(self.pos[u.id] < self.pos[root.id] for o in outs if o is not root for u in self.users[o.id]):
            return False
        d = {self.graph.type_of(r).dtype for r in inputs}
        if not self.declared(op, d, root) or not self.supports(op, d, root):
            return False
        members = list(internal.values())
        prec = self.same_precision(op, members)
        if prec is False:
            return False
        replaced = sorted(internal, key=self.pos.__getitem__)
        types = tuple(o.types[0] for o in outs)
        node = self.make(op, root, inputs, attrs, types, prec, replaced)
        k = next(i for i, o in enumerate(outs) if o is root)
        subst = {Ref(o.id): Ref(root.id, i) for i, o in enumerate(outs) if o is not root}
        if k:
            subst[Ref(root.id)] = Ref(root.id, k)
        found.append(Fusion(node, replaced, subst))
        self.taken.update(internal)
        return True

    def norm_grad(self) -> list[Fusion]:
        """dx (+ dgamma, dbeta) of the nn.layer_norm / nn.rms_norm VJP -> fused.*_norm_grad."""
        found: list[Fusion] = []
        m = _GradMatch(self)
        for dx in self.graph.nodes:
            if dx.op != "math.mul" or dx.id in self.taken or len(dx.types) != 1:
                continue
            for inner_ref, rs_ref in m.pairs(dx):
                if self._norm_grad_at(m, dx, inner_ref, rs_ref, found):
                    break
        return found

    def _norm_grad_at(self, m: _GradMatch, dx: Node, inner_ref: Ref, rs_ref: Ref, found: list[Fusion]) -> bool:
        rsqrt = m.node(rs_ref, "math.rsqrt")
        add = rsqrt and m.node(rsqrt.inputs[0], "math.add")
        if add is None:
            return False
        t = dx.types[0]
        for var_ref, eps_ref in m.pairs(add):
            eps = m.const(eps_ref)
            var = self.graph.node(var_ref.node)
            if eps is None or var.op != "reduce.mean" or not var.attrs["keepdims"] or var_ref.index:
                continue
            axes = _axes(var, t.rank)
            if not axes or axes != tuple(range(axes[0], t.rank)):
                continue
            axis = axes[0]
            sq = m.node(var.inputs[0], "math.mul")
            if sq is None or sq.inputs[0] != sq.inputs[1]:
                continue
            xc_ref = sq.inputs[0]
            xc = self.graph.node(xc_ref.node)
            mean = None
            if xc.op == "math.sub" and not xc_ref.index and xc.id not in self.taken:
                mean = m.reduce(xc.inputs[1], "reduce.mean", axes, True)
                if mean is not None and mean.inputs[0] != xc.inputs[0]:
                    mean = None
            centered = mean is not None
            x_ref = xc.inputs[0] if centered else xc_ref
            if self.graph.type_of(x_ref) != t:
                continue
            internal = {n.id: n for n in (rsqrt, add, var, sq, dx)}
            if centered:
                internal.update({xc.id: xc, mean.id: mean})
            inv_n = float(np.asarray(1.0 / prod(t.shape[axis:]), t.dtype.numpy)) if t.size else None
            if self._norm_grad_rest(m, dx, inner_ref, rs_ref, internal, x_ref, xc_ref, axis, axes, centered, eps, inv_n,
                                    found):
                return True
        return False

    def _norm_grad_rest(self, m, dx, inner_ref, rs_ref, internal, x_ref, xc_ref, axis, axes, centered, eps, inv_n,
                        found) -> bool:
        t = dx.types[0]
        # centered: inner = (g - xhat * p) - q, q = sum(g) * n; RMS: inner = g - xhat * p
        q = None
        sub2_ref = inner_ref
        if centered:
            sub3 = m.node(inner_ref, "math.sub")
            if sub3 is None:
                return False
            sub2_ref = sub3.inputs[0]
            q = m.scaled_sum(sub3.inputs[1], axes, inv_n)
            if q is None:
                return False
        sub2 = m.node(sub2_ref, "math.sub")
        mul6 = sub2 and m.node(sub2.inputs[1], "math.mul")
        if mul6 is None:
            return False
        g_ref = sub2.inputs[0]
        if q is not None and q[-1].inputs[0] != g_ref:
            return False
        for xh_ref, p_ref in m.pairs(mul6):
            xhat = m.node(xh_ref, "math.mul")
            p = m.scaled_sum(p_ref, axes, inv_n)
            if xhat is None or p is None or set(xhat.inputs) != {xc_ref, rs_ref} or len(set(xhat.inputs)) != 2:
                continue
            mul4 = m.node(p[-1].inputs[0], "math.mul")
            if mul4 is None or set(mul4.inputs) != {g_ref, xh_ref} or len(set(mul4.inputs)) != 2:
                continue
            inner = dict(internal)
            inner.update({n.id: n for n in (sub2, mul6, xhat, mul4, *p)})
            if centered:
                inner.update({n.id: n for n in (self.graph.node(inner_ref.node), *q)})
            # g = ct * gamma (gamma of the normalized axes' shape), or g = ct
            choices: list[tuple[Ref, Ref | None, Node | None]] = []
            gm = m.node(g_ref, "math.mul")
            if gm is not None:
                for c_ref, gam_ref in m.pairs(gm):
                    if self.graph.type_of(c_ref) == t and self.graph.type_of(gam_ref).shape == t.shape[axis:]:
                        choices.append((c_ref, gam_ref, gm))
            choices.append((g_ref, None, None))
            for ct_ref, gam_ref, gm_node in choices:
                if self._norm_grad_emit(m, dx, inner, x_ref, ct_ref, gam_ref, gm_node, xh_ref, axis, centered, eps,
                                        found):
                    return True
        return False

    def _norm_grad_emit(self, m, dx, inner, x_ref, ct_ref, gam_ref, gm_node, xh_ref, axis, centered, eps, found) -> bool:
        internal = dict(inner)
        if gm_node is not None:
            internal[gm_node.id] = gm_node
        lead = tuple(range(axis))
        outs = [dx]
        dgamma = dbeta = None
        if lead and gam_ref is not None:
            for u in self.users[xh_ref.node]:
                if u.op == "math.mul" and u.id not in self.taken and set(u.inputs) == {ct_ref, xh_ref} and len(self.users[u.id]) == 1:
                    s = m.reduce(Ref(self.users[u.id][0].id), "reduce.sum", lead, False)
                    if s is not None and s.inputs == (Ref(u.id),):
                        dgamma = s
                        internal.update({u.id: u, s.id: s})
                        break
            if centered:
                for u in self.users[ct_ref.node]:
                    if ct_ref.index == 0 and u.id not in internal and m.reduce(Ref(u.id), "reduce.sum", lead, False) is not None:
                        dbeta = u
                        internal[u.id] = u
                        break
        outs += [o for o in (dgamma, dbeta) if o is not None]
        op = F.LAYER_NORM_GRAD if centered else F.RMS_NORM_GRAD
        attrs = {"axis": axis, "eps": eps, "with_dgamma": dgamma is not None}
        if centered:
            attrs["with_dbeta"] = dbeta is not None
        inputs = [x_ref, ct_ref] + ([gam_ref] if gam_ref is not None else [])
        if any(r.node in internal for r in inputs):
            return False
        return self._emit_grad(op, outs, internal, inputs, attrs, found, m)

    def softmax_grad(self) -> list[Fusion]:
        """y * (ct - sum(ct * y)) and ct - exp(y) * sum(ct) over the last axis (keepdims): the
        nn.softmax / nn.log_softmax VJPs given the forward output y -> fused.(log_)softmax_grad."""
        found: list[Fusion] = []
        m = _GradMatch(self)
        for dx in self.graph.nodes:
            if dx.id in self.taken or len(dx.types) != 1 or dx.types[0].rank == 0:
                continue
            last = (dx.types[0].rank - 1,)
            if dx.op == "math.mul":
                for y_ref, sub_ref in m.pairs(dx):
                    sub = m.node(sub_ref, "math.sub")
                    s = sub and m.reduce(sub.inputs[1], "reduce.sum", last, True)
                    prod = s and m.node(s.inputs[0], "math.mul")
                    if prod is None or set(prod.inputs) != {sub.inputs[0], y_ref} or len(set(prod.inputs)) != 2:
                        continue
                    ct_ref = sub.inputs[0]
                    if self.graph.type_of(ct_ref) != dx.types[0] or self.graph.type_of(y_ref) != dx.types[0]:
                        continue
                    internal = {n.id: n for n in (dx, sub, s, prod)}
                    if self._emit_grad(F.SOFTMAX_GRAD, [dx], internal, [y_ref, ct_ref], {"axis": last[0]}, found, m):
                        break
            elif dx.op == "math.sub":
                ct_ref = dx.inputs[0]
                mul = m.node(dx.inputs[1], "math.mul")
                if mul is None:
                    continue
                for e_ref, s_ref in m.pairs(mul):
                    e = m.node(e_ref, "math.exp")
                    s = m.reduce(s_ref, "reduce.sum", last, True)
                    if e is None or s is None or s.inputs[0] != ct_ref:
                        continue
                    y_ref = e.inputs[0]
                    if self.graph.type_of(ct_ref) != dx.types[0] or self.graph.type_of(y_ref) != dx.types[0]:
                        continue
                    internal = {n.id: n for n in (dx, mul, e, s)}
                    if self._emit_grad(F.LOG_SOFTMAX_GRAD, [dx], internal, [y_ref, ct_ref], {"axis": last[0]}, found, m):
                        break
        return found

    def conv_grad(self) -> list[Fusion]:
        """The input- and weight-gradient chains of the nn.conv1d / nn.conv2d VJP ->
        fused.conv_transpose / fused.conv_weight_grad (``fuse_conv.py``: matched by evaluating
        their shape ops on index arrays)."""
        from caramba.compiler import fuse_conv

        return fuse_conv.conv_transpose(self, _GradMatch(self)) + fuse_conv.conv_weight_grad(self, _GradMatch(self))

    def pool_grad(self) -> list[Fusion]:
        """The nn.max_pool2d / nn.avg_pool2d VJP chains -> fused.max_pool2d_grad /
        fused.avg_pool2d_grad (``fuse_pool.py``: placements and crops matched on index arrays,
        the first-maximum conditions on truth tables)."""
        from caramba.compiler import fuse_pool

        return fuse_pool.pool_grad(self, _GradMatch(self))

    def elementwise(self) -> list[Fusion]:
        found = []
        for root in reversed(self.graph.nodes):
            if root.id in self.taken or len(root.types) != 1 or root.effect is not Effect.pure:
                continue
            opdef = get_op(root.op)
            if "reduction" in opdef.traits:
                src = self.graph.node(root.inputs[0].node)
                size = self.graph.type_of(root.inputs[0]).size
                if self.sole_user(src) is not root or src.precision != root.precision or not self.element_ok(src, size):
                    continue
                if not self.declared(F.elementwise_pattern(root.op), _touched(self.graph, root), root):
                    continue
                members = self.grow(root, size, {root.id, src.id})
            elif self.element_ok(root, root.types[0].size):
                members = self.grow(root, root.types[0].size, {root.id})
            else:
                continue
            work = [m for m in members if self.graph.node(m).op not in F.BROADCASTS]
            if len(work) < 2 and not (work and elementwise_flops(self.graph.node(work[0]).op) >= SOLO_FLOPS):
                continue
            expr, inputs = self.program(members, root.id)
            if not inputs:  # a chain over constants alone: constant folding's job (canonicalize), not a kernel's
                continue
            d = {self.graph.type_of(r).dtype for r in inputs} | {root.types[0].dtype}
            if not self.supports("fused.elementwise", d, root):
                continue
            prec = self.same_precision("fused.elementwise", [self.graph.node(m) for m in members])
            if prec is False:
                continue
            replaced = sorted(members, key=self.pos.__getitem__)
            node = self.make("fused.elementwise", root, inputs, {"expr": expr.encode()}, root.types, prec, replaced)
            found.append(Fusion(node, replaced))
            self.taken.update(members)
        return found


class _GradMatch:
    """Structural matching of the VJP chains of nn.layer_norm / nn.rms_norm / nn.softmax /
    nn.log_softmax (``autodiff/rules/nn.py``) as canonicalize leaves them: commutative ops in
    either operand order, scalar constants by value."""

    def __init__(self, fuser: Fuser) -> None:
        self.f = fuser
        self.g = fuser.graph

    def node(self, ref: Ref, op: str) -> Node | None:
        if ref.index != 0:
            return None
        n = self.g.node(ref.node)
        return n if n.op == op and n.id not in self.f.taken else None

    def pairs(self, node: Node) -> list[tuple[Ref, Ref]]:
        a, b = node.inputs
        return [(a, b), (b, a)] if node.op in ("math.mul", "math.add") else [(a, b)]

    def const(self, ref: Ref) -> float | None:
        n = self.g.node(ref.node)
        if n.op != "graph.constant" or n.attrs["value"].size != 1:
            return None
        return float(n.attrs["value"].reshape(()))

    def reduce(self, ref: Ref, op: str, axes: tuple[int, ...], keepdims: bool) -> Node | None:
        n = self.node(ref, op)
        if n is None or n.attrs["keepdims"] != keepdims:
            return None
        rank = self.g.type_of(n.inputs[0]).rank
        return n if _axes(n, rank) == axes else None

    def scaled_sum(self, ref: Ref, axes: tuple[int, ...], inv_n: float) -> tuple[Node, ...] | None:
        """``reduce.sum(v, axes, keepdims) * inv_n`` -> (mul, sum), or (sum,) where inv_n is 1
        (simplify drops the ``* 1.0`` of a row of one)."""
        if inv_n == 1.0:
            s = self.reduce(ref, "reduce.sum", axes, True)
            if s is not None:
                return (s,)
        m = self.node(ref, "math.mul")
        if m is None:
            return None
        for a, b in self.pairs(m):
            s = self.reduce(a, "reduce.sum", axes, True)
            if s is not None and self.const(b) == inv_n:
                return m, s
        return None

    def closed(self, internal: dict[str, Node], outputs: set[str]) -> bool:
        """No node of ``internal`` but the outputs has a use outside it."""
        refs: dict[str, int] = {}
        for n in internal.values():
            for r in n.inputs:
                refs[r.node] = refs.get(r.node, 0) + 1
        return all(refs.get(i, 0) == self.f.uses[i] for i in internal if i not in outputs)


def _axes(node: Node, rank: int) -> tuple[int, ...]:
    return norm_axes(node.attrs["axes"], rank)


def _activation(node: Node) -> str | None:
    if node.op == "activation.gelu":
        return "gelu" if node.attrs["approximate"] == "none" else "gelu_tanh"
    return {"activation.relu": "relu", "activation.silu": "silu", "math.tanh": "tanh"}.get(node.op)


def _apply(graph: Graph, fusions: list[Fusion]) -> Graph:
    replaced = {i for f in fusions for i in f.replaced}
    at = {f.node.id: f.node for f in fusions}  # a fused node takes the place of the node it computes
    subst: dict[Ref, Ref] = {}
    for f in fusions:
        subst.update(f.subst)
    nodes = []
    for n in graph.nodes:
        if n.id in at:
            n = at[n.id]
        elif n.id in replaced:
            continue
        if any(r in subst for r in n.inputs):
            n = n.replace(inputs=tuple(subst.get(r, r) for r in n.inputs))
        nodes.append(n)
    outputs = {k: subst.get(v, v) for k, v in graph.outputs.items()}
    return graph.rebuilt(nodes, outputs)


PATTERNS = ("linear", "layer_norm_residual", "attention_probs", "sdpa_probs", "softmax", "decomposed_softmax", "norm_grad", "softmax_grad", "conv_grad",
            "pool_grad", "elementwise")


def fuse(graph: Graph, ctx: PassContext) -> PassResult:
    caps = ctx.capabilities
    if not caps.fusions:
        return PassResult(graph, False, [f"{ctx.backend} declares no fusions"])
    fuser = Fuser(graph, caps)
    diags: list[str] = []
    changed = False
    for name in PATTERNS:
        fusions = getattr(fuser, name)()
        if fusions:
            graph = _apply(graph, fusions)
            fuser.reset(graph)
            changed = True
            for f in fusions:
                diags.append(f"{name}: {f.node.id} <- {', '.join(f.replaced)}" if len(f.replaced) <= 8
                             else f"{name}: {f.node.id} <- {len(f.replaced)} nodes ({f.replaced[0]} .. {f.replaced[-1]})")
    diags += [f"refused: {r}" for r in list(fuser.refusals.values())[:12]]
    if len(fuser.refusals) > 12:
        diags.append(f"refused: ... {len(fuser.refusals) - 12} more")
    return PassResult(graph, changed, diags)
