"""dce: remove pure nodes that no output and no effect depends on; keep every effectful node
(state reads and writes, random draws, checkpoints, IO) and every graph input (the
executable's signature), used or not.
"""

from __future__ import annotations

from caramba.compiler.passes import PassContext, PassResult
from caramba.ir.graph import Graph
from caramba.ir.types import Effect


def dce(graph: Graph, ctx: PassContext) -> PassResult:
    live: set[str] = {r.node for r in graph.outputs.values()}
    for node in reversed(graph.nodes):
        if node.id in live or node.effect is not Effect.pure:
            live.add(node.id)
            live.update(r.node for r in node.inputs)
    nodes = [n for n in graph.nodes if n.id in live]
    removed = [n.id for n in graph.nodes if n.id not in live]
    if not removed:
        return PassResult(graph, False)
    shown = ", ".join(removed[:20]) + (f", ... {len(removed) - 20} more" if len(removed) > 20 else "")
    return PassResult(graph.rebuilt(nodes), True, [f"removed {len(removed)} dead node(s): {shown}"])
