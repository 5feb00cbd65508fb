"""An IR graph drawn as SVG: a layered top-to-bottom layout, no toolkit needed.

Layout: a node's layer is one more than the deepest of its inputs (nodes are in program order,
so one pass suffices); nodes within a layer are ordered by the mean position of their inputs
and then of their users (a few barycenter sweeps, which untangles most edges). Every text is
XML-escaped, so the SVG can be inlined into a page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

if TYPE_CHECKING:
    from caramba.ir.graph import Graph, Node

CHAR_W = 7.0  # px per character at the 12px monospace font used below
BOX_H = 38.0
GAP_X = 24.0
GAP_Y = 46.0
PAD = 16.0
MAX_LABEL = 40

_FAMILY_COLORS = {
    "graph": "#e8eef7", "math": "#eef6ec", "activation": "#fdf1e2", "linalg": "#f3e9f7",
    "reduce": "#e9f4f6", "shape": "#f2f2f2", "nn": "#fbeaea", "attention": "#fff7d6",
    "state": "#e6e6fa", "random": "#f7efe6", "train": "#e9f7f1", "fused": "#ffe9c7",
}


@dataclass
class Box:
    id: str
    op: str
    label: str
    sub: str
    layer: int
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0


def _short(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def _sub(node: "Node") -> str:
    types = ", ".join(str(t) for t in node.types)
    return _short(f"{node.op} : {types}" if types else node.op)


def layout(graph: "Graph") -> tuple[list[Box], list[tuple[str, str]], float, float]:
    """Boxes with positions, edges (source ID, target ID), and the drawing's width and height."""
    layer: dict[str, int] = {}
    edges: list[tuple[str, str]] = []
    parents: dict[str, list[str]] = {}
    for n in graph.nodes:
        srcs = list(dict.fromkeys(r.node for r in n.inputs))
        parents[n.id] = srcs
        edges.extend((s, n.id) for s in srcs)
        layer[n.id] = 1 + max((layer[s] for s in srcs), default=-1)
    boxes = {n.id: Box(n.id, n.op, _short(n.id), _sub(n), layer[n.id]) for n in graph.nodes}
    for b in boxes.values():
        b.w = max(len(b.label), len(b.sub)) * CHAR_W + 16
    layers: list[list[str]] = [[] for _ in range(1 + max(layer.values(), default=-1))]
    for n in graph.nodes:
        layers[layer[n.id]].append(n.id)
    children: dict[str, list[str]] = {nid: [] for nid in boxes}
    for s, t in edges:
        children[s].append(t)

    def order_by(neigh: dict[str, list[str]], ref: list[str], i: int) -> None:
        pos = {nid: k / max(1, len(ref) - 1) for k, nid in enumerate(ref)}
        row = layers[i]
        keyed = []
        for k, nid in enumerate(row):
            ps = [pos[p] for p in neigh[nid] if p in pos]
            keyed.append((sum(ps) / len(ps) if ps else k / max(1, len(row) - 1), k, nid))
        layers[i] = [nid for _, _, nid in sorted(keyed)]

    for _ in range(2):  # down then up sweeps
        for i in range(1, len(layers)):
            order_by(parents, layers[i - 1], i)
        for i in range(len(layers) - 2, -1, -1):
            order_by(children, layers[i + 1], i)

    width = 0.0
    for i, row in enumerate(layers):
        x = PAD
        for nid in row:
            b = boxes[nid]
            b.x, b.y = x, PAD + i * (BOX_H + GAP_Y)
            x += b.w + GAP_X
        width = max(width, x - GAP_X + PAD)
    for row in layers:  # center each layer in the drawing
        if not row:
            continue
        last = boxes[row[-1]]
        shift = (width - (last.x + last.w + PAD)) / 2
        for nid in row:
            boxes[nid].x += shift
    height = PAD * 2 + len(layers) * BOX_H + max(0, len(layers) - 1) * GAP_Y + 28  # room for outputs
    return list(boxes.values()), edges, max(width, 2 * PAD), height


def to_svg(graph: "Graph", title: str | None = None) -> str:
    """The graph as a standalone SVG document (inline-safe: all text escaped)."""
    boxes, edges, width, height = layout(graph)
    by_id = {b.id: b for b in boxes}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="ir-graph" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="ui-monospace, monospace" font-size="12">',
        f"<title>{escape(title or graph.name)}</title>",
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" fill="#778"/></marker></defs>',
    ]
    for s, t in edges:
        a, b = by_id[s], by_id[t]
        x1, y1 = a.x + a.w / 2, a.y + BOX_H
        x2, y2 = b.x + b.w / 2, b.y
        my = (y1 + y2) / 2
        out.append(
            f'<path class="edge" d="M{x1:.1f},{y1:.1f} C{x1:.1f},{my:.1f} {x2:.1f},{my:.1f} {x2:.1f},{y2:.1f}" '
            'fill="none" stroke="#889" stroke-width="1.2" marker-end="url(#arrow)"/>'
        )
    for b in boxes:
        fill = _FAMILY_COLORS.get(b.op.split(".", 1)[0], "#ffffff")
        out.append(
            f'<g class="node" data-id="{escape(b.id, {chr(34): "&quot;"})}" data-op="{escape(b.op)}">'
            f'<rect x="{b.x:.1f}" y="{b.y:.1f}" width="{b.w:.1f}" height="{BOX_H:.0f}" rx="5" '
            f'fill="{fill}" stroke="#556"/>'
            f'<text x="{b.x + 8:.1f}" y="{b.y + 15:.1f}" font-weight="bold">{escape(b.label)}</text>'
            f'<text x="{b.x + 8:.1f}" y="{b.y + 30:.1f}" fill="#445">{escape(b.sub)}</text></g>'
        )
    seen: dict[str, int] = {}
    for name, ref in graph.outputs.items():
        src = by_id.get(ref.node)
        if src is None:
            continue
        k = seen[ref.node] = seen.get(ref.node, -1) + 1  # several outputs of one node side by side
        cx, cy = src.x + src.w / 2 + k * 60, src.y + BOX_H + 18
        out.append(
            f'<g class="output"><line x1="{src.x + src.w / 2:.1f}" y1="{src.y + BOX_H:.1f}" x2="{cx:.1f}" '
            f'y2="{cy - 8:.1f}" stroke="#2a6" stroke-width="1.2"/><text x="{cx:.1f}" y="{cy + 4:.1f}" '
            f'text-anchor="middle" fill="#174">→ {escape(_short(name))}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out)
