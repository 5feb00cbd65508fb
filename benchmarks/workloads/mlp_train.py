"""MLP train step: forward (exact GELU) + softmax cross-entropy + backward + Adam, float64.

The timed call is one whole step with parameters and optimizer state resident; the agreement
check runs one step from the same initial parameters in each implementation and compares the
loss and the updated last-layer weights.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import scipy.special as sc

from benchmarks.harness import Case, NotApplicable, Prepared, Workload
from benchmarks.workloads.dense import gelu_ref

LR, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-8
VARIANTS = {
    "small": (128, (64, 256, 256, 10)),
    "wide": (256, (784, 1024, 1024, 10)),
}


def init_params(sizes, rng):
    ps = []
    for a, b in itertools.pairwise(sizes):
        ps.append(rng.standard_normal((a, b)) * math.sqrt(2.0 / (a + b)))
        ps.append(np.zeros(b))
    return ps


def _gelu_grad(x):
    return 0.5 * sc.erfc(-x / math.sqrt(2.0)) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def numpy_loss_and_grads(ps, x, y):
    acts, pre = [x], []
    h = x
    n_layers = len(ps) // 2
    for i in range(n_layers):
        z = h @ ps[2 * i] + ps[2 * i + 1]
        pre.append(z)
        h = gelu_ref(z) if i < n_layers - 1 else z
        acts.append(h)
    logits = h
    m = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(-1, keepdims=True)) + m
    n = x.shape[0]
    loss = float(np.mean(lse[:, 0] - logits[np.arange(n), y]))
    d = np.exp(logits - lse)
    d[np.arange(n), y] -= 1.0
    d /= n
    grads = [None] * len(ps)
    for i in reversed(range(n_layers)):
        if i < n_layers - 1:
            d = d * _gelu_grad(pre[i])
        grads[2 * i] = acts[i].T @ d
        grads[2 * i + 1] = d.sum(0)
        if i > 0:
            d = d @ ps[2 * i].T
    return loss, grads


class NumpyAdam:
    def __init__(self, ps):
        self.ps = [p.copy() for p in ps]
        self.m = [np.zeros_like(p) for p in ps]
        self.v = [np.zeros_like(p) for p in ps]
        self.t = 0

    def step(self, x, y):
        loss, gs = numpy_loss_and_grads(self.ps, x, y)
        self.t += 1
        c1, c2 = 1 - B1**self.t, 1 - B2**self.t
        for p, g, m, v in zip(self.ps, gs, self.m, self.v, strict=True):
            m *= B1
            m += (1 - B1) * g
            v *= B2
            v += (1 - B2) * g * g
            p -= LR * (m / c1) / (np.sqrt(v / c2) + EPS)
        return loss


class MlpTrain(Workload):
    name = "mlp_train_step"
    description = "MLP train step (GELU, softmax cross-entropy, Adam), float64"

    def cases(self):
        out = []
        for key, (batch, sizes) in VARIANTS.items():
            flops = 6.0 * batch * sum(a * b for a, b in itertools.pairwise(sizes))
            label = f"[{batch},{sizes[0]}]→" + "→".join(map(str, sizes[1:]))
            out.append(Case(self.name, label, {"variant": key}, flops, ("quick", "full") if key == "small" else ("full",), 1e-8, 1e-10))
        return out

    def inputs(self, case, rng):
        batch, sizes = VARIANTS[case.params["variant"]]
        ps = init_params(sizes, rng)
        data = {"x": rng.standard_normal((batch, sizes[0])), "y": rng.integers(0, sizes[-1], batch)}
        data.update({f"p{i}": p for i, p in enumerate(ps)})
        return data

    @staticmethod
    def _params(inputs):
        return [inputs[f"p{i}"] for i in range(sum(1 for k in inputs if k.startswith("p")))]

    def reference(self, case, inputs):
        opt = NumpyAdam(self._params(inputs))
        loss = opt.step(inputs["x"], inputs["y"])
        return np.concatenate([[loss], opt.ps[-2].ravel()])

    def caramba(self, case, runner, inputs):
        from benchmarks.train_step import caramba_prepared

        return caramba_prepared(case.params["variant"], runner, inputs)

    def numpy(self, case, inputs):
        opt = NumpyAdam(self._params(inputs))
        x, y = inputs["x"], inputs["y"]

        def check():
            o = NumpyAdam(self._params(inputs))
            loss = o.step(x, y)
            return np.concatenate([[loss], o.ps[-2].ravel()])

        return Prepared(lambda: opt.step(x, y), check=check, note="hand-written backward + Adam")

    def jax(self, case, inputs):
        import jax

        from benchmarks.train_step import jax_step

        run, check = jax_step(self._params(inputs), inputs["x"], inputs["y"])
        return Prepared(run, check=check, context=lambda: jax.enable_x64(True), note="jit(value_and_grad + Adam), donated state")

    def torch(self, case, inputs):
        import torch

        x = torch.from_numpy(inputs["x"])
        y = torch.from_numpy(inputs["y"])

        def build():
            ps = [torch.tensor(p, requires_grad=True) for p in self._params(inputs)]
            opt = torch.optim.Adam(ps, lr=LR, betas=(B1, B2), eps=EPS)
            return ps, opt

        def one_step(ps, opt):
            opt.zero_grad(set_to_none=True)
            h = x
            n_layers = len(ps) // 2
            for i in range(n_layers):
                h = torch.addmm(ps[2 * i + 1], h, ps[2 * i])
                if i < n_layers - 1:
                    h = torch.nn.functional.gelu(h)
            loss = torch.nn.functional.cross_entropy(h, y)
            loss.backward()
            opt.step()
            return loss

        ps, opt = build()

        def check():
            ps2, opt2 = build()
            loss = one_step(ps2, opt2)
            return np.concatenate([[loss.item()], ps2[-2].detach().numpy().ravel()])

        return Prepared(lambda: one_step(ps, opt), check=check, note="eager autograd + torch.optim.Adam")

    def onnxruntime(self, case, inputs):
        raise NotApplicable("ONNX Runtime inference sessions do not train")
