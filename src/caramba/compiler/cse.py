"""cse: merge pure nodes that compute the same thing (same op ID and version, canonical attrs,
inputs, types and required precision). Run after canonicalize, so commutative inputs and
attributes are already in one spelling.

Only ``pure`` nodes are merged: random, state, checkpoint and IO nodes never are, even when
they look identical (two draws of one seed are still two draws; two writes are two writes).
"""

from __future__ import annotations

from caramba.compiler.passes import PassContext, PassResult
from caramba.ir.graph import Graph, Node, Ref
from caramba.ir.types import Effect


def cse(graph: Graph, ctx: PassContext) -> PassResult:
    seen: dict[tuple, Node] = {}
    subst: dict[Ref, Ref] = {}
    nodes: list[Node] = []
    merged: list[str] = []
    for node in graph.nodes:
        if any(r in subst for r in node.inputs):
            node = node.replace(inputs=tuple(subst.get(r, r) for r in node.inputs))
        if node.effect is Effect.pure:
            key = (node.op, node.version, node.attrs, node.inputs, node.types, node.precision)
            first = seen.get(key)
            if first is not None:
                for i in range(len(node.types)):
                    subst[Ref(node.id, i)] = Ref(first.id, i)
                merged.append(f"{node.id} -> {first.id}")
                continue
            seen[key] = node
        nodes.append(node)
    if not merged:
        return PassResult(graph, False)
    outputs = {k: subst.get(v, v) for k, v in graph.outputs.items()}
    shown = merged[:20] + ([f"... {len(merged) - 20} more"] if len(merged) > 20 else [])
    return PassResult(graph.rebuilt(nodes, outputs), True, [f"merged {len(merged)} node(s): " + ", ".join(shown)])
