"""Parameter initializers, drawn on the host from a seeded Philox generator.

Every parameter gets its own generator keyed by ``(seed, sha256(name))``, so one seed gives
the same initial values whatever the backend, the order parameters are created in, or which
other parameters exist. The values are uploaded explicitly (``Trainer.init``); nothing random
happens on a device.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from caramba.errors import ConfigError
from caramba.ir.dtypes import DType

MASK = (1 << 64) - 1


def generator(seed: int, name: str) -> np.random.Generator:
    """The host generator for parameter ``name`` under ``seed`` (NumPy Philox)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ConfigError(f"seed must be an int, got {seed!r}")
    h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    return np.random.Generator(np.random.Philox(key=np.array([int(seed) & MASK, h], dtype=np.uint64)))


def fans(shape: Sequence[int]) -> tuple[int, int]:
    """(fan_in, fan_out): [in, out] for matrices (``x @ W``), [out, in, *kernel] for convolutions."""
    shape = tuple(shape)
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    rf = math.prod(shape[2:])
    return shape[1] * rf, shape[0] * rf


class Initializer:
    """``init(rng, shape, dtype) -> np.ndarray``; subclasses implement ``draw`` in float64."""

    def __call__(self, rng: np.random.Generator, shape: Sequence[int], dtype: DType = DType.float64,
                 fan: tuple[int, int] | None = None) -> np.ndarray:
        shape = tuple(int(s) for s in shape)
        out = np.asarray(self.draw(rng, shape, fan if fan is not None else fans(shape)), dtype=np.float64)
        return out.astype(dtype.numpy)

    def draw(self, rng: np.random.Generator, shape: tuple[int, ...], fan: tuple[int, int]) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True)
class Constant(Initializer):
    """Every element ``value``."""

    value: float = 0.0

    def draw(self, rng, shape, fan):
        return np.full(shape, self.value)


@dataclass(frozen=True)
class Normal(Initializer):
    """``mean + std * N(0, 1)``."""

    mean: float = 0.0
    std: float = 1.0

    def __post_init__(self):
        _check(self.std >= 0, f"normal std must be >= 0, got {self.std}")

    def draw(self, rng, shape, fan):
        return self.mean + self.std * rng.standard_normal(shape)


@dataclass(frozen=True)
class Uniform(Initializer):
    """Uniform on ``[low, high)``."""

    low: float = 0.0
    high: float = 1.0

    def __post_init__(self):
        _check(self.low <= self.high, f"uniform needs low <= high, got low={self.low}, high={self.high}")

    def draw(self, rng, shape, fan):
        return rng.uniform(self.low, self.high, shape)


@dataclass(frozen=True)
class Glorot(Initializer):
    """Glorot/Xavier: uniform on ``±gain*sqrt(6/(fan_in+fan_out))`` or normal with
    ``std = gain*sqrt(2/(fan_in+fan_out))``."""

    gain: float = 1.0
    distribution: str = "uniform"

    def __post_init__(self):
        _check(self.distribution in ("uniform", "normal"), f"distribution must be uniform or normal, got {self.distribution!r}")

    def draw(self, rng, shape, fan):
        total = max(fan[0] + fan[1], 1)
        if self.distribution == "uniform":
            a = self.gain * math.sqrt(6.0 / total)
            return rng.uniform(-a, a, shape)
        return self.gain * math.sqrt(2.0 / total) * rng.standard_normal(shape)


@dataclass(frozen=True)
class He(Initializer):
    """He/Kaiming: ``std = gain/sqrt(fan)`` (normal) or uniform on ``±gain*sqrt(3/fan)``, with
    ``fan`` = fan_in (default) or fan_out and ``gain = sqrt(2)`` (ReLU)."""

    gain: float = math.sqrt(2.0)
    mode: str = "fan_in"
    distribution: str = "normal"

    def __post_init__(self):
        _check(self.mode in ("fan_in", "fan_out"), f"mode must be fan_in or fan_out, got {self.mode!r}")
        _check(self.distribution in ("uniform", "normal"), f"distribution must be uniform or normal, got {self.distribution!r}")

    def draw(self, rng, shape, fan):
        n = max(fan[0] if self.mode == "fan_in" else fan[1], 1)
        if self.distribution == "uniform":
            a = self.gain * math.sqrt(3.0 / n)
            return rng.uniform(-a, a, shape)
        return self.gain / math.sqrt(n) * rng.standard_normal(shape)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def zeros() -> Initializer:
    return Constant(0.0)


def ones() -> Initializer:
    return Constant(1.0)


def constant(value: float) -> Initializer:
    return Constant(float(value))


def normal(mean: float = 0.0, std: float = 1.0) -> Initializer:
    return Normal(mean, std)


def uniform(low: float = 0.0, high: float = 1.0) -> Initializer:
    return Uniform(low, high)


def glorot_uniform(gain: float = 1.0) -> Initializer:
    return Glorot(gain, "uniform")


def glorot_normal(gain: float = 1.0) -> Initializer:
    return Glorot(gain, "normal")


def he_normal(gain: float = math.sqrt(2.0), mode: str = "fan_in") -> Initializer:
    return He(gain, mode, "normal")


def he_uniform(gain: float = math.sqrt(2.0), mode: str = "fan_in") -> Initializer:
    return He(gain, mode, "uniform")


xavier_uniform, xavier_normal = glorot_uniform, glorot_normal
kaiming_normal, kaiming_uniform = he_normal, he_uniform

__all__ = [
    "Constant", "Glorot", "He", "Initializer", "Normal", "Uniform", "constant", "fans", "generator",
    "glorot_normal", "glorot_uniform", "he_normal", "he_uniform", "kaiming_normal", "kaiming_uniform",
    "normal", "ones", "uniform", "xavier_normal", "xavier_uniform", "zeros",
]
