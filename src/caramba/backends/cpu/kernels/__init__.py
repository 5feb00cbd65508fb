"""The cpu backend's kernel table: op ID -> factory(node, input types) -> callable.

A factory runs once at compile time and returns a plain callable taking NumPy arrays and
returning an array (or a tuple for multi-output ops). Attributes are read at compile time,
never per call. The dtypes registered with a kernel are what the cpu capability table claims.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from caramba.ir.dtypes import HOST_FLOATS, INTS, DType
from caramba.ir.graph import Node
from caramba.ir.types import ValueType

Kernel = Callable[..., Any]
KernelFactory = Callable[[Node, tuple[ValueType, ...]], Kernel]

KERNELS: dict[str, KernelFactory] = {}
DTYPES: dict[str, frozenset[DType]] = {}

FLOAT = HOST_FLOATS  # bfloat16 has no NumPy arithmetic: not claimed
NUM = HOST_FLOATS | INTS
ANY = NUM | {DType.bool}


def kernel(op_id: str, dtypes: frozenset[DType]) -> Callable[[KernelFactory], KernelFactory]:
    """Register ``factory`` as the kernel of ``op_id`` for ``dtypes``."""

    def deco(factory: KernelFactory) -> KernelFactory:
        if op_id in KERNELS:
            raise ValueError(f"cpu kernel for {op_id} registered twice")
        KERNELS[op_id] = factory
        DTYPES[op_id] = frozenset(dtypes)
        return factory

    return deco


def simple(op_id: str, dtypes: frozenset[DType], fn: Kernel) -> None:
    """Register an attribute-free kernel: ``fn`` itself is called."""
    kernel(op_id, dtypes)(lambda node, ins: fn)


def _load() -> None:
    from caramba.backends.cpu.kernels import (
        activation,
        attention,
        linalg,
        math,
        nn,
        random,
        reduce,
        shape,
        train,
    )


_load()
