"""The capability table of a GPU backend, derived from the kernel table and the emitter (device).

A GPU backend claims exactly the ops the kernel table has, for the dtypes its emitter can store
and compute. The precision is the emitter's: float64, or float32 under the float32 contract. Graph
plumbing (inputs, constants, state) does no arithmetic: it needs no opt-in where buffers keep
float64 values exactly, and the opt-in like everything else where they are stored as f32.
"""

from __future__ import annotations

from collections.abc import Callable

from caramba.backends.codegen.cstyle import Emitter
from caramba.backends.codegen.kernels import BUILDERS, DTYPES
from caramba.backends.codegen.kernels.fused import fusions
from caramba.backends.codegen.plan import PLUMBING
from caramba.compute.capabilities import Capabilities
from caramba.ir.dtypes import DType
from caramba.ir.graph import Node


def kernel_table(e: Emitter) -> dict[str, frozenset[DType]]:
    """op ID -> dtypes this emitter has kernels for (ops with none are left out)."""
    out = {}
    for op in BUILDERS:
        ds = DTYPES[op] & e.dtypes
        if ds:
            out[op] = ds
    return out


def storage_bytes(e: Emitter, t) -> int:
    return t.size * e.host_storage(t.dtype).itemsize


def size_rule(e: Emitter, max_binding: int | None, max_buffers: int | None) -> Callable[[Node], str | None]:
    def rule(node: Node) -> str | None:
        if max_buffers is not None and len(node.inputs) + len(node.types) + 1 > max_buffers:
            return (
                f"{node.op} with {len(node.inputs)} inputs needs {len(node.inputs) + len(node.types) + 1} storage "
                f"buffers; this device binds at most {max_buffers} per kernel"
            )
        if max_binding is not None:
            for t in node.types:
                if t.dtype in e.dtypes and storage_bytes(e, t) > max_binding:
                    return f"{t} needs {storage_bytes(e, t)} bytes; this device binds at most {max_binding} per buffer"
        return None

    return rule


def gpu_capabilities(e: Emitter, *, max_binding: int | None = None, max_buffers: int | None = None) -> Capabilities:
    ops = kernel_table(e)
    for op in PLUMBING:
        ops[op] = e.dtypes
    precision = {"*": DType.float64 if e.float64 else DType.float32}
    if not e.float64 and e.exact_storage:
        # float64 values stay float64 in memory: inputs, constants and state are exact
        precision.update({"graph": DType.float64, "state": DType.float64})
    rule = size_rule(e, max_binding, max_buffers)
    return Capabilities(
        ops=ops,
        precision=precision,
        fusions=fusions(e),
        shape_rules={op: rule for op in ops} if (max_binding or max_buffers) else {},
    )
