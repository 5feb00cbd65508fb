"""Dense layer y = x @ W + b, optionally followed by exact (erf) GELU."""

from __future__ import annotations

import math

import numpy as np
import scipy.special as sc

from benchmarks.harness import Case, NotApplicable, Prepared, Workload
from benchmarks.peers import caramba_prep, jax_prep, onnx_model, ort_prep, torch_prep

SHAPES = ((1, 64, 64), (8, 128, 256), (32, 512, 1024), (256, 1024, 4096))


def gelu_ref(x):
    return 0.5 * x * sc.erfc(-x / math.sqrt(2.0))


class Dense(Workload):
    name = "dense"
    description = "x[M,K] @ W[K,N] + b (+ exact GELU)"

    def cases(self):
        out = []
        for m, k, n in SHAPES:
            for act in ("none", "gelu"):
                dts = ("float64", "float32") if (m, k, n) == SHAPES[-1] and act == "gelu" else ("float64",)
                for dt in dts:
                    quick = (m, k, n) == (8, 128, 256) and act == "gelu"
                    # relative to the outputs' typical magnitude (~1): see gemm.py
                    tol = (1e-9, 1.0) if dt == "float64" else (2e-3, 1.0)
                    flops = 2.0 * m * k * n + m * n * (1 if act == "none" else 10)
                    out.append(Case(self.name, f"{m}x{k}x{n} {'+gelu ' if act == 'gelu' else ''}{dt}",
                                    {"m": m, "k": k, "n": n, "act": act, "dtype": dt}, flops,
                                    ("quick", "full") if quick else ("full",), *tol))
        return out

    def inputs(self, case, rng):
        p = case.params
        d = p["dtype"]
        return {
            "x": rng.standard_normal((p["m"], p["k"])).astype(d),
            "w": (rng.standard_normal((p["k"], p["n"])) / math.sqrt(p["k"])).astype(d),
            "b": rng.standard_normal(p["n"]).astype(d),
        }

    def reference(self, case, inputs):
        x, w, b = (inputs[k].astype(np.float64) for k in ("x", "w", "b"))
        y = x @ w + b
        return gelu_ref(y) if case.params["act"] == "gelu" else y

    def caramba(self, case, runner, inputs):
        import caramba
        from caramba import ops

        p = case.params
        d = p["dtype"]

        def dense(x, w, b):
            y = x @ w + b
            return ops.gelu(y) if p["act"] == "gelu" else y

        g = caramba.trace(dense, ((p["m"], p["k"]), d), ((p["k"], p["n"]), d), ((p["n"],), d), name="dense")
        return caramba_prep(runner, g, inputs)

    def numpy(self, case, inputs):
        x, w, b = inputs["x"], inputs["w"], inputs["b"]
        if case.params["act"] == "gelu":
            return Prepared(lambda: gelu_ref(x @ w + b).astype(x.dtype, copy=False), note="gelu via scipy.special.erfc")
        return Prepared(lambda: x @ w + b)

    def jax(self, case, inputs):
        import jax

        gelu = case.params["act"] == "gelu"
        return jax_prep(lambda x, w, b: jax.nn.gelu(x @ w + b, approximate=False) if gelu else x @ w + b,
                        [inputs["x"], inputs["w"], inputs["b"]])

    def torch(self, case, inputs):
        import torch

        gelu = case.params["act"] == "gelu"
        return torch_prep(lambda x, w, b: torch.nn.functional.gelu(torch.addmm(b, x, w)) if gelu else torch.addmm(b, x, w),
                          [inputs["x"], inputs["w"], inputs["b"]])

    def onnxruntime(self, case, inputs):
        from onnx import helper

        nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y" if case.params["act"] == "gelu" else "out"])]
        if case.params["act"] == "gelu":
            if case.params["dtype"] == "float64":
                raise NotApplicable("ONNX Runtime's CPU provider has no float64 Erf (exact GELU)")
            nodes.append(helper.make_node("Gelu", ["y"], ["out"], approximate="none"))
        return ort_prep(onnx_model(nodes, inputs, "out", inputs["x"].dtype), inputs)
