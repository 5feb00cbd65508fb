"""ONNX lowerings of ``active_inference.{belief_update, free_energy, expected_free_energy,
precision_weight}`` and ``markov_blanket.mutual_information`` (gaussian and discrete), forward only
(their VJP ops stay refused on onnx).

Each rule registers into ``caramba.onnx.export.RULES`` (imported at the end of ``export.py``, like
the research rules) and follows the definitions of ``caramba.ops.active_inference`` and
``caramba.ops.markov_blanket`` (the ``*_xp`` functions the cpu and xla backends run), operation
order included. Values with leading batch axes are flattened to rows first, so every MatMul has
operands of rank >= 2 (ORT 1.32 fuses ``MatMul(Transpose(A), v)`` with a 1-D ``v`` into wrong
values: that pattern is never emitted). ``ln max(x, eps)``, ``x ln x`` (``0 ln 0 = 0``) and the
softmax are the module's formulas with Max/Where/Log/Exp; ``expected_free_energy`` gathers
``B[:, :, u_t]`` per policy (a Gather with the policies, through a run-time check that they lie in
``[0, U)``) and propagates every policy at once with one batched MatMul per step. The gaussian
mutual information takes each log-determinant from an LU factorisation with partial pivoting
(row swaps as GatherElements, so exact; batched over leading axes, unrolled over the static n),
``ln det = sum ln |u_ii|``, NaN where the determinant is not > 0 like ``slogdet`` with its sign.
(``caramba.onnx.export_research.inverse`` is a Gauss-Jordan inverse of one matrix; a determinant
needs the pivots and their parity, which it does not expose, so the elimination is done here.)
The operators used (MatMul, Gather, GatherElements, ArgMax, Max, Log, Exp, ReduceSum/Max,
Where, Transpose, Reshape, ...) all have float64 and float32 kernels in ONNX Runtime's CPU
provider; the capability table claims float64 and float32 for these ops.
"""

from __future__ import annotations

import numpy as np

from caramba.ir.dtypes import DType
from caramba.ir.types import ValueType
from caramba.onnx.export import RUNTIME_CHECKS, Ctx, reshape, rule, softmax
from caramba.ops.active_inference import EPS
from caramba.ops.markov_blanket import masks

_I64 = DType.int64


def _rows(c: Ctx, x: str, shape: tuple[int, ...]) -> str:
    """``x`` of shape ``[..., m]`` as ``[B, m]`` (B >= 1)."""
    return reshape(c, x, (int(np.prod(shape[:-1], dtype=np.int64)), shape[-1]))


def _safe_log(c: Ctx, x: str, d: DType) -> str:
    return c.op("Log", c.op("Max", x, c.k(EPS, d)))


def _xlogx(c: Ctx, x: str, d: DType) -> str:
    pos = c.op("Greater", x, c.k(0, d))
    one, zero = c.k(1, d), c.k(0, d)
    return c.op("Where", pos, c.op("Mul", x, c.op("Log", c.op("Where", pos, x, one))), zero)


def _evidence(c: Ctx, a: str, obs: str, prior: str, t_obs: ValueType, s: int) -> str:
    """``z = obs . ln A + ln prior`` [..., S]."""
    d = t_obs.dtype
    z = c.op("MatMul", _rows(c, obs, t_obs.shape), _safe_log(c, a, d))  # [B, S]
    return c.op("Add", reshape(c, z, t_obs.shape[:-1] + (s,)), _safe_log(c, prior, d))


@rule("active_inference.belief_update")
def _belief_update(c: Ctx, node, xs, ins):
    a, obs, prior = xs
    z = _evidence(c, a, obs, prior, ins[1], ins[0].shape[1])
    return softmax(c, z, ins[2].rank - 1)


@rule("active_inference.free_energy")
def _free_energy(c: Ctx, node, xs, ins):
    q, a, obs, prior = xs
    d, rank = ins[0].dtype, ins[0].rank
    z = _evidence(c, a, obs, prior, ins[2], ins[1].shape[1])
    return c.op("ReduceSum", c.op("Sub", _xlogx(c, q, d), c.op("Mul", q, z)), c.ints([rank - 1]), keepdims=0)


def _checked_policies(c: Ctx, pol: str, u: int) -> str:
    """policies [P, T] unchanged, through a Gather that fails at run time for an action outside
    [0, U) (ONNX Gather would wrap a negative one: it is mapped to U first)."""
    bad = c.op("Where", c.op("Less", pol, c.k(0, _I64)), c.k(u, _I64), pol)
    return c.op("Gather", c.e.const(np.arange(u, dtype=np.int64), hint="actions"), bad, axis=0)


@rule("active_inference.expected_free_energy")
def _expected_free_energy(c: Ctx, node, xs, ins):
    q, a, b, cc, pol = xs
    tq, d = ins[0], ins[0].dtype
    s = ins[1].shape[1]
    u = ins[2].shape[2]
    p, horizon = ins[4].shape
    lead = tq.shape[:-1]
    nb = int(np.prod(lead, dtype=np.int64))
    pol = _checked_policies(c, pol, u)
    # ln softmax(C) = C - (m + ln sum exp(C - m))
    m = c.op("ReduceMax", cc, keepdims=1)
    lnc = c.op("Sub", cc, c.op("Add", m, c.op("Log", c.op("ReduceSum", c.op("Exp", c.op("Sub", cc, m)), keepdims=1))))
    ha = c.op("Neg", c.op("ReduceSum", _xlogx(c, a, d), c.ints([0]), keepdims=1))  # [1, S]
    ha_col = c.op("Transpose", ha, perm=[1, 0])  # [S, 1]
    at = c.op("Transpose", a, perm=[1, 0])  # [S, O]
    qt = c.op("Expand", reshape(c, q, (1, nb, s)), c.ints([p, nb, s]))  # [P, B, S]
    g = None
    for t in range(horizon):
        ut = reshape(c, c.op("Slice", pol, c.ints([t]), c.ints([t + 1]), c.ints([1])), (p,))
        bt = c.op("Transpose", c.op("Gather", b, ut, axis=2), perm=[2, 1, 0])  # [P, S (from j), S' (to i)]
        qt = c.op("MatMul", qt, bt)  # [P, B, S']
        qo = c.op("MatMul", qt, at)  # [P, B, O]
        risk = c.op("ReduceSum", c.op("Sub", _xlogx(c, qo, d), c.op("Mul", qo, lnc)), c.ints([2]), keepdims=0)
        amb = reshape(c, c.op("MatMul", qt, ha_col), (p, nb))
        step = c.op("Add", risk, amb)
        g = step if g is None else c.op("Add", g, step)
    return reshape(c, c.op("Transpose", g, perm=[1, 0]), lead + (p,))


@rule("active_inference.precision_weight")
def _precision_weight(c: Ctx, node, xs, ins):
    g, gamma = xs[0], xs[1]
    d = ins[0].dtype
    z = c.op("Mul", c.op("Neg", gamma), g)
    if len(xs) == 3:
        z = c.op("Add", z, _safe_log(c, xs[2], d))
    return softmax(c, z, ins[0].rank - 1)


# ---- markov_blanket.mutual_information ------------------------------------------------------
def _logdet(c: Ctx, x: str, nb: int, n: int, d: DType) -> str:
    """``ln det`` of each x [B, n, n] -> [B], NaN where det <= 0: LU with partial pivoting."""
    ar = np.arange(n, dtype=np.int64)
    rows = c.e.const(ar.reshape(1, n), hint="rows")
    one, zero = c.k(1, d), c.k(0, d)
    logabs = None
    sign = c.e.const(np.ones((nb, 1, 1), d.numpy), hint="ones")
    for j in range(n):
        col = reshape(c, c.op("Slice", x, c.ints([j]), c.ints([j + 1]), c.ints([2])), (nb, n))  # [B, n]
        cand = c.op("Where", c.e.const((ar >= j).reshape(1, n), hint="below"), c.op("Abs", col), c.k(-1, d))
        pv = c.op("ArgMax", cand, axis=1, keepdims=1)  # [B, 1]
        jj = c.k(j, _I64)
        idx = c.op("Where", c.op("Equal", rows, jj), pv, c.op("Where", c.op("Equal", rows, pv), jj, rows))  # [B, n]
        idx3 = c.op("Expand", c.op("Unsqueeze", idx, c.ints([2])), c.ints([nb, n, n]))
        x = c.op("GatherElements", x, idx3, axis=1)
        swapped = reshape(c, c.op("Not", c.op("Equal", pv, jj)), (nb, 1, 1))
        piv_row = c.op("Slice", x, c.ints([j]), c.ints([j + 1]), c.ints([1]))  # [B, 1, n]
        piv = c.op("Slice", piv_row, c.ints([j]), c.ints([j + 1]), c.ints([2]))  # [B, 1, 1]
        sign = c.op("Mul", sign, c.op("Where", swapped, c.k(-1, d), one))
        sign = c.op("Mul", sign, c.op("Sign", piv))
        la = c.op("Log", c.op("Abs", piv))
        logabs = la if logabs is None else c.op("Add", logabs, la)
        if j + 1 < n:
            below = c.e.const((ar > j).astype(d.numpy).reshape(1, n, 1), hint="below")
            f = c.op("Mul", c.op("Div", c.op("Slice", x, c.ints([j]), c.ints([j + 1]), c.ints([2])), piv), below)
            x = c.op("Sub", x, c.op("Mul", f, piv_row))
    nan = c.k(np.nan, d)
    out = c.op("Where", c.op("Greater", sign, zero), logabs, nan)
    return reshape(c, out, (nb,))


def _mi_gaussian(c: Ctx, cov: str, t: ValueType, a: tuple[int, ...], b: tuple[int, ...]) -> str:
    n, d = t.shape[-1], t.dtype
    lead = t.shape[:-2]
    nb = int(np.prod(lead, dtype=np.int64))
    x = reshape(c, cov, (nb, n, n))
    lds = []
    for m in masks(n, a, b):
        sub = c.op("Mul", c.op("Mul", x, c.e.const(m.reshape(n, 1).astype(d.numpy), hint="mask")),
                   c.e.const(m.reshape(1, n).astype(d.numpy), hint="mask"))
        sub = c.op("Add", sub, c.e.const(np.diag(1.0 - m).astype(d.numpy), hint="eye"))
        lds.append(_logdet(c, sub, nb, n, d))
    la, lb, lab = lds
    mi = c.op("Mul", c.k(0.5, d), c.op("Sub", c.op("Add", la, lb), lab))
    return reshape(c, mi, lead)


def _log0(c: Ctx, x: str, d: DType) -> str:
    pos = c.op("Greater", x, c.k(0, d))
    return c.op("Where", pos, c.op("Log", c.op("Where", pos, x, c.k(1, d))), c.k(0, d))


def _mi_discrete(c: Ctx, p: str, t: ValueType) -> str:
    d, r = t.dtype, t.rank
    last2 = c.ints([r - 2, r - 1])
    z = c.op("ReduceSum", p, last2, keepdims=1)
    pn = c.op("Div", p, z)
    px = c.op("ReduceSum", pn, c.ints([r - 1]), keepdims=1)
    py = c.op("ReduceSum", pn, c.ints([r - 2]), keepdims=1)

    def term(v: str) -> str:
        return c.op("ReduceSum", c.op("Mul", v, _log0(c, v, d)), last2, keepdims=0)

    return c.op("Sub", c.op("Sub", term(pn), term(px)), term(py))


@rule("markov_blanket.mutual_information")
def _mutual_information(c: Ctx, node, xs, ins):
    if node.attrs["kind"] == "gaussian":
        return _mi_gaussian(c, xs[0], ins[0], tuple(node.attrs["a"]), tuple(node.attrs["b"]))
    return _mi_discrete(c, xs[0], ins[0])


RUNTIME_CHECKS.update({
    "active_inference.expected_free_energy": "the policies' actions in [0, U)",
})

__all__: list[str] = []
