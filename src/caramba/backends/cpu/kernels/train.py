"""cpu kernels for train.*: losses, metrics, optimizer updates (one fused pass each) and the
checkpoint writer.

Optimizer updates run as one Numba loop over the parameter when Numba is installed (one pass
over memory instead of a dozen; float32 in float32 operations; large parameters in blocks on
the cpu workers, outputs in arrays of earlier runs nobody holds any more:
``compute/spare.py``), else as NumPy expressions. Both evaluate the same IEEE operations in
the same order (no contraction to FMA), so they give bit-identical results.
"""

from __future__ import annotations

import math

import numpy as np

from caramba.backends.cpu.kernels import FLOAT, kernel
from caramba.compute.spare import Spare
from caramba.errors import CarambaError
from caramba.ir.dtypes import DType
from caramba.ops.train import (
    adagrad_elem,
    adam_elem,
    adamax_elem,
    lamb_dir_elem,
    lion_elem,
    rmsprop_elem,
    sgd_elem,
)

LABELED = FLOAT | {DType.int64, DType.int32}  # float logits with integer labels
STEPPED = FLOAT | {DType.int64}  # float tensors with the int64 step counter
# Elements below which plain SGD (no momentum: two to five NumPy passes, ~2.7 us at 64 elements)
# runs as NumPy; every other update runs its loop at every size (~3.5 us a call at 64 elements
# against NumPy's 4-8 us: Adam is a dozen passes).
LOOP_MIN = 512
LOOP_SPLIT = 1 << 15  # elements from which an update is split over the cpu workers
SPARE_MIN = 1 << 12  # elements below which outputs are fresh arrays (no page faults to save)
SPARE_KEEP = 8  # outputs an update kernel remembers for reuse: two runs' worth (up to 3 each)


def _reduce(node):
    how = node.attrs["reduction"]
    if how == "mean":
        return lambda v: np.asarray(np.mean(v))
    if how == "sum":
        return lambda v: np.asarray(np.sum(v))
    return lambda v: v


# ---- losses -----------------------------------------------------------------------------


@kernel("train.loss.mse", FLOAT)
def _mse(node, ins):
    red = _reduce(node)

    def mse(p, t):
        d = p - t
        return red(d * d)

    return mse


class LabelOutOfRange(CarambaError):
    """A class label fed to a loss or metric is outside [0, classes)."""


def check_labels(labels, c: int, what: str) -> None:
    if labels.size and (labels.min() < 0 or labels.max() >= c):
        bad = labels[(labels < 0) | (labels >= c)].ravel()[:5].tolist()
        raise LabelOutOfRange(f"{what}: labels {bad} are outside [0, {c})")


def cross_entropy_rows(logits, labels, smoothing, what):
    """Per-row loss lse - (1-s)*x[label] - (s/C)*sum(x)."""
    c = logits.shape[-1]
    check_labels(labels, c, what)
    rows = logits.reshape(-1, c)
    m = np.max(rows, axis=1, keepdims=True) if c else np.zeros((rows.shape[0], 1), rows.dtype)
    if not np.isfinite(m).all():  # rows of -inf give -inf (not NaN); +inf rows stay inf/NaN
        m = np.where(np.isfinite(m), m, 0).astype(rows.dtype, copy=False)
    lse = (np.log(np.sum(np.exp(rows - m), axis=1)) + m[:, 0]).reshape(labels.shape)
    picked = rows[np.arange(rows.shape[0]), labels.reshape(-1)].reshape(labels.shape)
    loss = lse - picked if smoothing == 0.0 else lse - (1.0 - smoothing) * picked - (smoothing / c) * np.sum(logits, axis=-1)
    return loss.astype(logits.dtype, copy=False)


def _loss_loops():
    try:
        from caramba.backends.cpu.kernels import _loss_loops
    except ImportError:  # Numba is optional: NumPy computes the same loss
        return None
    return _loss_loops


# From this many classes a row's cross-entropy runs in vectorized passes (``_xent_loops``):
# below it, the one-pass loop of ``_loss_loops`` (float64) or NumPy.
WIDE_CLASSES = 32


def _wide_cross_entropy(logits, labels_t, red, s, what):
    """The cross-entropy of float rows of at least ``WIDE_CLASSES`` through ``_xent_loops``
    (float32 kept float32), or None (no Numba, narrow rows, another dtype)."""
    if logits.dtype not in (DType.float32, DType.float64) or not logits.rank or logits.shape[-1] < WIDE_CLASSES:
        return None
    from caramba.backends.cpu import fused

    if not fused.available():
        return None
    from caramba.backends.cpu.kernels import _xent_loops

    c, dt = logits.shape[-1], logits.dtype.numpy
    rows = _xent_loops.cross_entropy_rows_f32 if logits.dtype == DType.float32 else _xent_loops.cross_entropy_rows_f64
    n = math.prod(labels_t.shape)

    def cross_entropy_wide(x, labels):
        out, tmp = np.empty(labels.shape, dt), np.empty(c, dt)
        bad = rows(np.ascontiguousarray(x).reshape(n, c), labels.reshape(-1), float(s), out.reshape(-1), tmp)
        if bad >= 0:
            check_labels(labels, c, what)  # raises, naming the offending labels
        return red(out)

    return cross_entropy_wide


@kernel("train.loss.cross_entropy", LABELED)
def _cross_entropy(node, ins):
    red = _reduce(node)
    s = node.attrs["label_smoothing"]
    what = f"train.loss.cross_entropy node '{node.id}' labels"
    logits = ins[0]
    wide = _wide_cross_entropy(logits, labels_t=ins[1], red=red, s=s, what=what)
    if wide is not None:
        return wide
    loops = _loss_loops() if logits.dtype == DType.float64 and logits.rank and logits.shape[-1] else None
    if loops is None:
        return lambda logits, labels: red(cross_entropy_rows(logits, labels, s, what))
    c = logits.shape[-1]
    rows = loops.cross_entropy_rows
    _prefetch(rows, _c_array(DType.float64, 2), _c_array(ins[1].dtype, 1), *_typeof(float(s)),
              _c_array(DType.float64, 1, writable=True))

    def cross_entropy_loop(x, labels):
        out = np.empty(labels.shape, np.float64)
        bad = rows(np.ascontiguousarray(x).reshape(-1, c), labels.reshape(-1), s, out.reshape(-1))
        if bad >= 0:
            check_labels(labels, c, what)  # raises, naming the offending labels
        return red(out)

    return cross_entropy_loop


@kernel("train.loss.bce", FLOAT)
def _bce(node, ins):
    red = _reduce(node)
    if node.attrs["from_logits"]:

        def bce_logits(x, t):
            return red(np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x))))

        return bce_logits

    def bce(p, t):
        lp = np.maximum(np.log(p), -100.0)
        lq = np.maximum(np.log1p(-p), -100.0)
        return red(-(t * lp + (1 - t) * lq))

    return bce


# ---- metrics ----------------------------------------------------------------------------


def _predictions(logits, labels, what):
    check_labels(labels, logits.shape[-1], what)
    return np.argmax(logits, axis=-1).ravel(), labels.ravel().astype(np.int64)


@kernel("train.metric.accuracy", LABELED)
def _accuracy(node, ins):
    what = f"train.metric.accuracy node '{node.id}' labels"

    def accuracy(logits, labels):
        pred, lab = _predictions(logits, labels, what)
        return np.asarray(np.mean(pred == lab) if lab.size else 0.0, dtype=logits.dtype)

    return accuracy


@kernel("train.metric.f1", LABELED)
def _f1(node, ins):
    average = node.attrs["average"]
    c = ins[0].shape[-1]
    what = f"train.metric.f1 node '{node.id}' labels"

    def f1(logits, labels):
        pred, lab = _predictions(logits, labels, what)
        tp = np.bincount(lab[pred == lab], minlength=c).astype(np.float64)
        fp = np.bincount(pred, minlength=c) - tp
        fn = np.bincount(lab, minlength=c) - tp
        if average == "micro":
            tp, fp, fn = tp.sum(keepdims=True), fp.sum(keepdims=True), fn.sum(keepdims=True)
        elif average == "binary":
            tp, fp, fn = tp[1:2], fp[1:2], fn[1:2]
        denom = 2 * tp + fp + fn
        present = denom > 0
        scores = np.where(present, 2 * tp / np.where(present, denom, 1), 0.0)
        if average == "macro":
            value = scores[present].mean() if present.any() else 0.0
        else:
            value = scores[0]
        return np.asarray(value, dtype=logits.dtype)

    return f1


@kernel("train.metric.perplexity", LABELED)
def _perplexity(node, ins):
    what = f"train.metric.perplexity node '{node.id}' labels"
    return lambda logits, labels: np.asarray(np.exp(np.mean(cross_entropy_rows(logits, labels, 0.0, what))))


# ---- optimizer updates --------------------------------------------------------------------
#
# Each update rule is written once, per element, beside its op (``caramba.ops.train``, the
# ``*_elem`` functions). Parameters run it as one Numba loop (``_train_loops``; float32 ones as
# a loop written out in float32 operations, ``<rule>_f32``); plain SGD on small parameters, and
# every parameter when Numba is missing, runs the same expression on whole arrays. Both perform
# the same IEEE operations in the same order, so they agree bit for bit.


_LOOPS: list = []


def _prefetch(loop, *arg_types) -> None:
    """Compile ``loop`` for the argument types its first call will have with the graph's
    kernels, on two cores (``fused.jit.prefetch``; a call with other types compiles then, as
    before)."""
    from caramba.backends.cpu.fused import jit

    jit.prefetch(loop, arg_types)


def _c_array(dtype: DType, rank: int, writable: bool = False):
    """The Numba type of a C-contiguous array of ``dtype`` and ``rank`` (``fused.jit.array_type``)."""
    from caramba.backends.cpu.fused import jit
    from caramba.ir.types import ValueType

    return jit.array_type(ValueType((0,) * rank, dtype), readonly=not writable)


def _typeof(*values):
    from numba import typeof

    return tuple(typeof(v) for v in values)


def _loops():
    if not _LOOPS:
        try:
            from caramba.backends.cpu.kernels import _train_loops
        except ImportError:  # Numba is optional: the NumPy path computes the same bits
            _train_loops = None
        _LOOPS.append(_train_loops)
    return _LOOPS[0]


def _f32_scalars(name: str, scalars: tuple) -> np.ndarray:
    """The scalar array of ``name``'s float32 loop (``_train_loops.<name>_f32``) from the element
    rule's Python scalars: each rounded to float32 as NumPy rounds a Python float where it meets
    a float32 array, a subexpression of scalars alone (``1.0 - b1``, ``1.0 - lr * wd``) computed
    in float64 first as Python does; 0/1 flags for the rule's branches."""
    if name == "sgd":
        lr, gs, momentum, dampening, nesterov, wd = scalars
        s = (lr, gs, momentum, 1.0 - dampening, nesterov, wd, wd != 0.0, momentum != 0.0)
    elif name == "adam":
        lr, gs, b1, b2, eps, wd, decoupled, step_size, sqrt_c2 = scalars
        s = (gs, wd, b1, 1.0 - b1, b2, 1.0 - b2, 1.0 - lr * wd, step_size, sqrt_c2, eps,
             wd != 0.0 and not decoupled, decoupled)
    elif name == "adamax":
        gs, b1, b2, eps, wd, step_size = scalars
        s = (gs, wd, b1, 1.0 - b1, b2, eps, step_size, wd != 0.0)
    elif name == "rmsprop":
        lr, gs, alpha, eps, momentum, wd = scalars
        s = (lr, gs, wd, alpha, 1.0 - alpha, eps, momentum, wd != 0.0, momentum != 0.0)
    elif name == "adagrad":
        lr, gs, eps, wd = scalars
        s = (lr, gs, wd, eps, wd != 0.0)
    elif name == "lion":
        lr, gs, b1, b2, wd = scalars
        s = (lr, gs, b1, 1.0 - b1, b2, 1.0 - b2, 1.0 - lr * wd)
    else:  # lamb_dir
        gs, b1, b2, eps, wd, c1, c2 = scalars
        s = (gs, b1, 1.0 - b1, b2, 1.0 - b2, eps, wd, c1, c2)
    return np.array(s, np.float32)


# the rules with a float32 loop
F32_RULES = frozenset({"sgd", "adam", "adamax", "rmsprop", "adagrad", "lion", "lamb_dir"})


def _run(spare, name, elem, arrays, scalars):
    """Apply ``elem``; returns one new array per output (inputs are never written; large outputs
    reuse ``spare`` arrays nobody holds any more)."""
    p = arrays[0]
    n, dt = p.size, p.dtype
    if n < LOOP_MIN and name == "sgd" and scalars[2] == 0.0:
        loops = None
    elif dt == np.float64:
        loops, args = _loops(), scalars
    elif dt == np.float32 and name in F32_RULES:
        # float32 runs loops of float32 operations (``<rule>_f32``, all scalars in one array): the
        # generic loops would promote Python scalars to float64 where NumPy keeps float32, and
        # the two paths must agree
        loops = _loops()
        if loops is not None:
            name, args = f"{name}_f32", (_f32_scalars(name, scalars),)
    else:
        loops = None
    if loops is None:
        out = elem(*arrays, *scalars)
        return tuple(np.asarray(o, dtype=dt) for o in out)
    flat = [a.ravel() for a in arrays]  # a new C-contiguous view (a copy where a is not contiguous)
    for f in flat:  # inputs typed read-only always: fresh (read-only) and stepped state share one compile
        f.flags.writeable = False
    if n < SPARE_MIN:  # small: a fresh array costs less than looking for a released one
        outs = tuple(np.empty(n, dt) for _ in range(len(arrays) - 1))
    else:
        outs = tuple(spare.empty(n, dt) for _ in range(len(arrays) - 1))
    loop = getattr(loops, name)
    if n < LOOP_SPLIT:
        loop(*flat, *outs, *args)
    else:  # memory-bound: blocks on the cpu workers (the loops release the GIL)
        from caramba.backends.cpu import workers

        arrs = flat + list(outs)
        ranges = workers.blocks(n, workers.count())
        block_scalars = args[0] if dt == np.float32 else np.array(scalars, np.float64)
        if not _on_native_helpers(loops, name, arrs, block_scalars, ranges):
            workers.run(lambda lo, hi: loop(*(a[lo:hi] for a in arrs), *args), ranges)
    return outs if p.ndim == 1 else tuple(o.reshape(p.shape) for o in outs)


def _on_native_helpers(loops, name, arrays, scalars, ranges) -> bool:
    """Run the update's blocks on the native helpers (``<name>_block``; ``scalars``: the block's
    scalar array); False, with nothing done, where there are none or another split call holds
    them."""
    from caramba.backends.cpu import workers

    pool = workers.native_pool(len(ranges))
    if pool is None:
        return False
    block = getattr(loops, f"{name}_block").address

    def split() -> bool:
        loops.split(tuple(arrays), scalars, pool.boxes, np.array(ranges, np.int64), block, pool.ctl)
        return True

    return workers.run_native_call(split, lambda: False)


def _f(x) -> float:
    return float(x)


@kernel("train.optimizer.sgd", FLOAT)
def _sgd(node, ins):
    spare = Spare(SPARE_KEEP)
    a = node.attrs
    mom, damp, nest, wd = a["momentum"], a["dampening"], a["nesterov"], a["weight_decay"]
    if mom == 0.0:  # no buffer: p stands in for it and its copy is dropped
        return lambda p, g, lr, gs: _run(spare, "sgd", sgd_elem, (p, g, p), (_f(lr), _f(gs), mom, damp, nest, wd))[0]

    def sgd_momentum(p, g, lr, gs, buf):
        return _run(spare, "sgd", sgd_elem, (p, g, buf), (_f(lr), _f(gs), mom, damp, nest, wd))

    return sgd_momentum


def _bias(b, step):
    return 1.0 - b ** int(step)


@kernel("train.optimizer.adam", STEPPED)
def _adam(node, ins):
    spare = Spare(SPARE_KEEP)
    a = node.attrs
    b1, b2, eps, wd, dec = a["beta1"], a["beta2"], a["eps"], a["weight_decay"], a["decoupled"]

    if ins and ins[0].dtype == DType.float64 and ins[0].size < LOOP_SPLIT and _loops() is not None:  # _run: the loop
        ro, w = _c_array(DType.float64, 1), _c_array(DType.float64, 1, writable=True)
        _prefetch(_loops().adam, ro, ro, ro, ro, w, w, w, *_typeof(1.0, 1.0, b1, b2, eps, wd, dec, 1.0, 1.0))

    def adam(p, g, lr, gs, step, m, v):
        lr = _f(lr)
        return _run(spare, "adam", adam_elem, (p, g, m, v),
                    (lr, _f(gs), b1, b2, eps, wd, dec, lr / _bias(b1, step), math.sqrt(_bias(b2, step))))

    return adam


@kernel("train.optimizer.adamax", STEPPED)
def _adamax(node, ins):
    spare = Spare(SPARE_KEEP)
    a = node.attrs
    b1, b2, eps, wd = a["beta1"], a["beta2"], a["eps"], a["weight_decay"]

    def adamax(p, g, lr, gs, step, m, u):
        return _run(spare, "adamax", adamax_elem, (p, g, m, u), (_f(gs), b1, b2, eps, wd, _f(lr) / _bias(b1, step)))

    return adamax


@kernel("train.optimizer.rmsprop", FLOAT)
def _rmsprop(node, ins):
    spare = Spare(SPARE_KEEP)
    a = node.attrs
    alpha, eps, mom, wd = a["alpha"], a["eps"], a["momentum"], a["weight_decay"]
    if mom == 0.0:
        return lambda p, g, lr, gs, v: _run(spare, "rmsprop", rmsprop_elem, (p, g, v, p), (_f(lr), _f(gs), alpha, eps, mom, wd))[:2]

    def rmsprop_momentum(p, g, lr, gs, v, buf):
        return _run(spare, "rmsprop", rmsprop_elem, (p, g, v, buf), (_f(lr), _f(gs), alpha, eps, mom, wd))

    return rmsprop_momentum


@kernel("train.optimizer.adagrad", FLOAT)
def _adagrad(node, ins):
    spare = Spare(SPARE_KEEP)
    a = node.attrs
    eps, wd = a["eps"], a["weight_decay"]
    return lambda p, g, lr, gs, s: _run(spare, "adagrad", adagrad_elem, (p, g, s), (_f(lr), _f(gs), eps, wd))


@kernel("train.optimizer.lion", FLOAT)
def _lion(node, ins):
    spare = Spare(SPARE_KEEP)
    a = node.attrs
    b1, b2, wd = a["beta1"], a["beta2"], a["weight_decay"]
    return lambda p, g, lr, gs, m: _run(spare, "lion", lion_elem, (p, g, m), (_f(lr), _f(gs), b1, b2, wd))


def _norm(x):
    flat = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
    return math.sqrt(float(np.dot(flat, flat)))


@kernel("train.optimizer.lamb", STEPPED)
def _lamb(node, ins):
    spare = Spare(SPARE_KEEP)
    a = node.attrs
    b1, b2, eps, wd = a["beta1"], a["beta2"], a["eps"], a["weight_decay"]

    def lamb(p, g, lr, gs, step, m, v):
        r, m2, v2 = _run(spare, "lamb_dir", lamb_dir_elem, (p, g, m, v), (_f(gs), b1, b2, eps, wd, _bias(b1, step), _bias(b2, step)))
        pn, rn = _norm(p), _norm(r)
        trust = pn / rn if pn > 0.0 and rn > 0.0 else 1.0
        return (p - (_f(lr) * trust) * r).astype(p.dtype, copy=False), m2, v2

    return lamb


# ---- checkpoints --------------------------------------------------------------------------


@kernel("train.checkpoint.save", FLOAT | {DType.int64, DType.int32, DType.int8, DType.uint8, DType.bool})
def _checkpoint(node, ins):
    from caramba.compute import effects  # the host writes the file; the kernel only hands it over

    a = node.attrs
    names = a["names"].split(",")
    every, template = a["every"], a["path"]
    meta = {"graph_hash": a["graph_hash"], "manifest_hash": a["manifest_hash"], "format": "caramba"}

    def save(step, *tensors):
        t = int(step)
        if t % every:
            return np.asarray(False)
        effects.checkpoint(template.replace("{step}", str(t)), dict(zip(names, tensors, strict=True)),
                           {**meta, "step": str(t)})
        return np.asarray(True)

    return save
