"""The IR verifier: every graph is checked before and after the compiler pipeline."""

from __future__ import annotations

from caramba.errors import CarambaError, VerificationError
from caramba.ir.graph import Graph, Node
from caramba.ir.opdef import REGISTRY, _ensure_ops_loaded
from caramba.ir.printer import excerpt
from caramba.ir.types import Effect


def verify(g: Graph, *, context: str = "") -> Graph:
    """Check every invariant of ``g``; raise VerificationError naming the first bad node.

    Checks: known op and version, arity, attribute schema and canonical form, type inference
    agrees with recorded types, unique IDs, inputs defined earlier (no cycles, no dangling
    references), state reads/writes refer to declared state of the right type, outputs exist.
    """
    _ensure_ops_loaded()
    seen: dict[str, Node] = {}
    for node in g.nodes:
        try:
            _verify_node(g, node, seen)
        except CarambaError as exc:
            where = f" (after {context})" if context else ""
            raise VerificationError(
                f"{exc.message}{where}\n{excerpt(g, node.id)}",
                node=node.id,
                op=node.op,
                origin=node.origin,
            ) from None
        seen[node.id] = node
    for name, ref in g.outputs.items():
        src = seen.get(ref.node)
        if src is None or ref.index >= len(src.types):
            raise VerificationError(f"output '{name}' refers to missing value {ref}")
    return g


def _verify_node(g: Graph, node: Node, seen: dict[str, Node]) -> None:
    if node.id in seen:
        raise VerificationError("duplicate node ID")
    opdef = REGISTRY.get(node.op)
    if opdef is None:
        raise VerificationError(f"unknown op '{node.op}'")
    if node.version != opdef.version:
        raise VerificationError(
            f"op version {node.version} but this caramba implements version {opdef.version}"
        )
    opdef.check_arity(len(node.inputs))
    canon = opdef.make_attrs(dict(node.attrs))
    if canon != node.attrs:
        raise VerificationError(f"attributes are not canonical: {node.attrs} vs {canon}")
    in_types = []
    for ref in node.inputs:
        src = seen.get(ref.node)
        if src is None:
            kind = "later" if g.has_node(ref.node) else "missing"
            raise VerificationError(f"input {ref} refers to a {kind} node (cycle or dangling edge)")
        if ref.index >= len(src.types):
            raise VerificationError(f"input {ref} names output {ref.index} of a {len(src.types)}-output node")
        in_types.append(src.types[ref.index])
    inferred = tuple(opdef.infer(tuple(in_types), node.attrs))
    if inferred != node.types:
        raise VerificationError(
            f"recorded types {[str(t) for t in node.types]} disagree with inferred "
            f"{[str(t) for t in inferred]}"
        )
    if opdef.effect in (Effect.state_read, Effect.state_write):
        decl = g.state.get(node.attrs["name"])
        if decl is None:
            raise VerificationError(f"state '{node.attrs['name']}' is not declared")
        t = node.types[0] if opdef.effect is Effect.state_read else in_types[0]
        if t != decl.type:
            raise VerificationError(f"state '{decl.name}' is {decl.type} but node uses {t}")
    if node.precision is not None and not node.precision.is_float:
        raise VerificationError(f"precision {node.precision} is not a float type")
