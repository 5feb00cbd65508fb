"""Helpers for compiler tests: run a graph with passes on/off, fake capability tables, and an
independent checker of memory plans (shares no code with caramba.compiler.memory)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import numpy as np

from caramba.compiler import optional_stages
from caramba.compute.capabilities import Capabilities
from caramba.ir.dtypes import DType
from caramba.ir.graph import Graph, Ref

OPTIONAL = tuple(optional_stages())


def run(runner, graph: Graph, inputs: Mapping[str, np.ndarray], disable: Iterable[str] = ()) -> dict[str, np.ndarray]:
    exe = runner.compile(graph, disable=tuple(disable))
    outs = exe.run({k: runner.upload(v) for k, v in inputs.items()})
    return {k: t.download() for k, t in outs.items()}


def unoptimized(runner, graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return run(runner, graph, inputs, OPTIONAL)


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-12, what: str = "") -> None:
    """Relative agreement, elementwise, with a floor of ``rtol`` times the largest finite
    reference magnitude (so values that cancel to ~0 are compared on the output's scale)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype, want.shape, want.dtype)
    if not np.issubdtype(want.dtype, np.floating):
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    finite = np.isfinite(want)
    scale = float(np.max(np.abs(want[finite]), initial=0.0))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True, err_msg=what)


def with_caps(caps: Capabilities, **changes) -> Capabilities:
    return dataclasses.replace(caps, **changes)


def only_fusions(caps: Capabilities, keep) -> Capabilities:
    """``caps`` declaring only the (pattern, dtype) pairs for which ``keep`` is true."""
    return with_caps(caps, fusions=frozenset(p for p in caps.fusions if keep(*p)))


# ---- an independent memory-plan checker ---------------------------------------------------


def check_plan(graph: Graph, plan, buffers: frozenset[str]) -> None:
    """Prove the plan never lets two values that can be alive together share bytes.

    Independent of the planner: lifetimes here are recomputed from scratch, treating every
    value of a non-buffer op as possibly being any of its inputs' storage (a view or the input
    itself), so a value stays live while anything derived from it without a copy is live.
    """
    assert plan.order == tuple(n.id for n in graph.nodes), "plan made for another node order"
    pos = {n.id: i for i, n in enumerate(graph.nodes)}
    end = len(graph.nodes)
    # storage[v] = set of buffer-written values whose bytes v may be
    storage: dict[Ref, set[Ref]] = {}
    for n in graph.nodes:
        for j in range(len(n.types)):
            r = Ref(n.id, j)
            if n.op in ("graph.input", "graph.constant", "state.read"):
                storage[r] = set()
            elif n.op in buffers:
                storage[r] = {r}
            else:
                storage[r] = set().union(*(storage[i] for i in n.inputs)) if n.inputs else set()
    last: dict[Ref, int] = {}
    for n in graph.nodes:
        for i in n.inputs:
            for s in storage[i]:
                last[s] = max(last.get(s, -1), pos[n.id])
    visible: set[Ref] = set()
    for r in graph.outputs.values():
        visible |= storage[r]
    for n in graph.nodes:
        if n.op == "state.write":
            visible |= storage[n.inputs[0]]
    for r in visible:
        assert r not in plan.slots, f"{r} is visible after the run (output / state) but lives in the arena"
    live = {}
    for r, slot in plan.slots.items():
        node = graph.node(r.node)
        assert node.op in buffers, f"{r} placed but {node.op} does not write into buffers"
        t = graph.type_of(r)
        assert slot.nbytes == t.nbytes and slot.offset % 8 == 0
        assert slot.offset + slot.nbytes <= plan.arena_bytes
        live[r] = (pos[r.node], last.get(r, pos[r.node]) if r not in visible else end)
    items = sorted(plan.slots.items(), key=lambda kv: kv[1].offset)
    for a_i, (ra, sa) in enumerate(items):
        for rb, sb in items[a_i + 1 :]:
            if sb.offset >= sa.offset + sa.nbytes:
                break
            (a0, a1), (b0, b1) = live[ra], live[rb]
            overlap_time = not (a1 < b0 or b1 < a0)
            assert not overlap_time, (
                f"{ra} [{sa.offset}, +{sa.nbytes}) live {a0}..{a1} shares bytes with "
                f"{rb} [{sb.offset}, +{sb.nbytes}) live {b0}..{b1}"
            )


F64 = DType.float64


def run_feeds(runner, graph: Graph, feeds: Iterable[np.ndarray]) -> list[np.ndarray]:
    """``graph`` run on ``feeds`` given in the order of its inputs; the outputs sorted by name."""
    exe = runner.compile(graph)
    outs = exe.run({n.id: runner.upload(v) for n, v in zip(graph.inputs, feeds, strict=True)})
    return [outs[k].download() for k in sorted(outs)]
