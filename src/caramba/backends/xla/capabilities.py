"""The xla capability table: exactly the lowering table, plus graph plumbing ops."""

from __future__ import annotations

from caramba.backends.xla.lowering import ANY, DTYPES
from caramba.compute.capabilities import Capabilities
from caramba.ir.dtypes import DType

# Handled by the tracer itself: inputs, constants, resident state.
PLUMBING = {"graph.input": ANY, "graph.constant": ANY, "state.read": ANY, "state.write": ANY}


def xla_capabilities() -> Capabilities:
    # XLA computes float64 in float64 on the CPU client and on CUDA; no fusions are declared
    # (XLA fuses the whole jitted graph itself, so caramba's fused.* ops are not needed here).
    return Capabilities(ops={**DTYPES, **PLUMBING}, precision={"*": DType.float64})
