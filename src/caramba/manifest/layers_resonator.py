"""Layer lowerings for the resonator network's restarts (``block.vsa.resonator``).

A resonator network (Frady, Kent, Olshausen & Sommer 2020) started from the superposition of
every codevector settles, for three codebooks of 20 in dimension 1,000, on a spurious fixed
point for about 12-20% of products (measured in NumPy: the dynamics converge, to the wrong
factors). The block therefore runs ``restarts`` resonators side by side from differently
weighted superpositions and keeps the one whose decoded factors rebind to the product (the
verification of Kent et al. 2020 §2: a solution is right when ``X[i] * Y[j] * Z[k] = s``).

- ``vsa.restart_weights``: ``w [restarts, size]``, row 0 all ones (the plain superposition of
  the codebook), row ``r > 0`` ``exp(spread * u)``, ``u`` in {-1, +1} the sign of a normal(0, 1)
  parameter drawn from the run's seed (fixed: its gradient is 0, like ``vsa.codebook``).
- ``vsa.resonator_select``: from the similarities ``sx, sy, sz [..., restarts, size]`` of each
  restart's final estimates to the codebooks ``X, Y, Z [size, d]`` and the product
  ``s [..., d]``, decode each factor (argmax), score each restart by the cosine of the rebound
  decoded factors with ``s`` and return the similarities ``[..., size]`` of the best restart
  (the first of equal scores).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caramba.errors import CarambaError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Value
from caramba.manifest.lower import LayerContext, layer


@layer("vsa_restart_weights")
def vsa_restart_weights(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """w [restarts, size]: ones in row 0, exp(spread * sign(normal)) below."""
    if ins:
        raise CarambaError(f"vsa.restart_weights takes no inputs, got {len(ins)}")
    restarts, size = int(c["restarts"]), int(c["size"])
    spread = float(c["spread"])
    if not (np.isfinite(spread) and spread >= 0):
        raise CarambaError(f"vsa.restart_weights: spread must be a finite number >= 0, got {spread}")
    w = ctx.param("weight", (restarts, size), "normal", std=1.0)
    one = ctx.op("shape.expand_dims", (w,), {"axes": (-2,)}, name="item")
    u = ctx.op("vsa.bundle", (one,), {"model": "map", "axis": -2}, name="sign")  # VJP 0
    mask = np.ones((restarts, 1))
    mask[0] = 0.0
    scaled = ctx.op("math.mul", (u, ctx.const(mask * spread, name="spread")), name="scaled")
    return ctx.op("math.exp", (scaled,), name=None)


def _decode(ctx: LayerContext, sim: Value, book: Value, tag: str) -> Value:
    idx = ctx.op("reduce.argmax", (sim,), {"axis": -1}, name=f"argmax_{tag}")
    return ctx.op("shape.gather", (book, idx), {"axis": 0}, name=f"vec_{tag}")


@layer("vsa_resonator_select")
def vsa_resonator_select(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> tuple[Value, Value, Value]:
    """Similarities of the restart whose decoded factors rebind best to s."""
    if len(ins) != 7:
        raise CarambaError(f"vsa.resonator_select takes sx, sy, sz, X, Y, Z, s; got {len(ins)} inputs")
    sx, sy, sz, bx, by, bz, s = ins
    if sx.ndim < 2 or sx.shape != sy.shape or sx.shape != sz.shape:
        raise CarambaError(f"vsa.resonator_select needs similarities [..., restarts, size] of one shape, got "
                           f"{sx.type}, {sy.type}, {sz.type}")
    restarts = sx.shape[-2]
    vx, vy, vz = _decode(ctx, sx, bx, "x"), _decode(ctx, sy, by, "y"), _decode(ctx, sz, bz, "z")
    rec = ctx.op("vsa.bind", (ctx.op("vsa.bind", (vx, vy), {"model": "map"}, name="rec_xy"), vz),
                 {"model": "map"}, name="rec")
    es = ctx.op("shape.expand_dims", (s,), {"axes": (-2,)}, name="s_item")
    score = ctx.op("vsa.similarity", (rec, es), name="score")  # [..., restarts]
    best = ctx.op("reduce.argmax", (score,), {"axis": -1}, name="best")
    ar = ctx.op("shape.iota", (), {"shape": (restarts,), "axis": 0, "dtype": DType.int64}, name="restart_ids")
    eb = ctx.op("shape.expand_dims", (best,), {"axes": (-1,)}, name="best_item")
    hot = ctx.op("math.equal", (eb, ar), name="is_best")  # bool [..., restarts]
    hot = ctx.op("shape.expand_dims", (hot,), {"axes": (-1,)}, name="is_best_item")
    zero = ctx.const(0.0, sx.dtype, name="zero")
    out = []
    for tag, sim in (("x", sx), ("y", sy), ("z", sz)):
        picked = ctx.op("math.where", (hot, sim, zero), name=f"pick_{tag}")
        out.append(ctx.op("reduce.sum", (picked,), {"axes": (-2,)}, name=f"s{tag}_best"))
    return tuple(out)  # type: ignore[return-value]
