"""GEMM n x n x n in float64 (and float32), in GFLOP/s."""

from __future__ import annotations

import numpy as np

from benchmarks.harness import Case, Prepared, Workload
from benchmarks.peers import caramba_prep, jax_prep, onnx_model, ort_prep, torch_prep


class Gemm(Workload):
    name = "gemm"
    description = "C = A @ B, square n"

    def cases(self):
        out = []
        for n in (256, 512, 1024, 2048):
            for dt in ("float64", "float32"):
                quick = n == 512
                # Errors are judged against the entries' typical magnitude (sqrt(n) for N(0,1)
                # inputs), not each entry's: a length-n dot product summed in another order moves
                # an entry near zero by ~1e-13, a large relative change that means nothing.
                scale = float(np.sqrt(n))
                tol = (1e-9, scale) if dt == "float64" else (2e-3, scale)
                out.append(Case(self.name, f"n={n} {dt}", {"n": n, "dtype": dt}, 2.0 * n**3,
                                ("quick", "full") if quick else ("full",), *tol))
        return out

    def inputs(self, case, rng):
        n, d = case.params["n"], case.params["dtype"]
        return {"a": rng.standard_normal((n, n)).astype(d), "b": rng.standard_normal((n, n)).astype(d)}

    def reference(self, case, inputs):
        a, b = (inputs[k].astype(np.float64) for k in ("a", "b"))
        return a @ b

    def caramba(self, case, runner, inputs):
        import caramba

        n, d = case.params["n"], case.params["dtype"]
        g = caramba.trace(lambda a, b: a @ b, ((n, n), d), ((n, n), d), name="gemm")
        return caramba_prep(runner, g, inputs)

    def numpy(self, case, inputs):
        a, b = inputs["a"], inputs["b"]
        return Prepared(lambda: a @ b)

    def jax(self, case, inputs):
        return jax_prep(lambda a, b: a @ b, [inputs["a"], inputs["b"]])

    def torch(self, case, inputs):
        return torch_prep(lambda a, b: a @ b, [inputs["a"], inputs["b"]])

    def onnxruntime(self, case, inputs):
        from onnx import helper

        m = onnx_model([helper.make_node("MatMul", ["a", "b"], ["out"])], inputs, "out", inputs["a"].dtype)
        return ort_prep(m, inputs)
