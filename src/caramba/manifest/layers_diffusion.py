"""``diffusion.noise``: a clean batch in, a noised batch, its time features and the target out.

Randomness is drawn in the graph by ``random.*`` ops: while training they are keyed by the
step counter (``ctx.step_key()``: fresh noise and timesteps every step, the same ones for the
same step and ``seed``); evaluating, by a constant key (the same noise at every evaluation, so
eval losses compare). The schedulers' math is in ``caramba.diffusion.schedule``.
"""

from __future__ import annotations

import zlib
from typing import Any

from caramba.diffusion.schedule import scheduler, time_features
from caramba.errors import CarambaError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Value
from caramba.manifest.lower import LayerContext, layer

SEED_MASK = 0x7FFF_FFFF  # the random ops' seeds: node name and config seed mixed, non-negative


def noise_seeds(prefix: str, seed: int) -> tuple[int, int]:
    """(timestep seed, noise seed) of the node ``prefix``: distinct streams (a random op's draw
    is a function of its seed and key alone, so two ops must not share a seed)."""
    base = zlib.crc32(f"{prefix}:{seed}".encode()) & SEED_MASK
    return base, (base + 1) & SEED_MASK


@layer("diffusion_noise")
def diffusion_noise(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> tuple[Value, ...]:
    """(x_t, t_features, target, t) for a random timestep per example and Gaussian noise eps.

    ``x`` [B, ...] is mapped from ``data_range`` to [-1, 1] (x0). DDPM: x_t = sqrt(ab_t) x0 +
    sqrt(1 - ab_t) eps, target eps. Flow: x_t = (1 - t) x0 + t eps, target eps - x0.
    t_features [B, t_features] embed the normalized time t ([B], in [0, 1))."""
    (x,) = ins
    if x.ndim < 2 or not x.dtype.is_float:
        raise CarambaError(f"needs a float input [batch, ...features], got {x.type}")
    if len(c["data_range"]) != 2:
        raise CarambaError(f"data_range must be [low, high], got {list(c['data_range'])}")
    lo, hi = c["data_range"]
    if not lo < hi:
        raise CarambaError(f"data_range must be [low, high] with low < high, got {list(c['data_range'])}")
    if c["scheduler"] != "ddpm":
        given = [k for k, default in (("schedule", "linear"), ("beta_start", None), ("beta_end", None)) if c[k] != default]
        if given:
            raise CarambaError(f"{', '.join(given)} configure the DDPM beta schedule; scheduler {c['scheduler']} has none",
                               hint=f"remove {', '.join(given)} or use scheduler: ddpm")
    sched = scheduler(c)
    d = x.dtype
    if lo == -1.0 and hi == 1.0:
        x0 = x
    else:
        scaled = ctx.op("math.mul", (x, ctx.const(2.0 / (hi - lo), d, name="scale")), name="scaled")
        x0 = ctx.op("math.sub", (scaled, ctx.const(2.0 * lo / (hi - lo) + 1.0, d, name="shift")), name="x0")
    key = ctx.step_key() if ctx.training else ctx.const(0, DType.int64, name="key")
    s_t, s_eps = noise_seeds(ctx.prefix, c["seed"])
    b = x.shape[0]
    u = ctx.op("random.uniform", (key,), {"shape": (b,), "seed": s_t, "dtype": d}, name="u")
    eps = ctx.op("random.normal", (key,), {"shape": x.shape, "seed": s_eps, "dtype": d}, name="eps")
    x_t, t, target = sched.noise(ctx, x0, eps, u)
    feats = time_features(ctx, t, c["t_features"], d)
    return x_t, feats, target, t
