"""sample.*: next-token sampling as one op, giving the same tokens on every backend that runs it.

``sample.token(logits [B, V], key?, seen?) -> int64 [B]`` processes each row of logits the way
Hugging Face ``transformers`` 5.24 ``generate(do_sample=True, ...)`` does (the order of its
``_get_logits_processor``), then draws one token per row by inverse-CDF from one float64 uniform
of a counter-based stream:

1. repetition penalty on tokens with ``seen`` True: ``x / p if x > 0 else x * p``
   (``RepetitionPenaltyLogitsProcessor``; without ``seen`` nothing is penalized);
2. temperature: ``x / temperature`` (``TemperatureLogitsWarper``); ``temperature = 0`` is greedy:
   the first maximum of the penalized logits, no draw (the random stream is not used);
3. top-k: tokens below the k-th largest logit get -inf (``TopKLogitsWarper``; ties with the k-th
   are kept);
4. top-p: sort ascending, softmax, cumulative sum; tokens whose cumulative probability is
   ``<= 1 - top_p`` get -inf, the largest always stays (``TopPLogitsWarper``; a token tied in value
   with the smallest one kept is kept too, whatever order a sort gives ties);
5. min-p: tokens with ``softmax(x) < min_p * max(softmax(x))`` get -inf (``MinPLogitsWarper``).

The draw: ``w = exp(x - max(x))`` (0 for filtered tokens), ``c = cumsum(w)``, and the token of
row r is the smallest ``i`` with ``c[i] > u_r * c[V-1]`` (clamped to the last token with
``w > 0``), where ``u_r`` is the stream below. Every step runs in float64 whatever the logits'
dtype, written once here for an array module ``xp`` (NumPy on cpu, ``jax.numpy`` on xla), so
backends agree except when a comparison falls within float64 rounding of its threshold (sums
and ``exp`` may round differently: about 1e-13 per draw for random logits).

The stream is SplitMix64, the same counters as ``random.*`` on onnx (``caramba.onnx.special``)::

    s   = mix64(seed)                               without a key
    s   = mix64(seed ^ mix64(key + GOLDEN))         with an int64 key (as uint64)
    u_r = (mix64(s + (r + 1) * GOLDEN) >> 11) * 2**-53      r = 0 .. B-1

in uint64 arithmetic (wrapping), so it is bit-identical wherever it runs. Rows are independent
draws: a batch of identical rows samples the same distribution B times.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS, DType
from caramba.ir.graph import Value
from caramba.ir.types import Effect, ValueType
from caramba.ops._define import define, require_dtype

GOLDEN = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
U64 = (1 << 64) - 1

ATTRS = (
    Attr("seed", "int", 0, doc="stream seed"),
    Attr("temperature", "float", 1.0, doc=">= 0; 0 = greedy argmax (first maximum)"),
    Attr("top_k", "int", 0, doc=">= 0; keep the k largest logits (0 = off)"),
    Attr("top_p", "float", 1.0, doc="in (0, 1]; nucleus mass to keep (1 = off)"),
    Attr("min_p", "float", 0.0, doc="in [0, 1); drop tokens below min_p * max prob (0 = off)"),
    Attr("repetition_penalty", "float", 1.0, doc="> 0; applied to seen tokens (1 = off)"),
)


def check_attrs(a: Any) -> None:
    """Raise GraphError naming the first attribute out of its range."""
    t, k, p, m, r = a["temperature"], a["top_k"], a["top_p"], a["min_p"], a["repetition_penalty"]
    if not (math.isfinite(t) and t >= 0):
        raise GraphError(f"sample.token: temperature must be a finite number >= 0 (0 = greedy), got {t}")
    if k < 0:
        raise GraphError(f"sample.token: top_k must be >= 0 (0 = off), got {k}")
    if not 0.0 < p <= 1.0:
        raise GraphError(f"sample.token: top_p must be in (0, 1] (1 = off), got {p}")
    if not 0.0 <= m < 1.0:
        raise GraphError(f"sample.token: min_p must be in [0, 1) (0 = off), got {m}")
    if not (math.isfinite(r) and r > 0):
        raise GraphError(f"sample.token: repetition_penalty must be a finite number > 0 (1 = off), got {r}")


def roles(types: tuple[ValueType, ...]) -> tuple[int | None, int | None]:
    """(index of the key input, index of the seen input), None where absent. With two inputs
    the second is ``seen`` when it is bool, else the key."""
    if len(types) == 3:
        return 1, 2
    if len(types) == 2:
        return (None, 1) if types[1].dtype is DType.bool else (1, None)
    return None, None


def _infer(ins: tuple[ValueType, ...], a: Any) -> tuple[ValueType, ...]:
    x = ins[0]
    if x.rank != 2:
        raise GraphError(f"sample.token logits must be [batch, vocab], got {x}")
    require_dtype("sample.token", x, FLOATS, "logits")
    if x.shape[1] == 0:
        raise GraphError(f"sample.token needs a vocabulary of at least one token, got {x}")
    k, s = roles(ins)
    if k is not None and (ins[k].shape != () or ins[k].dtype is not DType.int64):
        raise GraphError(f"sample.token key must be an int64 scalar, got {ins[k]}")
    if s is not None and (ins[s].shape != x.shape or ins[s].dtype is not DType.bool):
        raise GraphError(f"sample.token seen must be {x.with_dtype(DType.bool)} like the logits, got {ins[s]}")
    check_attrs(a)
    return (ValueType((x.shape[0],), DType.int64),)


_token = define(
    "sample.token", _infer, (1, 3), ATTRS, effect=Effect.random, differentiable=False, doc=__doc__ or ""
)


def token(logits: Value, key: Value | None = None, seen: Value | None = None, **attrs: Any) -> Value:
    """One token per row of ``logits`` [B, V] (int64 [B]); see the module docstring.

    ``key``: an int64 scalar graph value (a fresh draw per step); ``seen``: bool [B, V], the tokens
    the repetition penalty applies to. Attributes: ``seed`` (0), ``temperature`` (1.0; 0 = greedy),
    ``top_k`` (0 = off), ``top_p`` (1.0 = off), ``min_p`` (0.0 = off), ``repetition_penalty``
    (1.0 = off). A Python int ``key`` becomes an int64 constant."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool) and isinstance(logits, Value):
        key = logits.graph.constant(np.asarray(key, dtype=np.int64))
    return _token(*(v for v in (logits, key, seen) if v is not None), **attrs)


token.opdef = _token.opdef  # type: ignore[attr-defined]


# ---- the definition, for an array module xp (numpy, jax.numpy) ---------------------------------


def mix64(z: Any) -> Any:
    """SplitMix64's finalizer on a uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
    return z ^ (z >> np.uint64(31))


def uniforms(seed: int, key: Any, rows: int, xp: Any = np) -> Any:
    """float64 [rows] on [0, 1): the stream of (seed, key) (key: None or an int64 scalar)."""
    s = np.array([seed & U64], dtype=np.uint64)  # arrays, never NumPy scalars: no overflow warnings
    if key is None:
        s = mix64(s)
    else:
        k = xp.reshape(xp.asarray(key), (1,)).astype(np.uint64)
        s = mix64(mix64(k + np.uint64(GOLDEN)) ^ s)  # the key's array first: xp's operator
    ctr = np.arange(1, rows + 1, dtype=np.uint64) * np.uint64(GOLDEN)
    bits = mix64(s + ctr)
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53


def penalized(x: Any, a: Any, seen: Any = None, xp: Any = np) -> Any:
    """Step 1: the repetition penalty (float64 logits)."""
    r = a["repetition_penalty"]
    if seen is None or r == 1.0:
        return x
    return xp.where(seen, xp.where(x < 0, x * r, x / r), x)


def kth_largest(x: np.ndarray, k: int) -> np.ndarray:
    """[B, 1]: the k-th largest value of each row (a selection, no arithmetic)."""
    v = x.shape[-1]
    return np.partition(x, v - k, axis=-1)[:, v - k : v - k + 1]


def filtered(x: Any, a: Any, xp: Any = np, kth: Any = kth_largest) -> Any:
    """Steps 2-5 for temperature > 0: the logits with -inf at filtered tokens. ``kth(x, k)`` is
    :func:`kth_largest` for ``xp`` (XLA: ``lax.top_k``, not a full sort)."""
    v = x.shape[-1]
    if a["temperature"] != 1.0:
        x = x / a["temperature"]
    k = a["top_k"]
    if 0 < k < v:
        x = xp.where(x < kth(x, k), -np.inf, x)
    if a["top_p"] < 1.0:
        s = xp.sort(x, axis=-1)
        e = xp.exp(s - s[:, -1:])
        cum = xp.cumsum(e / xp.sum(e, axis=-1, keepdims=True), axis=-1)
        n = xp.minimum(xp.sum(cum <= 1.0 - a["top_p"], axis=-1, keepdims=True), v - 1)
        x = xp.where(x < xp.take_along_axis(s, n, axis=-1), -np.inf, x)
    if a["min_p"] > 0.0:
        e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
        probs = e / xp.sum(e, axis=-1, keepdims=True)
        x = xp.where(probs < a["min_p"] * xp.max(probs, axis=-1, keepdims=True), -np.inf, x)
    return x


def filtered_probs(logits: Any, attrs: Any, seen: Any = None) -> np.ndarray:
    """Host helper: the float64 probabilities [B, V] a row is drawn from (0 at filtered tokens;
    one-hot at the first maximum for temperature 0). ``attrs`` may omit defaults."""
    a = _token.opdef.make_attrs(attrs)  # kinds and defaults, as on a node
    check_attrs(a)
    x = penalized(np.asarray(logits, dtype=np.float64), a, None if seen is None else np.asarray(seen, bool))
    if a["temperature"] == 0.0:
        return np.eye(x.shape[-1], dtype=np.float64)[np.argmax(x, axis=-1)]
    x = filtered(x, a)
    w = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return w / np.sum(w, axis=-1, keepdims=True)


def draw(logits: Any, a: Any, key: Any = None, seen: Any = None, xp: Any = np, kth: Any = kth_largest) -> Any:
    """The op: int64 [B] tokens (the kernels of cpu and xla are this with their ``xp``)."""
    x = penalized(logits.astype(np.float64), a, seen, xp)
    if a["temperature"] == 0.0:
        return xp.argmax(x, axis=-1).astype(np.int64)
    x = filtered(x, a, xp, kth)
    v = x.shape[-1]
    w = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
    c = xp.cumsum(w, axis=-1)
    u = xp.asarray(uniforms(a["seed"], key, x.shape[0], xp))
    i = xp.sum(c <= u[:, None] * c[:, -1:], axis=-1)
    last = v - 1 - xp.argmax(w[:, ::-1] > 0, axis=-1)  # u * c[V-1] may round up to c[V-1]
    return xp.minimum(i, last).astype(np.int64)


__all__ = [
    "ATTRS", "check_attrs", "draw", "filtered", "filtered_probs", "kth_largest", "penalized", "roles", "token", "uniforms",
]
