"""fused.*: the forms the ``fuse`` pass produces. Never written by hand; a backend runs them only
where its Capabilities declare the fusion legal (``caps.can_fuse(pattern, dtype)``).

- ``fused.elementwise(*inputs, expr)``: a chain of elementwise ops (with broadcasting and scalar
  constants), optionally ending in one reduction, as one kernel. ``expr`` carries the
  sub-expression (see ``Expr``); the type rule re-runs every step's own type rule, so the
  verifier checks a fused node as strictly as the nodes it replaced.
- ``fused.linear(x, w, bias?, activation)``: ``act(x @ w + bias)``. ``gelu`` is the exact erf
  form and ``gelu_tanh`` the tanh approximation: distinct values, never interchanged.
- ``fused.layer_norm_residual(x, r, gamma?, beta?)``: ``layer_norm(x + r)``; with ``with_sum``
  the sum ``x + r`` is a second output (the residual stream of a pre-LN block).
- ``fused.softmax(*inputs, expr, axis)``: ``softmax(prologue)`` where the prologue is an
  elementwise sub-expression (e.g. scores * scale + mask), computed row by row.
- ``fused.layer_norm_grad`` / ``fused.rms_norm_grad`` / ``fused.softmax_grad`` /
  ``fused.log_softmax_grad``: the VJP chains of the row ops (``autodiff/rules/nn.py``) as one
  node: dx, and for the norms dgamma / dbeta (sums over the leading axes) where the graph has them.
- ``fused.attention_probs(q, k)`` / ``fused.sdpa_probs(q, k, v)``: the probabilities sdpa's VJP
  recomputes, and (sdpa, probabilities) where the graph holds both (a train step): once.

Every fused node keeps the ID of the node whose value it computes and names the IDs it
replaced (in its steps and in its origin note), so errors point back to the source graph.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from caramba.errors import GraphError
from caramba.ir.attrs import Attr, Attrs, format_value
from caramba.ir.codec import _dec_value, _enc_value
from caramba.ir.dtypes import FLOATS
from caramba.ir.opdef import get_op
from caramba.ir.types import Effect, ValueType
from caramba.ops._define import broadcast_shapes, define, norm_axis, require_dtype, same_dtype
from caramba.ops.linalg import MATMUL_DTYPES, matmul_shape

# ---- the sub-expression carried by fused.elementwise / fused.softmax ---------------------

Arg = int | str  # int k: the fused node's input k; str: the ID of an earlier step


@dataclass(frozen=True)
class Step:
    """One op of a fused sub-expression: the replaced node's ID, op, version, args and attrs."""

    id: str
    op: str
    version: int
    args: tuple[Arg, ...]
    attrs: Attrs


@dataclass(frozen=True)
class Expr:
    """A straight-line elementwise program. ``out`` is a step ID (or an input index)."""

    steps: tuple[Step, ...]
    out: Arg

    def encode(self) -> str:
        """Canonical text (sorted keys, no spaces): equal programs give equal strings."""
        steps = [
            [s.id, s.op, s.version, list(s.args), {k: _enc_value(v) for k, v in s.attrs.items()}]
            for s in self.steps
        ]
        return json.dumps({"out": self.out, "steps": steps}, sort_keys=True, separators=(",", ":"), allow_nan=False)

    @property
    def reduction(self) -> Step | None:
        """The final reduction step, if the program ends in one."""
        if self.steps and isinstance(self.out, str) and self.steps[-1].id == self.out:
            last = self.steps[-1]
            if "reduction" in get_op(last.op).traits:
                return last
        return None

    def as_text(self) -> str:
        """``exp(mul(in0, 2.0))``-style rendering for explain output and errors."""
        by_id = {s.id: s for s in self.steps}

        def render(a: Arg, depth: int = 0) -> str:
            if isinstance(a, int):
                return f"in{a}"
            s = by_id[a]
            if s.op == "graph.constant":
                v = s.attrs["value"]
                return repr(v.item()) if v.size == 1 else format_value(v)
            if depth > 12:
                return f"%{a}"
            name = s.op.rsplit(".", 1)[1]
            extra = [f"{k}={format_value(v)}" for k, v in s.attrs.items()]
            return f"{name}({', '.join([render(x, depth + 1) for x in s.args] + extra)})"

        return render(self.out)


def decode_expr(text: str) -> Expr:
    """Parse (and validate the shape of) an ``expr`` attribute; cached by text."""
    return _decode(text)


@lru_cache(maxsize=4096)
def _decode(text: str) -> Expr:
    try:
        d = json.loads(text)
        steps = []
        for sid, op, version, args, attrs in d["steps"]:
            opdef = get_op(op)
            steps.append(Step(str(sid), op, int(version), tuple(args), opdef.make_attrs({k: _dec_value(v) for k, v in attrs.items()})))
        out = d["out"]
    except GraphError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise GraphError(f"malformed fused expression: {exc}") from None
    return Expr(tuple(steps), out)


def _is_scalar_constant(step: Step) -> bool:
    return step.op == "graph.constant" and step.attrs["value"].size == 1


# Ops a fused elementwise program may contain besides ops with the 'elementwise' trait:
# broadcasting is the identity on scalars, so it fuses like an elementwise op.
BROADCASTS = frozenset({"shape.broadcast_to"})


def infer_expr(op_id: str, ins: tuple[ValueType, ...], expr: Expr, allow_reduction: bool) -> ValueType:
    """Type of ``expr`` applied to ``ins``: every step's own type rule, in order."""
    env = expr_types(op_id, ins, expr, allow_reduction)
    return ins[expr.out] if isinstance(expr.out, int) else env[expr.out]


def expr_types(op_id: str, ins: tuple[ValueType, ...], expr: Expr, allow_reduction: bool = True) -> dict[str, ValueType]:
    """The type of every step of ``expr`` applied to ``ins`` (raises GraphError on misuse)."""
    env: dict[str, ValueType] = {}
    used = set()

    def type_of(a: Arg) -> ValueType:
        if isinstance(a, int):
            if not 0 <= a < len(ins):
                raise GraphError(f"{op_id}: step refers to input {a} of {len(ins)}")
            used.add(a)
            return ins[a]
        if a not in env:
            raise GraphError(f"{op_id}: step refers to '{a}' before it is defined")
        return env[a]

    for i, step in enumerate(expr.steps):
        opdef = get_op(step.op)
        if step.version != opdef.version:
            raise GraphError(f"{op_id}: step '{step.id}' uses {step.op} v{step.version}, this caramba has v{opdef.version}")
        if step.id in env:
            raise GraphError(f"{op_id}: duplicate step ID '{step.id}'")
        last = i == len(expr.steps) - 1 and step.id == expr.out
        if step.op == "graph.constant":
            if not _is_scalar_constant(step):
                raise GraphError(f"{op_id}: only one-element constants are embedded (step '{step.id}')")
        elif opdef.effect is not Effect.pure:
            raise GraphError(f"{op_id}: step '{step.id}' ({step.op}) is not pure")
        elif not ("elementwise" in opdef.traits or step.op in BROADCASTS or (allow_reduction and last and "reduction" in opdef.traits)):
            raise GraphError(f"{op_id}: {step.op} (step '{step.id}') cannot be part of a fused elementwise program")
        opdef.check_arity(len(step.args))
        types = tuple(opdef.infer(tuple(type_of(a) for a in step.args), step.attrs))
        if len(types) != 1:
            raise GraphError(f"{op_id}: step '{step.id}' must have one output")
        env[step.id] = types[0]
    type_of(expr.out)
    if len(used) != len(ins):
        raise GraphError(f"{op_id}: inputs {sorted(set(range(len(ins))) - used)} are never used")
    return env


_EXPR = Attr("expr", "str", doc="the fused sub-expression (canonical JSON, see caramba.ops.fused.Expr)")


def _elementwise(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
    return (infer_expr("fused.elementwise", ins, decode_expr(a["expr"]), allow_reduction=True),)


elementwise = define(
    "fused.elementwise",
    _elementwise,
    (1, None),
    (_EXPR,),
    differentiable=False,
    doc="A chain of elementwise ops (optionally ending in a reduction) computed as one kernel.",
)


def _softmax(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
    t = infer_expr("fused.softmax", ins, decode_expr(a["expr"]), allow_reduction=False)
    require_dtype("fused.softmax", t, FLOATS)
    if t.rank == 0:
        raise GraphError("fused.softmax needs a prologue of rank >= 1")
    norm_axis(a["axis"], t.rank)
    return (t,)


softmax = define(
    "fused.softmax",
    _softmax,
    (1, None),
    (_EXPR, Attr("axis", "int", -1)),
    differentiable=False,
    doc="softmax(prologue(inputs)) along axis, the elementwise prologue computed in the same pass.",
)

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu", "tanh")


def _linear(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
    d = same_dtype("fused.linear", ins)
    require_dtype("fused.linear", ins[0], MATMUL_DTYPES)
    shape = matmul_shape(ins[0].shape, ins[1].shape)
    if len(ins) == 3 and broadcast_shapes(shape, ins[2].shape) != shape:
        raise GraphError(f"fused.linear bias {list(ins[2].shape)} must broadcast to the product {list(shape)}")
    if a["activation"] != "none":
        require_dtype("fused.linear", ins[0], FLOATS)
    return (ValueType(shape, d),)


linear = define(
    "fused.linear",
    _linear,
    (2, 3),
    (Attr("activation", "str", "none", choices=ACTIVATIONS, doc="gelu is exact (erf); gelu_tanh the tanh form"),),
    differentiable=False,
    doc="activation(x @ w + bias): one matmul into the output buffer plus a fused epilogue.",
)


def _layer_norm_residual(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
    x, r = ins[0], ins[1]
    same_dtype("fused.layer_norm_residual", ins)
    require_dtype("fused.layer_norm_residual", x, FLOATS)
    if x.shape != r.shape:
        raise GraphError(f"fused.layer_norm_residual needs x and residual of one shape, got {x} and {r}")
    if x.rank == 0:
        raise GraphError("fused.layer_norm_residual needs inputs of rank >= 1")
    axis = norm_axis(a["axis"], x.rank)
    for t in ins[2:]:
        if t.shape != x.shape[axis:]:
            raise GraphError(f"fused.layer_norm_residual gamma/beta must have shape {list(x.shape[axis:])}, got {list(t.shape)}")
    return (x, x) if a["with_sum"] else (x,)


layer_norm_residual = define(
    "fused.layer_norm_residual",
    _layer_norm_residual,
    (2, 4),
    (Attr("axis", "int", -1), Attr("eps", "float", 1e-5), Attr("with_sum", "bool", False, doc="also output x + r")),
    differentiable=False,
    doc="layer_norm(x + r, gamma, beta) in one pass; with_sum adds the output x + r.",
)


def expr_attr(expr: Expr) -> dict[str, Any]:
    """``{"expr": text}`` for building a fused node."""
    return {"expr": expr.encode()}


# ---- fusion patterns: what a backend declares in Capabilities.fusions as (pattern, dtype) ----
# A backend declares a pattern for every dtype it computes that fused form in, with no
# change of dtype or precision. The fuse pass fuses only what is declared.

LAYER_NORM_RESIDUAL = "fused.layer_norm_residual"
SOFTMAX = "fused.softmax"  # softmax with an elementwise prologue (whose ops need their own patterns)


def elementwise_pattern(op_id: str) -> str:
    """``op_id`` may be a step of a fused elementwise program (a reduction: its final step)."""
    return f"fused.elementwise:{op_id}"


def linear_pattern(activation: str) -> str:
    """matmul + bias (+ activation) as ``fused.linear`` with that ``activation``."""
    if activation not in ACTIVATIONS:
        raise GraphError(f"unknown fused.linear activation '{activation}'; valid: {', '.join(ACTIVATIONS)}")
    return f"fused.linear:{activation}"


def requirements(op_id: str, ins: tuple[ValueType, ...], attrs: Attrs) -> list[tuple[str, frozenset]]:
    """Every (pattern, dtypes) a backend must declare to compute this fused node: one per step
    of its program (the dtypes the step touches), plus the fused form itself."""
    from caramba.ir.dtypes import DType

    out: list[tuple[str, frozenset[DType]]] = []
    if op_id in ("fused.elementwise", "fused.softmax"):
        expr = decode_expr(attrs["expr"])
        types = expr_types(op_id, ins, expr, allow_reduction=op_id == "fused.elementwise")
        for s in expr.steps:
            if s.op == "graph.constant":
                continue
            touched = {types[s.id].dtype} | {(ins[a] if isinstance(a, int) else types[a]).dtype for a in s.args}
            out.append((elementwise_pattern(s.op), frozenset(touched)))
        if op_id == "fused.softmax":
            t = ins[expr.out] if isinstance(expr.out, int) else types[expr.out]
            out.append((SOFTMAX, frozenset({t.dtype})))
    elif op_id == "fused.linear":
        out.append((linear_pattern(attrs["activation"]), frozenset(t.dtype for t in ins)))
    elif op_id == "fused.layer_norm_residual":
        out.append((LAYER_NORM_RESIDUAL, frozenset(t.dtype for t in ins)))
    elif op_id in GRAD_OPS:
        out += grad_requirements(op_id, ins)
    elif op_id in CONV_GRAD_OPS:
        out += grad_requirements(op_id, ins)
    return out


# ---- backward row kernels: what the fuse pass makes of the VJP chains of nn.layer_norm,
# nn.rms_norm, nn.softmax and nn.log_softmax (autodiff/rules/nn.py) ----------------------------
# The VJP rules stay chains of primitive ops (every backend runs them, and they differentiate
# again); a backend that declares one of these patterns gets the chain as one node.

LAYER_NORM_GRAD = "fused.layer_norm_grad"
RMS_NORM_GRAD = "fused.rms_norm_grad"
SOFTMAX_GRAD = "fused.softmax_grad"
LOG_SOFTMAX_GRAD = "fused.log_softmax_grad"


def _norm_grad(op_id: str, centered: bool):
    def infer(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
        x, ct = ins[0], ins[1]
        same_dtype(op_id, ins)
        require_dtype(op_id, x, FLOATS)
        if x.shape != ct.shape:
            raise GraphError(f"{op_id} needs x and its cotangent of one shape, got {x} and {ct}")
        if x.rank == 0:
            raise GraphError(f"{op_id} needs inputs of rank >= 1")
        axis = norm_axis(a["axis"], x.rank)
        tail = ValueType(x.shape[axis:], x.dtype)
        if len(ins) == 3 and ins[2].shape != tail.shape:
            raise GraphError(f"{op_id} gamma must have shape {list(tail.shape)}, got {list(ins[2].shape)}")
        outs = [x]
        if a["with_dgamma"]:
            outs.append(tail)
        if centered and a["with_dbeta"]:
            outs.append(tail)
        return tuple(outs)

    return infer


_NORM_GRAD_ATTRS = (Attr("axis", "int", -1), Attr("eps", "float", 1e-5),
                    Attr("with_dgamma", "bool", False, doc="also output sum(ct * xhat) over the leading axes"))

layer_norm_grad = define(
    LAYER_NORM_GRAD,
    _norm_grad(LAYER_NORM_GRAD, True),
    (2, 3),
    _NORM_GRAD_ATTRS + (Attr("with_dbeta", "bool", False, doc="also output sum(ct) over the leading axes"),),
    differentiable=False,
    doc="(x, ct, gamma?) -> dx [, dgamma] [, dbeta]: the VJP of nn.layer_norm over axes axis.. in one row pass.",
)

rms_norm_grad = define(
    RMS_NORM_GRAD,
    _norm_grad(RMS_NORM_GRAD, False),
    (2, 3),
    _NORM_GRAD_ATTRS,
    differentiable=False,
    doc="(x, ct, gamma?) -> dx [, dgamma]: the VJP of nn.rms_norm over axes axis.. in one row pass.",
)


def _softmax_grad(op_id: str):
    def infer(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
        y, ct = ins
        same_dtype(op_id, ins)
        require_dtype(op_id, y, FLOATS)
        if y.shape != ct.shape:
            raise GraphError(f"{op_id} needs the forward output and its cotangent of one shape, got {y} and {ct}")
        if y.rank == 0:
            raise GraphError(f"{op_id} needs inputs of rank >= 1")
        norm_axis(a["axis"], y.rank)
        return (y,)

    return infer


softmax_grad = define(
    SOFTMAX_GRAD,
    _softmax_grad(SOFTMAX_GRAD),
    2,
    (Attr("axis", "int", -1),),
    differentiable=False,
    doc="(y, ct) -> y * (ct - sum(ct * y, axis)): the VJP of nn.softmax given its output y.",
)

log_softmax_grad = define(
    LOG_SOFTMAX_GRAD,
    _softmax_grad(LOG_SOFTMAX_GRAD),
    2,
    (Attr("axis", "int", -1),),
    differentiable=False,
    doc="(y, ct) -> ct - exp(y) * sum(ct, axis): the VJP of nn.log_softmax given its output y.",
)

GRAD_OPS = (LAYER_NORM_GRAD, RMS_NORM_GRAD, SOFTMAX_GRAD, LOG_SOFTMAX_GRAD)


def grad_requirements(op_id: str, ins: tuple[ValueType, ...]) -> list[tuple[str, frozenset]]:
    """The pattern a backend declares to compute one of ``GRAD_OPS`` (named as the op)."""
    return [(op_id, frozenset(t.dtype for t in ins))]


# ---- convolution backward: what the fuse pass makes of the input-gradient chain of the
# nn.conv1d / nn.conv2d VJP (dilate the cotangent by the stride, pad it fully, correlate with
# the flipped, group-transposed kernel, crop the padding) --------------------------------------

CONV_TRANSPOSE = "fused.conv_transpose"


def conv_out_size(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    """The output length of a convolution along one axis (``nn.conv*``'s type rule)."""
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def _conv_grad_attrs(op_id: str, nd: int, a: Attrs, extent: str) -> dict[str, tuple[int, ...]]:
    """stride, padding, dilation and ``extent`` (size or kernel), one entry per spatial axis."""
    per = {k: tuple(a[k]) for k in ("stride", "padding", "dilation", extent)}
    if any(len(v) != nd for v in per.values()):
        raise GraphError(f"{op_id}: stride, padding, dilation and {extent} need {nd} entries each, got {per}")
    if any(v <= 0 for k in ("stride", "dilation", extent) for v in per[k]) or any(v < 0 for v in per["padding"]):
        raise GraphError(f"{op_id}: stride, dilation and {extent} must be positive, padding >= 0, got {per}")
    return per


def _conv_transpose(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
    ct, w = ins
    same_dtype(CONV_TRANSPOSE, ins)
    require_dtype(CONV_TRANSPOSE, ct, FLOATS)
    nd = ct.rank - 2
    if nd not in (1, 2) or w.rank != ct.rank:
        raise GraphError(f"{CONV_TRANSPOSE} needs ct [N, O, *S] and w [O, C/g, *K] with 1 or 2 spatial axes, got {ct} and {w}")
    per = _conv_grad_attrs(CONV_TRANSPOSE, nd, a, "size")
    g = a["groups"]
    o, cg = w.shape[:2]
    if g <= 0 or o % g or ct.shape[1] != o:
        raise GraphError(f"{CONV_TRANSPOSE}: cotangent {list(ct.shape)}, weight {list(w.shape)} and groups={g} do not agree")
    for i in range(nd):
        want = conv_out_size(per["size"][i], w.shape[2 + i], per["stride"][i], per["padding"][i], per["dilation"][i])
        if want != ct.shape[2 + i]:
            raise GraphError(f"{CONV_TRANSPOSE}: a convolution of size {list(per['size'])} gives spatial axis {i} of "
                             f"{want}, the cotangent has {ct.shape[2 + i]}")
    return (ValueType((ct.shape[0], g * cg, *per["size"]), ct.dtype),)


conv_transpose = define(
    CONV_TRANSPOSE,
    _conv_transpose,
    2,
    (Attr("stride", "ints"), Attr("padding", "ints"), Attr("dilation", "ints"), Attr("groups", "int", 1),
     Attr("size", "ints", doc="the spatial shape of the convolution's input (the result's)")),
    differentiable=False,
    doc="(ct, w) -> dx: the input gradient of nn.conv1d / nn.conv2d (a transposed convolution), "
        "computed as w^T x cotangent columns scattered back (col2im), with no inserted zeros.",
)


CONV_WEIGHT_GRAD = "fused.conv_weight_grad"


def _conv_weight_grad(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
    x, ct = ins
    same_dtype(CONV_WEIGHT_GRAD, ins)
    require_dtype(CONV_WEIGHT_GRAD, x, FLOATS)
    nd = x.rank - 2
    if nd not in (1, 2) or ct.rank != x.rank or ct.shape[0] != x.shape[0]:
        raise GraphError(f"{CONV_WEIGHT_GRAD} needs x [N, C, *S] and ct [N, O, *So] with 1 or 2 spatial axes, got {x} and {ct}")
    per = _conv_grad_attrs(CONV_WEIGHT_GRAD, nd, a, "kernel")
    g = a["groups"]
    c, o = x.shape[1], ct.shape[1]
    if g <= 0 or c % g or o % g:
        raise GraphError(f"{CONV_WEIGHT_GRAD}: {c} input channels, {o} output channels and groups={g} do not agree")
    for i in range(nd):
        want = conv_out_size(x.shape[2 + i], per["kernel"][i], per["stride"][i], per["padding"][i], per["dilation"][i])
        if want != ct.shape[2 + i]:
            raise GraphError(f"{CONV_WEIGHT_GRAD}: a convolution of {list(x.shape)} with kernel {list(per['kernel'])} "
                             f"gives spatial axis {i} of {want}, the cotangent has {ct.shape[2 + i]}")
    return (ValueType((o, c // g, *per["kernel"]), x.dtype),)


conv_weight_grad = define(
    CONV_WEIGHT_GRAD,
    _conv_weight_grad,
    2,
    (Attr("stride", "ints"), Attr("padding", "ints"), Attr("dilation", "ints"), Attr("groups", "int", 1),
     Attr("kernel", "ints", doc="the weight's kernel shape")),
    differentiable=False,
    doc="(x, ct) -> dw: the weight gradient of nn.conv1d / nn.conv2d (the forward convolution's "
        "stride, padding, dilation, groups): cotangent x im2col(x)^T, one GEMM per group.",
)

# ---- pooling backward: the nn.max_pool2d / nn.avg_pool2d VJPs (k*k slices, compares, wheres and
# placements summed) as one pass over the windows -------------------------------------------------

MAX_POOL2D_GRAD = "fused.max_pool2d_grad"
AVG_POOL2D_GRAD = "fused.avg_pool2d_grad"
_POOL_GRAD_ATTRS = (Attr("kernel", "ints"), Attr("stride", "ints"), Attr("padding", "ints"))


def _pool_window_check(op_id: str, ct: ValueType, size: tuple[int, ...], a: Attrs) -> None:
    k, s, p = (tuple(a[n]) for n in ("kernel", "stride", "padding"))
    if not (len(k) == len(s) == len(p) == len(size) == 2) or min(k + s + size) <= 0 or min(p) < 0 or any(
            2 * pi > ki for pi, ki in zip(p, k, strict=True)):
        raise GraphError(f"{op_id}: kernel, stride, padding and size need 2 entries each (positive; padding at most "
                         f"half the kernel), got kernel={list(k)} stride={list(s)} padding={list(p)} size={list(size)}")
    want = tuple((size[i] + 2 * p[i] - k[i]) // s[i] + 1 for i in range(2))
    if ct.rank != 4 or ct.shape[2:] != want:
        raise GraphError(f"{op_id}: pooling {list(size)} gives windows {list(want)}, the cotangent is {list(ct.shape)}")


def _max_pool2d_grad(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
    x, y, ct = ins
    same_dtype(MAX_POOL2D_GRAD, ins)
    require_dtype(MAX_POOL2D_GRAD, x, FLOATS)
    if x.rank != 4 or y.shape != ct.shape or ct.shape[:2] != x.shape[:2]:
        raise GraphError(f"{MAX_POOL2D_GRAD} needs x [N, C, H, W], the pooled y and its cotangent [N, C, Ho, Wo], "
                         f"got {x}, {y}, {ct}")
    _pool_window_check(MAX_POOL2D_GRAD, ct, x.shape[2:], a)
    return (x,)


max_pool2d_grad = define(
    MAX_POOL2D_GRAD,
    _max_pool2d_grad,
    3,
    _POOL_GRAD_ATTRS,
    differentiable=False,
    doc="(x, y, ct) -> dx: the VJP of nn.max_pool2d given its output y: each window's first element "
        "equal to its maximum (row-major, padding as -inf) takes the window's cotangent.",
)


def _avg_pool2d_grad(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
    (ct,) = ins
    require_dtype(AVG_POOL2D_GRAD, ct, FLOATS)
    size = tuple(a["size"])
    _pool_window_check(AVG_POOL2D_GRAD, ct, size, a)
    return (ValueType(ct.shape[:2] + size, ct.dtype),)


avg_pool2d_grad = define(
    AVG_POOL2D_GRAD,
    _avg_pool2d_grad,
    1,
    _POOL_GRAD_ATTRS + (Attr("size", "ints", doc="the pooled input's spatial shape (the result's)"),),
    differentiable=False,
    doc="ct -> dx: the VJP of nn.avg_pool2d: ct * (1 / (kh*kw)) added to every element of its window "
        "(padding dropped).",
)

CONV_GRAD_OPS = (CONV_TRANSPOSE, CONV_WEIGHT_GRAD, MAX_POOL2D_GRAD, AVG_POOL2D_GRAD)


# ---- attention probabilities: the recomputation in sdpa's VJP (autodiff/rules/attention.py) --
ATTENTION_PROBS = "fused.attention_probs"


def _attention_probs(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
    q, k = ins
    same_dtype(ATTENTION_PROBS, ins)
    require_dtype(ATTENTION_PROBS, q, FLOATS)
    if q.rank < 2 or k.rank != q.rank or q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise GraphError(f"{ATTENTION_PROBS} needs q [..., Tq, D] and k [..., Tk, D] of one batch shape, got {q}, {k}")
    if a["causal"] and q.shape[-2] > k.shape[-2]:
        raise GraphError(f"{ATTENTION_PROBS} causal needs Tq <= Tk, got {q.shape[-2]} > {k.shape[-2]}")
    return (ValueType(q.shape[:-1] + (k.shape[-2],), q.dtype),)


attention_probs = define(
    ATTENTION_PROBS,
    _attention_probs,
    2,
    (Attr("scale", "float", 1.0, doc="multiplies q @ k^T before the softmax"),
     Attr("causal", "bool", False, doc="keep key j <= i + Tk - Tq only (the causal mask aligned bottom-right)")),
    differentiable=False,
    doc="softmax(where(causal mask, (q @ k^T) * scale, -inf)) over the keys: the probabilities sdpa's VJP "
        "recomputes, as one node (a backend may skip the masked entries).",
)


SDPA_PROBS = "fused.sdpa_probs"


def _sdpa_probs(ins: tuple[ValueType, ...], a: Attrs) -> tuple[ValueType, ...]:
    q, k, v = ins
    (p,) = _attention_probs((q, k), a)
    if v.shape[:-2] != q.shape[:-2] or v.shape[-2] != k.shape[-2] or v.dtype != q.dtype:
        raise GraphError(f"{SDPA_PROBS} needs v [..., Tk, Dv] of q's batch shape and dtype, got q {q}, k {k}, v {v}")
    return (ValueType(q.shape[:-1] + (v.shape[-1],), q.dtype), p)


sdpa_probs = define(
    SDPA_PROBS,
    _sdpa_probs,
    3,
    (Attr("scale", "float", 1.0, doc="multiplies q @ k^T before the softmax"),
     Attr("causal", "bool", False, doc="keep key j <= i + Tk - Tq only (the causal mask aligned bottom-right)")),
    differentiable=False,
    doc="(sdpa(q, k, v), its probabilities): a training graph's forward sdpa and the probabilities its VJP "
        "recomputes (fused.attention_probs of the same q, k), computed once.",
)
