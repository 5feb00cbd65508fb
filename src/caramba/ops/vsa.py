"""vsa.*: vector-symbolic architectures, HRR and MAP, over the last axis.

Hypervectors are the last axis (dimension ``d``); leading axes broadcast like NumPy's. The
``model`` attribute picks the algebra:

**HRR** (holographic reduced representations, Plate 1995, "Holographic reduced
representations", IEEE Trans. Neural Networks 6(3)): real vectors with i.i.d. N(0, 1/d) entries.

- ``bind(a, b)``: circular convolution ``(a ⊛ b)[i] = sum_j a[j] b[(i - j) mod d]``, computed
  with the real FFT: ``irfft(rfft(a) * rfft(b), d)`` (O(d log d); the ``fft.*`` ops).
- ``bind(a, c, unbind=True)``: circular correlation ``(a ⋆ c)[i] = sum_j a[j] c[(i + j) mod d]``
  = ``a* ⊛ c`` with the involution ``a*[i] = a[-i mod d]``, Plate's approximate inverse:
  ``bind(a, bind(a, b), unbind=True) ≈ b`` (plus noise of variance about 1/d per entry).
- ``bundle(x, axis)``: superposition, the sum over ``axis``.

**MAP** (multiply-add-permute, Gayler 1998, "Multiplicative binding, representation operators
and analogy"; bipolar MAP-B vectors in {-1, +1}^d):

- ``bind(a, b) = a * b`` elementwise; self-inverse on bipolar vectors, so ``unbind`` is the same
  product (``a * (a * b) = b`` exactly).
- ``bundle(x, axis) = sign(sum over axis)``; a tie (an even number of items summing to 0)
  gives 0, which adds nothing to a similarity; use an odd count (or a tie-break vector) for a
  strictly bipolar result. Its VJP is 0 (sign is piecewise constant).

Both models:

- ``permute(x, shift)``: the cyclic shift ``ρ^s(x)[i] = x[(i - s) mod d]`` (``numpy.roll``),
  used to protect order (sequences, ``ρ(a) ⊛ b`` differs from ``a ⊛ ρ(b)``);
  ``inverse_permute(x, shift) = ρ^{-s}(x)``.
- ``similarity(a, b)``: cosine ``<a, b> / (|a| |b|)`` over the last axis (0 where a norm is 0),
  shape ``broadcast(a.shape[:-1], b.shape[:-1])``. For bipolar vectors it is the normalized
  Hamming agreement ``1 - 2 hamming / d``. Random vectors have similarity about
  ``N(0, 1/d)``: chance is ``|sim| <~ 3 / sqrt(d)``.

VJPs (``caramba.autodiff.rules.vsa``): with ``y = a ⊛ b``: ``da = b ⋆ ct``, ``db = a ⋆ ct``;
with ``y = a ⋆ c``: ``da = ct ⋆ c``, ``dc = ct ⊛ a``; ``permute`` and ``inverse_permute`` are
each other's transpose; ``bundle`` (HRR) broadcasts the cotangent back over ``axis``.

The resonator network that factorizes a bound product (Frady, Kent, Olshausen & Sommer 2020,
"Resonator networks", Neural Computation 32(12)) is the ``block.vsa.resonator`` asset, built
from these ops (docs/research_ops.md).

Backends: cpu and xla run the ``*_xp`` definitions below; onnx lowers each op in
``caramba.onnx.export_research``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caramba.errors import GraphError
from caramba.ir.attrs import Attr
from caramba.ir.dtypes import FLOATS
from caramba.ir.types import ValueType
from caramba.ops._define import broadcast_shapes, define, norm_axis, require_dtype, same_dtype

MODELS = ("hrr", "map")
MODEL = Attr("model", "str", "hrr", choices=MODELS, doc="hrr (Plate: circular convolution) or map (Gayler: bipolar)")


def _pair(op_id: str, ins: tuple[ValueType, ...]) -> tuple[tuple[int, ...], int]:
    a, b = ins
    same_dtype(op_id, ins)
    require_dtype(op_id, a, FLOATS)
    if a.rank < 1 or b.rank < 1:
        raise GraphError(f"{op_id} needs hypervectors [..., d], got {a} and {b}")
    if a.shape[-1] != b.shape[-1]:
        raise GraphError(f"{op_id} needs one dimension d on the last axis, got {a} and {b}")
    if a.shape[-1] < 1:
        raise GraphError(f"{op_id} needs d >= 1, got {a}")
    lead = broadcast_shapes(a.shape[:-1], b.shape[:-1])
    return lead, a.shape[-1]


def _bind(ins, a):
    lead, d = _pair("vsa.bind", ins)
    return (ValueType(lead + (d,), ins[0].dtype),)


bind = define(
    "vsa.bind", _bind, 2, (MODEL, Attr("unbind", "bool", False, doc="hrr: circular correlation (approximate inverse)")),
    doc="bind two hypervectors [..., d]: hrr circular convolution (unbind: correlation), map elementwise"
    " product; see caramba.ops.vsa.",
)


def _bundle(ins, a):
    x = ins[0]
    require_dtype("vsa.bundle", x, FLOATS)
    if x.rank < 2:
        raise GraphError(f"vsa.bundle needs items [..., n, ..., d] with an item axis besides d, got {x}")
    axis = norm_axis(a["axis"], x.rank)
    if axis == x.rank - 1:
        raise GraphError(f"vsa.bundle axis {a['axis']} is the hypervector axis; bundle over an item axis (e.g. -2)")
    return (ValueType(x.shape[:axis] + x.shape[axis + 1:], x.dtype),)


bundle = define(
    "vsa.bundle", _bundle, 1, (MODEL, Attr("axis", "int", -2, doc="the item axis to superpose")),
    doc="superpose the items along axis: hrr sum, map sign of the sum (0 on ties); see caramba.ops.vsa.",
)


def _permute(op_id: str):
    def infer(ins, a):
        x = ins[0]
        require_dtype(op_id, x, FLOATS)
        if x.rank < 1:
            raise GraphError(f"{op_id} needs hypervectors [..., d], got {x}")
        return (x,)

    return infer


SHIFT = Attr("shift", "int", 1, doc="cyclic shift s: y[i] = x[(i - s) mod d]")
permute = define(
    "vsa.permute", _permute("vsa.permute"), 1, (SHIFT,),
    doc="cyclic shift of the last axis, y[i] = x[(i - shift) mod d] (numpy.roll); see caramba.ops.vsa.",
)
inverse_permute = define(
    "vsa.inverse_permute", _permute("vsa.inverse_permute"), 1, (SHIFT,),
    doc="inverse of vsa.permute: y[i] = x[(i + shift) mod d]; see caramba.ops.vsa.",
)


def _similarity(ins, a):
    lead, _ = _pair("vsa.similarity", ins)
    return (ValueType(lead, ins[0].dtype),)


similarity = define(
    "vsa.similarity", _similarity, 2, (),
    doc="cosine similarity over the last axis, <a, b> / (|a| |b|), 0 where a norm is 0; see caramba.ops.vsa.",
)


# ---- the definitions, for an array module xp (numpy, jax.numpy) ---------------------------------


def bind_xp(a: Any, b: Any, model: str, unbind: bool, xp: Any = np) -> Any:
    if model == "map":
        return a * b
    d = a.shape[-1]
    fa, fb = xp.fft.rfft(a, axis=-1), xp.fft.rfft(b, axis=-1)
    return xp.fft.irfft((xp.conj(fa) if unbind else fa) * fb, n=d, axis=-1).astype(a.dtype)


def bundle_xp(x: Any, model: str, axis: int, xp: Any = np) -> Any:
    s = xp.sum(x, axis=axis)
    return xp.sign(s) if model == "map" else s


def permute_xp(x: Any, shift: int, xp: Any = np) -> Any:
    return xp.roll(x, shift, axis=-1)


def similarity_xp(a: Any, b: Any, xp: Any = np, dot: Any = None) -> Any:
    """``dot``: the last-axis dot products where a backend computed them its own way."""
    if dot is None:
        dot = xp.sum(a * b, axis=-1)
    den = xp.sqrt(xp.sum(a * a, axis=-1) * xp.sum(b * b, axis=-1))
    safe = xp.where(den > 0, den, xp.ones_like(den))
    return xp.where(den > 0, dot / safe, xp.zeros_like(dot))


__all__ = [
    "MODELS", "bind", "bind_xp", "bundle", "bundle_xp", "inverse_permute", "permute", "permute_xp",
    "similarity", "similarity_xp",
]
