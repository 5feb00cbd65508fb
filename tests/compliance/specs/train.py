"""train.*: losses, metrics, optimizer updates and the checkpoint writer.

References are loops over Python floats (``math``), sharing no code with any kernel. Optimizer
updates follow the equations in each op's doc, evaluated per element in float64.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..harness import ALL, F64, FLOATS, I32, I64, Case, arg, bad, build, row, tol, uniform, values
from ..reference import scalars

LOSS_TOL = tol(4, 4, float16=(64, 64), float32=(8, 8))
OPT_TOL = tol(8, 8, float16=(32, 32), float32=(16, 16))


def labels(hi: int):
    def gen(rng, d, shape):
        return rng.integers(0, hi, size=shape, endpoint=True).astype(d.numpy)

    return gen


def _reduce(vals: list[float], shape, how: str):
    if how == "mean":
        return math.fsum(vals) / len(vals)
    if how == "sum":
        return math.fsum(vals)
    return np.array(vals, dtype=np.float64).reshape(shape)


def _mse_ref(p, t, reduction):
    return _reduce([(a - b) ** 2 for a, b in zip(scalars(p), scalars(t), strict=True)], p.shape, reduction)


def _lse(row: list[float]) -> float:
    m = max(row)
    return m + math.log(math.fsum(math.exp(v - m) for v in row))


def _rows(logits):
    c = logits.shape[-1]
    flat = scalars(logits)
    return [flat[i : i + c] for i in range(0, len(flat), c)]


def _ce_rows(logits, y, smoothing):
    out = []
    for row_, label in zip(_rows(logits), scalars(y), strict=True):
        lse = _lse(row_)
        logp = [v - lse for v in row_]
        c = len(row_)
        out.append(-math.fsum(((1 - smoothing) * (k == label) + smoothing / c) * lp for k, lp in enumerate(logp)))
    return out


def _ce_ref(logits, y, label_smoothing, reduction):
    return _reduce(_ce_rows(logits, y, label_smoothing), y.shape, reduction)


def _bce_ref(x, t, from_logits, reduction):
    vals = []
    for a, b in zip(scalars(x), scalars(t), strict=True):
        if from_logits:  # -(t log sigmoid(a) + (1-t) log sigmoid(-a)), evaluated stably
            vals.append(max(a, 0.0) - a * b + math.log1p(math.exp(-abs(a))))
        else:
            lp = max(math.log(a), -100.0) if a > 0 else -100.0
            lq = max(math.log1p(-a), -100.0) if a < 1 else -100.0
            vals.append(-(b * lp + (1 - b) * lq))
    return _reduce(vals, x.shape, reduction)


def _argmax(row_: list[float]) -> int:
    best = 0
    for i, v in enumerate(row_):
        if v > row_[best]:
            best = i
    return best


def _accuracy_ref(logits, y):
    pairs = list(zip(map(_argmax, _rows(logits)), scalars(y), strict=True))
    return sum(p == t for p, t in pairs) / len(pairs) if pairs else 0.0


def _f1_ref(logits, y, average):
    c = logits.shape[-1]
    pairs = list(zip(map(_argmax, _rows(logits)), scalars(y), strict=True))
    tp = [sum(p == t == k for p, t in pairs) for k in range(c)]
    fp = [sum(p == k != t for p, t in pairs) for k in range(c)]
    fn = [sum(t == k != p for p, t in pairs) for k in range(c)]
    if average == "micro":
        tp, fp, fn = [sum(tp)], [sum(fp)], [sum(fn)]
    elif average == "binary":
        tp, fp, fn = tp[1:2], fp[1:2], fn[1:2]
    scores = [2 * a / (2 * a + b + e) for a, b, e in zip(tp, fp, fn, strict=True) if 2 * a + b + e]
    if average == "macro":
        return math.fsum(scores) / len(scores) if scores else 0.0
    return scores[0] if scores else 0.0


def _perplexity_ref(logits, y):
    rows_ = _ce_rows(logits, y, 0.0)
    return math.exp(math.fsum(rows_) / len(rows_))


# ---- optimizer references (documented equations, per element) -----------------------------


def _elementwise(fn, *arrays):
    cols = [scalars(np.ascontiguousarray(a)) for a in arrays]
    outs = [fn(*vs) for vs in zip(*cols, strict=True)]
    return tuple(np.array([o[k] for o in outs], dtype=np.float64).reshape(arrays[0].shape) for k in range(len(outs[0])))


def _sgd_ref(p, g, lr, gs, *buf, momentum, dampening, nesterov, weight_decay):
    lr, gs = float(lr), float(gs)

    def f(pi, gi, *b):
        gi = gi * gs + weight_decay * pi
        if momentum:
            bi = momentum * b[0] + (1 - dampening) * gi
            d = gi + momentum * bi if nesterov else bi
            return (pi - lr * d, bi)
        return (pi - lr * gi,)

    out = _elementwise(f, p, g, *buf)
    return out if momentum else out[0]


def _adam_ref(p, g, lr, gs, step, m, v, beta1, beta2, eps, weight_decay, decoupled):
    lr, gs, t = float(lr), float(gs), int(step)
    c1, c2 = 1 - beta1**t, 1 - beta2**t

    def f(pi, gi, mi, vi):
        gi = gi * gs + (0.0 if decoupled else weight_decay * pi)
        mi = beta1 * mi + (1 - beta1) * gi
        vi = beta2 * vi + (1 - beta2) * gi * gi
        if decoupled:
            pi = pi * (1 - lr * weight_decay)
        return (pi - lr * (mi / c1) / (math.sqrt(vi / c2) + eps), mi, vi)

    return _elementwise(f, p, g, m, v)


def _adamax_ref(p, g, lr, gs, step, m, u, beta1, beta2, eps, weight_decay):
    lr, gs, t = float(lr), float(gs), int(step)

    def f(pi, gi, mi, ui):
        gi = gi * gs + weight_decay * pi
        mi = beta1 * mi + (1 - beta1) * gi
        ui = max(beta2 * ui, abs(gi) + eps)
        return (pi - lr / (1 - beta1**t) * mi / ui, mi, ui)

    return _elementwise(f, p, g, m, u)


def _rmsprop_ref(p, g, lr, gs, v, *buf, alpha, eps, momentum, weight_decay):
    lr, gs = float(lr), float(gs)

    def f(pi, gi, vi, *b):
        gi = gi * gs + weight_decay * pi
        vi = alpha * vi + (1 - alpha) * gi * gi
        d = gi / (math.sqrt(vi) + eps)
        if momentum:
            bi = momentum * b[0] + d
            return (pi - lr * bi, vi, bi)
        return (pi - lr * d, vi)

    return _elementwise(f, p, g, v, *buf)


def _adagrad_ref(p, g, lr, gs, s, eps, weight_decay):
    lr, gs = float(lr), float(gs)

    def f(pi, gi, si):
        gi = gi * gs + weight_decay * pi
        si = si + gi * gi
        return (pi - lr * gi / (math.sqrt(si) + eps), si)

    return _elementwise(f, p, g, s)


def _lion_ref(p, g, lr, gs, m, beta1, beta2, weight_decay):
    lr, gs = float(lr), float(gs)

    def f(pi, gi, mi):
        gi = gi * gs
        c = beta1 * mi + (1 - beta1) * gi
        sign = (c > 0) - (c < 0)
        return (pi * (1 - lr * weight_decay) - lr * sign, beta2 * mi + (1 - beta2) * gi)

    return _elementwise(f, p, g, m)


def _lamb_ref(p, g, lr, gs, step, m, v, beta1, beta2, eps, weight_decay):
    lr, gs, t = float(lr), float(gs), int(step)
    c1, c2 = 1 - beta1**t, 1 - beta2**t

    def f(pi, gi, mi, vi):
        gi = gi * gs
        mi = beta1 * mi + (1 - beta1) * gi
        vi = beta2 * vi + (1 - beta2) * gi * gi
        return ((mi / c1) / (math.sqrt(vi / c2) + eps) + weight_decay * pi, mi, vi)

    r, m2, v2 = _elementwise(f, p, g, m, v)
    pn = math.sqrt(math.fsum(x * x for x in scalars(p)))
    rn = math.sqrt(math.fsum(x * x for x in scalars(r)))
    trust = pn / rn if pn > 0 and rn > 0 else 1.0
    return (np.array(scalars(p)).reshape(p.shape) - lr * trust * r, m2, v2)


def _opt_args(shape, n_slots, with_step, step=7):
    lead = [arg(shape, uniform(-2, 2)), arg(shape, uniform(-2, 2)), arg((), values([0.01])), arg((), values([0.75]))]
    if with_step:
        lead.append(arg((), values([step]), I64))
    return tuple(lead) + tuple(arg(shape, uniform(0.0, 2.0)) for _ in range(n_slots))


def _opt_cases(ref, n_slots, with_step, attr_sets, momentum_slot=False):
    cases = []
    for i, attrs in enumerate(attr_sets):
        extra = 1 if momentum_slot and attrs.get("momentum") else 0
        for shape in ((7,), (3, 4), ()):
            cases.append(Case(f"{i}-{'x'.join(map(str, shape)) or 'scalar'}", _opt_args(shape, n_slots + extra, with_step), attrs, ref, OPT_TOL))
    return cases


# ---- checkpoint ---------------------------------------------------------------------------


def _checkpoint_check(runner, case, d):
    import tempfile

    from caramba.train import safetensors

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ck-{step}.safetensors"
        attrs = dict(case.attrs_for(d), path=str(path))
        case2 = replace(case, attrs=attrs)  # keeps the case's precision opt-in
        b = build(case2, d)
        exe = runner.compile(b.graph)
        for step in (3, 4):
            vals = dict(b.inputs, x0=np.asarray(step, dtype=np.int64))
            saved = bool(exe.run({k: runner.upload(v) for k, v in vals.items()})["out"].download())
            target = Path(str(path).replace("{step}", str(step)))
            assert saved == (step % attrs["every"] == 0) == target.exists(), (step, saved, target.exists())
            if saved:
                tensors, meta = safetensors.load(target)
                assert meta == {"format": "caramba", "graph_hash": "g123", "manifest_hash": "m456", "step": str(step)}
                names = attrs["names"].split(",")
                for i, name in enumerate(names, start=1):
                    np.testing.assert_array_equal(tensors[name], b.inputs[f"x{i}"])
                    assert tensors[name].dtype == b.inputs[f"x{i}"].dtype


ROWS = [
    row(
        "train.loss.mse",
        FLOATS,
        [Case(f"{'x'.join(map(str, s))}-{r}", (arg(s), arg(s)), {"reduction": r}, _mse_ref, LOSS_TOL)
         for s in ((7,), (3, 5)) for r in ("mean", "sum", "none")],
        [bad("one shape", ((3,), F64), ((4,), F64)), bad("one dtype", ((3,), F64), ((3,), "float32")),
         bad("reduction.*'mean', 'sum', 'none'", ((3,), F64), ((3,), F64), reduction="max")],
    ),
    row(
        "train.loss.cross_entropy",
        FLOATS,
        [
            Case("6x4-mean", (arg((6, 4)), arg((6,), labels(3), I64)), {}, _ce_ref, LOSS_TOL),
            Case("2x3x5-smooth-sum", (arg((2, 3, 5)), arg((2, 3), labels(4), I32)), {"label_smoothing": 0.1, "reduction": "sum"}, _ce_ref, LOSS_TOL),
            Case("4x3-none", (arg((4, 3)), arg((4,), labels(2), I64)), {"reduction": "none"}, _ce_ref, LOSS_TOL),
            Case("large-logits", (arg((3, 4), uniform(-60, 60)), arg((3,), labels(3), I64)), {"label_smoothing": 0.2}, _ce_ref,
                 LOSS_TOL, frozenset({F64})),
        ],
        [bad("labels \\[...\\]", ((4, 3), F64), ((3,), I64)), bad("does not accept labels of dtype float64", ((4, 3), F64), ((4,), F64)),
         bad("label_smoothing must be in \\[0, 1\\]", ((4, 3), F64), ((4,), I64), label_smoothing=1.5)],
    ),
    row(
        "train.loss.bce",
        FLOATS,
        [
            Case("logits-mean", (arg((4, 5), uniform(-20, 20)), arg((4, 5), uniform(0, 1))), {}, _bce_ref, LOSS_TOL),
            Case("logits-none", (arg((6,)), arg((6,), uniform(0, 1))), {"reduction": "none"}, _bce_ref, LOSS_TOL),
            Case("probs-sum", (arg((6,), values([0.0, 1.0, 0.25, 0.5, 0.9, 1e-60])), arg((6,), values([0.0, 1.0, 1.0, 0.5, 0.1, 1.0]))),
                 {"from_logits": False, "reduction": "sum"}, _bce_ref, LOSS_TOL, frozenset({F64})),
        ],
        [bad("one shape", ((3,), F64), ((3, 1), F64))],
    ),
    row(
        "train.metric.accuracy",
        FLOATS,
        [Case(f"{'x'.join(map(str, s))}", (arg(s), arg(s[:-1], labels(s[-1] - 1), I64)), {}, _accuracy_ref, tol(1, 0)) for s in ((8, 5), (2, 3, 4), (1, 2))],
        [bad("logits \\[..., classes\\]", ((8, 5), F64), ((5,), I64))],
    ),
    row(
        "train.metric.f1",
        FLOATS,
        [Case(f"{avg}-{'x'.join(map(str, s))}", (arg(s), arg(s[:-1], labels(s[-1] - 1), I64)), {"average": avg}, _f1_ref, tol(4, 0))
         for avg in ("macro", "micro", "binary") for s in ((12, 3), (4, 5, 2))],
        [bad("needs at least 2 classes", ((4, 1), F64), ((4,), I64), average="binary")],
    ),
    row(
        "train.metric.perplexity",
        FLOATS,
        [Case("6x4", (arg((6, 4)), arg((6,), labels(3), I64)), {}, _perplexity_ref, LOSS_TOL)],
        [bad("does not accept logits of dtype int64", ((6, 4), I64), ((6,), I64))],
    ),
    row(
        "train.optimizer.sgd",
        FLOATS,
        _opt_cases(_sgd_ref, 0, False, [{}, {"momentum": 0.9, "weight_decay": 0.01}, {"momentum": 0.8, "nesterov": True},
                                        {"momentum": 0.5, "dampening": 0.2}], momentum_slot=True),
        [bad("takes param, grad, lr, grad_scale, buf \\(5 inputs", ((3,), F64), ((3,), F64), ((), F64), ((), F64), momentum=0.9),
         bad("lr must be a float64 scalar", ((3,), F64), ((3,), F64), ((1,), F64), ((), F64)),
         bad("gradient f64\\[4\\] does not match param", ((3,), F64), ((4,), F64), ((), F64), ((), F64)),
         bad("momentum must be >= 0", ((3,), F64), ((3,), F64), ((), F64), ((), F64), ((3,), F64), momentum=-0.5)],
    ),
    row(
        "train.optimizer.adam",
        FLOATS,
        _opt_cases(_adam_ref, 2, True, [
            {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "decoupled": False},
            {"beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.05, "decoupled": False},
            {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1, "decoupled": True},
        ]),
        [bad("step must be an int64 scalar", ((3,), F64), ((3,), F64), ((), F64), ((), F64), ((), F64), ((3,), F64), ((3,), F64)),
         bad("slot v f64\\[2\\] does not match", ((3,), F64), ((3,), F64), ((), F64), ((), F64), ((), I64), ((3,), F64), ((2,), F64)),
         bad("beta1 must be < 1", ((3,), F64), ((3,), F64), ((), F64), ((), F64), ((), I64), ((3,), F64), ((3,), F64), beta1=1.0)],
    ),
    row(
        "train.optimizer.adamax",
        FLOATS,
        _opt_cases(_adamax_ref, 2, True, [{"beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0},
                                          {"beta1": 0.85, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.02}]),
        [bad("takes 7 inputs", ((3,), F64), ((3,), F64), ((), F64), ((), F64), ((), I64), ((3,), F64))],
    ),
    row(
        "train.optimizer.rmsprop",
        FLOATS,
        _opt_cases(_rmsprop_ref, 1, False, [{"alpha": 0.99, "eps": 1e-8, "momentum": 0.0, "weight_decay": 0.0},
                                            {"alpha": 0.9, "eps": 1e-6, "momentum": 0.9, "weight_decay": 0.01}], momentum_slot=True),
        [bad("alpha must be < 1", ((3,), F64), ((3,), F64), ((), F64), ((), F64), ((3,), F64), alpha=1.0)],
    ),
    row(
        "train.optimizer.adagrad",
        FLOATS,
        _opt_cases(_adagrad_ref, 1, False, [{"eps": 1e-10, "weight_decay": 0.0}, {"eps": 1e-6, "weight_decay": 0.03}]),
        [bad("takes 5 inputs", ((3,), F64), ((3,), F64), ((), F64), ((), F64))],
    ),
    row(
        "train.optimizer.lion",
        FLOATS,
        _opt_cases(_lion_ref, 1, False, [{"beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0}, {"beta1": 0.95, "beta2": 0.98, "weight_decay": 0.1}]),
        [bad("grad_scale must be a float64 scalar", ((3,), F64), ((3,), F64), ((), F64), ((), "float32"), ((3,), F64))],
    ),
    row(
        "train.optimizer.lamb",
        FLOATS,
        _opt_cases(_lamb_ref, 2, True, [{"beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 0.0},
                                        {"beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 0.01}]),
        [bad("weight_decay must be >= 0", ((3,), F64), ((3,), F64), ((), F64), ((), F64), ((), I64), ((3,), F64), ((3,), F64), weight_decay=-1.0)],
    ),
    row(
        "train.checkpoint.save",
        ALL,
        [Case("two-tensors-every-2", (arg((), values([4]), I64), arg((2, 3)), arg((4,))),
              {"path": "unused-{step}", "names": "layer.w,layer.b", "every": 2, "graph_hash": "g123", "manifest_hash": "m456"},
              check=_checkpoint_check)],
        [bad("must name each of the 2 tensors once", ((), I64), ((2,), F64), ((2,), F64), path="p", names="a"),
         bad("step must be an int64 scalar", ((), F64), ((2,), F64), path="p", names="a"),
         bad("every must be positive", ((), I64), ((2,), F64), path="p", names="a", every=0)],
    ),
]
