"""Family constructors: most ops are one line (``unary``, ``binary``, ``reduction``, ...).

Each constructor registers an OpDef and returns the user-facing function, so an op's
definition, type rule and Python API sit together in its family file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from caramba.errors import GraphError
from caramba.ir.attrs import Attr, Attrs
from caramba.ir.dtypes import ALL, FLOATS, DType
from caramba.ir.graph import Value, current_graph, lift
from caramba.ir.opdef import InferFn, OpDef, register
from caramba.ir.types import Effect, ValueType

# ---- shape helpers used by type rules ---------------------------------------------------


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting; raises GraphError naming both shapes."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise GraphError(
                "shapes " + " and ".join(str(list(s)) for s in shapes) + " do not broadcast"
            )
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def norm_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise GraphError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def norm_axes(axes: Iterable[int] | None, rank: int) -> tuple[int, ...]:
    """Normalize ``axes`` (None = all) to sorted non-negative axes; rejects repeats."""
    if axes is None:
        return tuple(range(rank))
    out = [norm_axis(a, rank) for a in axes]
    if len(set(out)) != len(out):
        raise GraphError(f"repeated axis in {list(axes)}")
    return tuple(sorted(out))


def require_dtype(op_id: str, t: ValueType, allowed: frozenset[DType], what: str = "input") -> None:
    if t.dtype not in allowed:
        raise GraphError(
            f"{op_id} does not accept {what} of dtype {t.dtype}; accepts "
            + ", ".join(sorted(d.value for d in allowed)),
            hint="convert with ops.cast(x, dtype=...)" if allowed & FLOATS else None,
        )


def same_dtype(op_id: str, types: tuple[ValueType, ...]) -> DType:
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1:
        raise GraphError(
            f"{op_id} needs inputs of one dtype, got {', '.join(str(t) for t in types)}",
            hint="caramba never promotes dtypes implicitly; cast one input with ops.cast",
        )
    return types[0].dtype


# ---- the op function every constructor returns ------------------------------------------


def op_function(opdef: OpDef, scalars_like: tuple[int, ...] | None = None) -> Callable[..., Any]:
    """The Python API for ``opdef``: ``fn(*inputs, name=None, precision=None, **attrs)``.

    Python/NumPy scalars among the inputs become constants of the first value's dtype (with
    ``scalars_like``: of the first value among those inputs, e.g. where's branches, never its
    bool condition); trailing ``None`` inputs are dropped (optional inputs).
    """

    def fn(*inputs: Any, name: str | None = None, precision: Any = None, origin: Any = None, **attrs: Any):
        items = list(inputs)
        while items and items[-1] is None:
            items.pop()
        like = next((x for x in items if isinstance(x, Value)), None)
        if scalars_like is not None:  # scalars take these inputs' dtype (where's branches, not its condition)
            typed = [items[k] for k in scalars_like if k < len(items) and isinstance(items[k], Value)]
            if not typed and any(k < len(items) for k in scalars_like):
                raise GraphError(f"{opdef.id}: inputs {list(scalars_like)} are all Python scalars, so nothing says "
                                 "their dtype", op=opdef.id, hint="give one of them as a graph value (ops.constant or "
                                 "ops.cast) of the dtype you want")
            like = typed[0] if typed else like
        g = like.graph if like is not None else current_graph()
        if like is not None:
            items = [x if isinstance(x, Value) else lift(x, like) for x in items]
        elif items:
            raise GraphError(f"{opdef.id}: no graph value among the inputs", op=opdef.id)
        return g.call(opdef.id, items, attrs, id=name, precision=precision, origin=origin)

    fn.__name__ = opdef.name
    fn.__qualname__ = opdef.name
    fn.__doc__ = opdef.doc or f"The {opdef.id} op."
    fn.opdef = opdef  # type: ignore[attr-defined]
    return fn


def define(
    op_id: str,
    infer: InferFn,
    arity: int | tuple[int, int | None],
    attrs: Iterable[Attr] = (),
    *,
    effect: Effect = Effect.pure,
    traits: Iterable[str] = (),
    differentiable: bool = True,
    aliases: Iterable[tuple[int, int]] = (),
    version: int = 1,
    doc: str = "",
    scalars_like: tuple[int, ...] | None = None,
) -> Callable[..., Any]:
    opdef = register(
        OpDef(
            op_id,
            infer,
            arity,
            tuple(attrs),
            effect,
            version,
            tuple(aliases),
            frozenset(traits),
            differentiable,
            doc,
        )
    )
    return op_function(opdef, scalars_like)


def unary(
    op_id: str,
    dtypes: frozenset[DType] = FLOATS,
    attrs: Iterable[Attr] = (),
    *,
    out_dtype: DType | None = None,
    traits: Iterable[str] = (),
    differentiable: bool = True,
    doc: str = "",
) -> Callable[..., Any]:
    """Elementwise op of one input: same shape; dtype from ``dtypes``; output dtype kept."""

    def infer(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
        require_dtype(op_id, ins[0], dtypes)
        return (ins[0] if out_dtype is None else ins[0].with_dtype(out_dtype),)

    return define(op_id, infer, 1, attrs, traits={"elementwise", *traits}, differentiable=differentiable, doc=doc)


def binary(
    op_id: str,
    dtypes: frozenset[DType] = FLOATS,
    attrs: Iterable[Attr] = (),
    *,
    out_dtype: DType | None = None,
    traits: Iterable[str] = (),
    differentiable: bool = True,
    doc: str = "",
) -> Callable[..., Any]:
    """Elementwise op of two inputs with NumPy broadcasting and one shared dtype."""

    def infer(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
        d = same_dtype(op_id, ins)
        require_dtype(op_id, ins[0], dtypes)
        shape = broadcast_shapes(ins[0].shape, ins[1].shape)
        return (ValueType(shape, d if out_dtype is None else out_dtype),)

    return define(op_id, infer, 2, attrs, traits={"elementwise", *traits}, differentiable=differentiable, doc=doc)


AXES = Attr("axes", "ints?", None, doc="axes to reduce (None: all)")
KEEPDIMS = Attr("keepdims", "bool", False, doc="keep reduced axes with size 1")


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def reduction(
    op_id: str,
    dtypes: frozenset[DType] = FLOATS,
    extra: Iterable[Attr] = (),
    *,
    nonempty: bool = False,
    traits: Iterable[str] = (),
    differentiable: bool = True,
    doc: str = "",
) -> Callable[..., Any]:
    """Reduction over ``axes`` (None: all) with ``keepdims``; output dtype kept."""

    def infer(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
        t = ins[0]
        require_dtype(op_id, t, dtypes)
        axes = norm_axes(a["axes"], t.rank)
        if nonempty and any(t.shape[i] == 0 for i in axes):
            raise GraphError(f"{op_id} of an empty axis has no identity")
        return (ValueType(reduced_shape(t.shape, axes, a["keepdims"]), t.dtype),)

    return define(
        op_id,
        infer,
        1,
        (AXES, KEEPDIMS, *extra),
        traits={"reduction", *traits},
        differentiable=differentiable,
        doc=doc,
    )


__all__ = [
    "ALL", "AXES", "KEEPDIMS", "Attr", "binary", "broadcast_shapes", "define", "norm_axes",
    "norm_axis", "op_function", "reduced_shape", "reduction", "require_dtype", "same_dtype", "unary",
]
