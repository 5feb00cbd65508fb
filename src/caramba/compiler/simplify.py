"""simplify: algebraic identities that hold exactly in IEEE arithmetic.

x*1, 1*x, x+0, x-0, x/1, x**1 -> x (only when the constant does not broadcast x to a larger
shape); f(f(x)) -> x for involutions (neg, logical_not); f(f(x)) -> f(x) for idempotent
unary ops; f(x, x) -> x for idempotent binary ops; transpose∘transpose -> one transpose (or
none); reshape∘reshape -> one reshape; no-op transpose/reshape/broadcast/cast/clamp/slice
-> x; cast(cast(x, wider), back) -> x when the wider type holds every value exactly.

Nothing here changes a value: x*0 -> 0 and x-x -> 0 are *not* identities (NaN, inf).
"""

from __future__ import annotations

from caramba.compiler.passes import PassContext, PassResult
from caramba.compiler.rewrite import RuleSet, View, apply_rules, fired_lines, rule
from caramba.ir.dtypes import DType
from caramba.ir.graph import Node, Ref
from caramba.ir.opdef import get_op, having
from caramba.ops.shape import slice_plan


def _same_type(view: View, ref: Ref, node: Node) -> bool:
    return view.type(ref) == node.types[0]


def _identity_operand(node: Node, view: View, value: float, sides: tuple[int, ...]) -> Ref | None:
    """The other operand, if input ``side`` is a constant equal to ``value`` everywhere."""
    for side in sides:
        c, x = node.inputs[side], node.inputs[1 - side]
        if view.is_constant_equal(c, value) and _same_type(view, x, node):
            return x
    return None


def mul_one(node: Node, view: View) -> Ref | None:
    """x * 1 -> x, 1 * x -> x"""
    return _identity_operand(node, view, 1, (1, 0))


def add_zero(node: Node, view: View) -> Ref | None:
    """x + 0 -> x, 0 + x -> x"""
    return _identity_operand(node, view, 0, (1, 0))


def sub_zero(node: Node, view: View) -> Ref | None:
    """x - 0 -> x"""
    return _identity_operand(node, view, 0, (1,))


def div_one(node: Node, view: View) -> Ref | None:
    """x / 1 -> x"""
    return _identity_operand(node, view, 1, (1,))


def pow_one(node: Node, view: View) -> Ref | None:
    """x ** 1 -> x"""
    return _identity_operand(node, view, 1, (1,))


def involution(node: Node, view: View) -> Ref | None:
    """f(f(x)) -> x for f with the 'involution' trait (neg, logical_not)."""
    inner = view.producer(node.inputs[0])
    if inner.op == node.op and inner.attrs == node.attrs and _same_type(view, inner.inputs[0], node):
        return inner.inputs[0]
    return None


def idempotent_unary(node: Node, view: View) -> Ref | None:
    """f(f(x)) -> f(x) for unary f with the 'idempotent' trait (abs, relu, floor, ...)."""
    if len(node.inputs) != 1:
        return None
    inner = view.producer(node.inputs[0])
    if inner.op == node.op and inner.attrs == node.attrs and inner.precision == node.precision:
        return node.inputs[0]
    return None


def idempotent_binary(node: Node, view: View) -> Ref | None:
    """f(x, x) -> x for binary f with the 'idempotent' trait (maximum, logical_and, ...)."""
    if len(node.inputs) == 2 and node.inputs[0] == node.inputs[1] and _same_type(view, node.inputs[0], node):
        return node.inputs[0]
    return None


def transpose_identity(node: Node, view: View) -> Ref | None:
    perm = node.attrs["perm"]
    if perm is not None and tuple(perm) == tuple(range(len(perm))):
        return node.inputs[0]
    return None


def transpose_transpose(node: Node, view: View) -> Node | Ref | None:
    """transpose(transpose(x, p), q) -> transpose(x, p∘q), or x when that is the identity."""
    inner = view.producer(node.inputs[0])
    p, q = inner.attrs.get("perm"), node.attrs["perm"]
    if inner.op != "shape.transpose" or p is None or q is None:
        return None
    composed = tuple(p[k] for k in q)
    if composed == tuple(range(len(composed))):
        return inner.inputs[0]
    attrs = get_op("shape.transpose").make_attrs({"perm": composed})
    return node.replace(inputs=inner.inputs, attrs=attrs)


def reshape_identity(node: Node, view: View) -> Ref | None:
    return node.inputs[0] if _same_type(view, node.inputs[0], node) else None


def reshape_reshape(node: Node, view: View) -> Node | None:
    """reshape(reshape(x)) -> reshape(x): row-major reshapes compose."""
    inner = view.producer(node.inputs[0])
    if inner.op != "shape.reshape":
        return None
    return node.replace(inputs=inner.inputs)


def broadcast_identity(node: Node, view: View) -> Ref | None:
    return node.inputs[0] if _same_type(view, node.inputs[0], node) else None


def cast_identity(node: Node, view: View) -> Ref | None:
    """cast to the dtype x already has -> x"""
    return node.inputs[0] if _same_type(view, node.inputs[0], node) else None


# (narrow, wide): every value of ``narrow`` is exactly a value of ``wide`` and casting back
# returns it unchanged.
_LOSSLESS = {
    (DType.float16, DType.float32), (DType.float16, DType.float64), (DType.float32, DType.float64),
    (DType.bfloat16, DType.float32), (DType.bfloat16, DType.float64),
    (DType.int8, DType.int32), (DType.int8, DType.int64), (DType.int32, DType.int64),
    (DType.uint8, DType.int32), (DType.uint8, DType.int64), (DType.int8, DType.float32),
    (DType.int8, DType.float64), (DType.uint8, DType.float32), (DType.uint8, DType.float64),
    (DType.int32, DType.float64), (DType.bool, DType.float64), (DType.bool, DType.float32),
    (DType.bool, DType.int64), (DType.bool, DType.int32),
}


def cast_roundtrip(node: Node, view: View) -> Ref | None:
    """cast(cast(x, wide), narrow) -> x when ``wide`` holds every ``narrow`` value exactly."""
    inner = view.producer(node.inputs[0])
    if inner.op != "math.cast":
        return None
    x = inner.inputs[0]
    if _same_type(view, x, node) and (view.type(x).dtype, inner.types[0].dtype) in _LOSSLESS:
        return x
    return None


def clamp_unbounded(node: Node, view: View) -> Ref | None:
    if node.attrs["min"] is None and node.attrs["max"] is None:
        return node.inputs[0]
    return None


def slice_full(node: Node, view: View) -> Ref | None:
    t = view.type(node.inputs[0])
    if all(p == (0, d, 1) for p, d in zip(slice_plan(t, node.attrs), t.shape, strict=True)):
        return node.inputs[0]
    return None


RULES = RuleSet([
    rule("math.mul", mul_one),
    rule("math.add", add_zero),
    rule("math.sub", sub_zero),
    rule("math.div", div_one),
    rule("math.pow", pow_one),
    rule(having("involution"), involution),
    rule(having("idempotent") - having("commutative"), idempotent_unary),
    rule(having("idempotent") & having("commutative"), idempotent_binary),
    rule("shape.transpose", transpose_identity),
    rule("shape.transpose", transpose_transpose),
    rule("shape.reshape", reshape_identity),
    rule("shape.reshape", reshape_reshape),
    rule("shape.broadcast_to", broadcast_identity),
    rule("math.cast", cast_identity),
    rule("math.cast", cast_roundtrip),
    rule("math.clamp", clamp_unbounded),
    rule("shape.slice", slice_full),
])


def simplify(graph, ctx: PassContext) -> PassResult:
    new, fired = apply_rules(graph, RULES)
    return PassResult(new, bool(fired), fired_lines(fired))
