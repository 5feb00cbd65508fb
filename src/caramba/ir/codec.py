"""Versioned JSON codec for graphs: lossless round trip, carries op versions.

Format: ``{"format": "caramba.ir", "version": 1, "name", "state", "nodes", "outputs"}``.
Attribute values are tagged only where JSON would lose information (arrays, dtypes,
non-finite floats); the op's attribute schema restores tuples on decode.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np

from caramba.errors import CarambaError, CodecError
from caramba.ir.attrs import Attrs
from caramba.ir.dtypes import DType
from caramba.ir.dtypes import dtype as as_dtype
from caramba.ir.graph import Graph, Node, Origin, Ref, StateDecl
from caramba.ir.opdef import get_op
from caramba.ir.types import ValueType

FORMAT = "caramba.ir"
VERSION = 1


def _enc_value(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        arr = np.ascontiguousarray(v)
        return {
            "$array": base64.b64encode(arr.tobytes()).decode(),
            "dtype": as_dtype(arr.dtype).value,
            "shape": list(np.shape(v)),  # not arr.shape: ascontiguousarray makes 0-d arrays 1-d
        }
    if isinstance(v, DType):
        return {"$dtype": v.value}
    if isinstance(v, float) and not math.isfinite(v):
        return {"$float": repr(v)}
    if isinstance(v, tuple):
        return [_enc_value(x) for x in v]
    return v


def _dec_value(v: Any) -> Any:
    if isinstance(v, dict):
        if "$array" in v:
            d = as_dtype(v["dtype"])
            arr = np.frombuffer(base64.b64decode(v["$array"]), dtype=d.numpy).reshape(tuple(v["shape"]))
            return arr.copy()
        if "$dtype" in v:
            return as_dtype(v["$dtype"])
        if "$float" in v:
            return float(v["$float"])
        raise CodecError(f"unknown tagged value {sorted(v)}")
    if isinstance(v, list):
        return [_dec_value(x) for x in v]
    return v


def _enc_type(t: ValueType) -> dict:
    return {"shape": list(t.shape), "dtype": t.dtype.value}


def _dec_type(d: dict) -> ValueType:
    return ValueType(tuple(d["shape"]), as_dtype(d["dtype"]))


def to_dict(g: Graph) -> dict:
    nodes = []
    for n in g.nodes:
        item: dict[str, Any] = {
            "id": n.id,
            "op": n.op,
            "version": n.version,
            "inputs": [[r.node, r.index] for r in n.inputs],
            "attrs": {k: _enc_value(v) for k, v in n.attrs.items()},
            "types": [_enc_type(t) for t in n.types],
        }
        if n.precision is not None:
            item["precision"] = n.precision.value
        if n.origin is not None:
            item["origin"] = {k: getattr(n.origin, k) for k in Origin.__slots__ if getattr(n.origin, k) is not None}
        nodes.append(item)
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": g.name,
        "state": [
            {"name": s.name, "type": _enc_type(s.type), "init": s.init} for s in g.state.values()
        ],
        "nodes": nodes,
        "outputs": {k: [r.node, r.index] for k, r in g.outputs.items()},
    }


def from_dict(d: dict) -> Graph:
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise CodecError(f"not a caramba IR document (format {d.get('format') if isinstance(d, dict) else type(d)})")
    if d.get("version") != VERSION:
        raise CodecError(f"IR codec version {d.get('version')} is not supported (this caramba reads {VERSION})")
    try:
        g = Graph(d["name"])
        for s in d["state"]:
            g.state[s["name"]] = StateDecl(s["name"], _dec_type(s["type"]), s["init"])
        for item in d["nodes"]:
            opdef = get_op(item["op"])
            if item["version"] != opdef.version:
                raise CodecError(
                    f"node '{item['id']}' uses {item['op']} v{item['version']}, "
                    f"this caramba implements v{opdef.version}"
                )
            attrs = opdef.make_attrs({k: _dec_value(v) for k, v in item["attrs"].items()})
            origin = Origin(**item["origin"]) if "origin" in item else None
            prec = as_dtype(item["precision"]) if "precision" in item else None
            g.append(
                Node(
                    item["id"],
                    item["op"],
                    tuple(Ref(a, b) for a, b in item["inputs"]),
                    attrs,
                    tuple(_dec_type(t) for t in item["types"]),
                    item["version"],
                    prec,
                    origin,
                )
            )
        g.outputs = {k: Ref(a, b) for k, (a, b) in d["outputs"].items()}
    except CodecError:
        raise
    except (CarambaError, KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"malformed IR document: {exc}") from None
    return g


def dumps(g: Graph, indent: int | None = None) -> str:
    return json.dumps(to_dict(g), indent=indent, sort_keys=True, allow_nan=False)


def loads(text: str) -> Graph:
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CodecError(f"IR document is not valid JSON: {exc}") from None
    return from_dict(d)


# Attrs re-export so decoders elsewhere need not import attrs
__all__ = ["dumps", "loads", "to_dict", "from_dict", "Attrs", "FORMAT", "VERSION"]
