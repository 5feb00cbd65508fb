"""xla rules for train.*: losses, metrics and optimizer updates (no checkpoint writer: XLA has no
host file I/O inside a computation, so ``train.checkpoint.save`` is not claimed).

The optimizer updates run the per-element rules of ``caramba.ops.train`` with ``np`` bound to
``jax.numpy``, the same operations in the same order as the cpu kernels; bias corrections are
computed in float64 from the step and then rounded to the parameter's dtype, as the cpu kernels
(Python floats against NumPy arrays) do.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp

from caramba.backends.xla.lowering import FLOAT, IDX, KEY, log1p, rule, shift_of
from caramba.ops import train as rules

LABELED = FLOAT | IDX
STEPPED = FLOAT | KEY


def _bind(fn):
    return types.FunctionType(fn.__code__, {**fn.__globals__, "np": jnp}, fn.__name__, fn.__defaults__)


SGD, ADAM, ADAMAX, RMSPROP, ADAGRAD, LION, LAMB_DIR = (
    _bind(f) for f in (rules.sgd_elem, rules.adam_elem, rules.adamax_elem, rules.rmsprop_elem,
                       rules.adagrad_elem, rules.lion_elem, rules.lamb_dir_elem)
)


def _reduce(node):
    how = node.attrs["reduction"]
    if how == "mean":
        return jnp.mean
    if how == "sum":
        return jnp.sum
    return lambda v: v


@rule("train.loss.mse", FLOAT)
def _mse(node, ins, ctx):
    red = _reduce(node)

    def mse(p, t):
        d = p - t
        return red(d * d)

    return mse


def _check_labels(ctx, node, labels, c):
    ctx.check_range(node, labels, 0, c, f"{node.op}: labels outside [0, {c})")


def cross_entropy_rows(logits, labels, smoothing):
    c = logits.shape[-1]
    rows = jnp.reshape(logits, (-1, c))
    m = shift_of(rows, 1)  # -inf rows give -inf, not NaN
    lse = jnp.reshape(jnp.log(jnp.sum(jnp.exp(rows - m), axis=1)) + m[:, 0], labels.shape)
    flat = jnp.clip(jnp.reshape(labels, (-1,)).astype(jnp.int64), 0, c - 1)
    picked = jnp.reshape(jnp.take_along_axis(rows, flat[:, None], axis=1)[:, 0], labels.shape)
    if smoothing == 0.0:
        return lse - picked
    return lse - (1.0 - smoothing) * picked - (smoothing / c) * jnp.sum(logits, axis=-1)


@rule("train.loss.cross_entropy", LABELED)
def _cross_entropy(node, ins, ctx):
    red = _reduce(node)
    s = node.attrs["label_smoothing"]
    c = ins[0].shape[-1]

    def cross_entropy(logits, labels):
        _check_labels(ctx, node, labels, c)
        return red(cross_entropy_rows(logits, labels, s))

    return cross_entropy


@rule("train.loss.bce", FLOAT)
def _bce(node, ins, ctx):
    red = _reduce(node)
    if node.attrs["from_logits"]:
        return lambda x, t: red(jnp.maximum(x, 0) - x * t + log1p(jnp.exp(-jnp.abs(x))))

    def bce(p, t):
        lp = jnp.maximum(jnp.log(p), -100.0)
        lq = jnp.maximum(log1p(-p), -100.0)
        return red(-(t * lp + (1 - t) * lq))

    return bce


def _predictions(logits, labels):
    return jnp.reshape(jnp.argmax(logits, axis=-1), (-1,)), jnp.reshape(labels, (-1,)).astype(jnp.int64)


@rule("train.metric.accuracy", LABELED)
def _accuracy(node, ins, ctx):
    c = ins[0].shape[-1]

    def accuracy(logits, labels):
        _check_labels(ctx, node, labels, c)
        pred, lab = _predictions(logits, labels)
        if lab.size == 0:
            return jnp.zeros((), logits.dtype)
        return jnp.mean((pred == lab).astype(jnp.float64)).astype(logits.dtype)

    return accuracy


@rule("train.metric.f1", LABELED)
def _f1(node, ins, ctx):
    average = node.attrs["average"]
    c = ins[0].shape[-1]

    def f1(logits, labels):
        _check_labels(ctx, node, labels, c)
        pred, lab = _predictions(logits, labels)
        lab_c = jnp.clip(lab, 0, c - 1)
        tp = jnp.bincount(jnp.where(pred == lab, lab_c, c), length=c + 1)[:c].astype(jnp.float64)
        fp = jnp.bincount(pred, length=c).astype(jnp.float64) - tp
        fn = jnp.bincount(lab_c, length=c).astype(jnp.float64) - tp
        if average == "micro":
            tp, fp, fn = jnp.sum(tp, keepdims=True), jnp.sum(fp, keepdims=True), jnp.sum(fn, keepdims=True)
        elif average == "binary":
            tp, fp, fn = tp[1:2], fp[1:2], fn[1:2]
        denom = 2 * tp + fp + fn
        present = denom > 0
        scores = jnp.where(present, 2 * tp / jnp.where(present, denom, 1), 0.0)
        if average == "macro":
            n = jnp.sum(present)
            value = jnp.where(n > 0, jnp.sum(jnp.where(present, scores, 0.0)) / jnp.maximum(n, 1), 0.0)
        else:
            value = scores[0]
        return value.astype(logits.dtype)

    return f1


@rule("train.metric.perplexity", LABELED)
def _perplexity(node, ins, ctx):
    c = ins[0].shape[-1]

    def perplexity(logits, labels):
        _check_labels(ctx, node, labels, c)
        return jnp.exp(jnp.mean(cross_entropy_rows(logits, labels, 0.0)))

    return perplexity


# ---- optimizer updates --------------------------------------------------------------------


def _bias(b: float, step):
    """1 - b**step in float64 (the cpu kernels compute it as a Python float)."""
    return 1.0 - jnp.power(jnp.float64(b), step.astype(jnp.float64))


def _f64(x):
    return x.astype(jnp.float64)


def _as(p, *scalars):
    return tuple(s.astype(p.dtype) for s in scalars)


@rule("train.optimizer.sgd", FLOAT)
def _sgd(node, ins, ctx):
    a = node.attrs
    mom, damp, nest, wd = a["momentum"], a["dampening"], a["nesterov"], a["weight_decay"]
    if mom == 0.0:
        return lambda p, g, lr, gs: SGD(p, g, p, lr, gs, mom, damp, nest, wd)[0]
    return lambda p, g, lr, gs, buf: SGD(p, g, buf, lr, gs, mom, damp, nest, wd)


@rule("train.optimizer.adam", STEPPED)
def _adam(node, ins, ctx):
    a = node.attrs
    b1, b2, eps, wd, dec = a["beta1"], a["beta2"], a["eps"], a["weight_decay"], a["decoupled"]

    def adam(p, g, lr, gs, step, m, v):
        step_size, sqrt_c2 = _as(p, _f64(lr) / _bias(b1, step), jnp.sqrt(_bias(b2, step)))
        return ADAM(p, g, m, v, lr, gs, b1, b2, eps, wd, dec, step_size, sqrt_c2)

    return adam


@rule("train.optimizer.adamax", STEPPED)
def _adamax(node, ins, ctx):
    a = node.attrs
    b1, b2, eps, wd = a["beta1"], a["beta2"], a["eps"], a["weight_decay"]

    def adamax(p, g, lr, gs, step, m, u):
        (step_size,) = _as(p, _f64(lr) / _bias(b1, step))
        return ADAMAX(p, g, m, u, gs, b1, b2, eps, wd, step_size)

    return adamax


@rule("train.optimizer.rmsprop", FLOAT)
def _rmsprop(node, ins, ctx):
    a = node.attrs
    alpha, eps, mom, wd = a["alpha"], a["eps"], a["momentum"], a["weight_decay"]
    if mom == 0.0:
        return lambda p, g, lr, gs, v: RMSPROP(p, g, v, p, lr, gs, alpha, eps, mom, wd)[:2]
    return lambda p, g, lr, gs, v, buf: RMSPROP(p, g, v, buf, lr, gs, alpha, eps, mom, wd)


@rule("train.optimizer.adagrad", FLOAT)
def _adagrad(node, ins, ctx):
    a = node.attrs
    eps, wd = a["eps"], a["weight_decay"]
    return lambda p, g, lr, gs, s: ADAGRAD(p, g, s, lr, gs, eps, wd)


@rule("train.optimizer.lion", FLOAT)
def _lion(node, ins, ctx):
    a = node.attrs
    b1, b2, wd = a["beta1"], a["beta2"], a["weight_decay"]
    return lambda p, g, lr, gs, m: LION(p, g, m, lr, gs, b1, b2, wd)


def _norm(x):
    flat = jnp.reshape(x, (-1,)).astype(jnp.float64)
    return jnp.sqrt(jnp.dot(flat, flat, precision=jax.lax.Precision.HIGHEST))


@rule("train.optimizer.lamb", STEPPED)
def _lamb(node, ins, ctx):
    a = node.attrs
    b1, b2, eps, wd = a["beta1"], a["beta2"], a["eps"], a["weight_decay"]

    def lamb(p, g, lr, gs, step, m, v):
        c1, c2 = _as(p, _bias(b1, step), _bias(b2, step))
        r, m2, v2 = LAMB_DIR(p, g, m, v, gs, b1, b2, eps, wd, c1, c2)
        pn, rn = _norm(p), _norm(r)
        trust = jnp.where((pn > 0.0) & (rn > 0.0), pn / jnp.where(rn > 0.0, rn, 1.0), 1.0)
        (scale,) = _as(p, _f64(lr) * trust)
        return p - scale * r, m2, v2

    return lamb
