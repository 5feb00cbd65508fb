"""Constant folding's evaluator: a node applied to constant inputs by the cpu reference kernels.

The compiler never imports a backend: a runner hands this function to the pipeline
(``Runner.evaluate_constant``), and the pass calls it for each small node whose inputs are
all constants. Every backend folds with these kernels, the NumPy float64-accurate reference
the compliance suite checks every backend against.
"""

from __future__ import annotations

import numpy as np

from caramba.ir.dtypes import dtype as as_dtype
from caramba.ir.graph import Node
from caramba.ir.types import ValueType


def evaluate(node: Node, in_types: list[ValueType], consts: list[np.ndarray]) -> np.ndarray | None:
    """``node`` applied to ``consts``, or None if it cannot be (no kernel for the op or dtype, or
    the kernel raised: then it fails at run time instead, where the error names the node)."""
    from caramba.backends.cpu.kernels import DTYPES, KERNELS

    factory = KERNELS.get(node.op)
    touched = {t.dtype for t in node.types} | {t.dtype for t in in_types}
    if factory is None or not touched <= DTYPES[node.op]:
        return None
    try:
        fn = factory(node, tuple(in_types))
        with np.errstate(all="ignore"):
            out = np.array(fn(*consts), copy=True)
    except Exception:  # the kernel reports it properly when the graph runs
        return None
    t = node.types[0]
    if out.shape != t.shape or as_dtype(out.dtype) != t.dtype:
        return None
    out.setflags(write=False)
    return out
