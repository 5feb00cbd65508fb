"""Softmax (last axis) and layer norm with gamma/beta."""

from __future__ import annotations

import math

import numpy as np

from benchmarks.harness import Case, NotApplicable, Prepared, Workload
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


def _rms_ref(x, g, eps=1e-6):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * g


class RmsNorm(Workload):
    name = "rms_norm"
    description = "RMS norm over the last axis with gamma"
    SHAPES = LayerNorm.SHAPES

    def cases(self):
        return [
            Case(self.name, "x".join(map(str, s)) + " float64", {"shape": s}, 6.0 * math.prod(s),
                 ("quick", "full") if s == (32, 256) else ("full",), 1e-8, 1e-12)
            for s in self.SHAPES
        ]

    def inputs(self, case, rng):
        s = case.params["shape"]
        return {"x": rng.standard_normal(s), "gamma": rng.standard_normal(s[-1])}

    def reference(self, case, inputs):
        return _rms_ref(inputs["x"], inputs["gamma"])

    def caramba(self, case, runner, inputs):
        import caramba
        from caramba import ops

        s = case.params["shape"]
        g = caramba.trace(lambda x, gamma: ops.rms_norm(x, gamma, eps=1e-6), s, (s[-1],), name="rms_norm")
        return caramba_prep(runner, g, inputs)

    def numpy(self, case, inputs):
        x, g = inputs["x"], inputs["gamma"]
        return Prepared(lambda: _rms_ref(x, g))

    def jax(self, case, inputs):
        import jax.numpy as jnp

        return jax_prep(lambda x, g: x / jnp.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * g,
                        [inputs["x"], inputs["gamma"]])

    def torch(self, case, inputs):
        import torch

        n = case.params["shape"][-1]
        return torch_prep(lambda x, g: torch.nn.functional.rms_norm(x, (n,), g, 1e-6), [inputs["x"], inputs["gamma"]])

    def onnxruntime(self, case, inputs):
        raise NotApplicable("RMSNormalization needs opset 23, which ONNX Runtime's CPU provider may not have for float64")


# ---- backward: the vector-Jacobian product with respect to every input -------------------
# One call computes every input's cotangent from the inputs and the output's cotangent (the
# forward recomputed where the implementation needs it: caramba's graph, jax.vjp under jit,
# torch's autograd with the forward in the timed call, as a training step runs it). The checked
# output is every cotangent, raveled and concatenated in input order.


def _softmax_vjp(x, ct):
    y = _softmax_ref(x)
    return [y * (ct - (ct * y).sum(-1, keepdims=True))]


def _norm_vjp(x, g, ct, centered: bool, eps: float):
    n = x.shape[-1]
    xc = x - x.mean(-1, keepdims=True) if centered else x
    rstd = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)
    xhat = xc * rstd
    gg = ct * g
    dx = gg - xhat * (gg * xhat).sum(-1, keepdims=True) / n
    if centered:
        dx = dx - gg.sum(-1, keepdims=True) / n
    lead = tuple(range(x.ndim - 1))
    out = [dx * rstd, (ct * xhat).sum(lead)]
    if centered:
        out.append(ct.sum(lead))
    return out


class _Backward(Workload):
    """The VJP of a forward workload ``forward`` (same shapes, inputs plus ``ct``)."""

    forward: Workload
    names: tuple[str, ...]

    def cases(self):
        return [Case(self.name, c.label, c.params, 3 * c.flops, c.suites, 1e-8, 1e-12) for c in self.forward.cases()]

    def inputs(self, case, rng):
        ins = self.forward.inputs(case, rng)
        ins["ct"] = rng.standard_normal(case.params["shape"])
        return ins

    def reference(self, case, inputs):
        return np.concatenate([a.ravel() for a in self._numpy(inputs)])

    def _numpy(self, inputs):
        raise NotImplementedError

    def _caramba_fn(self, case):
        raise NotImplementedError

    def _jax_fn(self):
        raise NotImplementedError

    def _torch_fn(self, case):
        raise NotImplementedError

    def caramba(self, case, runner, inputs):
        import caramba
        from caramba.autodiff import vjp_graph

        s = case.params["shape"]
        specs = [s] + [(s[-1],)] * (len(self.names) - 1)
        g = caramba.trace(self._caramba_fn(case), *specs, name=f"{self.name}")
        g = vjp_graph(g, ["out"], list(self.names))
        del g.outputs["out"]
        exe = runner.compile(g)
        tensors = {k: runner.upload(inputs[k]) for k in self.names}
        tensors["cotangent.out"] = runner.upload(inputs["ct"])

        def run():
            outs = exe.run(tensors)
            for t in outs.values():
                t.wait()
            return outs

        return Prepared(run, fetch=lambda r: np.concatenate([r[f"grad.{k}"].download().ravel() for k in self.names]))

    def numpy(self, case, inputs):
        return Prepared(lambda: self._numpy(inputs), fetch=lambda r: np.concatenate([a.ravel() for a in r]),
                        note="hand-written VJP")

    def jax(self, case, inputs):
        import jax

        fn = self._jax_fn()

        def vjp(ct, *args):
            return jax.vjp(fn, *args)[1](ct)

        prep = jax_prep(vjp, [inputs["ct"]] + [inputs[k] for k in self.names])
        prep.fetch = lambda r: np.concatenate([np.asarray(a).ravel() for a in r])
        return prep

    def torch(self, case, inputs):
        import torch

        fn = self._torch_fn(case)
        args = [torch.tensor(inputs[k], requires_grad=True) for k in self.names]
        ct = torch.from_numpy(inputs["ct"])

        def run():
            return torch.autograd.grad(fn(*args), args, ct)

        return Prepared(run, fetch=lambda r: np.concatenate([a.numpy().ravel() for a in r]),
                        context=lambda: torch.enable_grad(), note="eager forward + autograd.grad")

    def onnxruntime(self, case, inputs):
        raise NotApplicable("ONNX Runtime inference sessions have no gradients")


class SoftmaxGrad(_Backward):
    name = "softmax_grad"
    description = "VJP of softmax over the last axis"
    forward = Softmax()
    names = ("x",)

    def _numpy(self, inputs):
        return _softmax_vjp(inputs["x"], inputs["ct"])

    def _caramba_fn(self, case):
        from caramba import ops

        return lambda x: ops.softmax(x, axis=-1)

    def _jax_fn(self):
        import jax

        return lambda x: jax.nn.softmax(x, axis=-1)

    def _torch_fn(self, case):
        import torch

        return lambda x: torch.softmax(x, dim=-1)


class LayerNormGrad(_Backward):
    name = "layer_norm_grad"
    description = "VJP of layer norm (x, gamma, beta) over the last axis"
    forward = LayerNorm()
    names = ("x", "gamma", "beta")

    def _numpy(self, inputs):
        return _norm_vjp(inputs["x"], inputs["gamma"], inputs["ct"], True, 1e-5)

    def _caramba_fn(self, case):
        from caramba import ops

        return lambda x, gamma, beta: ops.layer_norm(x, gamma, beta, eps=1e-5)

    def _jax_fn(self):
        import jax.numpy as jnp

        def ln(x, g, b):
            mu = x.mean(axis=-1, keepdims=True)
            var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
            return (x - mu) / jnp.sqrt(var + 1e-5) * g + b

        return ln

    def _torch_fn(self, case):
        import torch

        n = case.params["shape"][-1]
        return lambda x, g, b: torch.nn.functional.layer_norm(x, (n,), g, b, 1e-5)


class RmsNormGrad(_Backward):
    name = "rms_norm_grad"
    description = "VJP of RMS norm (x, gamma) over the last axis"
    forward = RmsNorm()
    names = ("x", "gamma")

    def _numpy(self, inputs):
        return _norm_vjp(inputs["x"], inputs["gamma"], inputs["ct"], False, 1e-6)

    def _caramba_fn(self, case):
        from caramba import ops

        return lambda x, gamma: ops.rms_norm(x, gamma, eps=1e-6)

    def _jax_fn(self):
        import jax.numpy as jnp

        return lambda x, g: x / jnp.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * g

    def _torch_fn(self, case):
        import torch

        n = case.params["shape"][-1]
        return lambda x, g: torch.nn.functional.rms_norm(x, (n,), g, 1e-6)
