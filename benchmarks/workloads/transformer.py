"""One pre-LN transformer block forward: batch 8, seq 128, d_model 256, 8 heads, MLP 1024, causal."""

from __future__ import annotations

import math

import numpy as np

from benchmarks.harness import Case, NotApplicable, Prepared, Workload
from benchmarks.peers import caramba_prep, jax_prep, torch_prep
from benchmarks.workloads.dense import gelu_ref

B, T, D, H, F = 8, 128, 256, 8, 1024
PARAMS = {
    "ln1_g": (D,), "ln1_b": (D,), "wq": (D, D), "bq": (D,), "wk": (D, D), "bk": (D,), "wv": (D, D), "bv": (D,),
    "wo": (D, D), "bo": (D,), "ln2_g": (D,), "ln2_b": (D,), "w1": (D, F), "b1": (F,), "w2": (F, D), "b2": (D,),
}
NAMES = ["x", *PARAMS]


def _ln(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def numpy_block(p):
    x = p["x"]
    h = _ln(x, p["ln1_g"], p["ln1_b"])
    q, k, v = (h @ p[w] + p[b] for w, b in (("wq", "bq"), ("wk", "bk"), ("wv", "bv")))
    split = lambda t: t.reshape(B, T, H, D // H).transpose(0, 2, 1, 3)
    q, k, v = split(q), split(k), split(v)
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D // H)
    s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    a = (e / e.sum(-1, keepdims=True)) @ v
    a = a.transpose(0, 2, 1, 3).reshape(B, T, D)
    y = x + a @ p["wo"] + p["bo"]
    m = gelu_ref(_ln(y, p["ln2_g"], p["ln2_b"]) @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return y + m


class TransformerBlock(Workload):
    name = "transformer_block"
    description = f"pre-LN block forward, batch {B}, seq {T}, d_model {D}, {H} heads, MLP {F}, causal"

    def cases(self):
        flops = 2.0 * B * T * (4 * D * D + 2 * D * F) + 4.0 * B * H * T * T * (D // H)
        return [Case(self.name, f"{B}x{T}x{D} float64", {}, flops, ("quick", "full"), 1e-9, 1e-9)]

    def inputs(self, case, rng):
        out = {"x": rng.standard_normal((B, T, D))}
        for k, s in PARAMS.items():
            scale = 1.0 / math.sqrt(s[0]) if len(s) == 2 else 0.1
            out[k] = rng.standard_normal(s) * scale + (1.0 if k.endswith("_g") else 0.0)
        return out

    def reference(self, case, inputs):
        return numpy_block(inputs)

    def caramba(self, case, runner, inputs):
        import caramba
        from caramba import ops

        def block(x, ln1_g, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_g, ln2_b, w1, b1, w2, b2):
            h = ops.layer_norm(x, ln1_g, ln1_b, eps=1e-5)
            q, k, v = (ops.view_as_heads(h @ w + b, num_heads=H) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
            a = ops.merge_heads(ops.sdpa(q, k, v, causal=True))
            y = x + (a @ wo + bo)
            m = ops.gelu(ops.layer_norm(y, ln2_g, ln2_b, eps=1e-5) @ w1 + b1) @ w2 + b2
            return y + m

        specs = [(B, T, D)] + [PARAMS[k] for k in PARAMS]
        g = caramba.trace(block, *specs, name="transformer_block")
        return caramba_prep(runner, g, inputs)

    def numpy(self, case, inputs):
        return Prepared(lambda: numpy_block(inputs))

    def jax(self, case, inputs):
        import jax
        import jax.numpy as jnp

        def block(x, ln1_g, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_g, ln2_b, w1, b1, w2, b2):
            def ln(t, g, b):
                mu = t.mean(-1, keepdims=True)
                var = ((t - mu) ** 2).mean(-1, keepdims=True)
                return (t - mu) / jnp.sqrt(var + 1e-5) * g + b

            h = ln(x, ln1_g, ln1_b)
            split = lambda t: t.reshape(B, T, H, D // H).transpose(0, 2, 1, 3)
            q, k, v = split(h @ wq + bq), split(h @ wk + bk), split(h @ wv + bv)
            s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D // H)
            s = jnp.where(jnp.tril(jnp.ones((T, T), dtype=bool)), s, -jnp.inf)
            a = (jax.nn.softmax(s, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
            y = x + a @ wo + bo
            return y + jax.nn.gelu(ln(y, ln2_g, ln2_b) @ w1 + b1, approximate=False) @ w2 + b2

        return jax_prep(block, [inputs[k] for k in NAMES])

    def torch(self, case, inputs):
        import torch.nn.functional as fn

        def block(x, ln1_g, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_g, ln2_b, w1, b1, w2, b2):
            h = fn.layer_norm(x, (D,), ln1_g, ln1_b, 1e-5)
            split = lambda t: t.reshape(B, T, H, D // H).transpose(1, 2)
            q, k, v = split(h @ wq + bq), split(h @ wk + bk), split(h @ wv + bv)
            a = fn.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
            y = x + a @ wo + bo
            return y + fn.gelu(fn.layer_norm(y, (D,), ln2_g, ln2_b, 1e-5) @ w1 + b1) @ w2 + b2

        return torch_prep(block, [inputs[k] for k in NAMES])

    def onnxruntime(self, case, inputs):
        raise NotApplicable("not built for ONNX Runtime (its CPU provider has no float64 Erf for exact GELU)")
