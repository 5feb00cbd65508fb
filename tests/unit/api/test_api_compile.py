"""Compile and explain over HTTP, and the IR graph drawn as SVG."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import caramba
from caramba import ops
from caramba.ir import to_dict

SVG = "{http://www.w3.org/2000/svg}"


def _mlp():
    def mlp(x, w1, b1, w2, b2):
        h = ops.gelu(x @ w1 + b1)
        return ops.softmax(h @ w2 + b2)

    return caramba.trace(mlp, (4, 3), (3, 5), (5,), (5, 2), (2,))


def test_svg_draws_every_node_and_output():
    from caramba.api.graphsvg import to_svg

    g = _mlp()
    root = ET.fromstring(to_svg(g))
    drawn = {e.get("data-id") for e in root.iter(f"{SVG}g") if e.get("class") == "node"}
    assert drawn == {n.id for n in g.nodes}
    edges = [e for e in root.iter(f"{SVG}path") if e.get("class") == "edge"]
    assert len(edges) == sum(len({r.node for r in n.inputs}) for n in g.nodes)
    assert any("out" in "".join(t.itertext()) for t in root.iter(f"{SVG}text"))


def test_svg_layers_follow_dependencies():
    from caramba.api.graphsvg import layout

    g = _mlp()
    boxes, edges, _, _ = layout(g)
    y = {b.id: b.y for b in boxes}
    assert all(y[s] < y[t] for s, t in edges)
    by_layer: dict[float, list] = {}
    for b in boxes:
        by_layer.setdefault(b.y, []).append(b)
    for row in by_layer.values():  # no two boxes overlap in a layer
        row.sort(key=lambda b: b.x)
        assert all(a.x + a.w <= b.x for a, b in itertools.pairwise(row))


def test_svg_escapes_names():
    from caramba.api.graphsvg import to_svg

    with caramba.Graph("g<&>") as g:
        x = g.input("x", (2,))
        g.output('<script>"o"', ops.exp(x))
    text = to_svg(g)
    ET.fromstring(text)  # well-formed
    assert "<script>" not in text


def test_compile_an_ir_graph_explains_every_pass(client):
    g = _mlp()
    r = client.post("/api/v1/compile", json={"graph": to_dict(g), "backend": "cpu"})
    assert r.status_code == 200, r.text
    body = r.json()
    from caramba.compiler import PIPELINE

    assert [s["name"] for s in body["stages"]] == [s.name for s in PIPELINE]
    assert body["before"]["nodes"] == len(g.nodes)
    assert body["after"]["svg"].startswith("<svg") and body["before"]["svg"].startswith("<svg")
    assert "pipeline for cpu" in body["report"]
    assert body["before"]["text"] == g.as_text()


def test_compile_can_disable_passes_and_skip_svg(client):
    r = client.post("/api/v1/compile", json={"graph": to_dict(_mlp()), "disable": ["dce"], "svg": False})
    assert r.status_code == 200, r.text
    body = r.json()
    assert next(s for s in body["stages"] if s["name"] == "dce")["skipped"] is True
    assert body["after"]["svg"] is None


def test_compile_errors_are_422_and_name_the_problem(client):
    g = to_dict(_mlp())
    assert client.post("/api/v1/compile", json={"graph": g, "backend": "nosuch"}).status_code == 422
    r = client.post("/api/v1/compile", json={"graph": g, "disable": ["lower"]})
    assert r.status_code == 422 and "cannot be disabled" in r.json()["detail"]
    assert client.post("/api/v1/compile", json={"graph": {"format": "x"}}).status_code == 422
    assert client.post("/api/v1/compile", json={}).status_code == 422
    bad = dict(g, nodes=[dict(g["nodes"][-1], op="math.nosuch")])
    assert client.post("/api/v1/compile", json={"graph": bad}).status_code == 422
