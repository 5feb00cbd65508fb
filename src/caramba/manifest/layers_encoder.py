"""Encoder layer lowerings (BERT): self-attention with separate q, k, v and a key padding mask.

Registered by the import at the end of ``caramba.manifest.layers``; the operation asset is
``caramba/assets/operation/attention/multihead.yml``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caramba.errors import CarambaError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Value
from caramba.manifest.lower import LayerContext, layer


def _dense(ctx: LayerContext, x: Value, d_out: int, name: str, bias: bool, std: float) -> Value:
    """The linear ``<node>.<name>`` (ctx.linear: LoRA applies when targeted), plus a zero-init bias."""
    y = ctx.linear(x, d_out, name, "normal", std=std, name=f"{name}.matmul")
    if not bias:
        return y
    return ctx.op("math.add", (y, ctx.param(f"{name}.bias", (d_out,), "zeros")), name=f"{name}.add")


def _additive_mask(ctx: LayerContext, mask: Value, x: Value) -> Value:
    """[B, Tk] keep-mask (nonzero keeps) -> [B, 1, 1, Tk] in x's dtype: 0 kept, finfo(dtype).min padded.

    Hugging Face's eager attention adds ``torch.finfo(dtype).min`` (not -inf) to padded scores, so a
    row whose keys are all padded averages them uniformly instead of giving NaN; this matches it.
    """
    b, t = x.shape[0], x.shape[1]
    if mask.ndim != 2 or mask.shape != (b, t):
        raise CarambaError(f"the padding mask must be [batch, seq] = [{b}, {t}], got {mask.type}")
    zero = ctx.const(False if mask.dtype is DType.bool else 0, mask.dtype, name="mask.zero")
    keep = ctx.op("math.not_equal", (mask, zero), name="mask.keep")
    keep = ctx.op("shape.reshape", (keep,), {"shape": (b, 1, 1, t)}, name="mask.reshape")
    dt = x.dtype
    lowest = float(np.finfo(dt.numpy).min)
    kept, padded = ctx.const(0.0, dt, name="mask.kept"), ctx.const(lowest, dt, name="mask.padded")
    return ctx.op("math.where", (keep, kept, padded), name="mask.additive")


@layer("multihead_self_attention")
def multihead_self_attention(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """softmax(q k^T * scale + mask) v over heads, with q, k, v = x @ W_{q,k,v} (+ b) and out [D, D].

    ``mask`` (optional second input) is a [batch, seq] key padding mask, nonzero keeps; the
    scale defaults to head_dim ** -0.5 (Hugging Face's ``scaling``).
    """
    x = ins[0]
    if x.ndim != 3:
        raise CarambaError(f"needs an input [batch, seq, d_model], got {x.type}")
    d = x.shape[-1]
    if c["d_model"] is not None and c["d_model"] != d:
        raise CarambaError(f"d_model is {c['d_model']} but the input {x.type} has {d}", hint=f"set d_model: {d} or leave it out")
    h = c["heads"]
    if h <= 0 or d % h:
        raise CarambaError(f"d_model {d} does not split into {h} heads")
    std, bias = c["std"], c["bias"]
    heads = [ctx.op("shape.view_as_heads", (_dense(ctx, x, d, n, bias, std),), {"num_heads": h}, name=f"{n}_heads")
             for n in "qkv"]
    if len(ins) == 2:
        heads.append(_additive_mask(ctx, ins[1], x))
    scale = c["scale"] if c["scale"] is not None else (d // h) ** -0.5
    a = ctx.op("attention.sdpa", heads, {"causal": c["causal"], "scale": scale}, name="sdpa")
    merged = ctx.op("shape.merge_heads", (a,), name="merge")
    out_std = c["out_std"] if c["out_std"] is not None else std
    if not bias:
        return ctx.linear(merged, d, "out", "normal", std=out_std, name=None)
    y = ctx.linear(merged, d, "out", "normal", std=out_std, name="out.matmul")
    return ctx.op("math.add", (y, ctx.param("out.bias", (d,), "zeros")))
