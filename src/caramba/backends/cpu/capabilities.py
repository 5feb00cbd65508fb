"""The cpu capability table: exactly the kernel table, plus graph plumbing ops."""

from __future__ import annotations

from caramba.backends.cpu.kernels import ANY, DTYPES
from caramba.compute.capabilities import Capabilities
from caramba.ir.dtypes import DType

# Ops the executable handles itself (no kernel): inputs, constants, state.
PLUMBING = {"graph.input": ANY, "graph.constant": ANY, "state.read": ANY, "state.write": ANY}


def cpu_capabilities() -> Capabilities:
    return Capabilities(ops={**DTYPES, **PLUMBING}, precision={"*": DType.float64})
