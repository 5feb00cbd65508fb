"""Layer lowerings: manifest ops that own parameters or are built from several IR ops.

Each function takes the LayerContext, the input values and the node's resolved config (already
checked against the op's schema in ``caramba/assets/operation/``) and returns the output
value(s). Parameters are declared with ``ctx.param`` (state ``<node id>.<name>``); the last
IR node is added with ``name=None`` so it carries the manifest node's ID.
"""

from __future__ import annotations

import zlib
from math import prod, sqrt
from typing import Any

from caramba.errors import CarambaError
from caramba.ir.graph import Value
from caramba.manifest.lower import LayerContext, layer


def _features(x: Value, given: int | None, what: str, axis: int = -1) -> int:
    if x.ndim == 0:
        raise CarambaError(f"needs an input with a {what} axis, got a scalar")
    n = x.shape[axis]
    if given is not None and given != n:
        raise CarambaError(f"{what} is {given} but the input {x.type} has {n} along axis {axis}",
                           hint=f"set {what}: {n} or leave it out (it is inferred)")
    return n


@layer("linear")
def linear(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """y = x @ weight + bias; weight [in, out] (plus a LoRA branch when ``model.lora`` targets it)."""
    (x,) = ins
    fan_in = _features(x, c["in_features"], "in_features")
    init = c["init"]
    bound = 1.0 / sqrt(fan_in) if fan_in > 0 else 0.0  # no features: ctx.param refuses the shape
    if not c["bias"]:
        return ctx.linear(x, c["out_features"], "", init, std=c["std"], bound=bound, name=None)
    y = ctx.linear(x, c["out_features"], "", init, std=c["std"], bound=bound, name="matmul")
    b = ctx.param("bias", (c["out_features"],), "zeros" if init == "normal" else init, bound=bound)
    return ctx.op("math.add", (y, b))


@layer("tied_linear")
def tied_linear(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """y = x @ weight^T with the weight of another node (tied input/output embeddings)."""
    (x,) = ins
    w = ctx.read(f"{ctx.sibling(c['tied_to'])}.{c['param']}")
    if w.ndim != 2 or w.shape[1] != x.shape[-1]:
        raise CarambaError(f"tied weight {c['tied_to']}.{c['param']} is {w.type}; the input {x.type} needs [*, {x.shape[-1]}]")
    wt = ctx.op("shape.transpose", (w,), name="transpose")
    return ctx.op("linalg.matmul", (x, wt))


@layer("token_embedding")
def token_embedding(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """table[ids]; table [vocab_size, d_model]."""
    (ids,) = ins
    w = ctx.param("weight", (c["vocab_size"], c["d_model"]), "normal", std=c["std"])
    return ctx.op("nn.embedding", (ids, w))


@layer("position_embedding")
def position_embedding(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """Learned absolute positions: the first T rows of table [context, d_model] for an input [B, T, ...].
    With a KV cache: the rows at each token's position, [B, T, d_model]."""
    (x,) = ins
    if x.ndim < 2:
        raise CarambaError(f"needs an input [batch, seq, ...], got {x.type}")
    t = x.shape[1]
    if t > c["context"]:
        raise CarambaError(f"sequence length {t} is longer than context {c['context']}")
    w = ctx.param("weight", (c["context"], c["d_model"]), "normal", std=c["std"])
    if ctx.cache is not None:
        if ctx.cache.capacity > c["context"]:
            raise CarambaError(f"a cache of capacity {ctx.cache.capacity} needs positions past the {c['context']} "
                               "rows of the position table", hint=f"use a capacity of at most {c['context']}")
        return ctx.op("shape.gather", (w, ctx.cache_positions(t)), {"axis": 0})
    return ctx.op("shape.slice", (w,), {"starts": (0,), "ends": (t,), "axes": (0,)})


@layer("layer_norm")
def layer_norm(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    (x,) = ins
    d = _features(x, c["d_model"], "d_model")
    if not c["affine"]:
        return ctx.op("nn.layer_norm", (x,), {"eps": c["eps"]})
    g = ctx.param("weight", (d,), "ones")
    b = ctx.param("bias", (d,), "zeros")
    return ctx.op("nn.layer_norm", (x, g, b), {"eps": c["eps"]})


def _project(ctx: LayerContext, x: Value, d_out: int, name: str, bias: bool, std: float) -> Value:
    """The linear ``<node>.<name>``: x @ weight [in, d_out] (+ bias), N(0, std) weights, zero bias;
    a LoRA branch when ``model.lora`` targets it."""
    y = ctx.linear(x, d_out, name, "normal", std=std, name=f"{name}.matmul")
    if bias:
        b = ctx.param(f"{name}.bias", (d_out,), "zeros")
        y = ctx.op("math.add", (y, b), name=f"{name}.add")
    return y


@layer("multihead_attention")
def multihead_attention(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """Multi-head scaled dot-product attention with its projections.

    One input [B, T, D]: self-attention with a fused qkv projection [D, 3D]. Two inputs
    (x, context): queries from x, keys and values from context ([D, 2D] projection).
    Output projection [D, D]. ``causal`` masks future positions. The projections are the
    linears ``<node>.qkv`` (or ``<node>.q`` and ``<node>.kv``) and ``<node>.out``.
    """
    x = ins[0]
    if x.ndim != 3:
        raise CarambaError(f"needs an input [batch, seq, d_model], got {x.type}")
    d = _features(x, c["d_model"], "d_model")
    h = c["heads"]
    if h <= 0 or d % h:
        raise CarambaError(f"d_model {d} does not split into {h} heads")
    std, bias = c["std"], c["bias"]
    if len(ins) == 1:
        qkv = _project(ctx, x, 3 * d, "qkv", bias, std)
        q, k, v = ctx.op("shape.split", (qkv,), {"axis": -1, "num": 3}, name="split")
    else:
        ctx_v = ins[1]
        if ctx_v.ndim != 3 or ctx_v.shape[-1] != d or ctx_v.shape[0] != x.shape[0]:
            raise CarambaError(f"context must be [batch, seq, {d}] like the input, got {ctx_v.type}")
        q = _project(ctx, x, d, "q", bias, std)
        kv = _project(ctx, ctx_v, 2 * d, "kv", bias, std)
        k, v = ctx.op("shape.split", (kv,), {"axis": -1, "num": 2}, name="split")
    heads = [ctx.op("shape.view_as_heads", (t,), {"num_heads": h}, name=f"{n}_heads") for n, t in zip("qkv", (q, k, v))]
    if ctx.cache is not None:  # decode mode: attend over the resident keys/values, up to each position
        if len(ins) != 1 or not c["causal"]:
            raise CarambaError("a KV cache needs causal self-attention (one input, causal: true)")
        keys, values = ctx.cache_append("k_cache", heads[1]), ctx.cache_append("v_cache", heads[2])
        keep = ctx.op("shape.expand_dims", (ctx.cache_keep(x.shape[1]),), {"axes": (1,)}, name="keep")  # [B, 1, T, slots]
        a = ctx.op("attention.sdpa", (heads[0], keys, values, keep), {"causal": False, "scale": c["scale"]}, name="sdpa")
    else:
        a = ctx.op("attention.sdpa", heads, {"causal": c["causal"], "scale": c["scale"]}, name="sdpa")
    merged = ctx.op("shape.merge_heads", (a,), name="merge")
    out_std = c["out_std"] if c["out_std"] is not None else std
    if not bias:
        return ctx.linear(merged, d, "out", "normal", std=out_std, name=None)
    y = ctx.linear(merged, d, "out", "normal", std=out_std, name="out.matmul")
    b = ctx.param("out.bias", (d,), "zeros")
    return ctx.op("math.add", (y, b))


def _conv(nd: int):
    def lower(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
        (x,) = ins
        if x.ndim != nd + 2:
            raise CarambaError(f"needs an input [batch, channels, {'length' if nd == 1 else 'height, width'}], got {x.type}")
        cin = _features(x, c["in_channels"], "in_channels", axis=1)
        kernel = list(c["kernel"]) * (nd if len(c["kernel"]) == 1 else 1)
        if len(kernel) != nd:
            raise CarambaError(f"kernel needs {nd} sizes, got {c['kernel']}")
        g = c["groups"]
        if g <= 0 or cin % g or c["out_channels"] % g:
            raise CarambaError(f"{cin} input and {c['out_channels']} output channels do not split into {g} groups")
        fan_in = cin // g * prod(kernel)
        bound = 1.0 / sqrt(fan_in)
        w = ctx.param("weight", (c["out_channels"], cin // g, *kernel), "uniform", bound=bound)
        attrs = {"stride": c["stride"], "padding": c["padding"], "dilation": c["dilation"], "groups": g}
        args = [x, w]
        if c["bias"]:
            args.append(ctx.param("bias", (c["out_channels"],), "uniform", bound=bound))
        return ctx.op(f"nn.conv{nd}d", args, attrs)

    return lower


layer("conv1d")(_conv(1))
layer("conv2d")(_conv(2))


def _pool1d(op: str):
    def lower(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
        (x,) = ins
        if x.ndim != 3:
            raise CarambaError(f"needs an input [batch, channels, length], got {x.type}")
        n, ch, length = x.shape
        x4 = ctx.op("shape.reshape", (x,), {"shape": (n, ch, 1, length)}, name="to2d")
        stride = c["stride"] if c["stride"] is not None else c["kernel"]
        p = ctx.op(op, (x4,), {"kernel": (1, c["kernel"]), "stride": (1, stride), "padding": (0, c["padding"])}, name="pool")
        return ctx.op("shape.reshape", (p,), {"shape": (n, ch, p.shape[-1])})

    return lower


layer("max_pool1d")(_pool1d("nn.max_pool2d"))
layer("avg_pool1d")(_pool1d("nn.avg_pool2d"))


@layer("global_avg_pool")
def global_avg_pool(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """Mean over every axis after the channel axis: [N, C, ...] -> [N, C]."""
    (x,) = ins
    if x.ndim < 3:
        raise CarambaError(f"needs an input [batch, channels, ...spatial], got {x.type}")
    return ctx.op("reduce.mean", (x,), {"axes": tuple(range(2, x.ndim))})


@layer("flatten")
def flatten(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """Merge the axes from ``start_axis`` on: [N, C, H, W] -> [N, C*H*W]."""
    (x,) = ins
    s = c["start_axis"]
    if not 0 <= s < max(x.ndim, 1):
        raise CarambaError(f"start_axis {s} is out of range for {x.type}")
    return ctx.op("shape.reshape", (x,), {"shape": (*x.shape[:s], prod(x.shape[s:]))})


@layer("dropout")
def dropout(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    """Training: zero elements with probability ``rate`` (a fresh mask each step). Evaluation: identity."""
    (x,) = ins
    if not 0.0 <= c["rate"] < 1.0:
        raise CarambaError(f"rate must be in [0, 1), got {c['rate']}")
    if not ctx.training or c["rate"] == 0.0:
        return x
    seed = zlib.crc32(ctx.prefix.encode()) & 0x7FFFFFFF  # distinct masks per layer, stable across runs
    return ctx.op("nn.dropout", (x, ctx.step_key()), {"rate": c["rate"], "seed": seed})


from caramba.manifest import layers_active_inference as _layers_active_inference  # noqa: E402, F401  (agent block)
from caramba.manifest import layers_causal_discovery as _layers_causal_discovery  # noqa: E402, F401  (NOTEARS)
from caramba.manifest import layers_decoder as _layers_decoder  # noqa: E402, F401  (decoder LM layers)
from caramba.manifest import layers_diffusion as _layers_diffusion  # noqa: E402, F401  (diffusion.noise)
from caramba.manifest import layers_encoder as _layers_encoder  # noqa: E402, F401  (BERT-style attention with a padding mask)
from caramba.manifest import layers_energy as _layers_energy  # noqa: E402, F401  (predictive_coding, energy, memory)
from caramba.manifest import layers_onehot as _layers_onehot  # noqa: E402, F401  (nn.one_hot)
from caramba.manifest import layers_research as _layers_research  # noqa: E402, F401  (hawkes.*, vsa.* layers)
from caramba.manifest import layers_resonator as _layers_resonator  # noqa: E402, F401  (vsa resonator restarts)
