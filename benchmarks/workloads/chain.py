"""A chain of 200 tiny elementwise ops on a [16] vector: per-op dispatch overhead."""

from __future__ import annotations

import numpy as np

from benchmarks.harness import Case, Prepared, Workload
from benchmarks.peers import caramba_prep, jax_prep, onnx_model, ort_prep, torch_prep

N_OPS = 200
# (op, constant) repeated: bounded values, a mix of arithmetic and transcendental ops.
PATTERN = (("mul", 0.9), ("add", 0.1), ("sin", None), ("mul", 1.1), ("add", -0.05), ("tanh", None), ("sub", 0.01), ("exp", None), ("mul", 0.5))


def steps():
    return [PATTERN[i % len(PATTERN)] for i in range(N_OPS)]


def apply_chain(x, sin, tanh, exp):
    """The chain written once for every array library (given its sin/tanh/exp)."""
    unary = {"sin": sin, "tanh": tanh, "exp": exp}
    for op, c in steps():
        if op == "mul":
            x = x * c
        elif op == "add":
            x = x + c
        elif op == "sub":
            x = x - c
        else:
            x = unary[op](x)
    return x


def numpy_chain(x):
    return apply_chain(x, np.sin, np.tanh, np.exp)


class Chain(Workload):
    name = "chain200"
    description = f"{N_OPS} elementwise ops on a [16] float64 vector (per-op overhead)"

    def cases(self):
        return [Case(self.name, "[16] float64", {"n": 16}, float(N_OPS * 16), ("quick", "full"), 1e-12, 1e-300)]

    def inputs(self, case, rng):
        return {"x": rng.uniform(-1, 1, case.params["n"])}

    def reference(self, case, inputs):
        return numpy_chain(inputs["x"].copy())

    def caramba(self, case, runner, inputs):
        import caramba
        from caramba import ops

        g = caramba.trace(lambda x: apply_chain(x, ops.sin, ops.tanh, ops.exp), (case.params["n"],), name="chain")
        prep = caramba_prep(runner, g, inputs)
        prep.note = f"{len(g.nodes) - 1} graph nodes before the pipeline"
        return prep

    def numpy(self, case, inputs):
        x = inputs["x"]
        fns = []
        for op, c in steps():
            if op in ("mul", "add", "sub"):
                uf = {"mul": np.multiply, "add": np.add, "sub": np.subtract}[op]
                fns.append((uf, np.float64(c)))
            else:
                fns.append(({"sin": np.sin, "tanh": np.tanh, "exp": np.exp}[op], None))

        def run():
            v = x
            for f, c in fns:
                v = f(v) if c is None else f(v, c)
            return v

        return Prepared(run, note="eager ufunc calls")

    def jax(self, case, inputs):
        import jax.numpy as jnp

        return jax_prep(lambda x: apply_chain(x, jnp.sin, jnp.tanh, jnp.exp), [inputs["x"]])

    def torch(self, case, inputs):
        import torch

        return torch_prep(lambda x: apply_chain(x, torch.sin, torch.tanh, torch.exp), [inputs["x"]])

    def onnxruntime(self, case, inputs):
        from onnx import helper

        nodes, inits, cur = [], {}, "x"
        for i, (op, c) in enumerate(steps()):
            out = "out" if i == N_OPS - 1 else f"v{i}"
            if c is None:
                nodes.append(helper.make_node({"sin": "Sin", "tanh": "Tanh", "exp": "Exp"}[op], [cur], [out]))
            else:
                inits[f"c{i}"] = np.array(c, dtype=np.float64)
                nodes.append(helper.make_node({"mul": "Mul", "add": "Add", "sub": "Sub"}[op], [cur, f"c{i}"], [out]))
            cur = out
        return ort_prep(onnx_model(nodes, inputs, "out", np.float64, inits), inputs)
