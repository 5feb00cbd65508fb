"""What the onnx backend tests share besides their fixtures (conftest.py): running a graph on a
runner with host arrays, and a graph that calls one op."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import caramba


def run(r: Any, g: Any, inputs: Mapping[str, np.ndarray] | None = None, /, **named: np.ndarray) -> dict[str, np.ndarray]:
    """Execute ``g`` on the runner ``r`` with host arrays (a mapping and/or keywords, by input
    name): its outputs as host arrays."""
    feed = {**(inputs or {}), **named}
    outs = r.execute(g, None, {k: r.upload(v) for k, v in feed.items()})
    return {k: v.download() for k, v in outs.items()}


def call_graph(op: str, args: Sequence[tuple[Any, Any]], attrs: Mapping[str, Any] | None = None,
               n_out: int = 1) -> caramba.Graph:
    """A graph calling ``op`` (node id ``subject``) on inputs x0, x1, ... of the given (shape,
    dtype), with outputs o0, o1, ... (``n_out`` of them)."""
    with caramba.Graph(op.replace(".", "_")) as g:
        ins = [g.input(f"x{i}", s, d) for i, (s, d) in enumerate(args)]
        res = g.call(op, ins, dict(attrs or {}), id="subject")
        for i, v in enumerate(res if n_out > 1 else (res,)):
            g.output(f"o{i}", v)
    return g
