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
4. ``elementwise``: chains of elementwise ops (broadcasts and scalar constants included),
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


PATTERNS = ("linear", "layer_norm_residual", "softmax", "decomposed_softmax", "elementwise")


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
