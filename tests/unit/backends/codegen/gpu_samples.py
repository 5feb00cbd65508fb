"""Representative graphs for every op in the GPU kernel table, per dtype: what the PTX build
check compiles and what the webgpu-vs-cpu tests run. ``samples(op, d)`` gives (label, graph, host
inputs) tuples; ``FUSION_BAIT`` are graphs the fuse pass turns into every fused.* form."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np

import caramba
from caramba import ops
from caramba.ir.dtypes import DType

F64, F32, I64, I32, BOOL = DType.float64, DType.float32, DType.int64, DType.int32, DType.bool

Sample = tuple[str, caramba.Graph, dict[str, np.ndarray]]


def values(rng: np.random.Generator, shape, d: DType, lo: float = -3.0, hi: float = 3.0) -> np.ndarray:
    if d is BOOL:
        return rng.random(shape) < 0.5
    if d.is_int:
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(d.numpy)
    return rng.uniform(lo, hi, shape).astype(d.numpy)


def graph(label: str, d: DType, specs: list[tuple[tuple[int, ...], DType | None, tuple[float, float]]], fn) -> Sample:
    """A graph of inputs x0.. (shape, dtype or None for ``d``, value range) and ``fn(*inputs)``."""
    rng = np.random.default_rng(zlib.crc32(label.encode()))
    g = caramba.Graph(label)
    host = {}
    with g:
        ins = []
        for i, (shape, dt, (lo, hi)) in enumerate(specs):
            dt = dt or d
            ins.append(g.input(f"x{i}", shape, dt))
            host[f"x{i}"] = values(rng, shape, dt, lo, hi)
        out = fn(*ins)
        for k, v in (out.items() if isinstance(out, dict) else enumerate(out if isinstance(out, tuple) else (out,))):
            g.output(f"out{k}", v)
    return (label, g, host)


A = (-3.0, 3.0)
POS = (0.1, 4.0)
UNARY_RANGE = {
    "math.log": POS, "math.sqrt": POS, "math.rsqrt": POS, "math.reciprocal": POS, "math.log1p": (-0.9, 3.0),
}
BINARY_RANGE = {"math.div": [A, POS], "math.pow": [POS, A]}

SamplesFn = Callable[[str, DType], list[Sample]]
TABLE: dict[str, SamplesFn] = {}


def _reg(op: str, fn: SamplesFn) -> None:
    TABLE[op] = fn


def _unary(op: str, d: DType) -> list[Sample]:
    fn = getattr(ops, op.split(".")[1])
    r = UNARY_RANGE.get(op, A)
    return [graph(f"{op}-{d.short}", d, [((3, 5), None, r)], fn)]


def _binary(op: str, d: DType) -> list[Sample]:
    fn = getattr(ops, op.split(".")[1])
    ra, rb = BINARY_RANGE.get(op, [A, A])
    return [
        graph(f"{op}-same-{d.short}", d, [((4, 6), None, ra), ((4, 6), None, rb)], fn),
        graph(f"{op}-bcast-{d.short}", d, [((3, 1, 5), None, ra), ((4, 1), None, rb)], fn),
    ]


for _op in (
    "math.exp", "math.log", "math.log1p", "math.expm1", "math.sqrt", "math.rsqrt", "math.reciprocal", "math.sin",
    "math.cos", "math.tanh", "math.erf", "math.floor", "math.ceil", "math.round", "math.neg", "math.abs", "math.sign",
    "math.square", "math.logical_not", "activation.relu", "activation.sigmoid", "activation.silu", "activation.selu",
):
    _reg(_op, _unary)
for _op in (
    "math.add", "math.sub", "math.mul", "math.div", "math.pow", "math.maximum", "math.minimum", "math.equal",
    "math.not_equal", "math.less", "math.less_equal", "math.greater", "math.greater_equal", "math.logical_and",
    "math.logical_or",
):
    _reg(_op, _binary)

_reg("math.where", lambda op, d: [graph(f"where-{d.short}", d, [((3, 5), BOOL, A), ((3, 5), None, A), ((5,), None, A)], ops.where)])
_reg("math.clamp", lambda op, d: [graph(f"clamp-{d.short}", d, [((3, 5), None, A)], lambda x: ops.clamp(x, min=-1.5, max=2.2))])
_reg("math.cast", lambda op, d: [
    graph(f"cast-{d.short}-{t.short}", d, [((3, 5), None, A)], lambda x, t=t: ops.cast(x, dtype=t)) for t in (F64, F32, I64, I32, BOOL)
])
_reg("activation.gelu", lambda op, d: [
    graph(f"gelu-{a}-{d.short}", d, [((3, 5), None, A)], lambda x, a=a: ops.gelu(x, approximate=a)) for a in ("none", "tanh")
])
_reg("activation.leaky_relu", lambda op, d: [graph(f"leaky-{d.short}", d, [((3, 5), None, A)], lambda x: ops.leaky_relu(x, alpha=0.2))])
_reg("activation.elu", lambda op, d: [graph(f"elu-{d.short}", d, [((3, 5), None, A)], lambda x: ops.elu(x, alpha=0.7))])
_reg("activation.softplus", lambda op, d: [graph(f"softplus-{d.short}", d, [((3, 5), None, A)], lambda x: ops.softplus(x, beta=2.0))])
_reg("activation.swiglu", lambda op, d: [
    graph(f"swiglu1-{d.short}", d, [((3, 8), None, A)], ops.swiglu),
    graph(f"swiglu2-{d.short}", d, [((3, 4), None, A), ((3, 4), None, A)], ops.swiglu),
])


def _reduction(op: str, d: DType) -> list[Sample]:
    fn = getattr(ops, op.split(".")[1])
    rng = (0.5, 1.5) if op == "reduce.prod" else A
    out = [
        graph(f"{op}-{axes}-{keep}-{d.short}", d, [((3, 4, 5), None, rng)], lambda x, a=axes, k=keep: fn(x, axes=a, keepdims=k))
        for axes, keep in (((1,), False), ((0, 2), True), (None, False))
    ]
    out.append(graph(f"{op}-tree-{d.short}", d, [((2, 300), None, rng)], lambda x: fn(x, axes=(1,))))
    if op == "reduce.variance":
        out.append(graph(f"{op}-unbiased-{d.short}", d, [((4, 9), None, rng)], lambda x: fn(x, axes=(1,), correction=1)))
    return out


for _op in ("reduce.sum", "reduce.mean", "reduce.max", "reduce.min", "reduce.prod", "reduce.logsumexp", "reduce.variance"):
    _reg(_op, _reduction)


def _arg(op: str, d: DType) -> list[Sample]:
    fn = getattr(ops, op.split(".")[1])
    return [
        graph(f"{op}-small-{d.short}", d, [((4, 7), None, A)], lambda x: fn(x, axis=1)),
        graph(f"{op}-tree-{d.short}", d, [((3, 100), None, A)], lambda x: fn(x, axis=-1, keepdims=True)),
        graph(f"{op}-axis0-{d.short}", d, [((50, 3), None, A)], lambda x: fn(x, axis=0)),
    ]


_reg("reduce.argmax", _arg)
_reg("reduce.argmin", _arg)

_reg("linalg.matmul", lambda op, d: [
    graph(f"mm-{d.short}", d, [((5, 7), None, A), ((7, 3), None, A)], ops.matmul),
    graph(f"mm-batch-{d.short}", d, [((2, 1, 17, 20), None, A), ((3, 20, 18), None, A)], ops.matmul),
    graph(f"mm-vec-{d.short}", d, [((7,), None, A), ((2, 7, 3), None, A)], ops.matmul),
    graph(f"mm-matvec-{d.short}", d, [((4, 7), None, A), ((7,), None, A)], ops.matmul),
])
_reg("linalg.outer", lambda op, d: [graph(f"outer-{d.short}", d, [((4,), None, A), ((6,), None, A)], ops.outer)])

# ---- shape ----------------------------------------------------------------------------------
S = (2, 3, 4)
_reg("shape.reshape", lambda op, d: [graph(f"reshape-{d.short}", d, [(S, None, A)], lambda x: ops.exp(ops.reshape(x, shape=(6, -1))) if d.is_float else ops.reshape(x, shape=(6, -1)))])
_reg("shape.expand_dims", lambda op, d: [graph(f"expand-{d.short}", d, [(S, None, A)], lambda x: ops.expand_dims(x, axes=(0, 3)))])
_reg("shape.squeeze", lambda op, d: [graph(f"squeeze-{d.short}", d, [((2, 1, 4), None, A)], lambda x: ops.squeeze(x))])
_reg("shape.transpose", lambda op, d: [graph(f"transpose-{d.short}", d, [(S, None, A)], lambda x: ops.transpose(x, perm=(2, 0, 1)))])
_reg("shape.concat", lambda op, d: [graph(f"concat-{d.short}", d, [((2, 3), None, A), ((2, 0), None, A), ((2, 2), None, A)], lambda a, b, c: ops.concat(a, b, c, axis=1))])
_reg("shape.split", lambda op, d: [graph(f"split-{d.short}", d, [((5, 4), None, A)], lambda x: ops.split(x, axis=0, sizes=(2, 0, 3)))])
_reg("shape.slice", lambda op, d: [
    graph(f"slice-{d.short}", d, [((5, 6), None, A)], lambda x: x[1:4, ::2]),
    graph(f"slice-neg-{d.short}", d, [((5, 6), None, A)], lambda x: x[::-2, -1:0:-3]),
])
_reg("shape.pad", lambda op, d: [
    graph(f"pad-{m}-{d.short}", d, [((3, 4), None, A)], lambda x, m=m: ops.pad(x, pads=(1, 2, 2, 1), mode=m, value=1.5)) for m in ("constant", "reflect", "edge")
])
_reg("shape.broadcast_to", lambda op, d: [graph(f"bcast-{d.short}", d, [((3, 1), None, A)], lambda x: ops.broadcast_to(x, shape=(2, 3, 4)))])
_reg("shape.gather", lambda op, d: [
    graph(f"gather-{d.short}", d, [((4, 5), None, A), ((2, 3), I64, (-5, 4))], lambda x, i: ops.gather(x, i, axis=1)),
    graph(f"gather-i32-{d.short}", d, [((4, 5), None, A), ((3,), I32, (-4, 3))], lambda x, i: ops.gather(x, i, axis=0)),
])
_reg("shape.scatter_add", lambda op, d: [
    graph(f"scatter-{d.short}", d, [((4, 5), None, A), ((6,), I64, (-5, 4)), ((4, 6), None, A)], lambda x, i, u: ops.scatter_add(x, i, u, axis=1)),
])
_reg("shape.slice_rows", lambda op, d: [
    graph(f"slice-rows-{d.short}", d, [((2, 3, 8, 4), None, A), ((2,), I64, (0, 5))],
          lambda x, s: ops.slice_rows(x, s, axis=2, size=3)),
])
_reg("shape.update_rows", lambda op, d: [
    graph(f"update-rows-{d.short}", d, [((2, 3, 8, 4), None, A), ((2, 3, 3, 4), None, A), ((2,), I32, (0, 5))],
          lambda x, u, s: ops.update_rows(x, u, s, axis=2)),
])
_reg("shape.iota", lambda op, d: [graph(f"iota-{d.short}", d, [((1,), F32, A)], lambda x: ops.iota(shape=(3, 4), axis=1, dtype=d))])
_reg("shape.upsample_nearest", lambda op, d: [graph(f"upsample-{d.short}", d, [((2, 3, 4), None, A)], lambda x: ops.upsample_nearest(x, scales=(2, 3)))])
_reg("shape.view_as_heads", lambda op, d: [graph(f"heads-{d.short}", d, [((2, 3, 8), None, A)], lambda x: ops.view_as_heads(x, num_heads=2))])
_reg("shape.merge_heads", lambda op, d: [graph(f"merge-{d.short}", d, [((2, 2, 3, 4), None, A)], ops.merge_heads)])
_reg("shape.last_token", lambda op, d: [graph(f"last-{d.short}", d, [((2, 3, 4), None, A)], ops.last_token)])
_reg("shape.flip", lambda op, d: [graph(f"flip-{d.short}", d, [(S, None, A)], lambda x: ops.flip(x, axes=(0, 2)))])

# ---- nn / attention -----------------------------------------------------------------------------
_reg("nn.softmax", lambda op, d: [
    graph(f"softmax-{d.short}", d, [((3, 40), None, A)], ops.softmax),
    graph(f"softmax-axis0-{d.short}", d, [((5, 3), None, A)], lambda x: ops.softmax(x, axis=0)),
])
_reg("nn.log_softmax", lambda op, d: [graph(f"logsoftmax-{d.short}", d, [((3, 7), None, A)], ops.log_softmax)])
_reg("nn.layer_norm", lambda op, d: [
    graph(f"ln-{d.short}", d, [((3, 8), None, A), ((8,), None, A), ((8,), None, A)], lambda x, g, b: ops.layer_norm(x, g, b)),
    graph(f"ln-axis-{d.short}", d, [((2, 3, 4), None, A)], lambda x: ops.layer_norm(x, axis=1)),
])
_reg("nn.rms_norm", lambda op, d: [graph(f"rms-{d.short}", d, [((3, 8), None, A), ((8,), None, A)], lambda x, g: ops.rms_norm(x, g))])
_reg("nn.group_norm", lambda op, d: [graph(f"gn-{d.short}", d, [((2, 4, 3, 3), None, A), ((4,), None, A), ((4,), None, A)], lambda x, g, b: ops.group_norm(x, g, b, num_groups=2))])
_reg("nn.embedding", lambda op, d: [graph(f"emb-{d.short}", d, [((2, 3), I64, (0, 9)), ((10, 4), None, A)], ops.embedding)])
_reg("nn.conv1d", lambda op, d: [graph(f"conv1d-{d.short}", d, [((2, 4, 9), None, A), ((6, 2, 3), None, A), ((6,), None, A)], lambda x, w, b: ops.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2))])
_reg("nn.conv2d", lambda op, d: [graph(f"conv2d-{d.short}", d, [((1, 2, 6, 5), None, A), ((3, 2, 3, 2), None, A)], lambda x, w: ops.conv2d(x, w, stride=(1, 2), padding=(1, 0)))])
_reg("nn.max_pool2d", lambda op, d: [graph(f"maxpool-{d.short}", d, [((1, 2, 6, 5), None, A)], lambda x: ops.max_pool2d(x, kernel=(3, 2), stride=(2, 1), padding=(1, 1)))])
_reg("nn.avg_pool2d", lambda op, d: [graph(f"avgpool-{d.short}", d, [((1, 2, 6, 5), None, A)], lambda x: ops.avg_pool2d(x, kernel=2, padding=1))])
_reg("attention.sdpa", lambda op, d: [] if d is BOOL else [
    graph(f"sdpa-{d.short}", d, [((2, 5, 8), None, A), ((2, 7, 8), None, A), ((2, 7, 6), None, A)], ops.sdpa),
    graph(f"sdpa-causal-mask-{d.short}", d, [((2, 2, 5, 4), None, A), ((1, 2, 5, 4), None, A), ((2, 1, 5, 4), None, A), ((5, 5), BOOL, A)],
          lambda q, k, v, m: ops.sdpa(q, k, v, m, causal=True)),
    graph(f"sdpa-addmask-{d.short}", d, [((3, 4), None, A), ((6, 4), None, A), ((6, 2), None, A), ((3, 6), None, A)],
          lambda q, k, v, m: ops.sdpa(q, k, v, m, scale=0.3)),
])
_reg("attention.rope", lambda op, d: [
    graph(f"rope-{d.short}", d, [((2, 5, 8), None, A)], lambda x: ops.rope(x, offset=3)),
    graph(f"rope-scaled-{d.short}", d, [((2, 5, 8), None, A)],
          lambda x: ops.rope(x, offset=3, inv_freq=(1.0, 0.2, 0.03, 0.004), scale=1.1)),
])


# ---- train -----------------------------------------------------------------------------------
def _opt(op: str, d: DType) -> list[Sample]:
    if d is I64:
        return []
    name = op.rsplit(".", 1)[1]
    stepped = name in ("adam", "adamax", "lamb")
    slots = {"sgd": 1, "adam": 2, "adamax": 2, "rmsprop": 2, "adagrad": 1, "lion": 1, "lamb": 2}[name]
    attrs = {"sgd": {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}, "rmsprop": {"momentum": 0.5},
             "adam": {"weight_decay": 0.1, "decoupled": True}}.get(name, {})
    specs = [((3, 4), None, A), ((3, 4), None, A), ((), None, (0.01, 0.1)), ((), None, (0.5, 1.0))]
    if stepped:
        specs.append(((), I64, (1, 20)))
    specs += [((3, 4), None, POS)] * slots

    def fn(*xs):
        return caramba.ir.current_graph().call(op, list(xs), attrs)

    return [graph(f"{name}-{d.short}", d, specs, fn)]


for _op in ("sgd", "adam", "adamax", "rmsprop", "adagrad", "lion", "lamb"):
    _reg(f"train.optimizer.{_op}", _opt)


def _loss(op: str, d: DType) -> list[Sample]:
    call = caramba.ir.current_graph

    if op in ("train.loss.mse", "train.loss.bce"):
        if d.is_int:
            return []
        rng_t = (0.0, 1.0) if op == "train.loss.bce" else A
        out = []
        for red in ("mean", "sum", "none"):
            out.append(graph(f"{op}-{red}-{d.short}", d, [((3, 4), None, (0.01, 0.99)), ((3, 4), None, rng_t)],
                             lambda p, t, r=red: call().call(op, [p, t], {"reduction": r})))
        if op == "train.loss.bce":
            out.append(graph(f"{op}-probs-{d.short}", d, [((3, 4), None, (0.01, 0.99)), ((3, 4), None, (0, 1))],
                             lambda p, t: call().call(op, [p, t], {"from_logits": False})))
        return out
    out = []
    for lab in (I64, I32):
        fd = F64 if d.is_int else d
        if d.is_int and d is not lab:
            continue
        attrs = {"train.loss.cross_entropy": {"label_smoothing": 0.1, "reduction": "sum"}}.get(op, {})
        out.append(graph(f"{op}-{fd.short}-{lab.short}", fd, [((4, 5), None, A), ((4,), lab, (0, 4))],
                         lambda x, y, a=attrs: call().call(op, [x, y], a)))
    return out


for _op in ("train.loss.mse", "train.loss.bce", "train.loss.cross_entropy", "train.metric.accuracy", "train.metric.perplexity"):
    _reg(_op, _loss)
_reg("train.metric.f1", lambda op, d: [] if d.is_int and d is not I64 else [
    graph(f"f1-{avg}-{(F64 if d.is_int else d).short}", F64 if d.is_int else d, [((6, 4), None, A), ((6,), I64, (0, 3))],
          lambda x, y, a=avg: caramba.ir.current_graph().call(op, [x, y], {"average": a}))
    for avg in ("macro", "micro", "binary")
] + ([graph("f1-i32", F64, [((6, 4), None, A), ((6,), I32, (0, 3))], lambda x, y: ops.train.f1(x, y))] if d is F64 else []))


# ---- random ---------------------------------------------------------------------------------
def _random(op: str, d: DType) -> list[Sample]:
    fn = getattr(ops, op.rsplit(".", 1)[1])
    if op == "random.bernoulli":
        if d is not BOOL:
            return []
        return [graph("bernoulli-key", F64, [((), I64, (0, 9))], lambda k: fn(k, shape=(40,), seed=3, p=0.3)),
                graph("bernoulli", F64, [((1,), F64, A)], lambda x: fn(shape=(5, 4), seed=1, p=1.0))]
    if not d.is_float:
        return []
    return [graph(f"{op}-key-{d.short}", d, [((), I64, (0, 9))], lambda k: fn(k, shape=(40,), seed=-7, dtype=d)),
            graph(f"{op}-{d.short}", d, [((1,), None, A)], lambda x: fn(shape=(5, 4), seed=2**40 + 3, dtype=d))]


for _op in ("random.uniform", "random.normal", "random.bernoulli"):
    _reg(_op, _random)
_reg("nn.dropout", lambda op, d: [] if not d.is_float else [
    graph(f"dropout-{d.short}", d, [((6, 7), None, A), ((), I64, (0, 9))], lambda x, k: ops.dropout(x, k, rate=0.3, seed=5)),
    graph(f"dropout0-{d.short}", d, [((6, 7), None, A)], lambda x: ops.dropout(x, rate=0.0)),
])


def samples(op: str, d: DType) -> list[Sample]:
    """Graphs exercising ``op`` at dtype ``d`` (empty if the table has none)."""
    fn = TABLE.get(op)
    return fn(op, d) if fn is not None else []


def fusion_bait(d: DType) -> list[Sample]:
    """Unfused graphs that the fuse pass rewrites into each fused.* form."""
    out = [
        graph(f"chain-{d.short}", d, [((4, 6), None, A), ((6,), None, A)], lambda x, y: ops.exp(ops.tanh(x * y) - 0.5) * 2.0),
        graph(f"chain-sum-{d.short}", d, [((4, 6), None, A)], lambda x: ops.sum(ops.square(x) + 1.0, axes=(1,))),
        graph(f"chain-lse-{d.short}", d, [((3, 50), None, A)], lambda x: ops.logsumexp(x * 2.0, axes=(1,))),
        graph(f"linear-gelu-{d.short}", d, [((5, 7), None, A), ((7, 4), None, A), ((4,), None, A)], lambda x, w, b: ops.gelu(x @ w + b)),
        graph(f"linear-relu-{d.short}", d, [((5, 7), None, A), ((7, 4), None, A), ((4,), None, A)], lambda x, w, b: ops.relu(x @ w + b)),
        graph(f"linear-{d.short}", d, [((2, 5, 7), None, A), ((7, 4), None, A), ((4,), None, A)], lambda x, w, b: x @ w + b),
        graph(f"ln-res-{d.short}", d, [((3, 8), None, A), ((3, 8), None, A), ((8,), None, A), ((8,), None, A)],
              lambda x, r, g, b: (lambda s: {"y": ops.layer_norm(s, g, b), "s": s * 2.0})(x + r)),
        graph(f"softmax-prologue-{d.short}", d, [((3, 6), None, A), ((6,), None, A)], lambda x, m: ops.softmax(x * 0.5 + m)),
    ]
    for i in (I64, I32):
        out += [
            graph(f"softmax-mixed-{d.short}-{i.short}", d, [((3, 6), None, A), ((3, 6), BOOL, A), ((3, 6), i, A)],
                  lambda x, m, k, d=d: ops.softmax(ops.where(m, ops.cast(k, dtype=d) * 0.5, x))),
        ]
    return out


def fusion_bait_int(d: DType) -> list[Sample]:
    """Integer forms: elementwise chains (with a bool step) and matmul + bias."""
    return [
        graph(f"int-chain-{d.short}", d, [((4, 6), None, A), ((6,), None, A)], lambda x, y: ops.where(x > y, x, y) * 2 + 1),
        graph(f"bool-chain-{d.short}", d, [((4, 6), None, A), ((4, 6), None, A)], lambda x, y: ops.logical_or(x > y, x < y * 2)),
        graph(f"int-linear-{d.short}", d, [((5, 7), None, A), ((7, 4), None, A), ((4,), None, A)], lambda x, w, b: x @ w + b),
    ]
