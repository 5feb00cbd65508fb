"""Pass interface: every pass is ``(graph, ctx) -> PassResult``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from caramba.ir.graph import Graph

if TYPE_CHECKING:
    from caramba.compute.capabilities import Capabilities


@dataclass
class PassResult:
    graph: Graph
    changed: bool
    diagnostics: list[str] = field(default_factory=list)


@dataclass
class PassContext:
    """What passes may know about the target: its capabilities and name, nothing else."""

    capabilities: "Capabilities"
    backend: str
    targets: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)
    # Results a pass leaves for later passes and the backend (e.g. the memory plan).
    artifacts: dict[str, Any] = field(default_factory=dict)


PassFn = Callable[[Graph, PassContext], PassResult]


@dataclass(frozen=True)
class Stage:
    name: str
    fn: PassFn
    why: str
    optional: bool = True  # may be disabled by name
