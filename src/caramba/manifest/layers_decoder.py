"""Layer lowerings of decoder-only language models (Llama, Mistral, Qwen2/3, Gemma, Gemma 2).

``attention.gqa`` is grouped-query self-attention with separate q/k/v/o projections, rotary
embeddings (Hugging Face ``rope_scaling`` types through ``caramba.ops.attention.rope_inv_freq``),
optional QK-norm, sliding window, logit soft-capping and score scale. ``norm.rms`` gains an
``offset`` (Gemma's ``x_hat * (1 + weight)``), ``embedding.scaled_token`` multiplies the lookup by
a constant (Gemma's ``sqrt(d_model)``) and ``projection.lm_head`` is the output head, own or tied
to the token embedding, with optional final-logit soft-capping (Gemma 2).

Every layer is a composition of IR ops that have VJP rules and run on every backend.
"""

from __future__ import annotations

from math import sqrt
from typing import Any

import numpy as np

from caramba.errors import CarambaError
from caramba.ir.graph import Value
from caramba.manifest.layers import _features, _project
from caramba.manifest.lower import LayerContext, layer
from caramba.ops.attention import rope_attention_scale, rope_inv_freq, rope_tables

RMS_OFFSET_INIT = {0.0: "ones", 1.0: "zeros"}  # the weight that starts as the identity scale


def _scalar(ctx: LayerContext, x: Value, value: float, name: str) -> Value:
    """A scalar constant in x's dtype (rounded to it, as torch rounds a Python float)."""
    return ctx.const(value, x.dtype, name=name)


def _rms(ctx: LayerContext, x: Value, eps: float, offset: float, param: str = "weight",
         name: str | None = None) -> Value:
    """x / sqrt(mean(x^2) + eps) * (offset + <param>) over the last axis, <param> [x.shape[-1]]."""
    offset = float(offset)
    if offset not in RMS_OFFSET_INIT:
        raise CarambaError(f"offset must be 0 or 1, got {offset}")
    g = ctx.param(param, (x.shape[-1],), RMS_OFFSET_INIT[offset])
    if offset:
        scale = param.replace("weight", "scale")
        g = ctx.op("math.add", (g, _scalar(ctx, g, offset, f"{scale}.offset")), name=scale)
    return ctx.op("nn.rms_norm", (x, g), {"eps": eps}, name=name)


@layer("rms_norm_offset")
def rms_norm_offset(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """x / sqrt(mean(x^2) + eps) * (offset + weight) over the last axis.

    ``offset: 0`` is the usual RMSNorm (weight starts at ones); ``offset: 1`` is Gemma's
    ``(1 + weight)`` form (weight starts at zeros), the sum formed in the parameter dtype.
    """
    (x,) = ins
    _features(x, c["d_model"], "d_model")
    if not c["affine"]:
        return ctx.op("nn.rms_norm", (x,), {"eps": c["eps"]})
    return _rms(ctx, x, c["eps"], c["offset"])


@layer("scaled_token_embedding")
def scaled_token_embedding(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """table[ids] * scale; table [vocab_size, d_model]; scale defaults to sqrt(d_model)."""
    (ids,) = ins
    w = ctx.param("weight", (c["vocab_size"], c["d_model"]), "normal", std=c["std"])
    e = ctx.op("nn.embedding", (ids, w), name="lookup")
    scale = c["scale"] if c["scale"] is not None else sqrt(c["d_model"])
    return ctx.op("math.mul", (e, _scalar(ctx, e, scale, "scale")))


def _softcap(ctx: LayerContext, s: Value, cap: float, name: str, out: str | None) -> Value:
    """cap * tanh(s / cap), the soft-capping of Gemma 2 (attention and final logits), as
    transformers writes it; ``out`` names the last node (None: the manifest node's own ID)."""
    if not cap > 0:
        raise CarambaError(f"soft-capping needs a cap > 0, got {cap}")
    t = ctx.op("math.div", (s, _scalar(ctx, s, cap, f"{name}.cap")), name=f"{name}.div")
    t = ctx.op("math.tanh", (t,), name=f"{name}.tanh")
    return ctx.op("math.mul", (t, _scalar(ctx, t, cap, f"{name}.cap")), name=out)


@layer("lm_head")
def lm_head(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """logits = x @ weight, this node's own linear [d_model, vocab_size], or, when ``tied``,
    x @ E^T with E [vocab_size, d_model] the ``weight`` of node ``tied_to`` (the token
    embedding); then ``softcap * tanh(logits / softcap)`` when ``softcap`` is set."""
    (x,) = ins
    d = _features(x, None, "d_model")
    last = None if c["softcap"] is None else "matmul"
    if c["tied"]:
        w = ctx.read(f"{ctx.sibling(c['tied_to'])}.weight")
        if w.ndim != 2 or w.shape[1] != d:
            raise CarambaError(f"tied weight {c['tied_to']}.weight is {w.type}; the input {x.type} needs [*, {d}]")
        if c["vocab_size"] is not None and w.shape[0] != c["vocab_size"]:
            raise CarambaError(f"vocab_size is {c['vocab_size']} but {c['tied_to']}.weight has {w.shape[0]} rows")
        wt = ctx.op("shape.transpose", (w,), name="transpose")
        logits = ctx.op("linalg.matmul", (x, wt), name=last)
    else:
        if c["vocab_size"] is None:
            raise CarambaError("an untied head needs vocab_size", hint="set vocab_size or tied: true")
        logits = ctx.linear(x, c["vocab_size"], "", "normal", std=c["std"], name=last)
    if c["softcap"] is None:
        return logits
    return _softcap(ctx, logits, c["softcap"], "softcap", out=None)


# ---- grouped-query attention ---------------------------------------------------------------


def _keep_mask(t: int, window: int) -> np.ndarray:
    """[t, t] bool: query i sees key j when j <= i and, with a window W > 0, j > i - W
    (W keys: transformers' ``sliding_window_overlay``, ``kv_idx > q_idx - sliding_window``)."""
    i = np.arange(t)[:, None]
    j = np.arange(t)[None, :]
    keep = j <= i
    if window > 0:
        keep &= j > i - window
    return keep


def _rope_attrs(c: dict[str, Any], head_dim: int, seq_len: int) -> dict[str, Any]:
    """attention.rope attrs; ``dynamic`` scaling uses the frequencies transformers uses for
    ``seq_len`` positions (graphs are static)."""
    attrs: dict[str, Any] = {"base": float(c["rope_theta"])}
    scaling = c["rope_scaling"]
    if scaling is None:
        return attrs
    if not isinstance(scaling, dict):
        raise CarambaError(f"rope_scaling must be a mapping (Hugging Face rope_scaling / rope_parameters), got {scaling!r}")
    if float(scaling.get("partial_rotary_factor", 1.0)) != 1.0:
        raise CarambaError(f"partial rotary embeddings are not supported (partial_rotary_factor "
                           f"{scaling['partial_rotary_factor']})")
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    try:
        inv = rope_inv_freq(head_dim, c["rope_theta"], scaling, max_position=c["max_position"], seq_len=seq_len)
        scale = rope_attention_scale(scaling, max_position=c["max_position"])
    except CarambaError as exc:
        raise CarambaError(f"rope_scaling: {exc.message}", hint=exc.hint) from None
    if kind != "default":  # checked above; the base formula needs no table
        attrs["inv_freq"] = tuple(float(f) for f in inv)
    if scale != 1.0:
        attrs["scale"] = float(scale)
    return attrs


def _rope_at_positions(ctx: LayerContext, x: Value, attrs: dict[str, Any], name: str) -> Value:
    """``attention.rope`` of x [B, H, T, hd] at the cache lowering's runtime positions: the cos/sin
    rows of ``rope_tables`` [capacity, hd/2] gathered at ``positions[:, None] + arange(T)`` and
    the same rotate-half arithmetic as the op's kernels (``x1 cos - x2 sin``, ``x2 cos + x1 sin``)."""
    assert ctx.cache is not None
    b, _, t, hd = x.shape
    key = ("rope", t, x.dtype, tuple(sorted((k, v) for k, v in attrs.items())))

    def tables() -> tuple[Value, Value]:
        cos, sin = rope_tables({"offset": 0, **attrs}, ctx.cache.capacity, hd)
        idx = ctx.cache_positions(t)
        rows = []
        for part, table in (("cos", cos), ("sin", sin)):
            tv = ctx.const(table, x.dtype, name=f"rope_{part}_table")
            g = ctx.op("shape.gather", (tv, idx), {"axis": 0}, name=f"rope_{part}")  # [B, T, hd/2]
            rows.append(ctx.op("shape.reshape", (g,), {"shape": (b, 1, t, hd // 2)}, name=f"rope_{part}_rows"))
        return rows[0], rows[1]

    cos, sin = ctx.shared(key, tables)
    x1, x2 = ctx.op("shape.split", (x,), {"axis": -1, "num": 2}, name=f"{name}.halves")
    a = ctx.op("math.sub", (ctx.op("math.mul", (x1, cos), name=f"{name}.x1cos"),
                            ctx.op("math.mul", (x2, sin), name=f"{name}.x2sin")), name=f"{name}.first")
    b2 = ctx.op("math.add", (ctx.op("math.mul", (x2, cos), name=f"{name}.x2cos"),
                             ctx.op("math.mul", (x1, sin), name=f"{name}.x1sin")), name=f"{name}.second")
    return ctx.op("shape.concat", (a, b2), {"axis": -1}, name=name)


@layer("grouped_query_attention")
def grouped_query_attention(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """Causal self-attention with ``heads`` query heads sharing ``kv_heads`` key/value heads.

    x [B, T, D] -> q = x @ q.weight [D, heads*head_dim] (+ q.bias), k and v [D, kv_heads*head_dim],
    split into heads; optional RMSNorm of each q/k head (``qk_norm``); rotary embedding of q and k;
    scores q k^T * scale (``scale`` = query_scalar^-0.5, default head_dim^-0.5), soft-capped
    ``softcap * tanh(s / softcap)`` when set, causal (and within ``window`` keys when > 0),
    softmax, times v; heads merged and projected by o.weight [heads*head_dim, D] (+ o.bias).
    Query head h reads key/value head h // (heads / kv_heads), as transformers' ``repeat_kv``.
    """
    (x,) = ins
    if x.ndim != 3:
        raise CarambaError(f"needs an input [batch, seq, d_model], got {x.type}")
    b, t, _ = x.shape
    d = _features(x, c["d_model"], "d_model")
    h = c["heads"]
    kvh = c["kv_heads"] if c["kv_heads"] is not None else h
    if h <= 0 or kvh <= 0 or h % kvh:
        raise CarambaError(f"{h} query heads do not split into groups over {kvh} key/value heads")
    if c["head_dim"] is None and d % h:
        raise CarambaError(f"d_model {d} does not split into {h} heads", hint="set head_dim")
    hd = c["head_dim"] if c["head_dim"] is not None else d // h
    if hd <= 0 or hd % 2:
        raise CarambaError(f"head_dim must be even and positive for rotary embeddings, got {hd}")
    group = h // kvh
    std, qkv_bias = c["std"], c["qkv_bias"]

    q = _project(ctx, x, h * hd, "q", qkv_bias, std)
    k = _project(ctx, x, kvh * hd, "k", qkv_bias, std)
    v = _project(ctx, x, kvh * hd, "v", qkv_bias, std)
    q = ctx.op("shape.view_as_heads", (q,), {"num_heads": h}, name="q_heads")  # [B, H, T, hd]
    k = ctx.op("shape.view_as_heads", (k,), {"num_heads": kvh}, name="k_heads")  # [B, KV, T, hd]
    v = ctx.op("shape.view_as_heads", (v,), {"num_heads": kvh}, name="v_heads")
    if c["qk_norm"]:
        q = _rms(ctx, q, c["eps"], c["norm_offset"], "q_norm.weight", name="q_norm")  # over head_dim
        k = _rms(ctx, k, c["eps"], c["norm_offset"], "k_norm.weight", name="k_norm")
    cache = ctx.cache
    if c["rope"] and cache is None:
        rope = _rope_attrs(c, hd, t)
        q = ctx.op("attention.rope", (q,), rope, name="q_rope")
        k = ctx.op("attention.rope", (k,), rope, name="k_rope")
    elif c["rope"]:
        scaling = c["rope_scaling"] if isinstance(c["rope_scaling"], dict) else {}
        kind = scaling.get("rope_type") or scaling.get("type")
        if kind == "dynamic" and (c["max_position"] is None or cache.capacity > c["max_position"]):
            raise CarambaError(f"dynamic rope scaling changes its frequencies past max_position "
                               f"{c['max_position']}; a KV cache of capacity {cache.capacity} would mix them",
                               hint=f"use a capacity of at most {c['max_position']}")
        rope = _rope_attrs(c, hd, cache.capacity)
        q = _rope_at_positions(ctx, q, rope, "q_rope")
        k = _rope_at_positions(ctx, k, rope, "k_rope")
    tk = t  # keys attended: this call's, or the whole cache
    if cache is not None:  # decode mode: append this call's keys/values to the resident cache
        k, v = ctx.cache_append("k_cache", k), ctx.cache_append("v_cache", v)
        tk = cache.slots
    # GQA: [B, KV, group, T, hd] queries against [B, KV, 1, Tk, hd] keys/values (broadcast)
    q = ctx.op("shape.reshape", (q,), {"shape": (b, kvh, group, t, hd)}, name="q_groups")
    k = ctx.op("shape.reshape", (k,), {"shape": (b, kvh, 1, tk, hd)}, name="k_groups")
    v = ctx.op("shape.reshape", (v,), {"shape": (b, kvh, 1, tk, hd)}, name="v_groups")

    if c["scale"] is not None and c["query_scalar"] is not None:
        raise CarambaError("give scale or query_scalar, not both")
    scale = c["scale"]
    if scale is None:  # transformers: head_dim**-0.5, Gemma 2 query_pre_attn_scalar**-0.5
        scale = (c["query_scalar"] if c["query_scalar"] is not None else hd) ** -0.5
    window = c["window"]
    if window < 0:
        raise CarambaError(f"window must be >= 0 (0: no window), got {window}")
    mask = None
    if cache is not None:  # [B, 1, 1, T, slots]: causal over absolute positions, and the window
        keep = ctx.cache_keep(t, window)
        mask = ctx.op("shape.reshape", (keep,), {"shape": (b, 1, 1, t, tk)}, name="keep")
    elif window > 0 and window < t:  # a window as long as the sequence keeps every causal key
        mask = ctx.const(_keep_mask(t, window), "bool", name="window")
    if c["softcap"] is None:
        ins_ = (q, k, v) if mask is None else (q, k, v, mask)
        a = ctx.op("attention.sdpa", ins_, {"causal": mask is None, "scale": scale}, name="sdpa")
    else:  # soft-capping sits between the scale and the mask: compose the attention from ops
        kt = ctx.op("shape.transpose", (k,), {"perm": (0, 1, 2, 4, 3)}, name="k_t")
        s = ctx.op("linalg.matmul", (q, kt), name="scores")
        s = ctx.op("math.mul", (s, _scalar(ctx, s, scale, "scale")), name="scaled")
        s = _softcap(ctx, s, c["softcap"], "softcap", out="softcap")
        keep = mask if mask is not None else ctx.const(_keep_mask(t, 0), "bool", name="causal")
        low = _scalar(ctx, s, float(np.finfo(s.dtype.numpy).min), "masked")
        s = ctx.op("math.where", (keep, s, low), name="masked_scores")
        p = ctx.op("nn.softmax", (s,), {"axis": -1}, name="probs")
        a = ctx.op("linalg.matmul", (p, v), name="attend")
    a = ctx.op("shape.reshape", (a,), {"shape": (b, h, t, hd)}, name="heads")
    merged = ctx.op("shape.merge_heads", (a,), name="merge")  # [B, T, H*hd]
    out_std = c["out_std"] if c["out_std"] is not None else std
    if not c["o_bias"]:
        return ctx.linear(merged, d, "o", "normal", std=out_std, name=None)
    y = ctx.linear(merged, d, "o", "normal", std=out_std, name="o.matmul")
    bias = ctx.param("o.bias", (d,), "zeros")
    return ctx.op("math.add", (y, bias))
