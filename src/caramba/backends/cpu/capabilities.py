"""The cpu capability table: exactly the kernel table, plus graph plumbing ops, plus the fused
forms the generated Numba kernels handle (only when Numba imports)."""

from __future__ import annotations

from caramba.backends.cpu.fused import fusion_capabilities
from caramba.backends.cpu.kernels import ANY, DTYPES, OUT
from caramba.compute.capabilities import Capabilities
from caramba.ir.dtypes import DType

# Ops the executable handles itself (no kernel): inputs, constants, state.
PLUMBING = {"graph.input": ANY, "graph.constant": ANY, "state.read": ANY, "state.write": ANY}


def cpu_capabilities(fusion: bool = True) -> Capabilities:
    """``fusion=False`` describes the cpu backend without Numba (no fused forms)."""
    fused_ops, fusions = fusion_capabilities() if fusion else ({}, frozenset())
    return Capabilities(
        ops={**DTYPES, **PLUMBING, **fused_ops},
        precision={"*": DType.float64},
        fusions=fusions,
        buffers=frozenset(OUT) | frozenset(fused_ops),
    )
