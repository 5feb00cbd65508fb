"""Softmax (last axis) and layer norm with gamma/beta."""

from __future__ import annotations

import math

import numpy as np

from benchmarks.harness import Case, Prepared, Workload
from benchmarks.peers import caramba_prep, jax_prep, onnx_model, ort_prep, torch_prep


def _softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class Softmax(Workload):
    name = "softmax"
    description = "softmax over the last axis"
    SHAPES = ((8, 64), (32, 128), (64, 512), (8, 16, 64), (4, 8, 32, 128))

    def cases(self):
        return [
            Case(self.name, "x".join(map(str, s)) + " float64", {"shape": s}, 5.0 * math.prod(s),
                 ("quick", "full") if s == (32, 128) else ("full",), 1e-12, 1e-300)
            for s in self.SHAPES
        ]

    def inputs(self, case, rng):
        return {"x": rng.standard_normal(case.params["shape"]) * 3}

    def reference(self, case, inputs):
        return _softmax_ref(inputs["x"])

    def caramba(self, case, runner, inputs):
        import caramba
        from caramba import ops

        g = caramba.trace(lambda x: ops.softmax(x, axis=-1), case.params["shape"], name="softmax")
        return caramba_prep(runner, g, inputs)

    def numpy(self, case, inputs):
        x = inputs["x"]
        return Prepared(lambda: _softmax_ref(x))

    def jax(self, case, inputs):
        import jax

        return jax_prep(lambda x: jax.nn.softmax(x, axis=-1), [inputs["x"]])

    def torch(self, case, inputs):
        import torch

        return torch_prep(lambda x: torch.softmax(x, dim=-1), [inputs["x"]])

    def onnxruntime(self, case, inputs):
        from onnx import helper

        return ort_prep(onnx_model([helper.make_node("Softmax", ["x"], ["out"], axis=-1)], inputs, "out", np.float64), inputs)


def _ln_ref(x, g, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


class LayerNorm(Workload):
    name = "layer_norm"
    description = "layer norm over the last axis with gamma and beta"
    SHAPES = ((8, 64), (32, 256), (64, 768), (8, 16, 64))

    def cases(self):
        return [
            Case(self.name, "x".join(map(str, s)) + " float64", {"shape": s}, 8.0 * math.prod(s),
                 ("quick", "full") if s == (32, 256) else ("full",), 1e-8, 1e-12)
            for s in self.SHAPES
        ]

    def inputs(self, case, rng):
        s = case.params["shape"]
        return {"x": rng.standard_normal(s), "gamma": rng.standard_normal(s[-1]), "beta": rng.standard_normal(s[-1])}

    def reference(self, case, inputs):
        return _ln_ref(inputs["x"], inputs["gamma"], inputs["beta"])

    def caramba(self, case, runner, inputs):
        import caramba
        from caramba import ops

        s = case.params["shape"]
        g = caramba.trace(lambda x, gamma, beta: ops.layer_norm(x, gamma, beta, eps=1e-5), s, (s[-1],), (s[-1],), name="layer_norm")
        return caramba_prep(runner, g, inputs)

    def numpy(self, case, inputs):
        x, g, b = inputs["x"], inputs["gamma"], inputs["beta"]
        return Prepared(lambda: _ln_ref(x, g, b))

    def jax(self, case, inputs):
        import jax.numpy as jnp

        def ln(x, g, b):
            mu = x.mean(axis=-1, keepdims=True)
            var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
            return (x - mu) / jnp.sqrt(var + 1e-5) * g + b

        return jax_prep(ln, [inputs["x"], inputs["gamma"], inputs["beta"]])

    def torch(self, case, inputs):
        import torch

        n = case.params["shape"][-1]
        return torch_prep(lambda x, g, b: torch.nn.functional.layer_norm(x, (n,), g, b, 1e-5), [inputs["x"], inputs["gamma"], inputs["beta"]])

    def onnxruntime(self, case, inputs):
        from onnx import helper

        node = helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["out"], axis=-1, epsilon=1e-5)
        return ort_prep(onnx_model([node], inputs, "out", np.float64), inputs)
