"""Rewrite rules: ``(pattern, fn)`` pairs indexed by op ID, applied by one small driver.

A rule is a module-level function ``fn(node, view) -> Node | Ref | None``:

- ``None``: the rule does not apply;
- a ``Ref``: the node's (single) value *is* that existing value; the node goes away;
- a ``Node``: the replacement (same ID, same output types), offered to the rules again.

``pattern`` is an op ID or a collection of op IDs (e.g. ``having("commutative")``) or ``"*"``.
The driver walks the graph once in program order, so a rule sees its inputs' producers
already rewritten; each rule records its name and where it is defined so ``--explain`` can
say which rule fired.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from caramba.errors import VerificationError
from caramba.ir.graph import Graph, Node, Ref
from caramba.ir.types import Effect, ValueType

RuleFn = Callable[[Node, "View"], "Node | Ref | None"]


@dataclass(frozen=True)
class Rule:
    pattern: frozenset[str]
    fn: RuleFn
    name: str
    where: str

    def __str__(self) -> str:
        return f"{self.name} ({self.where})"


def rule(pattern: "str | Iterable[str]", fn: RuleFn) -> Rule:
    ops = frozenset({pattern} if isinstance(pattern, str) else pattern)
    try:
        line = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):  # pragma: no cover - builtins
        line = 0
    return Rule(ops, fn, fn.__name__, f"{fn.__module__}:{line}")


class RuleSet:
    """Rules indexed by op ID; ``"*"`` rules are tried on every node after the specific ones."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = tuple(rules)
        self._by_op: dict[str, list[Rule]] = {}
        self._any: list[Rule] = []
        for r in self.rules:
            if "*" in r.pattern:
                self._any.append(r)
            for op in r.pattern - {"*"}:
                self._by_op.setdefault(op, []).append(r)

    def for_op(self, op: str) -> list[Rule]:
        return self._by_op.get(op, []) + self._any


class View:
    """What a rule may look at: producers (already rewritten) and their constants."""

    def __init__(self, nodes: Mapping[str, Node], positions: Mapping[str, int]) -> None:
        self._nodes = nodes
        self._pos = positions

    def position(self, node_id: str) -> int:
        """Index of the producer in the rewritten graph (program order)."""
        return self._pos[node_id]

    def producer(self, ref: Ref) -> Node:
        return self._nodes[ref.node]

    def type(self, ref: Ref) -> ValueType:
        return self._nodes[ref.node].types[ref.index]

    def constant(self, ref: Ref) -> np.ndarray | None:
        n = self._nodes[ref.node]
        return n.attrs["value"] if n.op == "graph.constant" else None

    def is_constant_equal(self, ref: Ref, value: float) -> bool:
        """Is ``ref`` a constant whose every element equals ``value``?"""
        c = self.constant(ref)
        return c is not None and c.size > 0 and bool(np.all(c == value))


MAX_REWRITES_PER_NODE = 16


def apply_rules(graph: Graph, rules: RuleSet) -> tuple[Graph, Counter]:
    """Rewrite ``graph`` with ``rules``; returns the new graph and how often each rule fired."""
    fired: Counter = Counter()
    subst: dict[Ref, Ref] = {}
    nodes: dict[str, Node] = {}
    positions: dict[str, int] = {}
    out: list[Node] = []
    view = View(nodes, positions)
    for node in graph.nodes:
        if any(r in subst for r in node.inputs):
            node = node.replace(inputs=tuple(subst.get(r, r) for r in node.inputs))
        for _ in range(MAX_REWRITES_PER_NODE):
            result = _first(rules, node, view)
            if result is None:
                break
            r, new = result
            fired[str(r)] += 1
            if isinstance(new, Ref):
                if node.effect is not Effect.pure or len(node.types) != 1:
                    raise VerificationError(f"rule {r} replaced a {node.effect} / multi-output node", node=node.id, op=node.op)
                if view.type(new) != node.types[0]:
                    raise VerificationError(f"rule {r} replaced {node.types[0]} by {view.type(new)}", node=node.id, op=node.op)
                subst[Ref(node.id)] = new
                node = None
                break
            if new.types != node.types or new.id != node.id:
                raise VerificationError(f"rule {r} changed the ID or types of the node", node=node.id, op=node.op)
            node = new
        if node is not None:
            nodes[node.id] = node
            positions[node.id] = len(out)
            out.append(node)
    outputs = {k: subst.get(v, v) for k, v in graph.outputs.items()}
    if not fired:
        return graph, fired
    return graph.rebuilt(out, outputs), fired


def _first(rules: RuleSet, node: Node, view: View):
    for r in rules.for_op(node.op):
        new = r.fn(node, view)
        if new is not None and new is not node:
            return r, new
    return None


def fired_lines(fired: Counter) -> list[str]:
    return [f"{n}x {name}" for name, n in sorted(fired.items(), key=lambda kv: (-kv[1], kv[0]))]
