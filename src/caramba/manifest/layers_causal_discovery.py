"""Layer lowerings of ``block.causal.discovery`` (NOTEARS; ``caramba/train/notears.py``).

- ``causal.adjacency``: the learnable weighted adjacency ``W [dim, dim]`` of a linear SEM,
  zero-initialised, its diagonal held at 0 (``W = raw o (1 - I)``; no self-loops).
- ``causal.notears``: from ``W`` and a batch ``x [batch, dim]`` (centred here), the NOTEARS
  objective with fixed multipliers, ``1/(2 batch) |x - x W|^2 + lambda1 |W|_1 + alpha h +
  rho/2 h^2``, and ``h = tr(e^{W o W}) - dim`` (0 exactly for a DAG). Trained with a fixed
  ``rho`` this is the quadratic-penalty method; the full augmented Lagrangian (rho and alpha
  raised between solves) is :func:`caramba.train.notears.notears`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caramba.errors import CarambaError
from caramba.ir.graph import Value
from caramba.manifest.lower import LayerContext, layer


def _nonneg(c: dict[str, Any], key: str) -> float:
    v = float(c[key])
    if not (np.isfinite(v) and v >= 0):
        raise CarambaError(f"causal.notears: {key} must be a finite number >= 0, got {v}")
    return v


@layer("causal_adjacency")
def causal_adjacency(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """raw o (1 - I), raw [dim, dim] zero-initialised."""
    if ins:
        raise CarambaError(f"causal.adjacency takes no inputs, got {len(ins)}")
    d = int(c["dim"])
    raw = ctx.param("weight", (d, d), "zeros")
    return ctx.op("math.mul", (raw, ctx.const(1.0 - np.eye(d), name="off_diagonal")), name=None)


@layer("causal_notears")
def causal_notears(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> tuple[Value, Value]:
    """(loss, h) of W [d, d] on x [batch, d]."""
    from caramba.train.notears import notears_terms

    if len(ins) != 2:
        raise CarambaError(f"causal.notears takes W and x, got {len(ins)} inputs")
    w, x = ins
    if w.ndim != 2 or w.shape[0] != w.shape[1] or x.ndim != 2 or x.shape[1] != w.shape[0]:
        raise CarambaError(f"causal.notears needs W [d, d] and x [batch, d], got {w.type} and {x.type}")
    d, n = w.shape[0], x.shape[0]
    lam, alpha, rho = _nonneg(c, "lambda1"), _nonneg(c, "alpha"), _nonneg(c, "rho")
    mean = ctx.op("reduce.mean", (x,), {"axes": (0,), "keepdims": True}, name="mean")
    xc = ctx.op("math.sub", (x, mean), name="centred")
    xt = ctx.op("shape.transpose", (xc,), {"perm": (1, 0)}, name="xt")
    cov = ctx.op("math.mul", (ctx.op("linalg.matmul", (xt, xc), name="gram"), ctx.const(1.0 / n, name="inv_n")), name="cov")
    count = [0]

    def call(op: str, inputs: tuple, attrs: dict | None = None) -> Value:
        count[0] += 1
        return ctx.op(op, inputs, attrs, name=f"t{count[0]}")

    def const(v: Any) -> Value:
        count[0] += 1
        return ctx.const(v, name=f"c{count[0]}")

    obj, h = notears_terms(call, const, w, cov, ctx.const(alpha, name="alpha"), ctx.const(rho, name="rho"), d)
    l1 = ctx.op("reduce.sum", (ctx.op("math.abs", (w,), name="abs"),), {"axes": (0, 1)}, name="l1")
    loss = ctx.op("math.add", (obj, ctx.op("math.mul", (l1, ctx.const(lam, name="lambda1")), name="l1_term")), name="loss")
    return loss, ctx.op("math.add", (h, ctx.const(0.0, name="zero")), name="h")
