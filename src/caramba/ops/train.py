"""train.*: losses, metrics, optimizer updates and checkpoints as graph ops.

Losses are differentiable (their VJP rules live in ``caramba/autodiff/rules/train.py``).
Metrics, optimizer updates and checkpoints are not. Optimizer updates are *pure* multi-output
ops ``(param, grad, lr, grad_scale, [step], *slots) -> (param', *slots')``; a train step writes
the results back with ``state.write``, so the compiler sees plain data flow. ``grad_scale``
multiplies the gradient first (global-norm clipping feeds it; 1 otherwise), ``lr`` is a scalar
(a schedule computes it in the graph) and ``step`` is the int64 count of updates including this
one (for bias correction). Learning-rate schedules and clipping are built from existing ops
(see ``caramba.train``), so they need nothing new from a backend.
"""

from __future__ import annotations

import numpy as np

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS, DType
from caramba.ir.types import Effect, ValueType
from caramba.ops._define import define, require_dtype, same_dtype

INDEX = frozenset({DType.int64, DType.int32})
REDUCTION = Attr("reduction", "str", "mean", choices=("mean", "sum", "none"), doc="mean, sum or none (per element)")


def _reduced(t: ValueType, a) -> ValueType:
    return t if a["reduction"] == "none" else ValueType((), t.dtype)


# ---- losses -----------------------------------------------------------------------------


def _pointwise_loss(op_id: str):
    def infer(ins, a):
        same_dtype(op_id, ins)
        require_dtype(op_id, ins[0], FLOATS)
        if ins[0].shape != ins[1].shape:
            raise GraphError(f"{op_id} needs prediction and target of one shape, got {ins[0]} and {ins[1]}")
        return (_reduced(ins[0], a),)

    return infer


mse = define(
    "train.loss.mse", _pointwise_loss("train.loss.mse"), 2, (REDUCTION,),
    doc="Mean squared error: reduce((pred - target)**2).",
)


def _labels_for(op_id: str, logits: ValueType, labels: ValueType) -> None:
    require_dtype(op_id, logits, FLOATS, "logits")
    require_dtype(op_id, labels, INDEX, "labels")
    if logits.rank == 0 or labels.shape != logits.shape[:-1]:
        raise GraphError(f"{op_id} needs logits [..., classes] and labels [...], got {logits} and {labels}")
    if logits.shape[-1] == 0:
        raise GraphError(f"{op_id} needs at least one class")


def _cross_entropy(ins, a):
    logits, labels = ins
    _labels_for("train.loss.cross_entropy", logits, labels)
    if not 0.0 <= a["label_smoothing"] <= 1.0:
        raise GraphError(f"train.loss.cross_entropy label_smoothing must be in [0, 1], got {a['label_smoothing']}")
    return (_reduced(logits.with_shape(labels.shape), a),)


cross_entropy = define(
    "train.loss.cross_entropy", _cross_entropy, 2,
    (Attr("label_smoothing", "float", 0.0), REDUCTION),
    doc="Softmax cross entropy of logits [..., C] against integer labels [...] (out-of-range labels"
    " are a run-time error): reduce(-sum_c q_c * log_softmax(logits)_c) with"
    " q = (1 - label_smoothing) * onehot(label) + label_smoothing / C.",
)

bce = define(
    "train.loss.bce", _pointwise_loss("train.loss.bce"), 2,
    (Attr("from_logits", "bool", True), REDUCTION),
    doc="Binary cross entropy against targets in [0, 1]: from logits x, max(x, 0) - x*t +"
    " log1p(exp(-|x|)); from probabilities p, -(t*log(p) + (1-t)*log(1-p)) with each log"
    " clamped at -100 (as PyTorch).",
)


# ---- metrics ----------------------------------------------------------------------------


def _metric(op_id: str):
    def infer(ins, a):
        logits, labels = ins
        _labels_for(op_id, logits, labels)
        if a.get("average") == "binary" and logits.shape[-1] < 2:
            raise GraphError(f"{op_id} average='binary' needs at least 2 classes, got {logits.shape[-1]}")
        return (ValueType((), logits.dtype),)

    return infer


accuracy = define(
    "train.metric.accuracy", _metric("train.metric.accuracy"), 2, differentiable=False,
    doc="Fraction of rows whose argmax over the last axis of logits equals the label (first"
    " maximum wins ties).",
)
f1 = define(
    "train.metric.f1", _metric("train.metric.f1"), 2,
    (Attr("average", "str", "macro", choices=("macro", "micro", "binary")),),
    differentiable=False,
    doc="F1 of argmax(logits) against labels. macro: mean of per-class 2tp / (2tp + fp + fn) over"
    " the classes present in labels or predictions (scikit-learn's default); micro: over all"
    " decisions; binary: class 1 is positive (0 when it has no tp, fp or fn).",
)
perplexity = define(
    "train.metric.perplexity", _metric("train.metric.perplexity"), 2, differentiable=False,
    doc="exp(mean cross entropy) of logits [..., C] against integer labels [...].",
)


# ---- optimizer updates ------------------------------------------------------------------


def _optimizer(op_id: str, slots, with_step: bool, optional_slot: str | None = None):
    """Type rule for ``(param, grad, lr, grad_scale, [step], *slots)``."""
    lead = 5 if with_step else 4

    def infer(ins, a):
        p = ins[0]
        require_dtype(op_id, p, FLOATS, "param")
        if ins[1] != p:
            raise GraphError(f"{op_id} gradient {ins[1]} does not match param {p}")
        for name, t in zip(("lr", "grad_scale"), ins[2:4], strict=True):
            if t != ValueType((), p.dtype):
                raise GraphError(f"{op_id} {name} must be a {p.dtype} scalar, got {t}")
        if with_step and ins[4] != ValueType((), DType.int64):
            raise GraphError(f"{op_id} step must be an int64 scalar, got {ins[4]}")
        names = list(slots)
        if optional_slot is not None and a["momentum"] != 0.0:
            names.append(optional_slot)
        if len(ins) != lead + len(names):
            raise GraphError(
                f"{op_id} takes param, grad, lr, grad_scale{', step' if with_step else ''}"
                + "".join(f", {n}" for n in names)
                + f" ({lead + len(names)} inputs with these attributes), got {len(ins)}"
            )
        for name, t in zip(names, ins[lead:], strict=True):
            if t != p:
                raise GraphError(f"{op_id} slot {name} {t} does not match param {p}")
        for attr in a:
            if attr in ("nesterov", "decoupled"):
                continue
            if not a[attr] >= 0.0:
                raise GraphError(f"{op_id} {attr} must be >= 0, got {a[attr]}")
        for beta in ("beta1", "beta2", "alpha"):
            if beta in a and not a[beta] < 1.0:
                raise GraphError(f"{op_id} {beta} must be < 1, got {a[beta]}")
        return (p,) * (1 + len(names))

    return infer


WD = Attr("weight_decay", "float", 0.0)
_OPT = dict(effect=Effect.pure, differentiable=False)

sgd = define(
    "train.optimizer.sgd", _optimizer("train.optimizer.sgd", (), False, "buf"), (4, 5),
    (Attr("momentum", "float", 0.0), Attr("dampening", "float", 0.0), Attr("nesterov", "bool", False), WD),
    **_OPT,
    doc="g = grad_scale*grad + wd*p; with momentum: buf = momentum*buf + (1-dampening)*g and"
    " d = g + momentum*buf (nesterov) or buf; else d = g. p -= lr*d. Outputs (p, [buf]).",
)
adam = define(
    "train.optimizer.adam", _optimizer("train.optimizer.adam", ("m", "v"), True), 7,
    (Attr("beta1", "float", 0.9), Attr("beta2", "float", 0.999), Attr("eps", "float", 1e-8), WD,
     Attr("decoupled", "bool", False, doc="AdamW: decay p by lr*wd instead of adding wd*p to g")),
    **_OPT,
    doc="g = grad_scale*grad (+ wd*p unless decoupled); m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;"
    " c1 = 1 - b1**step, c2 = 1 - b2**step; p = p*(1 - lr*wd) if decoupled;"
    " p -= (lr/c1) * m / (sqrt(v)/sqrt(c2) + eps). Outputs (p, m, v).",
)
adamax = define(
    "train.optimizer.adamax", _optimizer("train.optimizer.adamax", ("m", "u"), True), 7,
    (Attr("beta1", "float", 0.9), Attr("beta2", "float", 0.999), Attr("eps", "float", 1e-8), WD),
    **_OPT,
    doc="g = grad_scale*grad + wd*p; m = b1*m + (1-b1)*g; u = max(b2*u, |g| + eps);"
    " p -= (lr/(1 - b1**step)) * m / u. Outputs (p, m, u).",
)
rmsprop = define(
    "train.optimizer.rmsprop", _optimizer("train.optimizer.rmsprop", ("v",), False, "buf"), (5, 6),
    (Attr("alpha", "float", 0.99), Attr("eps", "float", 1e-8), Attr("momentum", "float", 0.0), WD),
    **_OPT,
    doc="g = grad_scale*grad + wd*p; v = alpha*v + (1-alpha)*g*g; d = g / (sqrt(v) + eps); with"
    " momentum buf = momentum*buf + d, p -= lr*buf; else p -= lr*d. Outputs (p, v, [buf]).",
)
adagrad = define(
    "train.optimizer.adagrad", _optimizer("train.optimizer.adagrad", ("s",), False), 5,
    (Attr("eps", "float", 1e-10), WD),
    **_OPT,
    doc="g = grad_scale*grad + wd*p; s = s + g*g; p -= lr * g / (sqrt(s) + eps). Outputs (p, s).",
)
lion = define(
    "train.optimizer.lion", _optimizer("train.optimizer.lion", ("m",), False), 5,
    (Attr("beta1", "float", 0.9), Attr("beta2", "float", 0.99), WD),
    **_OPT,
    doc="g = grad_scale*grad; c = b1*m + (1-b1)*g; p = p*(1 - lr*wd) - lr*sign(c);"
    " m = b2*m + (1-b2)*g. Outputs (p, m).",
)
lamb = define(
    "train.optimizer.lamb", _optimizer("train.optimizer.lamb", ("m", "v"), True), 7,
    (Attr("beta1", "float", 0.9), Attr("beta2", "float", 0.999), Attr("eps", "float", 1e-6), WD),
    **_OPT,
    doc="g = grad_scale*grad; m, v as Adam; r = (m/c1) / (sqrt(v/c2) + eps) + wd*p;"
    " trust = |p| / |r| (1 if either norm is 0); p -= lr*trust*r. Outputs (p, m, v).",
)

OPTIMIZERS = ("sgd", "adam", "adamax", "rmsprop", "adagrad", "lion", "lamb")


# ---- update rules -------------------------------------------------------------------------
#
# The per-element equations of the optimizer ops, written once. ``np`` functions here take
# scalars and arrays alike, so a backend runs them on whole arrays (NumPy), compiles them into a
# loop (Numba), or (``caramba.train``'s decomposed optimizers) on graph values, where ``np`` is
# bound to the matching IR ops: every path performs the same operations in the same order.
# ``step_size``/``sqrt_c2``/``c1``/``c2`` are the bias corrections of the ``step`` input:
# ``c1 = 1 - beta1**step``, ``c2 = 1 - beta2**step``, ``step_size = lr / c1``, ``sqrt_c2 = sqrt(c2)``.


def sgd_elem(p, g, buf, lr, gs, momentum, dampening, nesterov, wd):
    g = g * gs
    if wd != 0.0:
        g = g + wd * p
    if momentum != 0.0:
        buf = momentum * buf + (1.0 - dampening) * g
        d = g + momentum * buf if nesterov else buf
    else:
        d = g
    return p - lr * d, buf


def adam_elem(p, g, m, v, lr, gs, b1, b2, eps, wd, decoupled, step_size, sqrt_c2):
    g = g * gs
    if wd != 0.0 and not decoupled:
        g = g + wd * p
    m = b1 * m + (1.0 - b1) * g
    v = b2 * v + (1.0 - b2) * g * g
    if decoupled:
        p = p * (1.0 - lr * wd)
    return p - step_size * (m / (np.sqrt(v) / sqrt_c2 + eps)), m, v


def adamax_elem(p, g, m, u, gs, b1, b2, eps, wd, step_size):
    g = g * gs
    if wd != 0.0:
        g = g + wd * p
    m = b1 * m + (1.0 - b1) * g
    u = np.maximum(b2 * u, np.abs(g) + eps)
    return p - step_size * (m / u), m, u


def rmsprop_elem(p, g, v, buf, lr, gs, alpha, eps, momentum, wd):
    g = g * gs
    if wd != 0.0:
        g = g + wd * p
    v = alpha * v + (1.0 - alpha) * g * g
    d = g / (np.sqrt(v) + eps)
    if momentum != 0.0:
        buf = momentum * buf + d
        d = buf
    return p - lr * d, v, buf


def adagrad_elem(p, g, s, lr, gs, eps, wd):
    g = g * gs
    if wd != 0.0:
        g = g + wd * p
    s = s + g * g
    return p - lr * (g / (np.sqrt(s) + eps)), s


def lion_elem(p, g, m, lr, gs, b1, b2, wd):
    g = g * gs
    c = b1 * m + (1.0 - b1) * g
    return p * (1.0 - lr * wd) - lr * np.sign(c), b2 * m + (1.0 - b2) * g


def lamb_dir_elem(p, g, m, v, gs, b1, b2, eps, wd, c1, c2):
    """LAMB's first pass: the new moments and the update direction r (before the trust ratio)."""
    g = g * gs
    m = b1 * m + (1.0 - b1) * g
    v = b2 * v + (1.0 - b2) * g * g
    return (m / c1) / (np.sqrt(v / c2) + eps) + wd * p, m, v


# ---- checkpoints ------------------------------------------------------------------------


def _checkpoint(ins, a):
    if ins[0] != ValueType((), DType.int64):
        raise GraphError(f"train.checkpoint.save step must be an int64 scalar, got {ins[0]}")
    names = [n for n in a["names"].split(",") if n]
    if len(names) != len(ins) - 1 or len(set(names)) != len(names):
        raise GraphError(
            f"train.checkpoint.save names {names} must name each of the {len(ins) - 1} tensors once"
        )
    if a["every"] <= 0:
        raise GraphError(f"train.checkpoint.save every must be positive, got {a['every']}")
    if not a["path"]:
        raise GraphError("train.checkpoint.save needs a path")
    return (ValueType((), DType.bool),)


save = define(
    "train.checkpoint.save", _checkpoint, (1, None),
    (Attr("path", "str", doc="file path; '{step}' is replaced by the step"),
     Attr("names", "str", doc="comma-separated names of the tensors, in input order"),
     Attr("every", "int", 1, doc="save when step % every == 0"),
     Attr("graph_hash", "str", ""), Attr("manifest_hash", "str", "")),
    effect=Effect.checkpoint,
    differentiable=False,
    doc="Write the tensors (after the step input) to a safetensors file with metadata (step,"
    " graph_hash, manifest_hash) when step % every == 0; outputs whether it wrote. Never"
    " removed or reordered by the compiler.",
)
