"""ONNX lowerings of ``predictive_coding.*``: ``prediction``, ``prediction_error``,
``update_representation``, ``update_weights`` and their VJP op (``predictive_coding.vjp``, every
``of``).

Each rule registers into ``caramba.onnx.export.RULES`` (imported at the end of ``export.py``, like
the research rules) and follows the definitions of ``caramba.ops.predictive_coding`` (the
``*_xp`` functions the cpu and xla backends run), operation order included, so the backends
round alike. Values with leading batch axes are flattened to rows ``[B, k]`` first, so every
MatMul has two 2-D operands (ORT 1.32 fuses ``MatMul(Transpose(A), v)`` with a 1-D ``v`` into
wrong values: that pattern is never emitted). The ONNX operators used (MatMul, Transpose,
ReduceSum, Tanh, Greater, Where, Cast, Add/Sub/Mul/Neg, Reshape) all have float64 and float32
kernels in ONNX Runtime's CPU provider; ``tanh`` is ORT's Tanh, as ``math.tanh`` is lowered, and
``sigmoid`` is ``0.5 (tanh(a / 2) + 1)`` exactly as ``activation_xp`` computes it. The capability
table (``caramba/backends/onnx/capabilities.py``) claims float64 and float32 for these ops.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caramba.ir.dtypes import DType
from caramba.ir.types import ValueType
from caramba.onnx.export import Ctx, reshape, rule

_TR = [1, 0]


def _rows(c: Ctx, x: str, shape: tuple[int, ...]) -> str:
    """``x`` of shape ``[..., m]`` as ``[B, m]``."""
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    return reshape(c, x, (rows, shape[-1]))


def _t(c: Ctx, x: str) -> str:
    return c.op("Transpose", x, perm=_TR)


def _activation(c: Ctx, a: str, act: str, d: DType) -> tuple[str, str | None, str]:
    """(f(a), f'(a), f''(a)) as in ``activation_xp``; f'(a) is None where it is 1 (linear)."""
    if act == "linear":
        return a, None, c.k(0, d)
    if act == "tanh":
        t = c.op("Tanh", a)
        d1 = c.op("Sub", c.k(1.0, d), c.op("Mul", t, t))
        return t, d1, c.op("Mul", c.op("Mul", c.k(-2.0, d), t), d1)
    if act == "sigmoid":
        s = c.op("Mul", c.k(0.5, d), c.op("Add", c.op("Tanh", c.op("Mul", c.k(0.5, d), a)), c.k(1.0, d)))
        d1 = c.op("Mul", s, c.op("Sub", c.k(1.0, d), s))
        return s, d1, c.op("Mul", d1, c.op("Sub", c.k(1.0, d), c.op("Mul", c.k(2.0, d), s)))
    # relu (the op's attribute choices are checked when the graph is built)
    zero = c.k(0, d)
    pos = c.op("Greater", a, zero)
    return c.op("Where", pos, a, zero), c.cast(pos, d), zero


def _mul1(c: Ctx, x: str, d1: str | None) -> str:
    return x if d1 is None else c.op("Mul", x, d1)


def _pre(c: Ctx, r2: str, w: str, b: str) -> str:
    """a = r W + b for rows r2 [B, k]."""
    return c.op("Add", c.op("MatMul", r2, w), b)


def _back_through_a(c: Ctx, r2: str, w: str, da: str) -> list[str]:
    """(dr [B, k], dW [k, n], db [n]) of ``a = r W + b`` from ``da`` [B, n]."""
    return [c.op("MatMul", da, _t(c, w)), c.op("MatMul", _t(c, r2), da), c.op("ReduceSum", da, c.ints([0]), keepdims=0)]


def _prediction(c: Ctx, attrs: Any, xs: list[str], ins: tuple[ValueType, ...], cts: list[str] | None) -> Any:
    r, w, b = xs
    tr, d = ins[0], ins[0].dtype
    n = ins[1].shape[1]
    r2 = _rows(c, r, tr.shape)
    mu, d1, _ = _activation(c, _pre(c, r2, w, b), attrs["activation"], d)
    if cts is None:
        return reshape(c, mu, tr.shape[:-1] + (n,))
    da = _mul1(c, _rows(c, cts[0], tr.shape[:-1] + (n,)), d1)
    dr, dw, db = _back_through_a(c, r2, w, da)
    return [reshape(c, dr, tr.shape), dw, db]


def _prediction_error(c: Ctx, attrs: Any, xs: list[str], ins: tuple[ValueType, ...], cts: list[str] | None) -> Any:
    x, mu, pi = xs
    tx, tpi = ins[0], ins[2]
    e = c.op("Sub", x, mu)
    if cts is None:
        if tpi.rank == 2:
            return reshape(c, c.op("MatMul", _rows(c, e, tx.shape), _t(c, pi)), tx.shape)
        return c.op("Mul", pi, e)
    ct = cts[0]
    if tpi.rank == 2:
        ct2 = _rows(c, ct, tx.shape)
        de = reshape(c, c.op("MatMul", ct2, pi), tx.shape)
        dpi = c.op("MatMul", _t(c, ct2), _rows(c, e, tx.shape))
    elif tpi.rank == 1:
        de = c.op("Mul", ct, pi)
        dpi = c.op("ReduceSum", _rows(c, c.op("Mul", ct, e), tx.shape), c.ints([0]), keepdims=0)
    else:
        de = c.op("Mul", ct, pi)
        dpi = c.op("ReduceSum", c.op("Mul", ct, e), keepdims=0)
    return [de, c.op("Neg", de), dpi]


def _update_representation(c: Ctx, attrs: Any, xs: list[str], ins: tuple[ValueType, ...],
                           cts: list[str] | None) -> Any:
    r, w, b, eb, es = xs
    tr, teb, d = ins[0], ins[3], ins[0].dtype
    lr = c.k(attrs["lr"], d)
    r2, eb2 = _rows(c, r, tr.shape), _rows(c, eb, teb.shape)
    _, d1, d2 = _activation(c, _pre(c, r2, w, b), attrs["activation"], d)
    g = _mul1(c, eb2, d1)  # [B, n]
    if cts is None:
        step = c.op("Sub", c.op("MatMul", g, _t(c, w)), _rows(c, es, tr.shape))
        return reshape(c, c.op("Add", r2, c.op("Mul", lr, step)), tr.shape)
    ct2 = _rows(c, cts[0], tr.shape)
    dg = c.op("Mul", lr, c.op("MatMul", ct2, w))  # [B, n]
    dr, dw, db = _back_through_a(c, r2, w, c.op("Mul", c.op("Mul", dg, eb2), d2))
    return [reshape(c, c.op("Add", ct2, dr), tr.shape),
            c.op("Add", dw, c.op("Mul", lr, c.op("MatMul", _t(c, ct2), g))), db,
            reshape(c, _mul1(c, dg, d1), teb.shape), c.op("Mul", c.k(-attrs["lr"], d), cts[0])]


def _update_weights(c: Ctx, attrs: Any, xs: list[str], ins: tuple[ValueType, ...], cts: list[str] | None) -> Any:
    r, w, b, eb = xs
    tr, teb, d = ins[0], ins[3], ins[0].dtype
    lr = c.k(attrs["lr"], d)
    r2, eb2 = _rows(c, r, tr.shape), _rows(c, eb, teb.shape)
    _, d1, d2 = _activation(c, _pre(c, r2, w, b), attrs["activation"], d)
    g = _mul1(c, eb2, d1)  # [B, n]
    if cts is None:
        return [c.op("Mul", lr, c.op("MatMul", _t(c, r2), g)),
                c.op("Mul", lr, c.op("ReduceSum", g, c.ints([0]), keepdims=0))]
    cw, cb = cts
    dg = c.op("Mul", lr, c.op("Add", c.op("MatMul", r2, cw), cb))  # [B, n]
    dr, dw, db = _back_through_a(c, r2, w, c.op("Mul", c.op("Mul", dg, eb2), d2))
    dr = c.op("Add", dr, c.op("Mul", lr, c.op("MatMul", g, _t(c, cw))))
    return [reshape(c, dr, tr.shape), dw, db, reshape(c, _mul1(c, dg, d1), teb.shape)]


_PC = {"prediction": (_prediction, 1), "prediction_error": (_prediction_error, 1),
       "update_representation": (_update_representation, 1), "update_weights": (_update_weights, 2)}


@rule("predictive_coding.prediction", "predictive_coding.prediction_error",
      "predictive_coding.update_representation", "predictive_coding.update_weights")
def _pc(c: Ctx, node, xs, ins):
    return _PC[node.op.split(".")[1]][0](c, node.attrs, xs, ins, None)


@rule("predictive_coding.vjp")
def _pc_vjp(c: Ctx, node, xs, ins):
    fn, n_out = _PC[node.attrs["of"]]
    return fn(c, node.attrs, xs[n_out:], ins[n_out:], xs[:n_out])


__all__: list[str] = []
