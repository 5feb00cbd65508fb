"""canonicalize: one spelling per meaning, so CSE and the pattern rules see equal things equal.

- attribute normalization: negative axes become non-negative, ``axes=None`` / ``perm=None``
  become explicit, ``reshape`` loses its ``-1``, ``squeeze``/``expand_dims`` become ``reshape``;
- commutative ops (``having("commutative")``) order their inputs: constants last, otherwise
  earlier producers first;
- folding: a pure node whose inputs are all constants and whose result is tiny is evaluated on
  the host (with the cpu reference kernels) and becomes a constant.
"""

from __future__ import annotations

from contextvars import ContextVar

from caramba.compiler.passes import Evaluator, PassContext, PassResult
from caramba.compiler.rewrite import RuleSet, View, apply_rules, fired_lines, rule
from caramba.ir.attrs import Attrs
from caramba.ir.graph import Node, Origin
from caramba.ir.opdef import get_op, having
from caramba.ir.types import Effect
from caramba.ops._define import norm_axes, norm_axis

FOLD_MAX_OUT = 64  # elements: "tiny" results are folded
FOLD_MAX_IN = 4096  # elements per input: folding never does real work at compile time


def _with_attrs(node: Node, **changes) -> Node | None:
    attrs = get_op(node.op).make_attrs({**dict(node.attrs), **changes})
    return None if attrs == node.attrs else node.replace(attrs=attrs)


def normalize_axes(node: Node, view: View) -> Node | None:
    """``axes`` (None: all) of a reduction or flip -> sorted non-negative axes."""
    rank = view.type(node.inputs[0]).rank
    return _with_attrs(node, axes=norm_axes(node.attrs["axes"], rank))


def normalize_axis(node: Node, view: View) -> Node | None:
    """``axis`` relative to the first input's rank -> non-negative."""
    rank = view.type(node.inputs[0]).rank
    return _with_attrs(node, axis=norm_axis(node.attrs["axis"], rank))


def normalize_fused_axis(node: Node, view: View) -> Node | None:
    """``axis`` of a fused op, relative to its output rank -> non-negative."""
    return _with_attrs(node, axis=norm_axis(node.attrs["axis"], node.types[0].rank))


def normalize_perm(node: Node, view: View) -> Node | None:
    rank = view.type(node.inputs[0]).rank
    perm = node.attrs["perm"]
    perm = tuple(reversed(range(rank))) if perm is None else tuple(norm_axis(p, rank) for p in perm)
    return _with_attrs(node, perm=perm)


def explicit_shape(node: Node, view: View) -> Node | None:
    """reshape's ``-1`` -> the inferred size."""
    return _with_attrs(node, shape=node.types[0].shape)


def squeeze_to_reshape(node: Node, view: View) -> Node | None:
    """squeeze / expand_dims only insert or drop size-1 axes: a row-major reshape."""
    return node.replace(op="shape.reshape", version=get_op("shape.reshape").version,
                        attrs=get_op("shape.reshape").make_attrs({"shape": node.types[0].shape}))


def _position(view: View, ref) -> tuple:
    return (view.constant(ref) is not None, view.position(ref.node), ref.index)


def commutative_order(node: Node, view: View) -> Node | None:
    """Commutative inputs in one order: constants last, else earlier producer first."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if _position(view, b) < _position(view, a):
        return node.replace(inputs=(b, a))
    return None


# Ops never folded: they have no value at compile time or are plumbing.
_NOT_FOLDED = frozenset({"graph.input", "graph.constant"})


def fold_constants(node: Node, view: View) -> Node | None:
    """Evaluate a tiny pure node whose inputs are all constants (host reference kernels)."""
    if node.op in _NOT_FOLDED or node.effect is not Effect.pure or len(node.types) != 1 or not node.inputs:
        return None
    if node.types[0].size > FOLD_MAX_OUT:
        return None
    consts = [view.constant(r) for r in node.inputs]
    if any(c is None or c.size > FOLD_MAX_IN for c in consts):
        return None
    evaluate = _EVALUATE.get()
    if evaluate is None:
        return None
    value = evaluate(node, [view.type(r) for r in node.inputs], consts)
    if value is None:
        return None
    note = f"folded {node.op}" + (f"; {node.origin.note}" if node.origin and node.origin.note else "")
    origin = Origin(**{**_origin_fields(node.origin), "note": note})
    return node.replace(
        op="graph.constant",
        version=get_op("graph.constant").version,
        inputs=(),
        attrs=Attrs({"value": value}),
        precision=None,
        origin=origin,
    )


def _origin_fields(o: Origin | None) -> dict:
    if o is None:
        return {}
    return {k: getattr(o, k) for k in Origin.__slots__}


# The host evaluator of this canonicalize run (``PassContext.evaluate``, from the runner):
# the compiler never imports a backend's kernels itself. None: nothing is folded.
_EVALUATE: ContextVar[Evaluator | None] = ContextVar("caramba_fold_evaluator", default=None)


_REDUCTIONS_WITH_AXES = frozenset(op for op in having("reduction") if "axes" in get_op(op).attr_index)
_AXIS_OF_INPUT = frozenset({
    "reduce.argmax", "reduce.argmin", "nn.softmax", "nn.log_softmax", "nn.layer_norm", "nn.rms_norm",
    "shape.concat", "shape.split", "shape.gather", "shape.scatter_add",
})

RULES = RuleSet([
    rule(_REDUCTIONS_WITH_AXES | {"shape.flip"}, normalize_axes),
    rule(_AXIS_OF_INPUT, normalize_axis),
    rule({"fused.softmax", "fused.layer_norm_residual"}, normalize_fused_axis),
    rule("shape.transpose", normalize_perm),
    rule("shape.reshape", explicit_shape),
    rule({"shape.squeeze", "shape.expand_dims"}, squeeze_to_reshape),
    rule(having("commutative"), commutative_order),
    rule("*", fold_constants),
])


def canonicalize(graph, ctx: PassContext) -> PassResult:
    token = _EVALUATE.set(ctx.evaluate)
    try:
        new, fired = apply_rules(graph, RULES)
    finally:
        _EVALUATE.reset(token)
    return PassResult(new, bool(fired), fired_lines(fired))
