"""nn.*: softmax, normalization, embedding, convolution, pooling, dropout."""

from __future__ import annotations

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS, DType
from caramba.ir.types import Effect, ValueType
from caramba.ops._define import define, norm_axis, require_dtype, same_dtype


def _same_float(op_id: str):
    def infer(ins, a):
        require_dtype(op_id, ins[0], FLOATS)
        if ins[0].rank == 0:
            raise GraphError(f"{op_id} needs an input of rank >= 1")
        norm_axis(a["axis"], ins[0].rank)
        return (ins[0],)

    return infer


softmax = define("nn.softmax", _same_float("nn.softmax"), 1, (Attr("axis", "int", -1),), doc="exp(x) / sum(exp(x)) along axis, stable")
log_softmax = define("nn.log_softmax", _same_float("nn.log_softmax"), 1, (Attr("axis", "int", -1),), doc="x - logsumexp(x) along axis")


def _norm(op_id: str, n_affine: int):
    def infer(ins, a):
        x = ins[0]
        same_dtype(op_id, ins)
        require_dtype(op_id, x, FLOATS)
        if x.rank == 0:
            raise GraphError(f"{op_id} needs an input of rank >= 1")
        axis = norm_axis(a["axis"], x.rank)
        want = x.shape[axis:]
        for i, t in enumerate(ins[1:]):
            if t.shape != want:
                name = ("gamma", "beta")[i]
                raise GraphError(f"{op_id} {name} must have shape {list(want)} (x.shape[axis:]), got {list(t.shape)}")
        return (x,)

    return infer


layer_norm = define(
    "nn.layer_norm", _norm("nn.layer_norm", 2), (1, 3),
    (Attr("axis", "int", -1, doc="normalize over axes axis..rank-1"), Attr("eps", "float", 1e-5)),
    doc="(x - mean) / sqrt(var + eps) * gamma + beta over the trailing axes; gamma/beta optional",
)
rms_norm = define(
    "nn.rms_norm", _norm("nn.rms_norm", 1), (1, 2),
    (Attr("axis", "int", -1), Attr("eps", "float", 1e-6)),
    doc="x / sqrt(mean(x**2) + eps) * gamma over the trailing axes; gamma optional",
)


def _group_norm(ins, a):
    x = ins[0]
    same_dtype("nn.group_norm", ins)
    require_dtype("nn.group_norm", x, FLOATS)
    if x.rank < 2:
        raise GraphError(f"nn.group_norm needs [N, C, ...], got {list(x.shape)}")
    c, g = x.shape[1], a["num_groups"]
    if g <= 0 or c % g:
        raise GraphError(f"nn.group_norm: {c} channels do not split into {g} groups")
    for t in ins[1:]:
        if t.shape != (c,):
            raise GraphError(f"nn.group_norm gamma/beta must have shape [{c}], got {list(t.shape)}")
    return (x,)


group_norm = define(
    "nn.group_norm", _group_norm, (1, 3), (Attr("num_groups", "int"), Attr("eps", "float", 1e-5)),
    doc="normalize each group of channels of [N, C, ...]; per-channel gamma/beta optional",
)


def _embedding(ins, a):
    ids, table = ins
    require_dtype("nn.embedding", ids, frozenset({DType.int64, DType.int32}), "ids")
    if table.rank != 2:
        raise GraphError(f"nn.embedding table must be [vocab, dim], got {list(table.shape)}")
    return (ValueType(ids.shape + (table.shape[1],), table.dtype),)


embedding = define("nn.embedding", _embedding, 2, doc="table[ids]: ids [...] int, table [V, D] -> [..., D]")


def _conv(op_id: str, nd: int):
    def infer(ins, a):
        x, w = ins[0], ins[1]
        same_dtype(op_id, ins)
        require_dtype(op_id, x, FLOATS)
        if x.rank != nd + 2 or w.rank != nd + 2:
            raise GraphError(f"{op_id} needs x [N, C, {'L' if nd == 1 else 'H, W'}] and w [O, C/groups, k...], got {x} and {w}")
        n, c = x.shape[:2]
        o, cg = w.shape[:2]
        groups = a["groups"]
        if groups <= 0 or c % groups or o % groups or cg != c // groups:
            raise GraphError(f"{op_id}: {c} input channels, groups={groups}, weight {list(w.shape)} do not agree")
        if len(ins) == 3 and ins[2].shape != (o,):
            raise GraphError(f"{op_id} bias must have shape [{o}], got {list(ins[2].shape)}")
        stride, padding, dilation = (_per_dim(op_id, a, k, nd) for k in ("stride", "padding", "dilation"))
        spatial = []
        for i in range(nd):
            eff = dilation[i] * (w.shape[2 + i] - 1) + 1
            size = (x.shape[2 + i] + 2 * padding[i] - eff) // stride[i] + 1
            if size <= 0 or stride[i] <= 0:
                raise GraphError(f"{op_id}: kernel larger than padded input along spatial axis {i}")
            spatial.append(size)
        return (ValueType((n, o, *spatial), x.dtype),)

    return infer


def _per_dim(op_id: str, a, key: str, nd: int) -> tuple[int, ...]:
    v = a[key]
    if len(v) == 1:
        v = v * nd
    if len(v) != nd or any(x < 0 for x in v) or (key != "padding" and any(x == 0 for x in v)):
        raise GraphError(f"{op_id} {key} must be {nd} positive ints (padding may be 0), got {list(a[key])}")
    return tuple(v)


_CONV_ATTRS = (Attr("stride", "ints", (1,)), Attr("padding", "ints", (0,)), Attr("dilation", "ints", (1,)), Attr("groups", "int", 1))
conv1d = define("nn.conv1d", _conv("nn.conv1d", 1), (2, 3), _CONV_ATTRS, doc="1-D cross-correlation, x [N,C,L], w [O,C/g,K], bias [O] optional; symmetric zero padding")
conv2d = define("nn.conv2d", _conv("nn.conv2d", 2), (2, 3), _CONV_ATTRS, doc="2-D cross-correlation, x [N,C,H,W], w [O,C/g,KH,KW], bias [O] optional; symmetric zero padding")


def _pool(op_id: str):
    def infer(ins, a):
        x = ins[0]
        require_dtype(op_id, x, FLOATS)
        if x.rank != 4:
            raise GraphError(f"{op_id} needs [N, C, H, W], got {list(x.shape)}")
        kernel = _per_dim(op_id, a, "kernel", 2)
        stride = kernel if a["stride"] is None else _per_dim(op_id, {"stride": a["stride"]}, "stride", 2)
        padding = _per_dim(op_id, a, "padding", 2)
        if any(p * 2 > k for p, k in zip(padding, kernel, strict=True)):
            raise GraphError(f"{op_id}: padding {list(padding)} must be at most half the kernel {list(kernel)}")
        out = []
        for i in range(2):
            size = (x.shape[2 + i] + 2 * padding[i] - kernel[i]) // stride[i] + 1
            if size <= 0:
                raise GraphError(f"{op_id}: kernel larger than padded input")
            out.append(size)
        return (x.with_shape(x.shape[:2] + tuple(out)),)

    return infer


_POOL_ATTRS = (Attr("kernel", "ints"), Attr("stride", "ints?", None), Attr("padding", "ints", (0,)))
max_pool2d = define("nn.max_pool2d", _pool("nn.max_pool2d"), 1, _POOL_ATTRS, doc="max over windows of [N,C,H,W] (padding counts as -inf)")
avg_pool2d = define("nn.avg_pool2d", _pool("nn.avg_pool2d"), 1, _POOL_ATTRS, doc="mean over windows of [N,C,H,W] (zero padding counted in the mean)")


def _dropout(ins, a):
    require_dtype("nn.dropout", ins[0], FLOATS)
    if not 0.0 <= a["rate"] < 1.0:
        raise GraphError(f"nn.dropout rate must be in [0, 1), got {a['rate']}")
    if len(ins) == 2 and (ins[1].shape != () or ins[1].dtype is not DType.int64):
        raise GraphError(f"nn.dropout key must be an int64 scalar, got {ins[1]}")
    return (ins[0],)


dropout = define(
    "nn.dropout", _dropout, (1, 2), (Attr("rate", "float", 0.5), Attr("seed", "int", 0)),
    effect=Effect.random,
    doc="zero each element with probability rate, scale the rest by 1/(1-rate); the mask is a"
    " function of (seed, key) where key is an optional int64 scalar input (e.g. the step).",
)
