"""Fine-tuning controls of a manifest model: ``model.freeze`` and ``model.lora``.

LoRA (Hu et al. 2021, as in PEFT) adds a low-rank branch to a linear ``y = x @ W (+ b)``
with ``W`` [in, out] (caramba's layout)::

    y = x @ W (+ b) + scale * ((drop(x) @ A) @ B),    scale = alpha / rank

``A`` [in, rank] starts like PEFT's default (``kaiming_uniform_(a=sqrt(5))`` on its
[rank, in] ``lora_A`` weight, i.e. uniform(+-1/sqrt(in))), ``B`` [rank, out] starts at zeros,
so a model with adapters computes exactly what the base model does at step 0. The adapters of
the linear ``<linear>`` (its parameter prefix, e.g. ``gpt.h_0.attn.qkv``) are the parameters
``<linear>.lora_a`` and ``<linear>.lora_b``; ``merge`` folds them into ``<linear>.weight``.

This module is the one place with the LoRA math and names: the lowering
(``LayerContext.linear``) builds the branch with ``branch``, a run freezes what ``frozen``
says, and exporters call ``merge``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from math import sqrt
from typing import TYPE_CHECKING

import numpy as np

from caramba.errors import CarambaError, did_you_mean

if TYPE_CHECKING:
    from caramba.ir.graph import Value
    from caramba.manifest.loader import Document
    from caramba.manifest.lower import LayerContext
    from caramba.manifest.schema import LoraSpec, ModelSpec

A, B = "lora_a", "lora_b"  # parameter names under the linear's prefix


def scale(lora: "LoraSpec") -> float:
    """``alpha / rank`` (``alpha`` defaults to ``rank``: scale 1)."""
    return (lora.alpha if lora.alpha is not None else float(lora.rank)) / lora.rank


def adapter_names(linear: str) -> tuple[str, str]:
    """``(<linear>.lora_a, <linear>.lora_b)``."""
    return f"{linear}.{A}", f"{linear}.{B}"


def is_adapter(param: str) -> bool:
    """Whether ``param`` is a LoRA adapter (``*.lora_a`` / ``*.lora_b``)."""
    return param.rsplit(".", 1)[-1] in (A, B)


def targets(lora: "LoraSpec | None", linear: str) -> bool:
    """Whether ``lora.targets`` (fnmatch globs) names the linear ``linear``."""
    return lora is not None and any(fnmatchcase(linear, p) for p in lora.targets)


def branch(ctx: "LayerContext", x: "Value", linear: str, d_out: int, lora: "LoraSpec") -> "Value":
    """``scale * ((drop(x) @ A) @ B)`` for the linear ``<ctx.prefix>.<linear>`` (or the layer's own
    linear when ``linear`` is ``""``); declares ``A`` and ``B`` as parameters of that linear."""
    import zlib

    pre = f"{linear}." if linear else ""
    d_in = x.shape[-1]
    a = ctx.param(f"{pre}{A}", (d_in, lora.rank), "uniform", bound=1.0 / sqrt(d_in))
    b = ctx.param(f"{pre}{B}", (lora.rank, d_out), "zeros")
    if ctx.training and lora.dropout > 0.0:  # like the dropout layer: a fresh mask per step, per linear
        full = f"{ctx.prefix}.{linear}" if linear else ctx.prefix
        seed = zlib.crc32(f"{full}.{A}".encode()) & 0x7FFFFFFF
        x = ctx.op("nn.dropout", (x, ctx.step_key()), {"rate": lora.dropout, "seed": seed}, name=f"{pre}lora_dropout")
    h = ctx.op("linalg.matmul", (x, a), name=f"{pre}{A}.matmul")
    h = ctx.op("linalg.matmul", (h, b), name=f"{pre}{B}.matmul")
    return ctx.op("math.mul", (h, ctx.const(scale(lora), x.dtype, name=f"{pre}lora_scale")), name=f"{pre}lora.mul")


def frozen(params: Iterable[str], model: "ModelSpec | None") -> set[str]:
    """The parameters a run does not train: those a ``model.freeze`` glob matches and, with
    ``model.lora.freeze_base`` (the default), every parameter that is not a LoRA adapter."""
    if model is None:
        return set()
    base = model.lora is not None and model.lora.freeze_base
    return {p for p in params if (base and not is_adapter(p)) or any(fnmatchcase(p, g) for g in model.freeze)}


def check(model: "ModelSpec | None", params: Iterable[str], linears: Iterable[str], doc: "Document", *,
          training: bool = False) -> None:
    """Every ``model.freeze`` glob matches a parameter and every ``model.lora.targets`` glob a
    linear of the lowered model; with ``training``, something is left to train. Raises a
    ManifestError at the offending line."""
    if model is None:
        return
    params, linears = list(params), list(linears)
    for i, pat in enumerate(model.freeze):
        if not any(fnmatchcase(p, pat) for p in params):
            raise doc.error(("model", "freeze", i), f"freeze pattern '{pat}' matches no parameter of the model; "
                            f"{_names(pat, params, 'parameters')}")
    if model.lora is not None:
        for i, pat in enumerate(model.lora.targets):
            if not any(fnmatchcase(n, pat) for n in linears):
                what = _names(pat, linears, "linears") if linears else "the model has no linear a LoRA adapter fits"
                raise doc.error(("model", "lora", "targets", i), f"LoRA target '{pat}' matches no linear of the model "
                                f"(a linear is named by its weight's prefix: gpt.h_0.attn.qkv for "
                                f"gpt.h_0.attn.qkv.weight); {what}")
    if training and params and frozen(params, model) >= set(params):
        more = " (its globs match the LoRA adapters <linear>.lora_a and <linear>.lora_b too)" if model.lora else ""
        raise doc.error(("model", "freeze"), f"model.freeze leaves no parameter to train{more}",
                        hint="freeze fewer parameters, or add model.lora")


def _names(pattern: str, names: list[str], what: str) -> str:
    hint = did_you_mean(pattern, names)
    return hint if hint.startswith("did you mean") else f"{what}: {', '.join(sorted(names)[:40])}" + (
        f" and {len(names) - 40} more" if len(names) > 40 else "")


def merge(params: Mapping[str, np.ndarray], lora: "LoraSpec") -> dict[str, np.ndarray]:
    """``params`` with every adapter folded into its base weight, ``W + scale * A @ B``
    (computed in float64, stored in W's dtype), and the ``*.lora_a`` / ``*.lora_b`` entries
    removed. Other entries are returned as they are (the same arrays)."""
    out = {k: v for k, v in params.items() if not is_adapter(k)}
    s = scale(lora)
    for key in params:
        if not key.endswith(f".{A}"):
            if key.endswith(f".{B}") and key[: -len(B)] + A not in params:
                raise CarambaError(f"LoRA adapter '{key}' has no '{key[: -len(B)] + A}'")
            continue
        linear = key[: -len(A) - 1]
        a_name, b_name = adapter_names(linear)
        w_name = f"{linear}.weight"
        if b_name not in params or w_name not in params:
            raise CarambaError(f"LoRA adapter '{a_name}' needs '{b_name}' and the base weight '{w_name}'")
        w, a, b = (np.asarray(params[n]) for n in (w_name, a_name, b_name))
        if a.ndim != 2 or b.ndim != 2 or w.shape != (a.shape[0], b.shape[1]) or a.shape[1] != b.shape[0]:
            raise CarambaError(f"LoRA adapter of '{linear}' does not fit its weight: {w_name} {list(w.shape)}, "
                               f"{a_name} {list(a.shape)}, {b_name} {list(b.shape)}")
        merged = w.astype(np.float64) + s * (a.astype(np.float64) @ b.astype(np.float64))
        out[w_name] = merged.astype(w.dtype)
    return out


__all__ = ["A", "B", "adapter_names", "branch", "check", "frozen", "is_adapter", "merge", "scale", "targets"]
