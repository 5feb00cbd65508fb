"""OpDef: one record per op, and the registry that maps op IDs to them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from caramba.errors import GraphError, did_you_mean
from caramba.ir.attrs import Attr, Attrs, normalize_attrs
from caramba.ir.types import Effect, ValueType

InferFn = Callable[[tuple[ValueType, ...], Attrs], tuple[ValueType, ...]]


@dataclass(frozen=True)
class OpDef:
    """Everything the IR knows about one op.

    ``id`` is ``family.name``; ``arity`` is an exact count or ``(min, max)`` with ``max=None``
    for variadic ops; ``infer`` maps input types and attributes to output types and raises
    ``GraphError`` (with a message, not a location: the builder adds the node) on misuse;
    ``aliases`` lists ``(output, input)`` pairs a backend may implement as views;
    ``traits`` are facts passes read (``elementwise``, ``commutative``, ...).
    """

    id: str
    infer: InferFn
    arity: int | tuple[int, int | None]
    attrs: tuple[Attr, ...] = ()
    effect: Effect = Effect.pure
    version: int = 1
    aliases: tuple[tuple[int, int], ...] = ()
    traits: frozenset[str] = frozenset()
    differentiable: bool = True
    doc: str = ""
    attr_index: Mapping[str, Attr] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if "." not in self.id:
            raise ValueError(f"op ID {self.id!r} must be 'family.name'")
        object.__setattr__(self, "attr_index", {a.name: a for a in self.attrs})

    @property
    def family(self) -> str:
        return self.id.rsplit(".", 1)[0]

    @property
    def name(self) -> str:
        return self.id.rsplit(".", 1)[1]

    def make_attrs(self, given: Mapping[str, Any]) -> Attrs:
        return normalize_attrs(self.attrs, given, self.id)

    def check_arity(self, n: int) -> None:
        lo, hi = (self.arity, self.arity) if isinstance(self.arity, int) else self.arity
        if n < lo or (hi is not None and n > hi):
            want = str(lo) if lo == hi else f"{lo}..{'' if hi is None else hi}"
            raise GraphError(f"{self.id} takes {want} inputs, got {n}", op=self.id)


REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    if opdef.id in REGISTRY:
        raise ValueError(f"op {opdef.id} registered twice")
    REGISTRY[opdef.id] = opdef
    return opdef


def get_op(op_id: str) -> OpDef:
    _ensure_ops_loaded()
    try:
        return REGISTRY[op_id]
    except KeyError:
        raise GraphError(f"unknown op '{op_id}'; {did_you_mean(op_id, REGISTRY)}", op=op_id) from None


def all_ops() -> dict[str, OpDef]:
    _ensure_ops_loaded()
    return dict(REGISTRY)


def having(trait: str) -> frozenset[str]:
    """Op IDs carrying ``trait`` (e.g. ``having("commutative")``)."""
    _ensure_ops_loaded()
    return frozenset(k for k, v in REGISTRY.items() if trait in v.traits)


def _ensure_ops_loaded() -> None:
    import caramba.ops  # noqa: F401  (registers every family)
