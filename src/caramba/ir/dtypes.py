"""Element types of IR values and their NumPy counterparts."""

from __future__ import annotations

import enum

import numpy as np


class DType(enum.Enum):
    """Element type of an IR value. ``DType.float64.itemsize == 8``."""

    float64 = "float64"
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    int64 = "int64"
    int32 = "int32"
    int8 = "int8"
    uint8 = "uint8"
    bool = "bool"

    def __repr__(self) -> str:
        return f"DType.{self.value}"

    def __str__(self) -> str:
        return self.value

    @property
    def is_float(self) -> bool:
        return self in FLOATS

    @property
    def is_int(self) -> bool:
        return self in INTS

    @property
    def is_bool(self) -> bool:
        return self is DType.bool

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def short(self) -> str:
        return _SHORT[self]

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype holding this type on the host (bfloat16 needs ``ml_dtypes``)."""
        if self is DType.bfloat16:
            try:
                import ml_dtypes
            except ImportError as exc:  # pragma: no cover - depends on environment
                from caramba.errors import ConfigError

                raise ConfigError(
                    "bfloat16 host arrays need the 'ml_dtypes' package",
                    hint="pip install ml_dtypes",
                ) from exc
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.value)


FLOATS = frozenset({DType.float64, DType.float32, DType.float16, DType.bfloat16})
SIGNED_INTS = frozenset({DType.int64, DType.int32, DType.int8})
INTS = SIGNED_INTS | {DType.uint8}
NUMERIC = FLOATS | INTS
ALL = NUMERIC | {DType.bool}
# Types the CPU reference computes natively (bfloat16 has no NumPy arithmetic).
HOST_FLOATS = frozenset({DType.float64, DType.float32, DType.float16})

_ITEMSIZE = {
    DType.float64: 8,
    DType.float32: 4,
    DType.float16: 2,
    DType.bfloat16: 2,
    DType.int64: 8,
    DType.int32: 4,
    DType.int8: 1,
    DType.uint8: 1,
    DType.bool: 1,
}
_SHORT = {
    DType.float64: "f64",
    DType.float32: "f32",
    DType.float16: "f16",
    DType.bfloat16: "bf16",
    DType.int64: "i64",
    DType.int32: "i32",
    DType.int8: "i8",
    DType.uint8: "u8",
    DType.bool: "bool",
}
_BY_NAME = {d.value: d for d in DType} | {d.short: d for d in DType}


_BY_NUMPY: dict[np.dtype, DType] = {}


def dtype(x: "DType | str | np.dtype | type") -> DType:
    """Coerce a name (``"float64"``, ``"f64"``), NumPy dtype or DType to a DType."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    hit = _BY_NUMPY.get(x) if isinstance(x, np.dtype) else None
    if hit is not None:  # the hot path: a tensor's dtype, asked on every run
        return hit
    try:
        name = np.dtype(x).name
    except TypeError:
        name = str(x)
    if name in _BY_NAME:
        if isinstance(x, np.dtype):
            _BY_NUMPY[x] = _BY_NAME[name]
        return _BY_NAME[name]
    from caramba.errors import GraphError, did_you_mean

    raise GraphError(f"unknown dtype {x!r}; {did_you_mean(str(x), [d.value for d in DType])}")


def rank_of_precision(d: DType) -> int:
    """Order float types by precision so 'at least as precise' is a comparison."""
    return {DType.float64: 3, DType.float32: 2, DType.float16: 1, DType.bfloat16: 1}.get(d, 4)
