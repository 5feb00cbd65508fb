"""memory: lifetimes and buffer assignment, so a backend can preallocate one arena per
executable and have kernels write their results into it.

Only values produced by ops the backend lists in ``Capabilities.buffers`` (kernels that write
into a given output buffer) are placed. Everything else may be a view of, or be, one of its
inputs, so its lifetime extends the lifetime of whatever placed values it may alias. Values a
caller can see afterwards — graph outputs, values written to state, and anything they may
alias — are never placed: they get fresh storage each run, so a later run cannot overwrite
them. Graph inputs, constants and state are never in the arena, so nothing writes them.

Two placed values share bytes only when their lifetimes (definition .. last use, inclusive,
alias-extended) do not overlap. Placement is greedy by size (largest first, lowest offset
that fits beside every placed value whose lifetime overlaps), the arena is the highest end.
The plan is made for one node order; ``schedule`` re-plans after reordering.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from caramba.compiler.passes import PassContext, PassResult
from caramba.ir.graph import Graph, Ref
from caramba.ir.opdef import get_op

ALIGN = 64  # bytes: every placed value starts on a cache line
NO_STORAGE = frozenset({"graph.input", "graph.constant", "state.read"})


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class Slot:
    """Where a placed value lives in the arena and when: positions ``start..end`` inclusive."""

    offset: int
    nbytes: int
    start: int
    end: int


@dataclass
class MemoryPlan:
    order: tuple[str, ...]  # node IDs, in the order this plan is valid for
    slots: dict[Ref, Slot]  # placed values
    fresh: frozenset[Ref]  # written by buffer kernels but given fresh storage each run
    lifetimes: dict[Ref, tuple[int, int]]  # every computed value, alias-extended
    arena_bytes: int
    naive_bytes: int  # every computed value in its own buffer, none freed early
    peak_bytes: int  # arena + the most fresh storage alive at once
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"peak bytes before {self.naive_bytes} after {self.peak_bytes} "
            f"(arena {self.arena_bytes} B for {len(self.slots)} value(s), {len(self.fresh)} fresh)"
        )

    def as_text(self) -> str:
        lines = [self.summary()]
        for ref, s in sorted(self.slots.items(), key=lambda kv: (kv[1].start, kv[1].offset)):
            lines.append(f"  {ref!s:<24} [{s.offset:>10}, +{s.nbytes:<10}) live {s.start}..{s.end}")
        return "\n".join(lines)


def value_bytes(graph: Graph, ref: Ref) -> int:
    return graph.type_of(ref).nbytes


def lifetimes(
    graph: Graph, owns: "Callable[[str], bool]"
) -> tuple[dict[Ref, tuple[int, int]], dict[Ref, frozenset[Ref]], set[Ref]]:
    """(lifetime per computed value, storage roots per value, escaping roots).

    ``owns(op)`` says whether an op's outputs are storage of their own. A value's roots are
    the owning values whose storage it may share: itself if its op owns its outputs, else the
    union of its inputs' roots (it may be a view of, or be, any input). A root lives until the
    last use of anything rooted in it.
    """
    n_nodes = len(graph.nodes)
    roots: dict[Ref, frozenset[Ref]] = {}
    start: dict[Ref, int] = {}
    last: dict[Ref, int] = {}
    for i, node in enumerate(graph.nodes):
        for r in node.inputs:
            last[r] = i
        ins = frozenset().union(*(roots[r] for r in node.inputs)) if node.inputs else frozenset()
        for j in range(len(node.types)):
            ref = Ref(node.id, j)
            start[ref] = i
            last.setdefault(ref, i)
            if node.op in NO_STORAGE:
                roots[ref] = frozenset()
            elif owns(node.op):
                roots[ref] = frozenset({ref})
            else:
                roots[ref] = ins
    escaping: set[Ref] = set()
    for ref in graph.outputs.values():
        last[ref] = n_nodes
        escaping |= roots[ref]
    for node in graph.nodes:
        if node.op == "state.write":
            escaping |= roots[node.inputs[0]]
    end = {ref: last[ref] for ref in roots}
    for ref, rs in roots.items():
        for root in rs:
            end[root] = max(end[root], last[ref])
    spans = {ref: (start[ref], end[ref]) for ref in roots if graph.node(ref.node).op not in NO_STORAGE}
    return spans, roots, escaping


def plan_memory(graph: Graph, buffers: Iterable[str]) -> MemoryPlan:
    buffers = frozenset(buffers)
    spans, _, escaping = lifetimes(graph, buffers.__contains__)
    placeable = [
        ref for ref in spans
        if graph.node(ref.node).op in buffers and ref not in escaping and value_bytes(graph, ref) > 0
    ]
    fresh = frozenset(ref for ref in spans if graph.node(ref.node).op in buffers and ref not in placeable)
    order = {ref: k for k, ref in enumerate(spans)}
    placeable.sort(key=lambda r: (-value_bytes(graph, r), spans[r][0], order[r]))
    placed: list[tuple[int, int, int, int]] = []  # offset, end offset, start, end
    slots: dict[Ref, Slot] = {}
    for ref in placeable:
        size = value_bytes(graph, ref)
        a, b = spans[ref]
        busy = sorted((lo, hi) for lo, hi, s, e in placed if not (e < a or b < s))
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, _align(hi))
        placed.append((offset, offset + size, a, b))
        slots[ref] = Slot(offset, size, a, b)
    arena = _align(max((hi for _, hi, _, _ in placed), default=0))

    # Storage outside the arena (fresh buffers, and what other kernels allocate), for the
    # estimate: here only ops declaring aliases are taken to make views.
    est, _, _ = lifetimes(graph, lambda op: op in buffers or not get_op(op).aliases)
    alloc = [ref for ref in est if ref not in slots and (ref in fresh or _allocates(graph, ref, buffers))]
    events = [0] * (len(graph.nodes) + 2)
    for ref in alloc:
        a, b = est[ref]
        events[a] += value_bytes(graph, ref)
        events[b + 1] -= value_bytes(graph, ref)
    live = peak_fresh = 0
    for delta in events:
        live += delta
        peak_fresh = max(peak_fresh, live)
    naive = sum(value_bytes(graph, r) for r in spans if graph.node(r.node).op in buffers or _allocates(graph, r, buffers))
    return MemoryPlan(
        order=tuple(n.id for n in graph.nodes),
        slots=slots,
        fresh=fresh,
        lifetimes=spans,
        arena_bytes=arena,
        naive_bytes=naive,
        peak_bytes=arena + peak_fresh,
    )


def _allocates(graph: Graph, ref: Ref, buffers: frozenset[str]) -> bool:
    """Does a non-buffer kernel allocate ``ref``? Taken as yes unless the op declares aliases."""
    op = graph.node(ref.node).op
    return op not in buffers and not get_op(op).aliases


def memory(graph: Graph, ctx: PassContext) -> PassResult:
    plan = plan_memory(graph, ctx.capabilities.buffers)
    ctx.artifacts["memory"] = plan
    if not ctx.capabilities.buffers:
        return PassResult(graph, False, [f"{ctx.backend} declares no buffer-writing kernels: nothing planned"])
    return PassResult(graph, False, [plan.summary()])
