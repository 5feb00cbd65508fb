"""Convolution workloads: conv2d and pooling alone, and a ResNet-18-shaped forward.

``resnet18_forward``: ResNet-18's layers (7x7/2 stem, 3x3/2 max pool, four stages of two basic
blocks with 64, 128, 256, 512 channels, 1x1/2 projections, global average pool, 1000-way
linear) on batch 8 of 3x64x64, inference-mode batch norm as a per-channel scale and shift,
random weights; float32 and float64. The reference is PyTorch's functional forward in
float64 (NumPy has no convolution).
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.harness import Case, NotApplicable, Prepared, Workload
from benchmarks.peers import caramba_prep, jax_prep, onnx_model, ort_prep, torch_prep

# ---- conv2d and pooling alone --------------------------------------------------------------

# (label, x shape, out channels, kernel, stride, padding): the ResNet-18 stem and a stage-1 conv
CONVS = (("stem 8x3x64x64 k7 s2", (8, 3, 64, 64), 64, 7, 2, 3), ("8x64x16x16 k3", (8, 64, 16, 16), 64, 3, 1, 1))


def _torch_conv(x, w, stride, padding):
    import torch

    with torch.no_grad():
        return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=stride, padding=padding).numpy()


class Conv2d(Workload):
    name = "conv2d"
    description = "2-D convolution (no bias), ResNet-18's stem and a 3x3 stage-1 layer"

    def cases(self):
        out = []
        for label, xs, o, k, s, p in CONVS:
            oh = (xs[2] + 2 * p - k) // s + 1
            flops = 2.0 * xs[0] * o * oh * oh * xs[1] * k * k
            for dt in ("float32", "float64"):
                suites = ("quick", "full") if (dt == "float32" and k == 3) else ("full",)
                out.append(Case(self.name, f"{label} {dt}", {"x": xs, "o": o, "k": k, "s": s, "p": p, "dtype": dt}, flops,
                                # atol 1 (the outputs' scale) in float64: an output near 0 sums
                                # hundreds of O(1) products, so its error is an ulp of those, not of it
                                suites, 2e-3 if dt == "float32" else 1e-10, 1e-2 if dt == "float32" else 1.0))
        return out

    def inputs(self, case, rng):
        pr = case.params
        dt = pr["dtype"]
        w = rng.standard_normal((pr["o"], pr["x"][1], pr["k"], pr["k"])) / math.sqrt(pr["x"][1] * pr["k"] ** 2)
        return {"x": rng.standard_normal(pr["x"]).astype(dt), "w": w.astype(dt)}

    def reference(self, case, inputs):
        pr = case.params
        return _torch_conv(inputs["x"].astype(np.float64), inputs["w"].astype(np.float64), pr["s"], pr["p"])

    def caramba(self, case, runner, inputs):
        import caramba
        from caramba import ops

        pr = case.params
        g = caramba.trace(lambda x, w: ops.conv2d(x, w, stride=(pr["s"],), padding=(pr["p"],)),
                          (inputs["x"].shape, pr["dtype"]), (inputs["w"].shape, pr["dtype"]), name="conv2d")
        return caramba_prep(runner, g, inputs)

    def numpy(self, case, inputs):
        raise NotApplicable("NumPy has no convolution")

    def jax(self, case, inputs):
        from jax import lax

        pr = case.params
        return jax_prep(lambda x, w: lax.conv_general_dilated(x, w, (pr["s"],) * 2, [(pr["p"], pr["p"])] * 2),
                        [inputs["x"], inputs["w"]])

    def torch(self, case, inputs):
        import torch

        pr = case.params
        return torch_prep(lambda x, w: torch.nn.functional.conv2d(x, w, stride=pr["s"], padding=pr["p"]),
                          [inputs["x"], inputs["w"]])

    def onnxruntime(self, case, inputs):
        from onnx import helper

        pr = case.params
        node = helper.make_node("Conv", ["x", "w"], ["out"], strides=[pr["s"]] * 2, pads=[pr["p"]] * 4)
        return ort_prep(onnx_model([node], inputs, "out", inputs["x"].dtype), inputs)


POOL_SHAPE = (8, 64, 32, 32)


def _np_pool(x, kind, k, s, p):
    from numpy.lib.stride_tricks import sliding_window_view

    pad = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, [(0, 0), (0, 0), (p, p), (p, p)], constant_values=pad)
    win = sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::s, ::s]
    return win.max(axis=(-2, -1)) if kind == "max" else win.mean(axis=(-2, -1))


class Pool2d(Workload):
    name = "pool2d"
    description = f"max pool 3x3/2 pad 1 (ResNet's) and average pool 2x2/2 over {'x'.join(map(str, POOL_SHAPE))}"

    def cases(self):
        out = []
        for kind, k, s, p in (("max", 3, 2, 1), ("avg", 2, 2, 0)):
            for dt in ("float32", "float64"):
                n_out = POOL_SHAPE[0] * POOL_SHAPE[1] * ((POOL_SHAPE[2] + 2 * p - k) // s + 1) ** 2
                out.append(Case(self.name, f"{kind} k{k} s{s} {dt}", {"kind": kind, "k": k, "s": s, "p": p, "dtype": dt},
                                float(n_out * k * k), ("quick", "full") if (kind == "max" and dt == "float32") else ("full",),
                                # atol 1 (the inputs' scale): an average near 0 cancels O(1) inputs, so
                                # a summation order differs from NumPy's by an ulp of the inputs, not of
                                # the output (float32: a few 1e-8 absolute, every implementation alike)
                                1e-6 if dt == "float32" else 1e-12, 1.0))
        return out

    def inputs(self, case, rng):
        return {"x": rng.standard_normal(POOL_SHAPE).astype(case.params["dtype"])}

    def reference(self, case, inputs):
        pr = case.params
        return _np_pool(inputs["x"].astype(np.float64), pr["kind"], pr["k"], pr["s"], pr["p"])

    def caramba(self, case, runner, inputs):
        import caramba
        from caramba import ops

        pr = case.params
        op = ops.max_pool2d if pr["kind"] == "max" else ops.avg_pool2d
        g = caramba.trace(lambda x: op(x, kernel=(pr["k"],), stride=(pr["s"],), padding=(pr["p"],)),
                          (POOL_SHAPE, pr["dtype"]), name="pool2d")
        return caramba_prep(runner, g, inputs)

    def numpy(self, case, inputs):
        pr = case.params
        x = inputs["x"]
        return Prepared(lambda: _np_pool(x, pr["kind"], pr["k"], pr["s"], pr["p"]), note="sliding_window_view")

    def jax(self, case, inputs):
        import jax.numpy as jnp
        from jax import lax

        pr = case.params
        k, s, p = pr["k"], pr["s"], pr["p"]
        pads = [(0, 0), (0, 0), (p, p), (p, p)]
        if pr["kind"] == "max":
            fn = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, k, k), (1, 1, s, s), pads)
        else:
            fn = lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 1, k, k), (1, 1, s, s), pads) / (k * k)
        return jax_prep(fn, [inputs["x"]])

    def torch(self, case, inputs):
        import torch.nn.functional as fn

        pr = case.params
        if pr["kind"] == "max":
            return torch_prep(lambda x: fn.max_pool2d(x, pr["k"], pr["s"], pr["p"]), [inputs["x"]])
        return torch_prep(lambda x: fn.avg_pool2d(x, pr["k"], pr["s"], pr["p"], count_include_pad=True), [inputs["x"]])

    def onnxruntime(self, case, inputs):
        from onnx import helper

        pr = case.params
        attrs = {"kernel_shape": [pr["k"]] * 2, "strides": [pr["s"]] * 2, "pads": [pr["p"]] * 4}
        if pr["kind"] == "max":
            node = helper.make_node("MaxPool", ["x"], ["out"], **attrs)
        else:
            node = helper.make_node("AveragePool", ["x"], ["out"], count_include_pad=1, **attrs)
        return ort_prep(onnx_model([node], inputs, "out", inputs["x"].dtype), inputs)


# ---- ResNet-18 forward ---------------------------------------------------------------------

RB, RC, RS, CLASSES = 8, 3, 64, 1000
STAGES = (64, 128, 256, 512)


def resnet_params(rng, dtype) -> dict[str, np.ndarray]:
    """Weights by name: conv ``<n>.w`` [O, C, k, k]; batch norm ``<n>.s``/``<n>.b`` [O]."""
    p: dict[str, np.ndarray] = {}

    def conv(name, o, c, k):
        p[f"{name}.w"] = rng.standard_normal((o, c, k, k)) * math.sqrt(2.0 / (c * k * k))
        p[f"{name}.s"] = 1.0 + 0.1 * rng.standard_normal(o)
        p[f"{name}.b"] = 0.1 * rng.standard_normal(o)

    conv("stem", 64, RC, 7)
    c = 64
    for i, o in enumerate(STAGES):
        for j in range(2):
            stride = 2 if (i > 0 and j == 0) else 1
            conv(f"l{i}.{j}.c1", o, c, 3)
            conv(f"l{i}.{j}.c2", o, o, 3)
            if stride != 1 or c != o:
                conv(f"l{i}.{j}.down", o, c, 1)
            c = o
    p["fc.w"] = rng.standard_normal((512, CLASSES)) / math.sqrt(512)
    p["fc.b"] = np.zeros(CLASSES)
    return {k: v.astype(dtype) for k, v in p.items()}


def resnet_forward(p, x, conv, max_pool, relu, mean_hw, chan):
    """ResNet-18 written once over a framework's primitives: ``conv(x, w, stride, pad)``,
    ``max_pool(x)`` (3x3/2 pad 1), ``relu``, ``mean_hw`` (global average), ``chan(v)`` ([C] -> [1, C, 1, 1])."""

    def cbn(h, name, stride, pad):
        return conv(h, p[f"{name}.w"], stride, pad) * chan(p[f"{name}.s"]) + chan(p[f"{name}.b"])

    h = max_pool(relu(cbn(x, "stem", 2, 3)))
    c = 64
    for i, o in enumerate(STAGES):
        for j in range(2):
            stride = 2 if (i > 0 and j == 0) else 1
            n = f"l{i}.{j}"
            y = cbn(relu(cbn(h, f"{n}.c1", stride, 1)), f"{n}.c2", 1, 1)
            skip = cbn(h, f"{n}.down", stride, 0) if (stride != 1 or c != o) else h
            h = relu(y + skip)
            c = o
    return mean_hw(h) @ p["fc.w"] + p["fc.b"]


def _torch_resnet(p, x):
    import torch
    import torch.nn.functional as fn

    return resnet_forward(p, x, lambda h, w, s, pad: fn.conv2d(h, w, stride=s, padding=pad),
                          lambda h: fn.max_pool2d(h, 3, 2, 1), torch.relu, lambda h: h.mean(dim=(2, 3)),
                          lambda v: v.reshape(1, -1, 1, 1))


class ResNet18Forward(Workload):
    name = "resnet18_forward"
    description = f"ResNet-18-shaped forward, batch {RB} of {RC}x{RS}x{RS}, inference batch norm as scale+shift"
    peers = ("jax", "torch")

    def cases(self):
        return [Case(self.name, f"{RB}x{RC}x{RS}x{RS} {dt}", {"dtype": dt}, 2 * 1.82e9 * RB * (RS / 224) ** 2,
                     ("full",), 5e-3 if dt == "float32" else 1e-9, 1e-2)
                for dt in ("float32", "float64")]

    def inputs(self, case, rng):
        dt = case.params["dtype"]
        out = {f"p:{k}": v for k, v in resnet_params(rng, dt).items()}
        out["x"] = rng.standard_normal((RB, RC, RS, RS)).astype(dt)
        return out

    @staticmethod
    def _params(inputs):
        return {k[2:]: v for k, v in inputs.items() if k.startswith("p:")}

    def reference(self, case, inputs):
        import torch

        p = {k: torch.from_numpy(v.astype(np.float64)) for k, v in self._params(inputs).items()}
        with torch.no_grad():
            return _torch_resnet(p, torch.from_numpy(inputs["x"].astype(np.float64))).numpy()

    def caramba(self, case, runner, inputs):
        from caramba import ops
        from caramba.ir.graph import Graph

        dt = case.params["dtype"]
        params = self._params(inputs)
        g = Graph("resnet18_forward")
        with g:
            p = {k: g.input(k.replace(".", "_"), v.shape, dt) for k, v in params.items()}
            x = g.input("x", (RB, RC, RS, RS), dt)
            out = resnet_forward(
                p, x, lambda h, w, s, pad: ops.conv2d(h, w, stride=(s,), padding=(pad,)),
                lambda h: ops.max_pool2d(h, kernel=(3,), stride=(2,), padding=(1,)), ops.relu,
                lambda h: ops.mean(h, axes=(2, 3)), lambda v: ops.reshape(v, shape=(1, -1, 1, 1)))
            g.output("out", out)
        feeds = {k.replace(".", "_"): v for k, v in params.items()} | {"x": inputs["x"]}
        return caramba_prep(runner, g, feeds)

    def torch(self, case, inputs):
        import torch

        p = {k: torch.from_numpy(v) for k, v in self._params(inputs).items()}
        x = torch.from_numpy(inputs["x"])

        def run():
            with torch.no_grad():
                return _torch_resnet(p, x)

        return Prepared(run, fetch=lambda r: r.numpy())

    def jax(self, case, inputs):
        import jax
        import jax.numpy as jnp
        from jax import lax

        def fwd(p, x):
            return resnet_forward(
                p, x, lambda h, w, s, pad: lax.conv_general_dilated(h, w, (s, s), [(pad, pad)] * 2),
                lambda h: lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), [(0, 0), (0, 0), (1, 1), (1, 1)]),
                jax.nn.relu, lambda h: h.mean(axis=(2, 3)), lambda v: v.reshape(1, -1, 1, 1))

        names = list(self._params(inputs))
        return jax_prep(lambda x, *vals: fwd(dict(zip(names, vals, strict=True)), x),
                        [inputs["x"]] + [inputs[f"p:{k}"] for k in names])
