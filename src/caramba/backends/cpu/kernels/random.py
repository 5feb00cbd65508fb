"""cpu kernels for random.*: Philox keyed by (seed, key), so draws are reproducible."""

from __future__ import annotations

import numpy as np

from caramba.backends.cpu.kernels import FLOAT, kernel
from caramba.ir.dtypes import DType

MASK = (1 << 64) - 1
KEYED = FLOAT | {DType.int64}  # int64: the optional key input


def generator(seed: int, key=None) -> np.random.Generator:
    k = 0 if key is None else int(key)
    return np.random.Generator(np.random.Philox(key=np.array([seed & MASK, k & MASK], dtype=np.uint64)))


@kernel("random.uniform", KEYED)
def _uniform(node, ins):
    a = node.attrs
    shape, d, lo, hi = tuple(a["shape"]), a["dtype"].numpy, a["low"], a["high"]
    # Rounding to the dtype (or lo + (hi - lo) * u itself) can reach `high`; the interval is
    # half-open, so clamp to the largest value below it.
    top = np.nextafter(d.type(hi), d.type(-np.inf))
    return lambda key=None: np.minimum((lo + (hi - lo) * generator(a["seed"], key).random(shape)).astype(d), top)


@kernel("random.normal", KEYED)
def _normal(node, ins):
    a = node.attrs
    shape, d, mu, sd = tuple(a["shape"]), a["dtype"].numpy, a["mean"], a["std"]
    return lambda key=None: (mu + sd * generator(a["seed"], key).standard_normal(shape)).astype(d)


@kernel("random.bernoulli", frozenset({DType.bool, DType.int64}))
def _bernoulli(node, ins):
    a = node.attrs
    shape, p = tuple(a["shape"]), a["p"]
    return lambda key=None: generator(a["seed"], key).random(shape) < p
