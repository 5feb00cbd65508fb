"""Capabilities: what a backend claims. Lowering and fusion read only this."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from caramba.ir.dtypes import DType, rank_of_precision
from caramba.ir.graph import Node

ShapeRule = Callable[[Node], "str | None"]  # returns the reason a node is refused, or None


@dataclass(frozen=True)
class Capabilities:
    """A backend's contract with the compiler.

    ``ops`` maps op ID -> dtypes its kernel handles (every input and output dtype of a node
    must be in the set); ``precision`` maps op ID or family -> the precision that backend
    computes at (``"*"`` is the default); ``fusions`` lists (pattern, dtype) pairs the backend
    has fused kernels for; ``shape_rules`` refuse shapes a kernel cannot take; ``state`` says
    whether graphs may read and write resident state.
    """

    ops: Mapping[str, frozenset[DType]]
    precision: Mapping[str, DType] = field(default_factory=lambda: {"*": DType.float64})
    fusions: frozenset[tuple[str, DType]] = frozenset()
    shape_rules: Mapping[str, ShapeRule] = field(default_factory=dict)
    state: bool = True
    buffers: frozenset[str] = frozenset()  # ops whose kernels write into a planned output buffer (memory pass)

    def supports(self, op_id: str) -> bool:
        return op_id in self.ops

    def dtypes(self, op_id: str) -> frozenset[DType]:
        return self.ops.get(op_id, frozenset())

    def precision_for(self, op_id: str) -> DType:
        if op_id in self.precision:
            return self.precision[op_id]
        family = op_id.rsplit(".", 1)[0]
        return self.precision.get(family, self.precision.get("*", DType.float64))

    def offers(self, op_id: str, required: DType) -> bool:
        """Does this backend compute ``op_id`` at least as precisely as ``required``?"""
        return rank_of_precision(self.precision_for(op_id)) >= rank_of_precision(required)

    def can_fuse(self, pattern: str, dtype: DType) -> bool:
        return (pattern, dtype) in self.fusions
