"""Layer lowerings of the research families: Hawkes parameters and loss, VSA codebooks.

- ``hawkes.parameters``: the learnable ``mu [M]``, ``alpha [M, M, K]``, ``beta [M, M, K]`` of a
  Hawkes process, kept positive as ``value0 * exp(raw)`` with ``raw`` zero-initialized (state
  ``<node>.log_mu``, ``.log_alpha``, ``.log_beta``), so a run starts exactly at the configured
  initial values whatever the seed.
- ``hawkes.nll``: ``-mean(log_likelihood) / N``, the mean negative log-likelihood per event of a
  batch of sequences of N events (a scalar loss).
- ``vsa.codebook``: a random bipolar codebook ``sign(w)`` of ``size`` hypervectors of ``dim``,
  ``w`` a normal(0, 1) parameter drawn from the run's seed (zeros are measure-zero); the codebook
  is fixed (its gradient is 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caramba.errors import CarambaError
from caramba.ir.graph import Value
from caramba.manifest.lower import LayerContext, layer


def _positive(c: dict[str, Any], key: str) -> float:
    v = c[key]
    if not (np.isfinite(v) and v > 0):
        raise CarambaError(f"{key} must be a finite number > 0, got {v}")
    return float(v)


@layer("hawkes_parameters")
def hawkes_parameters(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> tuple[Value, Value, Value]:
    """(mu, alpha, beta) = (mu0, alpha0, beta0) * exp(raw), raw zero-initialized parameters."""
    if ins:
        raise CarambaError(f"hawkes.parameters takes no inputs, got {len(ins)}")
    m, k = c["dims"], c["kernels"]
    out = []
    for name, shape in (("mu", (m,)), ("alpha", (m, m, k)), ("beta", (m, m, k))):
        raw = ctx.param(f"log_{name}", shape, "zeros")
        scaled = ctx.op("math.mul", (ctx.op("math.exp", (raw,), name=f"exp_{name}"),
                                     ctx.const(_positive(c, f"{name}0"), name=f"{name}0")), name=name)
        out.append(scaled)
    return tuple(out)  # type: ignore[return-value]


@layer("hawkes_nll")
def hawkes_nll(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """-mean(ll) / N for ll [batch] and times [batch, N]."""
    ll, times = ins
    if ll.ndim != 1 or times.ndim != 2 or times.shape[0] != ll.shape[0] or times.shape[1] < 1:
        raise CarambaError(f"hawkes.nll needs log-likelihoods [batch] and times [batch, N], got {ll.type} and {times.type}")
    mean = ctx.op("reduce.mean", (ll,), {"axes": (0,)}, name="mean")
    return ctx.op("math.mul", (mean, ctx.const(-1.0 / times.shape[1], ll.dtype, name="scale")), name=None)


@layer("vsa_codebook")
def vsa_codebook(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """sign(w), w [size, dim] ~ normal(0, 1): a random bipolar codebook."""
    if ins:
        raise CarambaError(f"vsa.codebook takes no inputs, got {len(ins)}")
    w = ctx.param("weight", (c["size"], c["dim"]), "normal", std=1.0)
    # sign(w) as the MAP bundle of one item: the same values, and a VJP of 0 (not an error), so a
    # codebook can sit in a graph a trainer differentiates
    one = ctx.op("shape.expand_dims", (w,), {"axes": (-2,)}, name="item")
    return ctx.op("vsa.bundle", (one,), {"model": "map", "axis": -2}, name=None)
