"""Export rules for train.*: losses, metrics and optimizer updates (``train.checkpoint.save`` is
host file I/O and has no ONNX form).

Optimizer updates evaluate the per-element rules of ``caramba.ops.train`` on ``Sym`` values
(ONNX value names with Python operators), with ``np`` bound to ONNX ops, so the emitted graph
performs the cpu kernel's operations in the same order. Python scalars become constants of the
parameter's dtype, as NumPy's weak scalars do; bias corrections are computed in float64 and
rounded once. Label checks make out-of-range labels an out-of-range gather, which ONNX Runtime
reports as an error at run time.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from caramba.ir.dtypes import DType
from caramba.onnx import special
from caramba.onnx.export import Ctx, reshape, rule
from caramba.ops import train as rules

F64 = DType.float64


class Sym:
    """An ONNX value of dtype ``d`` with arithmetic operators that emit nodes."""

    __slots__ = ("c", "d", "name")

    def __init__(self, c: Ctx, name: str, d: DType) -> None:
        self.c, self.name, self.d = c, name, d

    def _v(self, o: Any) -> str:
        return o.name if isinstance(o, Sym) else self.c.k(o, self.d)

    def _op(self, op: str, a: Any, b: Any) -> "Sym":
        return Sym(self.c, self.c.op(op, self._v(a), self._v(b)), self.d)

    def __add__(self, o): return self._op("Add", self, o)
    def __radd__(self, o): return self._op("Add", o, self)
    def __sub__(self, o): return self._op("Sub", self, o)
    def __rsub__(self, o): return self._op("Sub", o, self)
    def __mul__(self, o): return self._op("Mul", self, o)
    def __rmul__(self, o): return self._op("Mul", o, self)
    def __truediv__(self, o): return self._op("Div", self, o)
    def __rtruediv__(self, o): return self._op("Div", o, self)

    def __neg__(self) -> "Sym":
        return Sym(self.c, self.c.op("Neg", self.name), self.d)


class _OnnxMath:
    """What the update rules call ``np``, bound to ONNX ops on ``Sym`` values."""

    @staticmethod
    def sqrt(x: Sym) -> Sym:
        return Sym(x.c, x.c.op("Sqrt", x.name), x.d)

    @staticmethod
    def abs(x: Sym) -> Sym:
        return Sym(x.c, x.c.op("Abs", x.name), x.d)

    @staticmethod
    def sign(x: Sym) -> Sym:
        return Sym(x.c, x.c.op("Sign", x.name), x.d)

    @staticmethod
    def maximum(a: Sym, b: Any) -> Sym:
        return a._op("Max", a, b)


def _bind(fn):
    return types.FunctionType(fn.__code__, {**fn.__globals__, "np": _OnnxMath}, fn.__name__, fn.__defaults__)


SGD, ADAM, ADAMAX, RMSPROP, ADAGRAD, LION, LAMB_DIR = (
    _bind(f) for f in (rules.sgd_elem, rules.adam_elem, rules.adamax_elem, rules.rmsprop_elem,
                       rules.adagrad_elem, rules.lion_elem, rules.lamb_dir_elem)
)


def _names(out) -> list[str]:
    return [o.name for o in out]


# ---- losses and metrics -------------------------------------------------------------------
def _reduce(c: Ctx, node, x: str, t) -> str:
    how = node.attrs["reduction"]
    axes = list(range(t.rank))
    if how == "none":
        return x
    total = c.reduce("ReduceSum", x, axes, False)
    return c.op("Div", total, c.k(t.size, t.dtype)) if how == "mean" else total


@rule("train.loss.mse")
def _mse(c: Ctx, node, xs, ins):
    d = c.op("Sub", xs[0], xs[1])
    return _reduce(c, node, c.op("Mul", d, d), ins[0])


def _label_index(c: Ctx, labels: str, ncls: int) -> str:
    """int64 labels with every label outside [0, ncls) replaced by ncls (out of range for a
    gather over ncls classes, so ONNX Runtime refuses it at run time)."""
    lab = c.cast(labels, DType.int64)
    bad = c.op("Or", c.op("Less", lab, c.k(0, DType.int64)), c.op("GreaterOrEqual", lab, c.k(ncls, DType.int64)))
    return c.op("Where", bad, c.k(ncls, DType.int64), lab)


def _checked(c: Ctx, value: str, labels: str, ncls: int, d: DType) -> str:
    """``value`` plus a zero that depends on a gather by the labels (so bad labels raise)."""
    probe = c.op("Gather", c.e.const(np.zeros(max(ncls, 1), d.numpy), hint="labelcheck"), _label_index(c, labels, ncls))
    return c.op("Add", value, c.op("ReduceSum", reshape(c, probe, [-1]), keepdims=0))


def cross_entropy_rows(c: Ctx, logits: str, labels: str, lt, smoothing: float) -> str:
    ncls = lt.shape[-1]
    d = lt.dtype
    rows = reshape(c, logits, [-1, ncls])
    m = c.op("ReduceMax", rows, c.ints([1]), keepdims=1)
    finite = c.op("Less", c.op("Abs", m), c.k(np.inf, d))  # (IsInf has no float16 form)
    m = c.op("Where", finite, m, c.k(0, d))  # rows of -inf give -inf, not NaN
    lse = c.op("Add", c.op("Log", c.op("ReduceSum", c.op("Exp", c.op("Sub", rows, m)), c.ints([1]), keepdims=0)),
               reshape(c, m, [-1]))
    idx = c.op("Unsqueeze", reshape(c, _label_index(c, labels, ncls), [-1]), c.ints([1]))
    picked = reshape(c, c.op("GatherElements", rows, idx, axis=1), [-1])
    if smoothing == 0.0:
        loss = c.op("Sub", lse, picked)
    else:
        loss = c.op("Sub", c.op("Sub", lse, c.op("Mul", c.k(1.0 - smoothing, d), picked)),
                    c.op("Mul", c.k(smoothing / ncls, d), reshape(c, c.op("ReduceSum", logits, c.ints([-1]), keepdims=0), [-1])))
    return loss


@rule("train.loss.cross_entropy")
def _cross_entropy(c: Ctx, node, xs, ins):
    lt, yt = ins
    rows = cross_entropy_rows(c, xs[0], xs[1], lt, node.attrs["label_smoothing"])
    loss = reshape(c, rows, yt.shape)
    return _reduce(c, node, loss, yt.with_dtype(lt.dtype))


@rule("train.loss.bce")
def _bce(c: Ctx, node, xs, ins):
    t = ins[0]
    d = t.dtype
    x, y = xs
    if node.attrs["from_logits"]:
        ex = c.op("Exp", c.op("Neg", c.op("Abs", x)))
        tail = _log1p(c, ex, d)
        v = c.op("Add", c.op("Sub", c.op("Max", x, c.k(0, d)), c.op("Mul", x, y)), tail)
        return _reduce(c, node, v, t)
    lp = c.op("Max", c.op("Log", x), c.k(-100.0, d))
    lq = c.op("Max", _log1p(c, c.op("Neg", x), d), c.k(-100.0, d))
    v = c.op("Neg", c.op("Add", c.op("Mul", y, lp), c.op("Mul", c.op("Sub", c.k(1, d), y), lq)))
    return _reduce(c, node, v, t)


def _log1p(c: Ctx, x: str, d: DType) -> str:
    xu, du = c.upcast(x, d)
    return c.downcast(special.log1p(c.e, xu, du), du, d)


def _pred_lab(c: Ctx, logits: str, labels: str, lt) -> tuple[str, str]:
    pred = reshape(c, c.op("ArgMax", logits, axis=lt.rank - 1, keepdims=0), [-1])
    lab = reshape(c, c.cast(labels, DType.int64), [-1])
    return pred, lab


@rule("train.metric.accuracy")
def _accuracy(c: Ctx, node, xs, ins):
    lt, yt = ins
    d = lt.dtype
    if yt.size == 0:
        return c.op("Identity", c.k(0, d))
    pred, lab = _pred_lab(c, xs[0], xs[1], lt)
    hits = c.cast(c.op("Equal", pred, lab), F64)
    acc = c.op("Div", c.op("ReduceSum", hits, keepdims=0), c.k(yt.size, F64))
    return c.cast(_checked(c, acc, xs[1], lt.shape[-1], F64), d)


@rule("train.metric.f1")
def _f1(c: Ctx, node, xs, ins):
    lt = ins[0]
    ncls = lt.shape[-1]
    average = node.attrs["average"]
    pred, lab = _pred_lab(c, xs[0], xs[1], lt)
    classes = c.e.const(np.arange(ncls, dtype=np.int64), hint="classes")
    onehot_p = c.cast(c.op("Equal", c.op("Unsqueeze", pred, c.ints([1])), classes), F64)
    onehot_l = c.cast(c.op("Equal", c.op("Unsqueeze", lab, c.ints([1])), classes), F64)
    tp = c.op("ReduceSum", c.op("Mul", onehot_p, onehot_l), c.ints([0]), keepdims=0)
    fp = c.op("Sub", c.op("ReduceSum", onehot_p, c.ints([0]), keepdims=0), tp)
    fn = c.op("Sub", c.op("ReduceSum", onehot_l, c.ints([0]), keepdims=0), tp)
    if average == "micro":
        tp, fp, fn = (c.op("ReduceSum", v, c.ints([0]), keepdims=1) for v in (tp, fp, fn))
    elif average == "binary":
        tp, fp, fn = (c.op("Slice", v, c.ints([1]), c.ints([2])) for v in (tp, fp, fn))
    two_tp = c.op("Mul", c.k(2.0, F64), tp)
    denom = c.op("Add", c.op("Add", two_tp, fp), fn)
    present = c.op("Greater", denom, c.k(0.0, F64))
    scores = c.op("Where", present, c.op("Div", two_tp, c.op("Where", present, denom, c.k(1.0, F64))), c.k(0.0, F64))
    if average == "macro":
        n = c.op("ReduceSum", c.cast(present, F64), keepdims=0)
        total = c.op("ReduceSum", c.op("Where", present, scores, c.k(0.0, F64)), keepdims=0)
        value = c.op("Where", c.op("Greater", n, c.k(0.0, F64)), c.op("Div", total, c.op("Max", n, c.k(1.0, F64))), c.k(0.0, F64))
    else:
        value = c.op("Gather", scores, c.k(0, DType.int64), axis=0)
    return c.cast(_checked(c, value, xs[1], ncls, F64), lt.dtype)


@rule("train.metric.perplexity")
def _perplexity(c: Ctx, node, xs, ins):
    lt, yt = ins
    rows = cross_entropy_rows(c, xs[0], xs[1], lt, 0.0)
    mean = c.op("Div", c.op("ReduceSum", rows, keepdims=0), c.k(yt.size, lt.dtype))
    return c.op("Exp", mean)


# ---- optimizer updates --------------------------------------------------------------------
def _syms(c: Ctx, xs, d: DType) -> list[Sym]:
    return [Sym(c, x, d) for x in xs]


def _bias(c: Ctx, beta: float, step: str) -> str:
    """1 - beta**step in float64."""
    return c.op("Sub", c.k(1.0, F64), c.op("Pow", c.k(beta, F64), c.cast(step, F64)))


@rule("train.optimizer.sgd")
def _sgd(c: Ctx, node, xs, ins):
    a = node.attrs
    d = ins[0].dtype
    p, g, lr, gs, *buf = _syms(c, xs, d)
    out = SGD(p, g, buf[0] if buf else p, lr, gs, a["momentum"], a["dampening"], a["nesterov"], a["weight_decay"])
    return _names(out) if buf else [out[0].name]


@rule("train.optimizer.adam")
def _adam(c: Ctx, node, xs, ins):
    a = node.attrs
    d = ins[0].dtype
    p, g, lr, gs, m, v = _syms(c, [xs[0], xs[1], xs[2], xs[3], xs[5], xs[6]], d)
    step_size = Sym(c, c.cast(c.op("Div", c.cast(xs[2], F64), _bias(c, a["beta1"], xs[4])), d), d)
    sqrt_c2 = Sym(c, c.cast(c.op("Sqrt", _bias(c, a["beta2"], xs[4])), d), d)
    out = ADAM(p, g, m, v, lr, gs, a["beta1"], a["beta2"], a["eps"], a["weight_decay"], a["decoupled"], step_size, sqrt_c2)
    return _names(out)


@rule("train.optimizer.adamax")
def _adamax(c: Ctx, node, xs, ins):
    a = node.attrs
    d = ins[0].dtype
    p, g, gs, m, u = _syms(c, [xs[0], xs[1], xs[3], xs[5], xs[6]], d)
    step_size = Sym(c, c.cast(c.op("Div", c.cast(xs[2], F64), _bias(c, a["beta1"], xs[4])), d), d)
    return _names(ADAMAX(p, g, m, u, gs, a["beta1"], a["beta2"], a["eps"], a["weight_decay"], step_size))


@rule("train.optimizer.rmsprop")
def _rmsprop(c: Ctx, node, xs, ins):
    a = node.attrs
    d = ins[0].dtype
    p, g, lr, gs, v, *buf = _syms(c, xs, d)
    out = RMSPROP(p, g, v, buf[0] if buf else p, lr, gs, a["alpha"], a["eps"], a["momentum"], a["weight_decay"])
    return _names(out if buf else out[:2])


@rule("train.optimizer.adagrad")
def _adagrad(c: Ctx, node, xs, ins):
    a = node.attrs
    p, g, lr, gs, s = _syms(c, xs, ins[0].dtype)
    return _names(ADAGRAD(p, g, s, lr, gs, a["eps"], a["weight_decay"]))


@rule("train.optimizer.lion")
def _lion(c: Ctx, node, xs, ins):
    a = node.attrs
    p, g, lr, gs, m = _syms(c, xs, ins[0].dtype)
    return _names(LION(p, g, m, lr, gs, a["beta1"], a["beta2"], a["weight_decay"]))


def _norm(c: Ctx, x: str) -> str:
    flat = c.cast(reshape(c, x, [-1]), F64)
    return c.op("Sqrt", c.op("ReduceSum", c.op("Mul", flat, flat), keepdims=0))


@rule("train.optimizer.lamb")
def _lamb(c: Ctx, node, xs, ins):
    a = node.attrs
    d = ins[0].dtype
    p, g, gs, m, v = _syms(c, [xs[0], xs[1], xs[3], xs[5], xs[6]], d)
    c1 = Sym(c, c.cast(_bias(c, a["beta1"], xs[4]), d), d)
    c2 = Sym(c, c.cast(_bias(c, a["beta2"], xs[4]), d), d)
    r, m2, v2 = LAMB_DIR(p, g, m, v, gs, a["beta1"], a["beta2"], a["eps"], a["weight_decay"], c1, c2)
    pn, rn = _norm(c, xs[0]), _norm(c, r.name)
    zero = c.k(0.0, F64)
    ok = c.op("And", c.op("Greater", pn, zero), c.op("Greater", rn, zero))
    trust = c.op("Where", ok, c.op("Div", pn, c.op("Where", ok, rn, c.k(1.0, F64))), c.k(1.0, F64))
    scale = c.cast(c.op("Mul", c.cast(xs[2], F64), trust), d)
    return [c.op("Sub", xs[0], c.op("Mul", scale, r.name)), m2.name, v2.name]
