"""attention.*: scaled dot-product attention and rotary position embedding.

``attention.rope`` keeps its frequency facts here, in one place: ``rope_tables`` builds the
float64 cos/sin tables every backend uploads (each casts them to its dtype), and
``rope_inv_freq`` / ``rope_attention_scale`` turn a Hugging Face ``rope_scaling`` (or
``rope_parameters``) mapping into the op's ``inv_freq`` and ``scale`` attributes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from caramba.errors import ConfigError, GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS, DType
from caramba.ir.types import ValueType
from caramba.ops._define import broadcast_shapes, define, require_dtype, same_dtype


def _sdpa(ins, a):
    q, k, v = ins[:3]
    same_dtype("attention.sdpa", ins[:3])
    require_dtype("attention.sdpa", q, FLOATS)
    if q.rank < 2 or k.rank != q.rank or v.rank != q.rank:
        raise GraphError(f"attention.sdpa needs q, k, v of one rank >= 2, got {q}, {k}, {v}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise GraphError(
            f"attention.sdpa: q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] disagree: {list(q.shape)}, {list(k.shape)}, {list(v.shape)}"
        )
    batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    tq, tk = q.shape[-2], k.shape[-2]
    if a["causal"] and tq > tk:
        raise GraphError(f"attention.sdpa causal needs Tq <= Tk, got {tq} > {tk}")
    if len(ins) == 4:
        m = ins[3]
        if m.dtype is not DType.bool and m.dtype != q.dtype:
            raise GraphError(f"attention.sdpa mask must be bool (True keeps) or {q.dtype} (added), got {m.dtype}")
        broadcast_shapes(m.shape, batch + (tq, tk))
    return (ValueType(batch + (tq, v.shape[-1]), q.dtype),)


sdpa = define(
    "attention.sdpa", _sdpa, (3, 4), (Attr("scale", "float?", None), Attr("causal", "bool", False)),
    doc="softmax(q @ k^T * scale + mask) @ v; scale defaults to 1/sqrt(D); causal aligns the last"
    " query with the last key; a bool mask keeps True positions, a float mask is added.",
)


def _rope(ins, a):
    x = ins[0]
    require_dtype("attention.rope", x, FLOATS)
    if x.rank < 2 or x.shape[-1] % 2:
        raise GraphError(f"attention.rope needs [..., seq, dim] with even dim, got {list(x.shape)}")
    inv_freq, scale = a["inv_freq"], a["scale"]
    if inv_freq and len(inv_freq) != x.shape[-1] // 2:
        raise GraphError(
            f"attention.rope inv_freq needs dim/2 = {x.shape[-1] // 2} frequencies, got {len(inv_freq)}",
            hint="rope_inv_freq(head_dim, base, scaling) gives head_dim/2; pass [] for the base formula",
        )
    if not all(math.isfinite(f) for f in inv_freq):
        raise GraphError(f"attention.rope inv_freq must be finite, got {list(inv_freq)}")
    if not (math.isfinite(scale) and scale > 0):
        raise GraphError(f"attention.rope scale must be finite and > 0, got {scale}")
    return (x,)


rope = define(
    "attention.rope", _rope, 1,
    (
        Attr("base", "float", 10000.0, doc="frequency base: inv_freq[i] = base^(-2i/dim)"),
        Attr("offset", "int", 0, doc="position of the first element"),
        Attr("inv_freq", "floats", (), doc="dim/2 inverse frequencies replacing the base formula ([]: use base)"),
        Attr("scale", "float", 1.0, doc="multiplies cos and sin (Hugging Face's attention_scaling)"),
    ),
    doc="rotary position embedding (rotate-half form) over [..., seq, dim]: with x = [x1, x2],"
    " y = [x1 cos - x2 sin, x2 cos + x1 sin] * scale, angle[t, i] = (offset + t) * inv_freq[i];"
    " inv_freq defaults to base^(-2i/dim) (see rope_inv_freq for Hugging Face's scaled ones).",
)


# ---- frequency tables -----------------------------------------------------------------------


def _base_inv_freq(dim: int, base: float) -> np.ndarray:
    return base ** (-np.arange(dim // 2, dtype=np.float64) * 2.0 / dim)


def rope_tables(attrs: Mapping[str, Any], t_len: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The float64 ``(cos, sin)`` tables, each ``[t_len, dim/2]``, of an ``attention.rope`` node.

    ``angle[t, i] = (offset + t) * inv_freq[i]`` in float64, ``inv_freq`` being the node's
    attribute or (when empty) ``base^(-2i/dim)``; both tables are multiplied by ``scale``.
    Every backend uploads these (cast to its dtype), so they agree on one definition.
    """
    inv_freq = attrs.get("inv_freq")
    inv_freq = () if inv_freq is None else inv_freq
    inv = np.asarray(inv_freq, dtype=np.float64) if len(inv_freq) else _base_inv_freq(dim, attrs["base"])
    if inv.shape != (dim // 2,):
        raise GraphError(f"attention.rope inv_freq needs dim/2 = {dim // 2} frequencies, got {inv.shape[0]}")
    angles = (attrs["offset"] + np.arange(t_len, dtype=np.float64))[:, None] * inv[None, :]
    scale = float(attrs.get("scale", 1.0))
    return np.cos(angles) * scale, np.sin(angles) * scale


# ---- Hugging Face rope scaling (transformers.modeling_rope_utils, recomputed in float64) --------

ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")
_COMMON_KEYS = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor"})
_TYPE_KEYS = {
    "default": frozenset(),
    "linear": frozenset({"factor"}),
    "dynamic": frozenset({"factor"}),
    "llama3": frozenset({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}),
    "yarn": frozenset({
        "factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
        "mscale", "mscale_all_dim", "truncate",
    }),
}


def _rope_type(scaling: Mapping[str, Any] | None, base: float | None = None) -> tuple[str, Mapping[str, Any]]:
    """(rope type, parameters) of a Hugging Face rope mapping; rejects unknown types and keys."""
    if scaling is None:
        return "default", {}
    new, old = scaling.get("rope_type"), scaling.get("type")
    if new is not None and old is not None and new != old:
        raise ConfigError(f"rope scaling names two types: rope_type={new!r} and type={old!r}")
    kind = new if new is not None else old if old is not None else "default"
    if kind not in _TYPE_KEYS:
        raise ConfigError(
            f"unsupported rope type {kind!r}; caramba supports {', '.join(ROPE_TYPES)}",
            hint="compute the inverse frequencies yourself and pass them as attention.rope's inv_freq",
        )
    unknown = set(scaling) - _COMMON_KEYS - _TYPE_KEYS[kind]
    if unknown:
        raise ConfigError(
            f"rope type {kind!r} does not take {', '.join(sorted(unknown))}; it takes "
            + ", ".join(sorted(_COMMON_KEYS | _TYPE_KEYS[kind]))
        )
    theta = scaling.get("rope_theta")
    if base is not None and theta is not None and float(theta) != float(base):
        raise ConfigError(f"rope scaling's rope_theta {theta} disagrees with base {base}")
    return kind, scaling


def _need(kind: str, p: Mapping[str, Any], key: str) -> Any:
    if p.get(key) is None:
        raise ConfigError(f"rope type {kind!r} needs {key!r}, got {dict(p)}")
    return p[key]


def _original(kind: str, p: Mapping[str, Any], max_position: int | None) -> int:
    """original_max_position_embeddings; transformers' standardization falls back to the model's
    max_position_embeddings (``max_position`` here) for llama3 and yarn."""
    original = p.get("original_max_position_embeddings")
    if original is None:
        if max_position is None:
            raise ConfigError(f"rope type {kind!r} needs 'original_max_position_embeddings' (or max_position)")
        original = max_position
    return int(original)


def _yarn_factor(p: Mapping[str, Any], max_position: int | None) -> tuple[float, int]:
    """(factor, original_max_position_embeddings) as transformers 5 resolves them for yarn."""
    original = _original("yarn", p, max_position)
    factor = p.get("factor")
    if factor is None:  # DeepSeek-V3 style: the ratio of the two context lengths
        if max_position is None:
            raise ConfigError("rope type 'yarn' needs 'factor' (or max_position to derive it)")
        factor = max_position / original
    return float(factor), original


def rope_inv_freq(
    head_dim: int,
    base: float,
    scaling: Mapping[str, Any] | None = None,
    *,
    max_position: int | None = None,
    seq_len: int | None = None,
) -> np.ndarray:
    """Hugging Face's rotary inverse frequencies, computed in float64: ``[rot_dim/2]``.

    ``scaling`` is a transformers ``rope_scaling`` / ``rope_parameters`` mapping (``rope_type``
    or the old key ``type``; ``rope_theta``, if present, must equal ``base``); None is the default
    ``base^(-2i/rot_dim)``, with ``rot_dim = int(head_dim * partial_rotary_factor)`` (default 1.0).
    Types: ``default``; ``linear`` (``/ factor``); ``llama3`` (``factor``, ``low_freq_factor``,
    ``high_freq_factor``, ``original_max_position_embeddings``: long wavelengths divided by factor,
    short ones kept, a smooth ramp between); ``dynamic`` (NTK, needs ``max_position``, the model's
    ``max_position_embeddings``); ``yarn`` (``factor``, ``original_max_position_embeddings``,
    optional ``beta_fast`` = 32, ``beta_slow`` = 1, ``truncate`` = True; its cos/sin scale is
    ``rope_attention_scale``). As in transformers, a missing ``original_max_position_embeddings``
    is ``max_position`` and a missing yarn ``factor`` is ``max_position / original``. Other types
    (``longrope``, ``proportional``, ...) and keys a type does not take raise ``ConfigError``.

    ``dynamic``: caramba graphs are static, so the frequencies are those transformers uses for a
    sequence of ``seq_len`` positions: the base ones while ``seq_len`` is None or at most
    ``max_position`` (as at init), else ``base * (factor * seq_len / max_position - factor + 1)
    ^ (rot_dim / (rot_dim - 2))``. Build the graph for its longest sequence and pass that length.

    Pass the result as ``attention.rope``'s ``inv_freq`` (and ``rope_attention_scale`` as its
    ``scale``), applied to the first ``rot_dim`` features when partial.
    """
    kind, p = _rope_type(scaling, base)
    dim = int(head_dim * float(p.get("partial_rotary_factor", 1.0)))
    if dim < 2 or dim % 2:
        raise ConfigError(f"rope needs an even rotary dim >= 2, got {dim} (head_dim {head_dim})")
    base = float(base)
    if kind == "dynamic":
        factor = float(_need(kind, p, "factor"))
        if max_position is None:
            raise ConfigError("rope type 'dynamic' needs max_position (the model's max_position_embeddings)")
        if seq_len is not None and seq_len > max_position:
            base = base * (factor * seq_len / max_position - (factor - 1)) ** (dim / (dim - 2))
    inv = _base_inv_freq(dim, base)
    if kind == "linear":
        return inv / float(_need(kind, p, "factor"))
    if kind == "llama3":
        factor = float(_need(kind, p, "factor"))
        low, high = float(_need(kind, p, "low_freq_factor")), float(_need(kind, p, "high_freq_factor"))
        old_len = float(_original(kind, p, max_position))
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > old_len / low, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        medium = ~(wavelen < old_len / high) & ~(wavelen > old_len / low)
        return np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    if kind == "yarn":
        factor, original = _yarn_factor(p, max_position)
        beta_fast = p.get("beta_fast") or 32  # `or`, as transformers: 0 means the default too
        beta_slow = p.get("beta_slow") or 1

        def correction_dim(rotations: float) -> float:
            return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

        lo, hi = correction_dim(beta_fast), correction_dim(beta_slow)
        if p.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001  # transformers' guard against a zero-width ramp
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0)
        extrapolation = 1.0 - ramp
        return (inv / factor) * (1.0 - extrapolation) + inv * extrapolation
    return inv


def rope_attention_scale(scaling: Mapping[str, Any] | None = None, *, max_position: int | None = None) -> float:
    """Hugging Face's ``attention_scaling`` for ``scaling``: the factor on cos and sin.

    1.0 for every type but ``yarn``, where it is ``attention_factor`` if given, else
    ``mscale(factor, mscale) / mscale(factor, mscale_all_dim)`` when both are set, else
    ``mscale(factor)``, with ``mscale(s, m=1) = 0.1 m ln(s) + 1`` for s > 1 (1 otherwise).
    Pass it as ``attention.rope``'s ``scale``.
    """
    kind, p = _rope_type(scaling)
    if kind != "yarn":
        return 1.0
    if p.get("attention_factor") is not None:
        return float(p["attention_factor"])
    factor, _ = _yarn_factor(p, max_position)

    def mscale(s: float, m: float = 1.0) -> float:
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

    if p.get("mscale") and p.get("mscale_all_dim"):
        return float(mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"]))
    return mscale(factor)
