"""train.* kernels: optimizer updates, losses and the argmax metrics.

Optimizer updates are generated from the per-element update rules beside their ops
(``caramba.ops.train.*_elem``): the rule is called once with symbolic values (``Sym``) that write
one kernel statement per operation, so a GPU update performs the same IEEE operations in the
same order as the cpu kernel. Attributes (momentum, weight decay, nesterov, ...) stay Python
values, so their branches are taken at codegen time.
"""

from __future__ import annotations

from math import prod

from caramba.backends.codegen.cstyle import INDEX, KernelWriter
from caramba.backends.codegen.kernels import (
    INT,
    F,
    bind,
    builder,
    kernel_name,
    map_finish,
    map_writer,
    row_finish,
    row_size,
    row_writer,
    workgroup_reduce,
)
from caramba.backends.codegen.kernels.reduce import count
from caramba.backends.codegen.kernels.shape import checked_index
from caramba.backends.codegen.program import Launch, Program, Slot
from caramba.ir.dtypes import DType
from caramba.ir.graph import Node
from caramba.ir.types import ValueType
from caramba.ops import train as T

STEPPED = F | frozenset({DType.int64})
LABELED = F | INT


class Sym:
    """A kernel value of dtype ``d``; arithmetic on it writes ``let`` statements. Python numbers
    mixing in become literals of ``d`` (NumPy's rule for Python scalars with an array)."""

    __array_priority__ = 1000

    def __init__(self, w: KernelWriter, d: DType, text: str) -> None:
        self.w, self.d, self.text = w, d, text

    def _as(self, x: "Sym | float | int") -> "Sym":
        return x if isinstance(x, Sym) else Sym(self.w, self.d, self.w.e.lit(float(x), self.d))

    def _new(self, expr: str) -> "Sym":
        return Sym(self.w, self.d, self.w.let(self.d, expr, "u"))

    def _bin(self, other, op: str, swap: bool = False) -> "Sym":
        a, b = (self._as(other), self) if swap else (self, self._as(other))
        return self._new(f"({a.text} {op} {b.text})")

    def __add__(self, o):
        return self._bin(o, "+")

    def __radd__(self, o):
        return self._bin(o, "+", True)

    def __sub__(self, o):
        return self._bin(o, "-")

    def __rsub__(self, o):
        return self._bin(o, "-", True)

    def __mul__(self, o):
        return self._bin(o, "*")

    def __rmul__(self, o):
        return self._bin(o, "*", True)

    def __truediv__(self, o):
        return self._bin(o, "/")

    def __rtruediv__(self, o):
        return self._bin(o, "/", True)

    def __neg__(self):
        return self._new(f"(-{self.text})")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        args = [self._as(x) for x in inputs]
        w, d = self.w, self.d
        name = ufunc.__name__
        if name == "sqrt":
            return self._new(w.fn("sqrt", d, args[0].text))
        if name in ("absolute", "fabs"):
            return self._new(w.fn("abs", d, args[0].text))
        if name == "maximum":
            return self._new(w.max(d, args[0].text, args[1].text))
        if name == "minimum":
            return self._new(w.min(d, args[0].text, args[1].text))
        if name == "sign":
            x = args[0].text
            z, one = w.e.lit(0, d), w.e.lit(1, d)
            return self._new(w.e.select(f"{x} > {z}", one, w.e.select(f"{x} < {z}", w.e.lit(-1, d), x)))
        return NotImplemented


# the update rules: (elem, slot names, with step); scalars are appended per rule below
RULES = {
    "train.optimizer.sgd": T.sgd_elem,
    "train.optimizer.adam": T.adam_elem,
    "train.optimizer.adamax": T.adamax_elem,
    "train.optimizer.rmsprop": T.rmsprop_elem,
    "train.optimizer.adagrad": T.adagrad_elem,
    "train.optimizer.lion": T.lion_elem,
}


def _bias(w: KernelWriter, d: DType, beta: float, step: Sym) -> Sym:
    """1 - beta**step (step an integer count, converted to d), correctly rounded near 1."""
    return step._new(w.fn("bias", d, w.e.lit(beta, d), step.text))


def _optimizer(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    op = node.op
    p_t = ins[0]
    d = p_t.dtype
    a = node.attrs
    with_step = op in ("train.optimizer.adam", "train.optimizer.adamax", "train.optimizer.lamb")
    lead = 5 if with_step else 4
    n_out = len(node.types)
    w = map_writer(e, kernel_name(node), p_t.size)
    names, outs = bind(w, ins, node.types)
    arr = [Sym(w, d, w.let(d, w.load(names[i], "gid", d), "v")) for i in (0, 1)]
    slots = [Sym(w, d, w.let(d, w.load(names[i], "gid", d), "v")) for i in range(lead, len(ins))]
    lr = Sym(w, d, w.let(d, w.load(names[2], "0", d), "lr"))
    gs = Sym(w, d, w.let(d, w.load(names[3], "0", d), "gs"))
    step = Sym(w, d, w.let(d, w.e.cast(w.load(names[4], "0", DType.int64), d, DType.int64), "step")) if with_step else None
    p, g = arr
    if op == "train.optimizer.sgd":
        buf = slots[0] if slots else p
        res = T.sgd_elem(p, g, buf, lr, gs, a["momentum"], a["dampening"], a["nesterov"], a["weight_decay"])
    elif op == "train.optimizer.adam":
        c1, c2 = _bias(w, d, a["beta1"], step), _bias(w, d, a["beta2"], step)
        res = T.adam_elem(p, g, *slots, lr, gs, a["beta1"], a["beta2"], a["eps"], a["weight_decay"], a["decoupled"],
                          lr / c1, c2._new(w.fn("sqrt", d, c2.text)))
    elif op == "train.optimizer.adamax":
        res = T.adamax_elem(p, g, *slots, gs, a["beta1"], a["beta2"], a["eps"], a["weight_decay"], lr / _bias(w, d, a["beta1"], step))
    elif op == "train.optimizer.rmsprop":
        buf = slots[1] if len(slots) > 1 else p
        res = T.rmsprop_elem(p, g, slots[0], buf, lr, gs, a["alpha"], a["eps"], a["momentum"], a["weight_decay"])
    elif op == "train.optimizer.adagrad":
        res = T.adagrad_elem(p, g, slots[0], lr, gs, a["eps"], a["weight_decay"])
    else:
        res = T.lion_elem(p, g, slots[0], lr, gs, a["beta1"], a["beta2"], a["weight_decay"])
    for j in range(n_out):
        w.store(outs[j], "gid", res[j].text, d)
    prog = Program()
    args = tuple(Slot("in", i) for i in range(len(ins))) + tuple(Slot("out", j) for j in range(n_out))
    prog.steps.append(Launch(map_finish(w), args))
    return prog


for _op in RULES:
    builder(_op, STEPPED if _op in ("train.optimizer.adam", "train.optimizer.adamax") else F)(_optimizer)


@builder("train.optimizer.lamb", STEPPED)
def _lamb(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    """Three kernels: the direction r and the new moments; |p| and |r| (one workgroup); the step."""
    p_t = ins[0]
    d = p_t.dtype
    a = node.attrs
    n = p_t.size
    prog = Program()
    r_slot = prog.temp(d, n)
    norms = prog.temp(d, 2)
    w = map_writer(e, kernel_name(node, "dir"), n)
    names, outs = bind(w, ins, [p_t, p_t, p_t])  # out0 is the direction r (a temporary)
    p, g, m, v = (Sym(w, d, w.let(d, w.load(names[i], "gid", d), "v")) for i in (0, 1, 5, 6))
    gs = Sym(w, d, w.let(d, w.load(names[3], "0", d), "gs"))
    step = Sym(w, d, w.let(d, w.e.cast(w.load(names[4], "0", DType.int64), d, DType.int64), "step"))
    r, m2, v2 = T.lamb_dir_elem(p, g, m, v, gs, a["beta1"], a["beta2"], a["eps"], a["weight_decay"],
                                _bias(w, d, a["beta1"], step), _bias(w, d, a["beta2"], step))
    for o, val in zip(outs, (r, m2, v2), strict=True):
        w.store(o, "gid", val.text, d)
    ins_slots = tuple(Slot("in", i) for i in range(len(ins)))
    prog.steps.append(Launch(map_finish(w), ins_slots + (r_slot, Slot("out", 1), Slot("out", 2))))
    # |p| and |r| by one workgroup
    w = row_writer(e, kernel_name(node, "norms"), 1, row_size(n))
    (pb, rb), (nb,) = bind(w, [p_t, p_t], [ValueType((2,), d)])
    add = lambda x, y: f"({x} + {y})"
    pn = workgroup_reduce(w, d, n, lambda j: f"({w.load(pb, j, d)} * {w.load(pb, j, d)})", e.lit(0, d), add)
    rn = workgroup_reduce(w, d, n, lambda j: f"({w.load(rb, j, d)} * {w.load(rb, j, d)})", e.lit(0, d), add)
    with w.if_("lid == 0"):
        w.store(nb, "0", w.fn("sqrt", d, pn), d)
        w.store(nb, "1", w.fn("sqrt", d, rn), d)
    prog.steps.append(Launch(row_finish(w), (Slot("in", 0), r_slot, norms)))
    # p - (lr * trust) * r, trust = |p| / |r| (1 if either is 0)
    w = map_writer(e, kernel_name(node, "step"), n)
    (pb, rb, lrb, nb), (ob,) = bind(w, [p_t, p_t, ValueType((), d), ValueType((2,), d)], [p_t])
    z = e.lit(0, d)
    pn, rn = w.let(d, w.load(nb, "0", d), "pn"), w.let(d, w.load(nb, "1", d), "rn")
    trust = w.let(d, e.select(f"{pn} > {z} && {rn} > {z}", f"({pn} / {rn})", e.lit(1, d)), "trust")
    scale = w.let(d, f"({w.load(lrb, '0', d)} * {trust})", "s")
    w.store(ob, "gid", f"({w.load(pb, 'gid', d)} - {scale} * {w.load(rb, 'gid', d)})", d)
    prog.steps.append(Launch(map_finish(w), (Slot("in", 0), r_slot, Slot("in", 2), norms, Slot("out", 0))))
    return prog


# ---- losses -----------------------------------------------------------------------------


def _finish_loss(prog: Program, node: Node, per: Slot, n: int, d: DType, e) -> None:
    """Reduce the per-element/per-row losses in ``per`` (n values) into out0 (mean, sum)."""
    how = node.attrs["reduction"]
    w = row_writer(e, kernel_name(node, how), 1, row_size(n))
    (xb,), (out,) = bind(w, [ValueType((n,), d)], [ValueType((), d)])
    total = workgroup_reduce(w, d, n, lambda j: w.load(xb, j, d), e.lit(0, d), lambda a, b: f"({a} + {b})")
    with w.if_("lid == 0"):
        value = total if how == "sum" else (f"({total} / {count(w, n, d)})" if n else e.nan(d))
        w.store(out, "0", value, d)
    prog.steps.append(Launch(row_finish(w), (per, Slot("out", 0))))


def _pointwise_loss(body):
    def build(node: Node, ins: tuple[ValueType, ...], e) -> Program:
        x_t = ins[0]
        d = x_t.dtype
        n = x_t.size
        prog = Program()
        none = node.attrs["reduction"] == "none"
        per = Slot("out", 0) if none else prog.temp(d, n)
        w = map_writer(e, kernel_name(node), n)
        (pb, tb), (ob,) = bind(w, ins, [x_t])
        x = w.let(d, w.load(pb, "gid", d), "p")
        t = w.let(d, w.load(tb, "gid", d), "t")
        w.store(ob, "gid", body(w, node, d, x, t), d)
        prog.steps.append(Launch(map_finish(w), (Slot("in", 0), Slot("in", 1), per)))
        if not none:
            _finish_loss(prog, node, per, n, d, e)
        return prog

    return build


def _mse(w: KernelWriter, node: Node, d: DType, p: str, t: str) -> str:
    diff = w.let(d, f"({p} - {t})", "dd")
    return f"({diff} * {diff})"


def _bce(w: KernelWriter, node: Node, d: DType, x: str, t: str) -> str:
    one = w.e.lit(1, d)
    if node.attrs["from_logits"]:
        tail = w.fn("log1p", d, w.fn("exp", d, f"(-{w.fn('abs', d, x)})"))
        return f"(({w.max(d, x, w.e.lit(0, d))} - {x} * {t}) + {tail})"
    lp = w.let(d, w.max(d, w.fn("log", d, x), w.e.lit(-100.0, d)), "lp")
    lq = w.let(d, w.max(d, w.fn("log1p", d, f"(-{x})"), w.e.lit(-100.0, d)), "lq")
    return f"(-({t} * {lp} + ({one} - {t}) * {lq}))"


builder("train.loss.mse", F)(_pointwise_loss(_mse))
builder("train.loss.bce", F)(_pointwise_loss(_bce))


def _rows_kernel(node: Node, ins: tuple[ValueType, ...], e, what: str, body) -> tuple[Program, Slot, int]:
    """One workgroup per row of logits [rows, C] with its label; ``body(w, row values...)``
    gives the row's value, written to a temporary (or out0 when ``what`` says so)."""
    logits, labels = ins
    d = logits.dtype
    c = logits.shape[-1]
    rows = prod(labels.shape)
    prog = Program()
    per = prog.temp(d, rows) if what == "temp" else Slot("out", 0)
    w = row_writer(e, kernel_name(node, "rows"), rows, row_size(c))
    (xb, lb), (ob,) = bind(w, ins, [ValueType((rows,), d)])
    w.error_flag()
    base = w.let(INDEX, f"group * {w.num(c)}", "base")
    label = checked_index(w, lb, "group", labels.dtype, c)

    def at(j: str) -> str:
        return w.load(xb, f"{base} + {j}", d)

    value = body(w, d, c, at, label)
    with w.if_("lid == 0"):
        w.store(ob, "group", value, d)
    prog.steps.append(Launch(row_finish(w), (Slot("in", 0), Slot("in", 1), per, Slot("err"))))
    return prog, per, rows


def _ce_row(smoothing: float):
    def body(w: KernelWriter, d: DType, c: int, at, label: str) -> str:
        e = w.e
        m = workgroup_reduce(w, d, c, at, e.lowest(d), lambda a, b: w.max(d, a, b))
        shift = w.let(d, e.select(e.isfinite(m, d), m, e.lit(0, d)), "m")
        s = workgroup_reduce(w, d, c, lambda j: w.fn("exp", d, f"({at(j)} - {shift})"), e.lit(0, d), lambda a, b: f"({a} + {b})")
        lse = w.let(d, f"({w.fn('log', d, s)} + {shift})", "lse")
        picked = w.let(d, at(label), "picked")
        if smoothing == 0.0:
            return f"({lse} - {picked})"
        total = workgroup_reduce(w, d, c, at, e.lit(0, d), lambda a, b: f"({a} + {b})")
        return f"(({lse} - {e.lit(1.0 - smoothing, d)} * {picked}) - {e.lit(smoothing / c, d)} * {total})"

    return body


@builder("train.loss.cross_entropy", LABELED)
def _cross_entropy(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    none = node.attrs["reduction"] == "none"
    prog, per, rows = _rows_kernel(node, ins, e, "out" if none else "temp", _ce_row(node.attrs["label_smoothing"]))
    if not none:
        _finish_loss(prog, node, per, rows, ins[0].dtype, e)
    return prog


@builder("train.metric.perplexity", LABELED)
def _perplexity(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    prog, per, rows = _rows_kernel(node, ins, e, "temp", _ce_row(0.0))
    d = ins[0].dtype
    w = row_writer(e, kernel_name(node, "exp"), 1, row_size(rows))
    (xb,), (out,) = bind(w, [ValueType((rows,), d)], [ValueType((), d)])
    total = workgroup_reduce(w, d, rows, lambda j: w.load(xb, j, d), e.lit(0, d), lambda a, b: f"({a} + {b})")
    with w.if_("lid == 0"):
        mean = f"({total} / {count(w, rows, d)})" if rows else e.nan(d)
        w.store(out, "0", w.fn("exp", d, mean), d)
    prog.steps.append(Launch(row_finish(w), (per, Slot("out", 0))))
    return prog


@builder("train.metric.accuracy", LABELED)
def _accuracy(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    def body(w: KernelWriter, d: DType, c: int, at, label: str) -> str:
        # argmax with the first maximum winning ties and NaN counting as the maximum (numpy)
        bv = w.var(d, at("0"), "bv")
        bi = w.var(INDEX, "0", "bi")
        with w.loop("1", w.num(c), "1", "j") as j:
            v = w.let(d, at(j), "x")
            vn, bn = w.e.isnan(v, d), w.e.isnan(bv, d)
            with w.if_(f"({vn} && !{bn}) || (!{vn} && !{bn} && {v} > {bv})"):
                w.set(bv, v)
                w.set(bi, j)
        return w.e.select(f"{bi} == {label}", w.e.lit(1, d), w.e.lit(0, d))

    d = ins[0].dtype
    prog, per, rows = _rows_kernel(node, ins, e, "temp", body)
    w = row_writer(e, kernel_name(node, "mean"), 1, row_size(rows))
    (xb,), (out,) = bind(w, [ValueType((rows,), d)], [ValueType((), d)])
    total = workgroup_reduce(w, d, rows, lambda j: w.load(xb, j, d), e.lit(0, d), lambda a, b: f"({a} + {b})")
    with w.if_("lid == 0"):
        w.store(out, "0", f"({total} / {count(w, rows, d)})" if rows else e.lit(0, d), d)
    prog.steps.append(Launch(row_finish(w), (per, Slot("out", 0))))
    return prog



@builder("train.metric.f1", LABELED)
def _f1(node: Node, ins: tuple[ValueType, ...], e) -> Program:
    """Predictions per row, then per-class tp/fp/fn (one workgroup per class), then the
    average (macro over the classes present, micro over all decisions, or class 1)."""
    logits, labels = ins
    d = logits.dtype
    c = logits.shape[-1]
    rows = prod(labels.shape)
    average = node.attrs["average"]
    prog = Program()
    pred = prog.temp(DType.int32, rows)
    lab = prog.temp(DType.int32, rows)
    counts = prog.temp(d, 3 * c)
    # 1: argmax per row (first maximum; NaN wins) and the checked label
    w = map_writer(e, kernel_name(node, "pred"), rows)
    (xb, lb), (pb, qb) = bind(w, ins, [ValueType((rows,), DType.int32), ValueType((rows,), DType.int32)])
    w.error_flag()
    base = w.let(INDEX, f"gid * {w.num(c)}", "base")
    label = checked_index(w, lb, "gid", labels.dtype, c)
    bv = w.var(d, w.load(xb, base, d), "bv")
    bi = w.var(INDEX, "0", "bi")
    with w.loop("1", w.num(c), "1", "j") as j:
        v = w.let(d, w.load(xb, f"{base} + {j}", d), "x")
        vn, bn = e.isnan(v, d), e.isnan(bv, d)
        with w.if_(f"({vn} && !{bn}) || (!{vn} && !{bn} && {v} > {bv})"):
            w.set(bv, v)
            w.set(bi, j)
    w.store(pb, "gid", e.cast(bi, DType.int32, INDEX), DType.int32)
    w.store(qb, "gid", e.cast(label, DType.int32, INDEX), DType.int32)
    prog.steps.append(Launch(map_finish(w), (Slot("in", 0), Slot("in", 1), pred, lab, Slot("err"))))
    # 2: per class k: tp, fp, fn over the rows
    w = row_writer(e, kernel_name(node, "counts"), c, row_size(rows))
    i32 = ValueType((rows,), DType.int32)
    (pb, qb), (cb,) = bind(w, [i32, i32], [ValueType((3 * c,), d)])
    k = w.let(DType.int32, e.cast("group", DType.int32, INDEX), "k")
    one, zero = e.lit(1, d), e.lit(0, d)
    add = lambda a, b: f"({a} + {b})"

    def hit(cond):
        def load(j: str) -> str:
            p, q = w.let(DType.int32, w.load(pb, j, DType.int32), "p"), w.let(DType.int32, w.load(qb, j, DType.int32), "q")
            return e.select(cond(p, q), one, zero)

        return load

    tp = workgroup_reduce(w, d, rows, hit(lambda p, q: f"{p} == {k} && {q} == {k}"), zero, add)
    fp = workgroup_reduce(w, d, rows, hit(lambda p, q: f"{p} == {k} && {q} != {k}"), zero, add)
    fn = workgroup_reduce(w, d, rows, hit(lambda p, q: f"{p} != {k} && {q} == {k}"), zero, add)
    with w.if_("lid == 0"):
        w.store(cb, "group", tp, d)
        w.store(cb, f"group + {w.num(c)}", fp, d)
        w.store(cb, f"group + {w.num(2 * c)}", fn, d)
    prog.steps.append(Launch(row_finish(w), (pred, lab, counts)))
    # 3: the average
    w = row_writer(e, kernel_name(node, average), 1, row_size(c))
    (cb,), (out,) = bind(w, [ValueType((3 * c,), d)], [ValueType((), d)])
    two = e.lit(2, d)

    def score(tp_: str, fp_: str, fn_: str) -> tuple[str, str]:
        den = w.let(d, f"({two} * {tp_} + {fp_} + {fn_})", "den")
        present = f"({den} > {zero})"
        return e.select(present, f"({two} * {tp_} / {den})", zero), e.select(present, one, zero)

    def at(j: str, part: int) -> str:
        return w.load(cb, f"{j} + {w.num(part * c)}" if part else j, d)

    if average == "macro":
        total = workgroup_reduce(w, d, c, lambda j: score(at(j, 0), at(j, 1), at(j, 2))[0], zero, add)
        present = workgroup_reduce(w, d, c, lambda j: score(at(j, 0), at(j, 1), at(j, 2))[1], zero, add)
        value = e.select(f"{present} > {zero}", f"({total} / {present})", zero)
    else:
        if average == "micro":
            sums = [workgroup_reduce(w, d, c, lambda j, p=p: at(j, p), zero, add) for p in range(3)]
        else:  # binary: class 1 is positive
            sums = [w.let(d, at("1", p), "s") for p in range(3)]
        value = score(*sums)[0]
    with w.if_("lid == 0"):
        w.store(out, "0", value, d)
    prog.steps.append(Launch(row_finish(w), (counts, Slot("out", 0))))
    return prog
