"""VJP rules for the train.* losses (metrics, optimizer updates and checkpoints have none)."""

from __future__ import annotations

from caramba import ops
from caramba.autodiff.rules import rule
from caramba.autodiff.rules._util import scalar


def _per_element(c, ct, n: int):
    """The loss cotangent per element: ct / n for mean, ct for sum and none (broadcastable)."""
    return ct * (1.0 / n) if c.attrs["reduction"] == "mean" and n else ct


@rule("train.loss.mse")
def mse(c, ct):
    pred, target = c.x
    d = (pred - target) * _per_element(c, ct, pred.type.size) * 2.0
    return (d if c.needs[0] else None, -d if c.needs[1] else None)


@rule("train.loss.cross_entropy")
def cross_entropy(c, ct):
    logits, labels = c.x
    n_classes = logits.shape[-1]
    s = c.attrs["label_smoothing"]
    w = _per_element(c, ct, labels.type.size)
    if c.attrs["reduction"] == "none":
        w = ops.expand_dims(w, axes=(-1,))
    classes = c.call("shape.iota", (), {"shape": logits.shape, "axis": logits.ndim - 1, "dtype": labels.dtype})
    hit = ops.equal(classes, ops.expand_dims(labels, axes=(-1,)))
    target = ops.cast(hit, dtype=logits.dtype)
    if s:
        target = target * (1.0 - s) + s / n_classes
    return ((ops.softmax(logits, axis=-1) - target) * w, None)


@rule("train.loss.bce")
def bce(c, ct):
    x, t = c.x
    w = _per_element(c, ct, x.type.size)
    dx = dt = None
    if c.attrs["from_logits"]:
        if c.needs[0]:
            dx = (ops.sigmoid(x) - t) * w
        if c.needs[1]:
            dt = -(x * w)
        return dx, dt
    if c.needs[0]:  # (p - t) / (p (1 - p)), guarded as PyTorch does
        dx = (x - t) / ops.maximum(x * (1.0 - x), scalar(1e-12, x)) * w
    if c.needs[1]:
        floor = scalar(-100.0, x)
        dt = (ops.maximum(ops.log1p(-x), floor) - ops.maximum(ops.log(x), floor)) * w
    return dx, dt


