"""lower: legality against the backend's capabilities. Collects every violation into one error.

No silent fallback: a node the backend does not claim (op, dtype, shape) or cannot compute at
the required precision is refused here, before anything runs.
"""

from __future__ import annotations

from caramba.compiler.passes import PassContext, PassResult
from caramba.errors import PrecisionError, UnsupportedOperation
from caramba.ir.graph import Graph, Node
from caramba.ir.types import Effect


def violations(node: Node, ctx: PassContext) -> list[tuple[str, str]]:
    """(kind, reason) pairs for one node; kind is 'unsupported' or 'precision'."""
    caps = ctx.capabilities
    out: list[tuple[str, str]] = []
    if not caps.supports(node.op):
        return [("unsupported", f"{ctx.backend} has no kernel for {node.op}")]
    if node.effect in (Effect.state_read, Effect.state_write) and not caps.state:
        out.append(("unsupported", f"{ctx.backend} cannot hold resident state"))
    touched = {t.dtype for t in node.types}
    if node.op != "graph.input":
        touched |= set(_input_dtypes(node, ctx))
    missing = sorted(d.value for d in touched - caps.dtypes(node.op))
    if missing:
        have = ", ".join(sorted(d.value for d in caps.dtypes(node.op))) or "none"
        out.append(("unsupported", f"{node.op} on {ctx.backend} does not take {', '.join(missing)} (takes {have})"))
    required = node.required_precision()
    if required is not None and required.is_float and not caps.offers(node.op, required):
        offered = caps.precision_for(node.op)
        out.append(
            (
                "precision",
                f"{node.op} needs {required.value} precision; {ctx.backend} computes it at {offered.value}"
                f" (opt in with precision={offered.value} on this node)",
            )
        )
    if node.op.startswith("fused."):
        out.extend(_fusion_violations(node, ctx))
    rule = caps.shape_rules.get(node.op)
    if rule is not None:
        reason = rule(node)
        if reason:
            out.append(("unsupported", reason))
    return out


def _fusion_violations(node: Node, ctx: PassContext) -> list[tuple[str, str]]:
    """A fused node runs only if the backend declares every step of it (not just the op)."""
    from caramba.ops.fused import requirements

    graph: Graph = ctx.artifacts["lower.graph"]
    ins = tuple(graph.type_of(r) for r in node.inputs)
    out = []
    for pattern, dtypes in requirements(node.op, ins, node.attrs):
        missing = sorted(d.value for d in dtypes if not ctx.capabilities.can_fuse(pattern, d))
        if missing:
            out.append(("unsupported", f"{ctx.backend} declares no fusion {pattern} for {', '.join(missing)}"))
    return out


def _input_dtypes(node: Node, ctx: PassContext):
    graph: Graph = ctx.artifacts["lower.graph"]
    return (graph.type_of(r).dtype for r in node.inputs)


def lower(graph: Graph, ctx: PassContext) -> PassResult:
    ctx.artifacts["lower.graph"] = graph
    found: list[tuple[Node, str, str]] = []
    for node in graph.nodes:
        for kind, reason in violations(node, ctx):
            found.append((node, kind, reason))
    del ctx.artifacts["lower.graph"]
    if found:
        lines = [f"  - node '{n.id}' ({n.op})" + (f" at {n.origin}" if n.origin else "") + f": {r}" for n, _, r in found]
        kinds = {k for _, k, _ in found}
        cls = PrecisionError if kinds == {"precision"} else UnsupportedOperation
        first = found[0][0]
        raise cls(
            f"graph '{graph.name}' cannot run on {ctx.backend}: {len(found)} problem(s)\n" + "\n".join(lines),
            node=first.id,
            op=first.op,
            backend=ctx.backend,
            origin=first.origin,
        )
    return PassResult(graph, False, [f"{len(graph.nodes)} nodes legal on {ctx.backend}"])
