"""Readable text form of a graph (what `caramba compile --explain` and errors show)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from caramba.ir.attrs import format_value

if TYPE_CHECKING:
    from caramba.ir.graph import Graph, Node


def format_node(node: "Node") -> str:
    lhs = ", ".join(f"%{node.id}" if i == 0 else f"%{node.id}#{i}" for i in range(len(node.types)))
    args = ", ".join(str(r) for r in node.inputs)
    attrs = ""
    if node.attrs:
        attrs = " {" + ", ".join(f"{k}={format_value(v)}" for k, v in node.attrs.items()) + "}"
    types = ", ".join(str(t) for t in node.types)
    prec = f" @precision={node.precision}" if node.precision is not None else ""
    head = f"{lhs} = " if node.types else ""
    ver = f"@v{node.version}" if node.version != 1 else ""
    return f"{head}{node.op}{ver}({args}){attrs}{prec}" + (f" : {types}" if types else "")


def print_graph(g: "Graph", mark: str | None = None) -> str:
    """Print ``g``; the node with ID ``mark`` is flagged with ``>>``."""
    ins = ", ".join(f"{n.id}: {n.types[0]}" for n in g.inputs)
    lines = [f"graph {g.name}({ins}) {{"]
    for decl in g.state.values():
        lines.append(f"    state {decl.name}: {decl.type} = {decl.init}")
    for n in g.nodes:
        if n.op == "graph.input":
            continue
        prefix = ">>  " if n.id == mark else "    "
        lines.append(prefix + format_node(n))
    outs = ", ".join(f"{k}: {v}" for k, v in g.outputs.items())
    lines.append(f"    return {{{outs}}}")
    lines.append("}")
    return "\n".join(lines)


def excerpt(g: "Graph", node_id: str, context: int = 3) -> str:
    """A few printed lines around ``node_id`` (for verifier messages)."""
    lines = print_graph(g, mark=node_id).splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith(">>")), None)
    if at is None:
        return ""
    lo, hi = max(0, at - context), min(len(lines), at + context + 1)
    return "\n".join(lines[lo:hi])
