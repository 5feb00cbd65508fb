"""What codegen hands a GPU runtime: kernels (complete source text) and how to launch them.

A node becomes a ``Program``: a list of launches over slots (the node's inputs and outputs,
temporaries, constants uploaded once at compile time, the shared error flag), or a view that
reuses an input's buffer, or a library call (cuBLAS GEMM). Nothing here touches a device, so
kernel text and launch plans are testable anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from caramba.ir.dtypes import DType


@dataclass(frozen=True)
class Param:
    """A buffer parameter of a kernel: ``access`` is ``read``, ``write``, ``error`` (the shared
    error flag) or ``params`` (the kernel's integer parameters, bound by the runtime)."""

    name: str
    dtype: DType | None  # None for the error flag
    access: str


@dataclass(frozen=True)
class Kernel:
    """One compute kernel: complete source text, its buffer parameters in binding order, the
    workgroup size, how many workgroups one launch runs, and the values of its params buffer
    (sizes and strides, when the emitter does not bake them into the text)."""

    name: str
    lang: str
    source: str
    params: tuple[Param, ...]
    workgroup: int
    groups: int
    values: tuple[int, ...] = ()

    @property
    def checks(self) -> bool:
        return any(p.access == "error" for p in self.params)


@dataclass(frozen=True)
class Slot:
    """Where a kernel argument comes from: ``in``/``out``/``tmp``/``const`` with an index, or ``err``."""

    kind: str
    index: int = 0

    def __str__(self) -> str:
        return self.kind if self.kind == "err" else f"{self.kind}{self.index}"


@dataclass(frozen=True)
class Launch:
    kernel: Kernel
    args: tuple[Slot, ...]


@dataclass(frozen=True)
class LibraryCall:
    """A call into a vendor library instead of generated code (cuBLAS GEMM on cuda)."""

    name: str
    args: tuple[Slot, ...]
    attrs: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class Temp:
    dtype: DType
    size: int


@dataclass
class Program:
    """How one node runs. ``views[j] = i`` makes output j share input i's buffer (same bytes,
    new shape: reshape, squeeze, expand_dims); such outputs need no launch."""

    steps: list[Launch | LibraryCall] = field(default_factory=list)
    temps: list[Temp] = field(default_factory=list)
    consts: list[np.ndarray] = field(default_factory=list)
    views: dict[int, int] = field(default_factory=dict)

    @property
    def kernels(self) -> list[Kernel]:
        return [s.kernel for s in self.steps if isinstance(s, Launch)]

    @property
    def checks(self) -> bool:
        return any(k.checks for k in self.kernels)

    def temp(self, dtype: DType, size: int) -> Slot:
        self.temps.append(Temp(dtype, size))
        return Slot("tmp", len(self.temps) - 1)

    def const(self, array: np.ndarray) -> Slot:
        self.consts.append(array)
        return Slot("const", len(self.consts) - 1)
