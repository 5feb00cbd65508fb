"""dce: remove pure nodes no output depends on; keep every effectful node.

Also applies the compile targets: outputs not asked for are dropped first.
"""

from __future__ import annotations

from caramba.compiler.passes import PassContext, PassResult
from caramba.ir.graph import Graph
from caramba.ir.types import Effect


def dce(graph: Graph, ctx: PassContext) -> PassResult:
    outputs = {k: v for k, v in graph.outputs.items() if k in ctx.targets}
    live: set[str] = {r.node for r in outputs.values()}
    for node in reversed(graph.nodes):
        keep = node.id in live or (node.effect is not Effect.pure and node.op != "graph.input")
        if keep:
            live.add(node.id)
            live.update(r.node for r in node.inputs)
    # Graph inputs stay (they are the executable's signature) even when unused.
    nodes = [n for n in graph.nodes if n.id in live or n.op == "graph.input"]
    removed = len(graph.nodes) - len(nodes)
    changed = removed > 0 or outputs != graph.outputs
    diags = [f"removed {removed} dead node(s)"] if removed else []
    return PassResult(graph.rebuilt(nodes, outputs) if changed else graph, changed, diags)
