"""ValueType (shape + dtype) and Effect."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from math import prod

from caramba.ir.dtypes import DType
from caramba.ir.dtypes import dtype as as_dtype


@dataclass(frozen=True, slots=True)
class ValueType:
    """Static shape and element type of an IR value."""

    shape: tuple[int, ...]
    dtype: DType

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", as_dtype(self.dtype))
        if any(s < 0 for s in self.shape):
            from caramba.errors import GraphError

            raise GraphError(f"negative dimension in shape {self.shape}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def with_shape(self, shape: "tuple[int, ...] | list[int]") -> "ValueType":
        return ValueType(tuple(shape), self.dtype)

    def with_dtype(self, d: DType) -> "ValueType":
        return ValueType(self.shape, d)

    def __str__(self) -> str:
        return f"{self.dtype.short}[{','.join(str(s) for s in self.shape)}]"


class Effect(enum.Enum):
    """What a node does besides computing its outputs from its inputs.

    CSE merges only ``pure`` nodes; DCE never drops the others; the scheduler keeps
    effectful nodes in program order.
    """

    pure = "pure"
    random = "random"
    state_read = "state_read"
    state_write = "state_write"
    checkpoint = "checkpoint"
    external_io = "external_io"

    def __str__(self) -> str:
        return self.value
