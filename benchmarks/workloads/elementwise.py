"""Exact (erf) GELU on its own."""

from __future__ import annotations

import math

from benchmarks.harness import Case, NotApplicable, Prepared, Workload
from benchmarks.peers import caramba_prep, jax_prep, torch_prep
from benchmarks.workloads.dense import gelu_ref


class Gelu(Workload):
    name = "gelu"
    description = "exact GELU, elementwise"
    SHAPES = ((512,), (4096,), (32, 1024), (64, 4096))

    def cases(self):
        # Outputs below 1e-5 in magnitude (the far negative tail) are held to 1e-15 absolute, not
        # 1e-10 relative: PyTorch's vectorized float64 erf is off by 1e-4 relative at gelu(-7.6)
        # ~ -1e-13, an absolute error of 2e-17 that says nothing about a kernel's accuracy.
        return [
            Case(self.name, "x".join(map(str, s)) + " float64", {"shape": s}, 10.0 * math.prod(s),
                 ("quick", "full") if s == (4096,) else ("full",), 1e-10, 1e-5)
            for s in self.SHAPES
        ]

    def inputs(self, case, rng):
        return {"x": rng.standard_normal(case.params["shape"]) * 2}

    def reference(self, case, inputs):
        return gelu_ref(inputs["x"])

    def caramba(self, case, runner, inputs):
        import caramba
        from caramba import ops

        g = caramba.trace(lambda x: ops.gelu(x), case.params["shape"], name="gelu")
        return caramba_prep(runner, g, inputs)

    def numpy(self, case, inputs):
        x = inputs["x"]
        return Prepared(lambda: gelu_ref(x), note="scipy.special.erfc")

    def jax(self, case, inputs):
        import jax

        return jax_prep(lambda x: jax.nn.gelu(x, approximate=False), [inputs["x"]])

    def torch(self, case, inputs):
        import torch

        return torch_prep(lambda x: torch.nn.functional.gelu(x), [inputs["x"]])

    def onnxruntime(self, case, inputs):
        raise NotApplicable("ONNX Runtime's CPU provider has no float64 Erf (exact GELU)")
