"""Backward row kernels of the cpu backend: the VJPs of layer_norm, rms_norm, softmax and
log_softmax (``fused.layer_norm_grad``, ``fused.rms_norm_grad``, ``fused.softmax_grad``,
``fused.log_softmax_grad``) as one Numba kernel over rows instead of the rules' chains of
reductions and elementwise kernels (``compiler/fuse.py`` matches those chains).

The arrays are seen as ``[L, D]`` (rows normalized over the trailing axes, as ``rows.py``).
Every kernel takes ``lo, hi`` and runs rows ``lo..hi``; the runner splits the rows over the cpu
workers when the work pays (``codegen.PARALLEL_MIN_WORK``), on the native helpers like every
generated kernel (``fused._compiled``). dgamma / dbeta are sums over the rows: each row block
accumulates its own partial sums (128 rows at a time, then added into the block's partial row:
row ``b`` of ``pg`` / ``pb`` [blocks, D], ``b`` found from ``lo``), and the runner adds the
blocks' partial rows into the output (the same blocks whoever runs them: the same bits).

The arithmetic is the VJP rule's (``autodiff/rules/nn.py``), in the same order, in the
array's dtype: ``g = ct * gamma``, ``xhat = (x - mean) * rstd`` and
``dx = ((g - xhat * (sum(g * xhat) * (1/D))) - sum(g) * (1/D)) * rstd`` (no centering term for
RMS norm); ``dx = y * (ct - sum(ct * y))`` for softmax and ``ct - exp(y) * sum(ct)`` for
log-softmax. Row sums are ``rows_runtime.row_sum``'s (NumPy's pairwise leaf), each block's eight
lanes summed as one vector (``rows._row_sum``, ``rows_simd``): the same bits.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from caramba.ir.dtypes import DType
from caramba.ir.types import ValueType

from .codegen import DECORATOR, Kernel, _pays
from .rows import HEADER, _exp, _row_sum, _simd, split_rows
from .scalar import cast, lit

# weighted steps per element (codegen.work's units), for the thread split
_WORK = {"norm": 12, "softmax": 4, "log_softmax": 12}
FLUSH = 128  # rows a block sums into its local dgamma/dbeta before adding them to its partial row


def _kernel_text(what: str, d: DType, params: list[str], pre: list[str], body: list[str], post: list[str]) -> str:
    lines = ["D = x.shape[1]", f"zero = {lit(-0.0, d)}"] + pre + ["for l in range(lo, hi):"]
    lines += ["    " + b for b in body] + post
    return _simd(HEADER.format(what=what) + DECORATOR + f"def kernel({', '.join(params + ['lo', 'hi'])}):\n"
                 + "\n".join("    " + ln for ln in lines) + "\n")


def norm_backward(d: DType, gamma: bool, eps: float, centered: bool, dgamma: bool, dbeta: bool) -> str:
    """``kernel(x, ct, [gm], dx, [pg], [pb], lo, hi)``: dx of layer norm (``centered``) or RMS
    norm over each row, plus the rows' partial sums of ``ct * xhat`` into pg and of ``ct`` into pb
    ([blocks, D]: the row of the block that starts at ``lo``)."""
    dbeta = dbeta and centered
    dt = d.numpy.name
    pre = [f"Dt = {cast('D', d)}", f"n = {cast('1.0 / D', d)}"]
    if gamma:
        pre.append(f"t = np.empty(D, np.{dt})")
    if dgamma:
        pre.append(f"ag = np.zeros(D, np.{dt})")
    if dbeta:
        pre.append(f"ab = np.zeros(D, np.{dt})")
    pre.append("cnt = 0")
    if dgamma or dbeta:  # this block's partial rows: block b of P starts at row L * b // P
        pre.append("bi = (lo * PARTS + x.shape[0] - 1) // x.shape[0]".replace("PARTS", "pg.shape[0]" if dgamma else "pb.shape[0]"))
    if dgamma:
        pre.append("pgr = pg[bi]")
    if dbeta:
        pre.append("pbr = pb[bi]")
    body = ["xr = x[l]", "cr = ct[l]", "dr = dx[l]"]
    if centered:
        body += _row_sum("sx", "xr", None) + [f"mu = {cast('sx / Dt', d)}"]
    else:
        body.append(f"mu = {lit(0, d)}")
    body += _row_sum("sv", "xr", "mu")
    body += [
        f"var = {cast('sv / Dt', d)}",
        f"rstd = {cast(f'{lit(1, d)} / math.sqrt(var + {lit(eps, d)})', d)}",
    ]
    g = "t" if gamma else "cr"
    if gamma:
        body += ["for k in range(D):", "    t[k] = cr[k] * gm[k]"]
    if centered:
        body += _row_sum("s2", g, None)
    xh = cast("(xr[k] - mu) * rstd", d) if centered else "xr[k] * rstd"
    body += ["for k in range(D):", f"    xh = {xh}", f"    dr[k] = {g}[k] * xh"]
    if dgamma:
        body.append("    ag[k] += cr[k] * xh")
    if dbeta:
        body.append("    ab[k] += cr[k]")
    body += _row_sum("s1", "dr", None) + ["p = s1 * n"]
    if centered:
        body += ["q = s2 * n", "for k in range(D):", f"    xh = {xh}", f"    dr[k] = (({g}[k] - xh * p) - q) * rstd"]
    else:
        body += ["for k in range(D):", f"    xh = {xh}", f"    dr[k] = ({g}[k] - xh * p) * rstd"]
    flush = []
    if dgamma or dbeta:
        flush = ["for k in range(D):"]
        if dgamma:
            flush += ["    pgr[k] += ag[k]", f"    ag[k] = {lit(0, d)}"]
        if dbeta:
            flush += ["    pbr[k] += ab[k]", f"    ab[k] = {lit(0, d)}"]
        body += ["cnt += 1", f"if cnt == {FLUSH}:"] + ["    " + f for f in flush] + ["    cnt = 0"]
    params = ["x", "ct"] + (["gm"] if gamma else []) + ["dx"] + (["pg"] if dgamma else []) + (["pb"] if dbeta else [])
    return _kernel_text(("layer_norm" if centered else "rms_norm") + " backward", d, params, pre, body, flush)


def softmax_backward(d: DType, log: bool) -> str:
    """``kernel(x, ct, dx, lo, hi)``: dx of softmax / log-softmax over each row given its output y."""
    body = ["yr = x[l]", "cr = ct[l]", "dr = dx[l]"]
    if log:
        body += _row_sum("s", "cr", None) + ["for k in range(D):", f"    dr[k] = cr[k] - {_exp('yr[k]', d)} * s"]
    else:
        body += ["for k in range(D):", "    dr[k] = cr[k] * yr[k]", *_row_sum("s", "dr", None),
                 "for k in range(D):", "    dr[k] = yr[k] * (cr[k] - s)"]
    return _kernel_text(("log_softmax" if log else "softmax") + " backward", d, ["x", "ct", "dx"], [], body, [])


# ---- the callables the cpu fused kernels use ---------------------------------------------

Run = Callable[..., None]


def _load(source: str, ins: list[ValueType], outs: list[ValueType], rows: int, parts: int):
    """``f(*arrays)``: the kernel over rows ``0..rows`` in ``parts`` blocks (``fused._compiled``)."""
    from . import _compiled

    return _compiled(Kernel(source, "kernel", max(rows, 1), len(ins), len(outs)), ins, outs,
                     [(True, False)] * len(ins), parts)


def _parts(L: int, D: int, work: int) -> int:
    from caramba.backends.cpu import workers

    return len(workers.blocks(L, workers.count())) if _pays(L * D, work, L) else 1


def _rows(a: np.ndarray, L: int, D: int) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(L, D)


def norm_grad(x: ValueType, axis: int, eps: float, centered: bool, gamma: bool, dgamma: bool, dbeta: bool) -> Run:
    """``k(x, ct, [gamma], dx, [dgamma], [dbeta])`` on arrays of the node's shapes (``axis``
    normalized): the VJP of layer norm / RMS norm over the axes ``axis..``."""
    dbeta = dbeta and centered
    d = x.dtype
    L, D = split_rows(x.shape, axis)
    parts = _parts(L, D, _WORK["norm"])
    two, row, partial = ValueType((L, D), d), ValueType((D,), d), ValueType((parts, D), d)
    ins = [two, two] + ([row] if gamma else [])
    outs = [two] + [partial] * (int(dgamma) + int(dbeta))
    fn = _load(norm_backward(d, gamma, eps, centered, dgamma, dbeta), ins, outs, L, parts)
    n_part = int(dgamma) + int(dbeta)
    npd = d.numpy

    def run(x_a, c_a, *rest):
        g_a = rest[:1] if gamma else ()
        dx_out = rest[len(g_a)]
        sums = rest[len(g_a) + 1:]
        if not L * D:
            for s in sums:
                s[...] = 0
            return
        args = [_rows(x_a, L, D), _rows(c_a, L, D)] + [np.ascontiguousarray(a).reshape(D) for a in g_a]
        dx2 = dx_out.reshape(L, D) if dx_out.flags.c_contiguous else np.empty((L, D), npd)
        if parts == 1:  # one block sums straight into the outputs (zeroed first)
            part = [s.reshape(1, D) if s.flags.c_contiguous else np.zeros((1, D), npd) for s in sums]
            for r in part:
                r.fill(0)
        else:  # one partial row per block, added below
            part = list(np.zeros((n_part, parts, D), npd))
        fn(*args, dx2, *part)
        for s, r in zip(sums, part, strict=True):
            if parts > 1:
                s[...] = r.sum(axis=0).reshape(s.shape)
            elif not s.flags.c_contiguous:
                s[...] = r.reshape(s.shape)
        if not dx_out.flags.c_contiguous:
            dx_out[...] = dx2.reshape(dx_out.shape)

    return run


def softmax_grad(y: ValueType, axis: int, log: bool) -> Run:
    """``k(y, ct, dx)``: the VJP of softmax / log-softmax along ``axis`` (normalized) given the
    forward output ``y`` (another axis than the last is moved last and back)."""
    d = y.dtype
    last = axis == y.rank - 1
    shape = y.shape if last else tuple(s for i, s in enumerate(y.shape) if i != axis) + (y.shape[axis],)
    L, D = split_rows(shape, len(shape) - 1)
    two = ValueType((L, D), d)
    fn = _load(softmax_backward(d, log), [two, two], [two], L, _parts(L, D, _WORK["log_softmax" if log else "softmax"]))

    def prep(a):
        return _rows(a if last else np.moveaxis(a, axis, -1), L, D)

    two_d = y.rank == 2 and last

    def run(y_a, c_a, dx_out):
        if two_d and y_a.flags.c_contiguous and c_a.flags.c_contiguous and dx_out.flags.c_contiguous:
            fn(y_a, c_a, dx_out)  # the common case, with no reshapes (small rows: µs count)
            return
        if not L * D:
            return
        y2, c2 = prep(y_a), prep(c_a)
        direct = last and dx_out.flags.c_contiguous
        dx2 = dx_out.reshape(L, D) if direct else np.empty((L, D), d.numpy)
        fn(y2, c2, dx2)
        if not direct:
            dx_out[...] = dx2.reshape(shape) if last else np.moveaxis(dx2.reshape(shape), -1, axis)

    return run
