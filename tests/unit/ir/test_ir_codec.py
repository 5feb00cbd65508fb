"""The versioned JSON codec: lossless round trip, canonical text, clear errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from caramba import ir, ops
from caramba.errors import CodecError
from caramba.ir import Graph


def _graph() -> Graph:
    with Graph("codec") as g:
        x = g.input("x", (2, 6), "float32")
        w = g.variable("enc.w", (6, 6), "float32", "external")
        c = g.constant(np.array([[1.5, -2.0, 3.25, 0.0, 1.0, 2.0]], dtype=np.float32), id="bias")
        h = ops.matmul(x, w) + c
        a, b = ops.split(h, sizes=[2, 4], axis=-1)
        y = ops.clamp(a, min=-math.inf, max=math.nan, precision="float64", origin=ir.Origin("m.yml", 3, 7, "t.clamp"))
        z = ops.cast(b, dtype="int8")
        g.write("enc.w", w * 0.5)
        g.output("y", y)
        g.output("z", z)
        g.output("b", b)
    return g


def test_round_trip_is_lossless_and_canonical():
    g = _graph()
    text = ir.dumps(g)
    back = ir.loads(text)
    assert back == g
    assert ir.dumps(back) == text
    assert back.fingerprint() == g.fingerprint()
    ir.verify(back)
    # things JSON alone would lose come back exactly
    assert back.node("bias").attrs["value"].dtype == np.float32
    np.testing.assert_array_equal(back.node("bias").attrs["value"], g.node("bias").attrs["value"])
    clamp = next(n for n in back.nodes if n.op == "math.clamp")
    assert clamp.attrs["min"] == -math.inf and math.isnan(clamp.attrs["max"])
    assert clamp.precision is ir.DType.float64
    assert clamp.origin == ir.Origin("m.yml", 3, 7, "t.clamp")
    assert back.outputs["b"] == ir.Ref(g.outputs["b"].node, 1)
    assert back.state["enc.w"] == g.state["enc.w"]
    cast = next(n for n in back.nodes if n.op == "math.cast")
    assert cast.attrs["dtype"] is ir.DType.int8


def test_document_shape():
    d = json.loads(ir.dumps(_graph()))
    assert d["format"] == "caramba.ir" and d["version"] == 1 and d["name"] == "codec"
    assert all("version" in n for n in d["nodes"])
    assert ir.dumps(_graph(), indent=2) != ir.dumps(_graph()) and json.loads(ir.dumps(_graph(), indent=2)) == d


def test_fingerprint_changes_with_content():
    g = _graph()
    h = g.rebuilt([n.replace(attrs=n.attrs.replace(max=1.0)) if n.op == "math.clamp" else n for n in g.nodes])
    assert h.fingerprint() != g.fingerprint()


def _doc(**changes):
    d = ir.to_dict(_graph())
    d.update(changes)
    return d


@pytest.mark.parametrize(
    "text_or_doc, match",
    [
        ("{not json", "not valid JSON"),
        ([1, 2], "not a caramba IR document"),
        ({"format": "onnx"}, "not a caramba IR document \\(format onnx\\)"),
        (_doc(version=2), "IR codec version 2 is not supported \\(this caramba reads 1\\)"),
        (_doc(name=None, nodes=None), "malformed IR document"),
    ],
)
def test_decode_errors(text_or_doc, match):
    text = text_or_doc if isinstance(text_or_doc, str) else json.dumps(text_or_doc)
    with pytest.raises(CodecError, match=match):
        ir.loads(text)


def test_node_level_decode_errors():
    d = ir.to_dict(_graph())
    d["nodes"][3]["version"] = 9
    with pytest.raises(CodecError, match=f"node '{d['nodes'][3]['id']}' uses .* v9, this caramba implements v1"):
        ir.from_dict(d)
    d = ir.to_dict(_graph())
    d["nodes"][3]["op"] = "math.nope"
    with pytest.raises(CodecError, match="malformed IR document: unknown op 'math.nope'"):
        ir.from_dict(d)
    d = ir.to_dict(_graph())
    bias = next(n for n in d["nodes"] if n["id"] == "bias")
    bias["attrs"]["value"] = {"$tensor": "??"}
    with pytest.raises(CodecError, match="unknown tagged value \\['\\$tensor'\\]"):
        ir.from_dict(d)
    d = ir.to_dict(_graph())
    d["nodes"][3]["attrs"]["zz"] = 1
    with pytest.raises(CodecError, match="unknown attribute 'zz'"):
        ir.from_dict(d)
