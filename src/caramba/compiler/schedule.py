"""schedule: annotate every node with a cost (flops, bytes moved) and pick a node order that
respects data dependencies and effects and keeps peak memory low.

Effectful nodes (state, random, checkpoint, IO) keep their program order relative to each
other; pure nodes move freely between them as their inputs allow. The order is built by a
list scheduler that, among ready nodes, runs the one that frees the most bytes for the fewest
it allocates (ties: program order). The new order is kept only if its peak live bytes are
lower than program order's; the memory plan is then redone for it.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from caramba.compiler.memory import NO_STORAGE, lifetimes, plan_memory
from caramba.compiler.passes import PassContext, PassResult
from caramba.ir.graph import Graph, Node, Ref
from caramba.ir.opdef import get_op
from caramba.ir.types import Effect
from caramba.ops.cost import Cost, node_cost  # the cost model lives next to the ops

# ---- ordering ------------------------------------------------------------------------------


@dataclass
class Schedule:
    order: tuple[str, ...]
    costs: dict[str, Cost] = field(default_factory=dict)
    peak_before: int = 0
    peak_after: int = 0

    @property
    def flops(self) -> int:
        return sum(c.flops for c in self.costs.values())

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.costs.values())


def live_peak(graph: Graph, owns) -> int:
    """Peak bytes of storage alive at once in program order (ideal allocator)."""
    spans, roots, _ = lifetimes(graph, owns)
    events = [0] * (len(graph.nodes) + 2)
    for ref, (a, b) in spans.items():
        if roots[ref] == frozenset({ref}):
            n = graph.type_of(ref).nbytes
            events[a] += n
            events[b + 1] -= n
    live = peak = 0
    for d in events:
        live += d
        peak = max(peak, live)
    return peak


def memory_order(graph: Graph, owns) -> list[Node]:
    """A topological order respecting effect order, greedily minimizing live bytes."""
    nodes = graph.nodes
    pos = {n.id: i for i, n in enumerate(nodes)}
    users: dict[str, set[str]] = {n.id: set() for n in nodes}
    preds: dict[str, set[str]] = {n.id: {r.node for r in n.inputs} for n in nodes}
    effectful = [n.id for n in nodes if n.effect is not Effect.pure]
    for a, b in itertools.pairwise(effectful):
        preds[b].add(a)  # effects keep program order
    for n in nodes:
        for p in preds[n.id]:
            users[p].add(n.id)
    remaining_uses: dict[Ref, int] = {}
    for n in nodes:
        for r in n.inputs:
            remaining_uses[r] = remaining_uses.get(r, 0) + 1
    outputs = set(graph.outputs.values())
    size = {Ref(n.id, j): t.nbytes for n in nodes for j, t in enumerate(n.types)}

    def held(op: str) -> bool:  # storage the executable allocates (not inputs, constants, state)
        return op not in NO_STORAGE and owns(op)

    def score(n: Node) -> int:
        alloc = sum(t.nbytes for t in n.types) if held(n.op) else 0
        freed = sum(size[r] for r in set(n.inputs) if remaining_uses[r] == n.inputs.count(r) and r not in outputs
                    and held(graph.node(r.node).op))
        return alloc - freed

    missing = {n.id: len(preds[n.id]) for n in nodes}
    ready = [(score(n), pos[n.id], n.id) for n in nodes if missing[n.id] == 0]
    heapq.heapify(ready)
    order: list[Node] = []
    by_id = {n.id: n for n in nodes}
    while ready:
        _, _, nid = heapq.heappop(ready)
        n = by_id[nid]
        order.append(n)
        for r in n.inputs:
            remaining_uses[r] -= 1
        touched = set()
        for u in users[nid]:
            missing[u] -= 1
            if missing[u] == 0:
                touched.add(u)
        # Scores of ready nodes change as uses drain; re-score the ready set (small in practice).
        ready = [(score(by_id[i]), pos[i], i) for _, _, i in ready] + [(score(by_id[u]), pos[u], u) for u in touched]
        heapq.heapify(ready)
    assert len(order) == len(nodes), "schedule: graph has a cycle"
    return order


def schedule(graph: Graph, ctx: PassContext) -> PassResult:
    buffers = ctx.capabilities.buffers

    def owns(op: str) -> bool:
        return op in buffers or not get_op(op).aliases

    costs = {n.id: node_cost(graph, n) for n in graph.nodes}
    before = live_peak(graph, owns)
    order = memory_order(graph, owns)
    changed = [n.id for n in order] != [n.id for n in graph.nodes]
    after = before
    if changed:
        candidate = graph.rebuilt(order)
        after = live_peak(candidate, owns)
        if after < before:
            graph = candidate
        else:
            changed, after = False, before
    sched = Schedule(tuple(n.id for n in graph.nodes), costs, before, after)
    ctx.artifacts["schedule"] = sched
    diags = [f"{sched.flops:,} flops, {sched.bytes:,} bytes moved; live peak {before:,} B"
             + (f" -> {after:,} B after reordering" if changed else " (program order kept)")]
    if changed and "memory" in ctx.artifacts:
        old = ctx.artifacts["memory"]
        plan = plan_memory(graph, buffers)
        ctx.artifacts["memory"] = plan
        diags.append(f"memory re-planned: arena {old.arena_bytes:,} -> {plan.arena_bytes:,} B; {plan.summary()}")
    return PassResult(graph, changed, diags)
