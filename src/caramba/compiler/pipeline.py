"""The pipeline: one readable list of stages, each with the reason it exists."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from caramba.compiler.dce import dce
from caramba.compiler.lower import lower
from caramba.compiler.passes import PassContext, PassResult, Stage
from caramba.errors import ConfigError, VerificationError
from caramba.ir.graph import Graph
from caramba.ir.verify import verify

if TYPE_CHECKING:
    from caramba.compute.runner import Runner


def verify_pass(graph: Graph, ctx: PassContext) -> PassResult:
    verify(graph, context=ctx.options.get("after", ""))
    return PassResult(graph, False)


PIPELINE: list[Stage] = [
    Stage("verify", verify_pass, "nothing downstream trusts a malformed graph", optional=False),
    Stage("dce", dce, "drop work no requested output or effect needs"),
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
    backend: str
    stages: list[StageRecord] = field(default_factory=list)
    before: Graph | None = None
    after: Graph | None = None
    artifacts: dict = field(default_factory=dict)

    def as_text(self) -> str:
        lines = [f"pipeline for {self.backend}:"]
        for s in self.stages:
            if s.skipped:
                lines.append(f"  {s.name:<12} (disabled)")
                continue
            mark = "changed" if s.changed else "-"
            lines.append(
                f"  {s.name:<12} {mark:<8} nodes {s.nodes_before}->{s.nodes_after}  {s.seconds * 1e3:.2f} ms"
            )
            lines.extend(f"      {d}" for d in s.diagnostics)
        return "\n".join(lines)


def stage_names() -> list[str]:
    return list(dict.fromkeys(s.name for s in PIPELINE))


def run_pipeline(graph: Graph, ctx: PassContext, disable: Iterable[str] = (), check_each: bool = False) -> tuple[Graph, CompileReport]:
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
                verify(result.graph, context=f"pass {stage.name} (after {' -> '.join(done)})")
            except VerificationError as exc:
                raise VerificationError(f"pass '{stage.name}' produced an invalid graph: {exc.message}") from None
        report.stages.append(
            StageRecord(stage.name, result.changed, result.diagnostics, len(graph.nodes), len(result.graph.nodes), dt)
        )
        graph = result.graph
        done.append(stage.name)
    report.after = graph
    report.artifacts = ctx.artifacts
    return graph, report


def compile_graph(
    graph: Graph,
    runner: "Runner",
    targets: Iterable[str] | None = None,
    disable: Iterable[str] = (),
    check_each: bool = False,
) -> tuple[Graph, CompileReport]:
    """Run the pipeline for ``runner``'s capabilities; returns the lowered graph and a report."""
    targets = tuple(targets) if targets is not None else tuple(graph.outputs)
    unknown = [t for t in targets if t not in graph.outputs]
    if unknown:
        raise ConfigError(f"unknown target(s) {unknown}; graph outputs are {list(graph.outputs)}")
    ctx = PassContext(runner.capabilities, runner.location, targets)
    return run_pipeline(graph, ctx, disable, check_each)
