"""From a lowered graph to what a GPU runtime executes: one Program per compute node, which
buffer every value lives in (views share their input's), and when each intermediate buffer can
go back to the pool. Device-free, so it is tested without hardware; the cuda and webgpu
runtimes only allocate, bind and dispatch what the plan says."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from caramba.backends.codegen.cstyle import Emitter
from caramba.backends.codegen.kernels import generate
from caramba.backends.codegen.program import Kernel, Program
from caramba.ir.graph import Graph, Node, Ref
from caramba.ir.types import ValueType

PLUMBING = ("graph.input", "graph.constant", "state.read", "state.write")


@dataclass
class Step:
    node: Node
    program: Program
    inputs: tuple[Ref, ...]
    outputs: tuple[Ref, ...]
    in_types: tuple[ValueType, ...]
    release: list[Ref] = field(default_factory=list)  # buffer roots dead after this step


@dataclass
class Plan:
    graph: Graph
    steps: list[Step]
    root: dict[Ref, Ref]  # value -> the value that owns its buffer (itself unless a view)
    inputs: dict[Ref, str]
    constants: dict[Ref, np.ndarray]
    state_reads: dict[Ref, str]
    state_writes: list[tuple[str, Ref]]
    outputs: dict[str, Ref]
    types: dict[Ref, ValueType]

    @property
    def kernels(self) -> list[Kernel]:
        return [k for s in self.steps for k in s.program.kernels]

    @property
    def checks(self) -> bool:
        return any(s.program.checks for s in self.steps)

    def sources(self) -> list[str]:
        """Every distinct kernel source, in first-use order (what a runtime compiles)."""
        return list(dict.fromkeys(k.source for k in self.kernels))


def make_plan(graph: Graph, e: Emitter) -> Plan:
    root: dict[Ref, Ref] = {}
    types: dict[Ref, ValueType] = {}
    inputs: dict[Ref, str] = {}
    constants: dict[Ref, np.ndarray] = {}
    state_reads: dict[Ref, str] = {}
    state_writes: list[tuple[str, Ref]] = []
    steps: list[Step] = []
    written: dict[str, Ref] = {}  # a read after a write (in program order) sees the written value
    for node in graph.nodes:
        outs = node.outputs
        for r, t in zip(outs, node.types, strict=True):
            root[r] = r
            types[r] = t
        if node.op == "graph.input":
            inputs[outs[0]] = node.id
        elif node.op == "graph.constant":
            constants[outs[0]] = node.attrs["value"]
        elif node.op == "state.read":
            name = node.attrs["name"]
            if name in written:
                root[outs[0]] = root[written[name]]
            else:
                state_reads[outs[0]] = name
        elif node.op == "state.write":
            state_writes.append((node.attrs["name"], node.inputs[0]))
            written[node.attrs["name"]] = node.inputs[0]
        else:
            in_types = tuple(graph.type_of(r) for r in node.inputs)
            program = generate(node, in_types, e)
            for j, i in program.views.items():
                root[outs[j]] = root[node.inputs[i]]
            steps.append(Step(node, program, node.inputs, outs, in_types))
    # Lifetimes: a root computed by a step dies after its last reader, unless it leaves the graph.
    pinned = {root[r] for r in graph.outputs.values()} | {root[r] for _, r in state_writes}
    last: dict[Ref, int] = {}
    produced = set()
    for i, st in enumerate(steps):
        for j, r in enumerate(st.outputs):
            if j not in st.program.views:
                produced.add(r)
                last.setdefault(r, i)
        for r in st.inputs:
            last[root[r]] = i
    for r, i in last.items():
        if r in produced and r not in pinned:
            steps[i].release.append(r)
    return Plan(graph, steps, root, inputs, constants, state_reads, state_writes, dict(graph.outputs), types)
