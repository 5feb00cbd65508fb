"""Diffusion schedulers: float64 tables on the host, the per-step math as IR ops.

Two schedulers share one small interface, so the noising layer (``diffusion.noise``) and the
sampler build their graphs the same way:

- ``DDPM`` (Ho et al. 2020): ``x_t = sqrt(ab_t) x0 + sqrt(1 - ab_t) eps`` with ``ab_t`` the
  cumulative product of ``1 - beta``; the model predicts ``eps``; sampling is ancestral, with
  the posterior variance ``(1 - ab_prev) / (1 - ab_t) * beta_t`` (diffusers' ``DDPMScheduler``,
  ``variance_type="fixed_small"``, ``clip_sample=True``, "leading" timestep spacing).
- ``Flow`` (rectified flow / flow matching): ``x_t = (1 - t) x0 + t eps`` for t in [0, 1); the
  model predicts the velocity ``eps - x0``; sampling is Euler from t = 1 to 0.

Tables (betas, alphas_cumprod, timesteps, per-step coefficients) are computed once in float64;
``noise`` and ``update`` add IR ops through an ``Emit`` (a ``LayerContext`` or ``GraphEmit``), so
every step runs on the runner and its tensors stay there.

Time is passed to the model as a normalized time ``s`` in [0, 1]: ``t / steps`` for DDPM (t the
integer timestep), ``t`` for flow; ``time_features`` embeds ``1000 s`` sinusoidally.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import log, pi
from typing import Any, Protocol

import numpy as np

from caramba.errors import ConfigError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Graph, Value

MAX_STEPS = 100_000  # training timesteps (tables are this long)
COSINE_S = 0.008  # Nichol & Dhariwal 2021, eq. 17
MAX_BETA = 0.999  # their clipping of the cosine schedule's betas
TIME_SCALE = 1000.0  # time features embed 1000 * s, the range diffusers' timesteps have
MAX_PERIOD = 10_000.0


class Emit(Protocol):
    """Adds IR nodes: ``op(op_id, inputs, attrs, name)`` and ``const(value, dtype, name)``."""

    def op(self, op_id: str, inputs: Any = (), attrs: Any = None, name: str | None = None) -> Any: ...

    def const(self, value: Any, dtype: Any = None, name: str = "const") -> Value: ...


class GraphEmit:
    """An ``Emit`` on a plain graph, naming nodes ``<prefix>.<name>`` (fresh if taken)."""

    def __init__(self, graph: Graph, prefix: str) -> None:
        self.graph, self.prefix = graph, prefix

    def _id(self, name: str | None) -> str:
        nid = f"{self.prefix}.{name or 'out'}"
        return nid if not self.graph.has_node(nid) else self.graph.fresh_id(nid)

    def op(self, op_id: str, inputs: Any = (), attrs: Any = None, name: str | None = None) -> Any:
        return self.graph.call(op_id, inputs, attrs, id=self._id(name))

    def const(self, value: Any, dtype: Any = None, name: str = "const") -> Value:
        return self.graph.constant(np.asarray(value, dtype=(dtype or DType.float64).numpy), id=self._id(name))


# ---- shared IR helpers --------------------------------------------------------------------------


def _per_example(e: Emit, v: Value, like: Value, name: str) -> Value:
    """[B] -> [B, 1, ..., 1] so it broadcasts against ``like`` [B, ...]."""
    return e.op("shape.reshape", (v,), {"shape": (v.shape[0],) + (1,) * (like.ndim - 1)}, name=name)


def take(e: Emit, table: np.ndarray, idx: Value, dtype: DType, name: str) -> Value:
    """table[idx] for an int64 index value (scalar or [B])."""
    return e.op("shape.gather", (e.const(table, dtype, name=f"{name}_table"), idx), {"axis": 0}, name=name)


def time_features(e: Emit, s: Value, width: int, dtype: DType, name: str = "t_features") -> Value:
    """Sinusoidal features of normalized time ``s`` ([B] or a scalar) -> [B, width] (or [1, width]):
    ``[sin(1000 s f_k), cos(1000 s f_k)]``, ``f_k = 10000^(-k / (width/2))`` (Vaswani et al.; diffusers'
    ``get_timestep_embedding`` with ``flip_sin_to_cos=False``, ``downscale_freq_shift=0``)."""
    if width < 2 or width % 2:
        raise ConfigError(f"t_features must be an even number >= 2, got {width}")
    half = width // 2
    freqs = TIME_SCALE * np.exp(-log(MAX_PERIOD) * np.arange(half, dtype=np.float64) / half)
    rows = s.shape[0] if s.ndim else 1
    col = e.op("shape.reshape", (s,), {"shape": (rows, 1)}, name=f"{name}.col")
    arg = e.op("math.mul", (col, e.const(freqs[None, :], dtype, name=f"{name}.freqs")), name=f"{name}.arg")
    sin = e.op("math.sin", (arg,), name=f"{name}.sin")
    cos = e.op("math.cos", (arg,), name=f"{name}.cos")
    return e.op("shape.concat", (sin, cos), {"axis": -1}, name=name)


def time_features_host(s: np.ndarray, width: int) -> np.ndarray:
    """``time_features`` in NumPy float64 (tests, reference)."""
    half = width // 2
    freqs = TIME_SCALE * np.exp(-log(MAX_PERIOD) * np.arange(half, dtype=np.float64) / half)
    arg = np.asarray(s, np.float64).reshape(-1, 1) * freqs[None, :]
    return np.concatenate([np.sin(arg), np.cos(arg)], axis=-1)


@dataclass(frozen=True)
class Plan:
    """A sampling schedule: ``times[k]`` is the normalized time the model sees at step k, ``coef``
    the per-step coefficient tables (float64 [K] each) that ``update`` gathers at step k."""

    times: np.ndarray
    coef: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.times)


# ---- DDPM -----------------------------------------------------------------------------------------


def ddpm_betas(steps: int, schedule: str = "linear", beta_start: float | None = None,
               beta_end: float | None = None) -> np.ndarray:
    """float64 betas [steps]. ``linear``: evenly from beta_start to beta_end (default 1e-4 and 0.02
    scaled by 1000 / steps, so any ``steps`` noises as far as Ho et al.'s 1000 do: Nichol & Dhariwal
    2021; at most 0.999). ``cosine``: ``1 - ab(t+1) / ab(t)``, ``ab(t) = cos((t/T + s) / (1 + s) * pi/2)^2``,
    s = 0.008, clipped to 0.999 (diffusers' ``squaredcos_cap_v2``)."""
    if not 1 <= steps <= MAX_STEPS:
        raise ConfigError(f"steps must be in 1..{MAX_STEPS}, got {steps}")
    if schedule == "linear":
        scale = 1000.0 / steps
        lo = beta_start if beta_start is not None else min(1e-4 * scale, MAX_BETA)
        hi = beta_end if beta_end is not None else min(0.02 * scale, MAX_BETA)
        if not 0.0 < lo <= hi < 1.0:
            raise ConfigError(f"a linear schedule needs 0 < beta_start <= beta_end < 1, got {lo} and {hi}")
        return np.linspace(lo, hi, steps, dtype=np.float64)
    if schedule == "cosine":
        def ab(t: np.ndarray) -> np.ndarray:
            return np.cos((t / steps + COSINE_S) / (1 + COSINE_S) * pi / 2) ** 2

        t = np.arange(steps, dtype=np.float64)
        return np.minimum(1.0 - ab(t + 1) / ab(t), MAX_BETA)
    raise ConfigError(f"unknown beta schedule {schedule!r}; choose linear or cosine")


@dataclass(frozen=True)
class DDPM:
    """Denoising diffusion (Ho et al. 2020) over ``betas`` (float64 [T]); the model predicts eps."""

    betas: np.ndarray
    clip_sample: bool = True  # clip the predicted x0 to [-1, 1] (diffusers' default)
    name = "ddpm"
    stochastic = True

    @classmethod
    def make(cls, steps: int = 100, schedule: str = "linear", beta_start: float | None = None,
             beta_end: float | None = None) -> "DDPM":
        return cls(ddpm_betas(steps, schedule, beta_start, beta_end))

    @property
    def steps(self) -> int:
        return len(self.betas)

    @property
    def alphas_cumprod(self) -> np.ndarray:
        return np.cumprod(1.0 - self.betas)

    def timesteps(self, n: int | None = None) -> np.ndarray:
        """``n`` sampling timesteps, descending, "leading" spacing: ``arange(n) * (T // n)`` reversed."""
        n = self.steps if n is None else n
        if not 1 <= n <= self.steps:
            raise ConfigError(f"DDPM samples with 1..{self.steps} steps (its training steps), got {n}")
        return (np.arange(n, dtype=np.int64) * (self.steps // n))[::-1].copy()

    # training: noise a clean batch
    def noise(self, e: Emit, x0: Value, eps: Value, u: Value) -> tuple[Value, Value, Value]:
        """``u`` ~ U[0, 1) [B] picks t = floor(u T); returns (x_t, normalized time t / T, target eps).
        The last op (x_t) is added with ``name=None``."""
        d, T = x0.dtype, self.steps
        ut = e.op("math.mul", (u, e.const(float(T), d, name="T")), name="u_T")
        tf = e.op("math.clamp", (e.op("math.floor", (ut,), name="floor"),), {"min": 0.0, "max": float(T - 1)}, name="t_float")
        t = e.op("math.cast", (tf,), {"dtype": DType.int64}, name="t")
        ab = self.alphas_cumprod
        a = _per_example(e, take(e, np.sqrt(ab), t, d, "sqrt_ab"), x0, "sqrt_ab_b")
        b = _per_example(e, take(e, np.sqrt(1.0 - ab), t, d, "sqrt_1m_ab"), x0, "sqrt_1m_ab_b")
        s = e.op("math.div", (tf, e.const(float(T), d, name="T_div")), name="time")
        xa = e.op("math.mul", (a, x0), name="signal")
        xb = e.op("math.mul", (b, eps), name="noise_part")
        return e.op("math.add", (xa, xb), name=None), s, eps

    # sampling
    def plan(self, n: int | None = None) -> Plan:
        """Per-step float64 coefficients of the ancestral step (diffusers ``DDPMScheduler.step``)."""
        ts = self.timesteps(n)
        ratio = self.steps // len(ts)
        ab = self.alphas_cumprod
        ab_t = ab[ts]
        prev = ts - ratio
        ab_prev = np.where(prev >= 0, ab[np.maximum(prev, 0)], 1.0)
        beta = 1.0 - ab_t / ab_prev  # the step's beta (= betas[t] when every timestep is used)
        var = np.where(ts > 0, np.maximum((1.0 - ab_prev) / (1.0 - ab_t) * beta, 1e-20), 0.0)
        coef = {
            "x0_x": 1.0 / np.sqrt(ab_t),  # pred_x0 = x0_x * x - x0_eps * eps
            "x0_eps": np.sqrt(1.0 - ab_t) / np.sqrt(ab_t),
            "mean_x0": np.sqrt(ab_prev) * beta / (1.0 - ab_t),  # mean = mean_x0 * pred_x0 + mean_x * x
            "mean_x": np.sqrt(1.0 - beta) * (1.0 - ab_prev) / (1.0 - ab_t),
            "std": np.sqrt(var),
        }
        return Plan(ts.astype(np.float64) / self.steps, coef)

    def update(self, e: Emit, plan: Plan, x: Value, pred: Value, k: Value, z: Value | None) -> Value:
        """x_{prev} from x_t, the predicted eps and standard normal ``z`` at step ``k`` (int64 scalar)."""
        d = x.dtype
        c = {name: take(e, table, k, d, name) for name, table in plan.coef.items()}
        x0 = e.op("math.sub", (e.op("math.mul", (c["x0_x"], x), name="x0_a"),
                               e.op("math.mul", (c["x0_eps"], pred), name="x0_b")), name="pred_x0")
        if self.clip_sample:
            x0 = e.op("math.clamp", (x0,), {"min": -1.0, "max": 1.0}, name="pred_x0_clip")
        mean = e.op("math.add", (e.op("math.mul", (c["mean_x0"], x0), name="mean_a"),
                                 e.op("math.mul", (c["mean_x"], x), name="mean_b")), name="mean")
        if z is None:
            return mean
        return e.op("math.add", (mean, e.op("math.mul", (c["std"], z), name="sigma_z")), name="x_prev")


# ---- flow matching --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flow:
    """Rectified flow: x_t = (1 - t) x0 + t eps, t ~ U[0, 1); the model predicts v = eps - x0;
    sampling takes ``steps`` Euler steps x <- x - dt v from t = 1 to 0."""

    steps: int = 100
    name = "flow"
    stochastic = False

    def __post_init__(self) -> None:
        if not 1 <= self.steps <= MAX_STEPS:
            raise ConfigError(f"steps must be in 1..{MAX_STEPS}, got {self.steps}")

    def noise(self, e: Emit, x0: Value, eps: Value, u: Value) -> tuple[Value, Value, Value]:
        tb = _per_example(e, u, x0, "t_b")
        one_m = e.op("math.sub", (e.const(1.0, x0.dtype, name="one"), tb), name="one_minus_t")
        xa = e.op("math.mul", (one_m, x0), name="signal")
        xb = e.op("math.mul", (tb, eps), name="noise_part")
        target = e.op("math.sub", (eps, x0), name="velocity")
        return e.op("math.add", (xa, xb), name=None), u, target

    def plan(self, n: int | None = None) -> Plan:
        n = self.steps if n is None else n
        if not 1 <= n <= MAX_STEPS:
            raise ConfigError(f"flow sampling takes 1..{MAX_STEPS} Euler steps, got {n}")
        return Plan(1.0 - np.arange(n, dtype=np.float64) / n, {"dt": np.full(n, 1.0 / n)})

    def update(self, e: Emit, plan: Plan, x: Value, pred: Value, k: Value, z: Value | None) -> Value:
        dt = take(e, plan.coef["dt"], k, x.dtype, "dt")
        return e.op("math.sub", (x, e.op("math.mul", (dt, pred), name="dt_v")), name="x_prev")


Scheduler = DDPM | Flow


def scheduler(config: dict[str, Any]) -> Scheduler:
    """The scheduler a ``diffusion.noise`` node's resolved config describes."""
    kind = config.get("scheduler", "ddpm")
    if kind == "ddpm":
        return DDPM.make(config["steps"], config.get("schedule", "linear"), config.get("beta_start"),
                         config.get("beta_end"))
    if kind == "flow":
        return Flow(config["steps"])
    raise ConfigError(f"unknown scheduler {kind!r}; choose ddpm or flow")


__all__ = ["DDPM", "Emit", "Flow", "GraphEmit", "Plan", "Scheduler", "ddpm_betas", "scheduler", "take", "time_features",
           "time_features_host"]
