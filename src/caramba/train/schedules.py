"""Learning-rate schedules: functions of the step counter, built into the train-step graph.

A schedule maps the int64 step ``t`` (the number of updates including the current one, so the
first update sees ``t = 1``) to a float learning rate with ordinary IR ops, so it needs nothing
new from a backend. ``schedule.value(t)`` gives the same number on the host (references, logs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from caramba import ops
from caramba.errors import ConfigError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Value


class Schedule:
    """``schedule(step_value, dtype) -> lr value``; ``schedule.value(t) -> float``."""

    def __call__(self, step: Value, dtype: DType = DType.float64) -> Value:
        raise NotImplementedError

    def value(self, t: int) -> float:
        raise NotImplementedError


def _const(like: Value, v: float, dtype: DType) -> Value:
    return like.graph.constant(np.asarray(v, dtype=dtype.numpy))


def _positive(name: str, v: float) -> None:
    if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v)):
        raise ConfigError(f"{name} must be a positive number, got {v!r}")


def _steps(name: str, v: int, allow_zero: bool = True) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (v == 0 and not allow_zero):
        raise ConfigError(f"{name} must be a {'non-negative' if allow_zero else 'positive'} int, got {v!r}")


@dataclass(frozen=True)
class Constant(Schedule):
    """``lr`` at every step."""

    lr: float

    def __post_init__(self):
        _positive("learning rate", self.lr)

    def __call__(self, step, dtype=DType.float64):
        return _const(step, self.lr, dtype)

    def value(self, t):
        return float(self.lr)


@dataclass(frozen=True)
class LinearWarmup(Schedule):
    """``lr * min(t / warmup_steps, 1)``: a linear ramp to ``lr`` over ``warmup_steps`` updates."""

    lr: float
    warmup_steps: int

    def __post_init__(self):
        _positive("learning rate", self.lr)
        _steps("warmup_steps", self.warmup_steps, allow_zero=False)

    def __call__(self, step, dtype=DType.float64):
        t = ops.cast(step, dtype=dtype)
        frac = ops.minimum(t * (1.0 / self.warmup_steps), _const(step, 1.0, dtype))
        return frac * self.lr

    def value(self, t):
        return min(t * (1.0 / self.warmup_steps), 1.0) * self.lr


@dataclass(frozen=True)
class Cosine(Schedule):
    """Linear warmup over ``warmup_steps``, then cosine decay from ``lr`` to ``final_lr`` over
    ``decay_steps`` more updates (``final_lr`` afterwards):
    ``final + 0.5 * (lr - final) * (1 + cos(pi * min((t - warmup) / decay_steps, 1)))``."""

    lr: float
    decay_steps: int
    warmup_steps: int = 0
    final_lr: float = 0.0

    def __post_init__(self):
        _positive("learning rate", self.lr)
        _steps("decay_steps", self.decay_steps, allow_zero=False)
        _steps("warmup_steps", self.warmup_steps)
        if not 0.0 <= self.final_lr <= self.lr:
            raise ConfigError(f"final_lr must be in [0, lr={self.lr}], got {self.final_lr!r}")

    def __call__(self, step, dtype=DType.float64):
        t = ops.cast(step, dtype=dtype)
        one = _const(step, 1.0, dtype)
        w, amp = self.warmup_steps, 0.5 * (self.lr - self.final_lr)
        progress = ops.minimum((t - float(w)) * (1.0 / self.decay_steps), one)
        lr = (ops.cos(progress * math.pi) + 1.0) * amp + self.final_lr
        if w:
            ramp = t * (self.lr / w)
            lr = ops.where(ops.less(t, _const(step, float(w), dtype)), ramp, lr)
        return lr

    def value(self, t):
        w, amp = self.warmup_steps, 0.5 * (self.lr - self.final_lr)
        if w and t < w:
            return t * (self.lr / w)
        progress = min((t - float(w)) * (1.0 / self.decay_steps), 1.0)
        return (math.cos(progress * math.pi) + 1.0) * amp + self.final_lr


def constant(lr: float) -> Schedule:
    return Constant(lr)


def linear_warmup(lr: float, warmup_steps: int) -> Schedule:
    return LinearWarmup(lr, warmup_steps)


def cosine(lr: float, decay_steps: int, warmup_steps: int = 0, final_lr: float = 0.0) -> Schedule:
    return Cosine(lr, decay_steps, warmup_steps, final_lr)


def as_schedule(lr: "float | Schedule") -> Schedule:
    if isinstance(lr, Schedule):
        return lr
    return Constant(lr)


__all__ = ["Constant", "Cosine", "LinearWarmup", "Schedule", "as_schedule", "constant", "cosine", "linear_warmup"]
