"""Typed attribute schemas and their canonical (normalized, sorted, hashable) form."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from caramba.errors import GraphError, did_you_mean
from caramba.ir.dtypes import DType
from caramba.ir.dtypes import dtype as as_dtype

REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()

# kind -> normalizer. A trailing "?" on a kind makes None a legal value.
KINDS = ("int", "float", "bool", "str", "dtype", "ints", "floats", "array")


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        if isinstance(v, (float, np.floating)) and float(v).is_integer():
            return int(v)
        raise TypeError(f"expected an int, got {v!r}")
    return int(v)


def _float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"expected a number, got {v!r}")
    return float(v)


def _bool(v: Any) -> bool:
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"expected true/false, got {v!r}")
    return bool(v)


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {v!r}")
    return v


def _ints(v: Any) -> tuple[int, ...]:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),)
    if not isinstance(v, (list, tuple, np.ndarray)):
        raise TypeError(f"expected a list of ints, got {v!r}")
    return tuple(_int(x) for x in v)


def _floats(v: Any) -> tuple[float, ...]:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (float(v),)
    if not isinstance(v, (list, tuple, np.ndarray)):
        raise TypeError(f"expected a list of numbers, got {v!r}")
    return tuple(_float(x) for x in v)


def _array(v: Any) -> np.ndarray:
    arr = np.array(v)  # copy: attributes are immutable
    arr.setflags(write=False)
    return arr


def _dtype(v: Any) -> DType:
    return as_dtype(v)


_NORMALIZE = {
    "int": _int,
    "float": _float,
    "bool": _bool,
    "str": _str,
    "dtype": _dtype,
    "ints": _ints,
    "floats": _floats,
    "array": _array,
}


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: name, kind, default (``REQUIRED`` if none), allowed choices."""

    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple[Any, ...] | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind.rstrip("?") not in KINDS:
            raise ValueError(f"unknown attribute kind {self.kind!r}")

    @property
    def optional(self) -> bool:
        return self.kind.endswith("?")

    def normalize(self, value: Any) -> Any:
        if value is None and self.optional:
            return None
        value = _NORMALIZE[self.kind.rstrip("?")](value)
        if self.choices is not None and value not in self.choices:
            raise TypeError(f"{value!r} is not one of {', '.join(map(repr, self.choices))}")
        return value


def _freeze_key(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
        return ("ndarray", value.dtype.str, value.shape, digest)
    if isinstance(value, float) and value != value:  # NaN equals itself in attributes
        return ("nan",)
    return value


class Attrs(Mapping[str, Any]):
    """Canonical attribute set: normalized values, sorted names, hashable, immutable."""

    __slots__ = ("_hash", "_items", "_key")

    def __init__(self, items: "Mapping[str, Any] | None" = None) -> None:
        pairs = tuple(sorted((items or {}).items()))
        self._items = pairs
        self._key = tuple((k, _freeze_key(v)) for k, v in pairs)
        self._hash = hash(self._key)

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Attrs):
            return self._key == other._key
        if isinstance(other, Mapping):
            return self == Attrs(other)
        return NotImplemented

    def __repr__(self) -> str:
        return "Attrs(" + ", ".join(f"{k}={format_value(v)}" for k, v in self._items) + ")"

    @property
    def key(self) -> tuple:
        return self._key

    def replace(self, **changes: Any) -> "Attrs":
        return Attrs({**dict(self._items), **changes})


def format_value(v: Any) -> str:
    if isinstance(v, np.ndarray):
        if v.size <= 8:
            return f"array({v.tolist()}, {v.dtype.name})"
        return f"array(<{v.dtype.name}{list(v.shape)}>)"
    if isinstance(v, DType):
        return v.value
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, tuple):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    return repr(v)


def normalize_attrs(schema: tuple[Attr, ...], given: Mapping[str, Any], op_id: str) -> Attrs:
    """Validate ``given`` against ``schema``: unknown names, missing required, wrong kinds."""
    names = {a.name for a in schema}
    for key in given:
        if key not in names:
            raise GraphError(
                f"unknown attribute '{key}' for {op_id}; "
                + (did_you_mean(key, names) if names else "this op takes no attributes"),
                op=op_id,
            )
    out: dict[str, Any] = {}
    for a in schema:
        if a.name in given:
            raw = given[a.name]
        elif a.default is REQUIRED:
            raise GraphError(f"missing required attribute '{a.name}' ({a.kind})", op=op_id)
        else:
            raw = a.default
        try:
            out[a.name] = a.normalize(raw)
        except (TypeError, ValueError) as exc:
            raise GraphError(f"attribute '{a.name}' ({a.kind}): {exc}", op=op_id) from None
    return Attrs(out)
