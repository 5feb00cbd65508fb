"""caramba.onnx: ONNX import (model -> ir.Graph) and export (ir.Graph -> model).

``import_model(path_or_proto)`` builds a caramba graph from an ONNX model for the ONNX ops
caramba has; ``export_model(graph)`` writes a caramba graph as an ONNX model (opset 18), the
form the onnx backend runs. Both import the ``onnx`` package only when called.
"""

from __future__ import annotations

from typing import Any


def import_model(model: Any, **kwargs: Any):
    """ONNX model (path, bytes or ModelProto) -> ``ir.Graph``; see ``caramba.onnx.importer``."""
    from caramba.onnx.importer import import_model as _import

    return _import(model, **kwargs)


def export_model(graph: Any, profile: Any = None):
    """``ir.Graph`` -> ONNX ModelProto (opset 18). ``profile`` names a target's gaps (default: none)."""
    from caramba.onnx.export import STANDARD, export_graph

    return export_graph(graph, profile or STANDARD).model


__all__ = ["export_model", "import_model"]
