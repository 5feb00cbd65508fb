"""Layer lowerings of the predictive-coding layer's parameters and of the energy and memory
blocks, composed of existing IR ops (their math needs no new op; the references are in
docs/research_ops.md):

- ``predictive_coding.parameters``: learnable ``W [k, n]`` (normal, std ``std``) and ``b [n]``
  (zeros), parameters ``weight`` and ``bias``, and the layer's precision ``Pi`` (a scalar
  constant from the config).
- ``energy.boltzmann_distribution``: ``p = softmax(-E / T)`` along ``axis``.
- ``energy.free_energy``: ``F = -T logsumexp(-E / T)`` along ``axis`` (the Helmholtz free energy
  ``-T ln Z``).
- ``energy.langevin_step``: unadjusted Langevin, ``x' = x - lr dE/dx + sqrt(2 lr T) noise``,
  noise ~ normal(0, 1) from caramba's seeded in-graph stream (``random.normal``), keyed by the
  optional int64 ``key`` input, else by the step counter while training and by the constant 0
  while evaluating.
- ``energy.contrastive_phase``: ``dW = <v h^T>_clamped - <v h^T>_free``, ``dv = <v>_clamped -
  <v>_free``, ``dh = <h>_clamped - <h>_free`` (means over the batch axis of each phase).
- ``memory.hopfield_store``: a memory of ``size`` patterns ``X [size, dim]`` held as the
  parameter ``patterns`` (``init: normal`` or ``bipolar`` = sign of a normal draw, fixed), set by
  training or through ``runner.state``.
- ``memory.hopfield_recall``: the modern Hopfield update (Ramsauer et al. 2020, eq. 3) applied
  ``iterations`` times, ``xi' = softmax(beta xi X^T) X`` (rows: ``xi [..., dim]``, ``X [N, dim]``;
  the paper's ``X softmax(beta X^T xi)`` with patterns as columns).
- ``memory.corrupt``: flips the sign of (``mode: flip``) or zeroes (``mode: mask``) each entry
  with probability ``fraction``, from a seeded in-graph Bernoulli stream (keyed like langevin).
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from caramba.errors import CarambaError
from caramba.ir.dtypes import DType
from caramba.ir.graph import Value
from caramba.manifest.lower import LayerContext, layer

SEED_MASK = 0x7FFF_FFFF


def _finite(c: dict[str, Any], key: str, *, positive: bool = True) -> float:
    v = c[key]
    if not (np.isfinite(v) and (v > 0 or (not positive and v >= 0))):
        raise CarambaError(f"{key} must be a finite number {'>' if positive else '>='} 0, got {v}")
    return float(v)


def _float_input(name: str, x: Value, what: str) -> None:
    if not x.dtype.is_float or x.ndim < 1:
        raise CarambaError(f"{name} needs a float input {what}, got {x.type}")


def _key(ctx: LayerContext, ins: list[Value], n: int, name: str) -> Value:
    """The random stream's key: the optional int64 scalar input ``ins[n]``, else the step
    counter while training, else 0."""
    if len(ins) > n:
        k = ins[n]
        if k.dtype is not DType.int64 or k.shape != ():
            raise CarambaError(f"{name}: key must be an int64 scalar, got {k.type}")
        return k
    return ctx.step_key() if ctx.training else ctx.const(0, DType.int64, name="key")


def _scale(ctx: LayerContext, c: dict[str, Any], key: str, learn: str, dtype: DType, *, positive: bool = True) -> Value:
    """The scalar ``c[key]`` as a constant, or, when ``c[learn]``, as the learnable
    ``c[key] * exp(raw)`` with ``raw`` the zero-initialized parameter ``log_<key>`` (a run starts
    at the configured value whatever the seed)."""
    v = _finite(c, key, positive=positive)
    if not c.get(learn, False):
        return ctx.const(v, dtype, name=key)
    if v <= 0:
        raise CarambaError(f"{learn}: a learnable {key} must start > 0, got {v}")
    raw = ctx.param(f"log_{key}", (), "zeros", dtype=dtype)
    return ctx.op("math.mul", (ctx.op("math.exp", (raw,), name=f"exp_{key}"), ctx.const(v, dtype, name=f"{key}0")),
                  name=key)


def _seed(ctx: LayerContext, seed: int) -> int:
    return zlib.crc32(f"{ctx.prefix}:{seed}".encode()) & SEED_MASK


@layer("predictive_coding_parameters")
def pc_parameters(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> tuple[Value, Value, Value]:
    if ins:
        raise CarambaError(f"predictive_coding.parameters takes no inputs, got {len(ins)}")
    std = _finite(c, "std", positive=False)
    w = ctx.param("weight", (c["above"], c["below"]), "normal", std=std)
    return w, ctx.param("bias", (c["below"],), "zeros"), ctx.const(_finite(c, "precision"), name="precision")


@layer("energy_boltzmann_distribution")
def boltzmann(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    (e,) = ins
    _float_input("energy.boltzmann_distribution", e, "E [..., states]")
    t = _scale(ctx, c, "temperature", "learn_temperature", e.dtype)
    z = ctx.op("math.neg", (ctx.op("math.div", (e, t), name="scaled"),), name="logits")
    return ctx.op("nn.softmax", (z,), {"axis": c["axis"]}, name=None)


@layer("energy_free_energy")
def free_energy(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    (e,) = ins
    _float_input("energy.free_energy", e, "E [..., states]")
    t = _scale(ctx, c, "temperature", "learn_temperature", e.dtype)
    z = ctx.op("math.neg", (ctx.op("math.div", (e, t), name="scaled"),), name="logits")
    lse = ctx.op("reduce.logsumexp", (z,), {"axes": (c["axis"],)}, name="log_z")
    return ctx.op("math.neg", (ctx.op("math.mul", (lse, t), name="t_log_z"),), name=None)


@layer("energy_langevin_step")
def langevin_step(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    if len(ins) not in (2, 3):
        raise CarambaError(f"energy.langevin_step takes x, grad and an optional key, got {len(ins)} inputs")
    x, grad = ins[0], ins[1]
    _float_input("energy.langevin_step", x, "x [...]")
    if grad.type != x.type:
        raise CarambaError(f"energy.langevin_step: grad (dE/dx) must be {x.type} like x, got {grad.type}")
    lr = _finite(c, "lr")
    d = x.dtype
    step = ctx.op("math.mul", (grad, ctx.const(lr, d, name="lr")), name="step")
    if _finite(c, "temperature", positive=False) == 0.0 and not c.get("learn_temperature", False):
        return ctx.op("math.sub", (x, step), name=None)  # gradient descent: no noise
    t = _scale(ctx, c, "temperature", "learn_temperature", d, positive=False)
    drift = ctx.op("math.sub", (x, step), name="drift")
    noise = ctx.op("random.normal", (_key(ctx, ins, 2, "energy.langevin_step"),),
                   {"shape": x.shape, "seed": _seed(ctx, c["seed"]), "dtype": d}, name="noise")
    std = ctx.op("math.sqrt", (ctx.op("math.mul", (t, ctx.const(2.0 * lr, d, name="two_lr")), name="variance"),),
                 name="noise_scale")
    return ctx.op("math.add", (drift, ctx.op("math.mul", (noise, std), name="diffusion")), name=None)


@layer("energy_contrastive_phase")
def contrastive_phase(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> tuple[Value, Value, Value]:
    v_pos, h_pos, v_neg, h_neg = ins
    for name, x in (("v_clamped", v_pos), ("h_clamped", h_pos), ("v_free", v_neg), ("h_free", h_neg)):
        if x.ndim != 2 or not x.dtype.is_float:
            raise CarambaError(f"energy.contrastive_phase: {name} must be a float [batch, units], got {x.type}")
    if v_pos.shape[0] != h_pos.shape[0] or v_neg.shape[0] != h_neg.shape[0]:
        raise CarambaError("energy.contrastive_phase: each phase's v and h need one batch size, got "
                           f"{v_pos.type}, {h_pos.type} (clamped) and {v_neg.type}, {h_neg.type} (free)")
    if v_pos.shape[1] != v_neg.shape[1] or h_pos.shape[1] != h_neg.shape[1]:
        raise CarambaError("energy.contrastive_phase: the phases need the same visible and hidden units, got "
                           f"{v_pos.type}, {h_pos.type} (clamped) and {v_neg.type}, {h_neg.type} (free)")

    def stats(v: Value, h: Value, tag: str) -> tuple[Value, Value, Value]:
        vt = ctx.op("shape.transpose", (v,), {"perm": (1, 0)}, name=f"{tag}.v_t")
        vh = ctx.op("linalg.matmul", (vt, h), name=f"{tag}.vh")
        vh = ctx.op("math.mul", (vh, ctx.const(1.0 / v.shape[0], v.dtype, name=f"{tag}.inv_batch")), name=f"{tag}.vh_mean")
        return (vh, ctx.op("reduce.mean", (v,), {"axes": (0,)}, name=f"{tag}.v_mean"),
                ctx.op("reduce.mean", (h,), {"axes": (0,)}, name=f"{tag}.h_mean"))

    pos, neg = stats(v_pos, h_pos, "clamped"), stats(v_neg, h_neg, "free")
    return tuple(ctx.op("math.sub", (p, q), name=n) for p, q, n in zip(pos, neg, ("dW", "dv", "dh"), strict=True))


@layer("memory_hopfield_store")
def hopfield_store(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    if ins:
        raise CarambaError(f"memory.hopfield_store takes no inputs, got {len(ins)}")
    x = ctx.param("patterns", (c["size"], c["dim"]), "normal", std=1.0)
    if c["init"] == "normal":
        return x
    # sign(w) as the MAP bundle of one item (a VJP of 0, like vsa.codebook): fixed bipolar patterns
    one = ctx.op("shape.expand_dims", (x,), {"axes": (-2,)}, name="item")
    return ctx.op("vsa.bundle", (one,), {"model": "map", "axis": -2}, name=None)


@layer("memory_hopfield_recall")
def hopfield_recall(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    xi, x = ins
    _float_input("memory.hopfield_recall", xi, "xi [..., dim]")
    if x.ndim != 2 or x.shape[1] != xi.shape[-1] or x.dtype != xi.dtype:
        raise CarambaError(f"memory.hopfield_recall: patterns must be [N, dim] = [N, {xi.shape[-1]}] of xi's dtype "
                           f"{xi.dtype}, got {x.type}")
    b = _scale(ctx, c, "beta", "learn_beta", xi.dtype)
    xt = ctx.op("shape.transpose", (x,), {"perm": (1, 0)}, name="patterns_t")
    n = c["iterations"]
    for i in range(n):
        s = ctx.op("linalg.matmul", (xi, xt), name=f"scores_{i}")
        p = ctx.op("nn.softmax", (ctx.op("math.mul", (s, b), name=f"logits_{i}"),), {"axis": -1}, name=f"attention_{i}")
        xi = ctx.op("linalg.matmul", (p, x), name=None if i == n - 1 else f"xi_{i + 1}")
    return xi


@layer("memory_corrupt")
def corrupt(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> Value:
    if len(ins) not in (1, 2):
        raise CarambaError(f"memory.corrupt takes x and an optional key, got {len(ins)} inputs")
    x = ins[0]
    _float_input("memory.corrupt", x, "x [...]")
    frac = c["fraction"]
    if not (np.isfinite(frac) and 0.0 <= frac <= 1.0):
        raise CarambaError(f"fraction must be in [0, 1], got {frac}")
    hit = ctx.op("random.bernoulli", (_key(ctx, ins, 1, "memory.corrupt"),),
                 {"shape": x.shape, "seed": _seed(ctx, c["seed"]), "p": float(frac)}, name="hit")
    other = (ctx.op("math.neg", (x,), name="flipped") if c["mode"] == "flip"
             else ctx.op("math.mul", (x, ctx.const(0.0, x.dtype, name="zero")), name="masked"))
    return ctx.op("math.where", (hit, other, x), name=None)


@layer("energy_rbm_phases")
def rbm_phases(ctx: LayerContext, ins: list[Value], c: dict[str, Any]) -> tuple[Value, Value, Value, Value]:
    """A restricted Boltzmann machine ``E(v, h) = -v W h - a.v - b.h`` (parameters ``weight
    [visible, hidden]``, ``visible_bias``, ``hidden_bias``) and its two phases for CD-k (Hinton
    2002): clamped ``(v, p(h | v))``; free: ``k`` Gibbs steps from the data, ``h ~ p(h | v)``,
    ``v = p(v | h)`` (mean field), ending with ``(v_k, p(h | v_k))``. Bernoulli draws come from
    seeded in-graph streams keyed by the step counter while training and 0 while evaluating."""
    (v,) = ins
    if v.ndim != 2 or not v.dtype.is_float:
        raise CarambaError(f"energy.rbm_phases needs a float input v [batch, visible], got {v.type}")
    nv, nh, d = v.shape[1], c["hidden"], v.dtype
    if c["visible"] != nv:
        raise CarambaError(f"energy.rbm_phases: visible is {c['visible']} but v has {nv} units ({v.type})")
    w = ctx.param("weight", (nv, nh), "normal", std=_finite(c, "std", positive=False))
    a = ctx.param("visible_bias", (nv,), "zeros")
    b = ctx.param("hidden_bias", (nh,), "zeros")
    wt = ctx.op("shape.transpose", (w,), {"perm": (1, 0)}, name="weight_t")
    key = _key(ctx, [], 0, "energy.rbm_phases")

    def hidden(x: Value, tag: str) -> Value:
        pre = ctx.op("math.add", (ctx.op("linalg.matmul", (x, w), name=f"{tag}.vw"), b), name=f"{tag}.h_pre")
        return ctx.op("activation.sigmoid", (pre,), name=f"{tag}.p_h")

    h0 = hidden(v, "clamped")
    vk, hk = v, h0
    for i in range(c["k"]):
        u = ctx.op("random.uniform", (key,), {"shape": (v.shape[0], nh), "seed": _seed(ctx, c["seed"] + i), "dtype": d},
                   name=f"gibbs_{i}.u")
        hs = ctx.op("math.cast", (ctx.op("math.less", (u, hk), name=f"gibbs_{i}.fire"),), {"dtype": d},
                    name=f"gibbs_{i}.h")
        pre = ctx.op("math.add", (ctx.op("linalg.matmul", (hs, wt), name=f"gibbs_{i}.hw"), a), name=f"gibbs_{i}.v_pre")
        vk = ctx.op("activation.sigmoid", (pre,), name=f"gibbs_{i}.v")
        hk = hidden(vk, f"gibbs_{i}")
    return v, h0, vk, hk
