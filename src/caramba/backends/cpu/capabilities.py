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
    # fused.* kernels of the table (attention's) are declared with the other fused forms only
    unfused = {op: ds for op, ds in DTYPES.items() if not op.startswith("fused.")}
    return Capabilities(
        ops={**unfused, **PLUMBING, **fused_ops},
        precision={"*": DType.float64},
        fusions=fusions,
        # generated fused kernels write into planned buffers; the table's own (attention's) as OUT says
        buffers=frozenset(OUT) | frozenset(op for op in fused_ops if op not in DTYPES),
    )
