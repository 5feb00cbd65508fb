"""Pass interface: every pass is ``(graph, ctx) -> PassResult``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from caramba.ir.graph import Graph, Node
from caramba.ir.types import ValueType

if TYPE_CHECKING:
    from caramba.compute.capabilities import Capabilities


@dataclass
class PassResult:
    graph: Graph
    changed: bool
    diagnostics: list[str] = field(default_factory=list)


@dataclass
class PassContext:
    """What passes may know about the target: its capabilities and name, and the runner's host
    evaluator for constant folding (``evaluate``; None: nothing is folded), nothing else."""

    capabilities: "Capabilities"
    backend: str
    targets: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)
    evaluate: "Evaluator | None" = None
    # Results a pass leaves for later passes and the backend (e.g. the memory plan).
    artifacts: dict[str, Any] = field(default_factory=dict)


PassFn = Callable[[Graph, PassContext], PassResult]
# (node, input types, constant input arrays) -> the node's value, or None when it cannot be computed
Evaluator = Callable[[Node, list[ValueType], list[np.ndarray]], "np.ndarray | None"]


@dataclass(frozen=True)
class Stage:
    name: str
    fn: PassFn
    why: str
    optional: bool = True  # may be disabled by name
