"""The pipeline: one readable list of stages, each with the reason it exists."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from caramba.compiler.canonicalize import canonicalize
from caramba.compiler.cse import cse
from caramba.compiler.dce import dce
from caramba.compiler.fuse import fuse
from caramba.compiler.lower import lower
from caramba.compiler.memory import memory
from caramba.compiler.passes import Evaluator, PassContext, PassResult, Stage
from caramba.compiler.schedule import schedule
from caramba.compiler.simplify import simplify
from caramba.errors import ConfigError, VerificationError
from caramba.ir.graph import Graph
from caramba.ir.verify import verify

if TYPE_CHECKING:
    from caramba.compiler.memory import MemoryPlan
    from caramba.compute.capabilities import Capabilities
    from caramba.compute.runner import Runner


def verify_pass(graph: Graph, ctx: PassContext) -> PassResult:
    verify(graph, context=ctx.options.get("after", ""))
    return PassResult(graph, False)


PIPELINE: list[Stage] = [
    Stage("verify", verify_pass, "nothing downstream trusts a malformed graph", optional=False),
    Stage("canonicalize", canonicalize, "one spelling per meaning, so equal things look equal"),
    Stage("cse", cse, "compute each pure value once"),
    Stage("simplify", simplify, "drop work that provably changes nothing (x*1, neg(neg x), ...)"),
    Stage("fuse", fuse, "fewer, bigger kernels, only in forms the backend declares legal"),
    Stage("dce", dce, "drop work no output or effect needs"),
    Stage("memory", memory, "preallocate and reuse buffers whose lifetimes do not overlap"),
    Stage("schedule", schedule, "an order that keeps effects in place and peak memory low"),
    Stage("lower", lower, "refuse what the backend cannot run, before it runs", optional=False),
    Stage("verify", verify_pass, "every pass must leave a valid graph", optional=False),
]


@dataclass
class StageRecord:
    name: str
    changed: bool
    diagnostics: list[str]
    nodes_before: int
    nodes_after: int
    seconds: float
    skipped: bool = False


@dataclass
class CompileReport:
    """What the pipeline did: per stage, whether it changed the graph and what it says; the
    graph before and after; artifacts (``memory``: MemoryPlan, ``schedule``: Schedule)."""

    backend: str
    stages: list[StageRecord] = field(default_factory=list)
    before: Graph | None = None
    after: Graph | None = None
    artifacts: dict[str, Any] = field(default_factory=dict)

    @property
    def memory(self) -> "MemoryPlan | None":
        return self.artifacts.get("memory")

    def as_text(self) -> str:
        lines = [f"pipeline for {self.backend}:"]
        for s in self.stages:
            if s.skipped:
                lines.append(f"  {s.name:<13} (disabled)")
                continue
            mark = "changed" if s.changed else "-"
            lines.append(f"  {s.name:<13} {mark:<8} nodes {s.nodes_before}->{s.nodes_after}  {s.seconds * 1e3:.2f} ms")
            lines.extend(f"      {d}" for d in s.diagnostics)
        plan = self.memory
        if plan is not None:
            lines.append(f"memory plan: {plan.summary()}")
        return "\n".join(lines)


def stage_names() -> list[str]:
    return list(dict.fromkeys(s.name for s in PIPELINE))


def optional_stages() -> list[str]:
    """Names of the stages that may be disabled (everything but verify and lower)."""
    return list(dict.fromkeys(s.name for s in PIPELINE if s.optional))


def run_pipeline(
    graph: Graph, ctx: PassContext, disable: Iterable[str] = (), check_each: bool = True
) -> tuple[Graph, CompileReport]:
    """Run every stage not in ``disable``. With ``check_each`` (the default) the verifier runs
    after each stage that changed the graph, and a failure names that stage and those before."""
    disabled = set(disable)
    names = set(stage_names())
    unknown = disabled - names
    if unknown:
        raise ConfigError(f"unknown pass(es) {sorted(unknown)}; passes: {', '.join(stage_names())}")
    required = {s.name for s in PIPELINE if not s.optional} & disabled
    if required:
        raise ConfigError(f"pass(es) {sorted(required)} cannot be disabled")
    report = CompileReport(ctx.backend, before=graph)
    done: list[str] = []
    for stage in PIPELINE:
        if stage.name in disabled:
            report.stages.append(StageRecord(stage.name, False, [], len(graph.nodes), len(graph.nodes), 0.0, True))
            continue
        t0 = time.perf_counter()
        ctx.options["after"] = " -> ".join(done) if done else ""
        result = stage.fn(graph, ctx)
        dt = time.perf_counter() - t0
        if check_each and result.changed:
            try:
                verify(result.graph, context=f"pass {stage.name} (after {' -> '.join(done) or 'nothing'})")
            except VerificationError as exc:
                raise VerificationError(
                    f"pass '{stage.name}' produced an invalid graph: {exc.message}",
                    node=exc.node, op=exc.op, origin=exc.origin,
                ) from None
        report.stages.append(
            StageRecord(stage.name, result.changed, result.diagnostics, len(graph.nodes), len(result.graph.nodes), dt)
        )
        graph = result.graph
        done.append(stage.name)
    plan = ctx.artifacts.get("memory")
    if plan is not None and plan.order != tuple(n.id for n in graph.nodes):
        # A stage after memory reordered without re-planning: the plan no longer applies.
        del ctx.artifacts["memory"]
    report.after = graph
    report.artifacts = ctx.artifacts
    return graph, report


def select_targets(graph: Graph, targets: Iterable[str] | None) -> Graph:
    """``graph`` with only the requested outputs (all of them when ``targets`` is None)."""
    if targets is None:
        return graph
    targets = tuple(targets)
    unknown = [t for t in targets if t not in graph.outputs]
    if unknown:
        raise ConfigError(f"unknown target(s) {unknown}; graph outputs are {list(graph.outputs)}")
    if targets == tuple(graph.outputs):
        return graph
    return graph.rebuilt(graph.nodes, {k: graph.outputs[k] for k in targets})


def compile_for(
    graph: Graph,
    capabilities: "Capabilities",
    backend: str,
    targets: Iterable[str] | None = None,
    disable: Iterable[str] = (),
    check_each: bool = True,
    evaluate: "Evaluator | None" = None,
) -> tuple[Graph, CompileReport]:
    """Run the pipeline for a capability table (no runner needed); ``evaluate`` is the host
    evaluator constant folding uses (None: nothing is folded)."""
    graph = select_targets(graph, targets)
    ctx = PassContext(capabilities, backend, tuple(graph.outputs), evaluate=evaluate)
    return run_pipeline(graph, ctx, disable, check_each)


def compile_graph(
    graph: Graph,
    runner: "Runner",
    targets: Iterable[str] | None = None,
    disable: Iterable[str] = (),
    check_each: bool = True,
) -> tuple[Graph, CompileReport]:
    """Run the pipeline for ``runner``'s capabilities (and its constant evaluator); returns the
    lowered graph and a report."""
    return compile_for(graph, runner.capabilities, runner.location, targets, disable, check_each,
                       evaluate=runner.evaluate_constant)
