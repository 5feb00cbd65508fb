"""``resnet18_train_step``: one training step of the ResNet-18-shaped network of ``cnn.py``.

Batch 8 of 3x64x64, 1000 classes, mean cross-entropy over integer labels, gradients of every
parameter (the batch-norm scales and shifts included), SGD with momentum 0.9 and weight decay
1e-4 (PyTorch's ``torch.optim.SGD`` rule). caramba runs it as one ``TrainStep`` graph with the
parameters and momentum buffers resident on the runner; PyTorch as eager autograd plus its
optimizer; JAX as ``jit(value_and_grad + update)`` with donated state. The agreement check runs two
steps from fresh state and compares both losses with PyTorch's in float64.
"""

from __future__ import annotations

import numpy as np

from benchmarks.harness import Case, Prepared, Workload
from benchmarks.peers import caramba_train_prep, torch_train_prep, torch_two_losses
from benchmarks.workloads.cnn import CLASSES, RB, RC, RS, _torch_resnet, resnet_forward, resnet_params

# lr 1e-4: the random network starts at a loss of ~63 (no batch statistics); 1e-2 diverges in two steps
LR, MOMENTUM, WD = 1e-4, 0.9, 1e-4


def _labels(rng) -> np.ndarray:
    return rng.integers(0, CLASSES, RB)


def caramba_resnet(params: dict[str, np.ndarray], dtype: str):
    """The network as a ``caramba.train.Module`` whose parameters carry ``params``' names."""
    from caramba import ops
    from caramba.train import Module, Parameter

    class ResNet(Module):
        def __init__(self) -> None:
            super().__init__()
            for name, v in params.items():
                setattr(self, name.replace(".", "_"), Parameter(v.shape, None, dtype))

        def __call__(self, x):
            p = {name: getattr(self, name.replace(".", "_")).read() for name in params}
            return resnet_forward(
                p, x, lambda h, w, s, pad: ops.conv2d(h, w, stride=(s,), padding=(pad,)),
                lambda h: ops.max_pool2d(h, kernel=(3,), stride=(2,), padding=(1,)), ops.relu,
                lambda h: ops.mean(h, axes=(2, 3)), lambda v: ops.reshape(v, shape=(1, -1, 1, 1)))

    return ResNet()


def _torch_trainer(params, x, y, dtype):
    import torch

    tx, ty = torch.from_numpy(x.astype(dtype)), torch.from_numpy(y)

    def fresh():
        ps = {k: torch.tensor(v.astype(dtype), requires_grad=True) for k, v in params.items()}
        return ps, torch.optim.SGD(list(ps.values()), lr=LR, momentum=MOMENTUM, weight_decay=WD)

    def step(state):
        ps, opt = state
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(_torch_resnet(ps, tx), ty)
        loss.backward()
        opt.step()
        return loss

    return step, fresh


class ResNet18Train(Workload):
    name = "resnet18_train_step"
    description = (f"ResNet-18-shaped train step, batch {RB} of {RC}x{RS}x{RS}, {CLASSES} classes, cross-entropy, "
                   f"SGD momentum {MOMENTUM} weight decay {WD:g}")
    peers = ("jax", "torch")

    def cases(self):
        return [Case(self.name, f"{RB}x{RC}x{RS}x{RS} {dt}", {"dtype": dt}, 3 * 2 * 1.82e9 * RB * (RS / 224) ** 2,
                     ("full",), 1e-3 if dt == "float32" else 1e-9, 1e-12)
                for dt in ("float32", "float64")]

    def inputs(self, case, rng):
        dt = case.params["dtype"]
        out = {f"p:{k}": v for k, v in resnet_params(rng, dt).items()}
        out["x"] = rng.standard_normal((RB, RC, RS, RS)).astype(dt)
        out["y"] = _labels(rng)
        return out

    @staticmethod
    def _params(inputs):
        return {k[2:]: v for k, v in inputs.items() if k.startswith("p:")}

    def reference(self, case, inputs):
        step, fresh = _torch_trainer(self._params(inputs), inputs["x"], inputs["y"], np.float64)
        return torch_two_losses(step, fresh())

    def caramba(self, case, runner, inputs):
        from caramba.train import SGD, TrainStep, cross_entropy

        dt = case.params["dtype"]
        params = self._params(inputs)
        model = caramba_resnet(params, dt)
        step = TrainStep(model, lambda m, x, y: cross_entropy(m(x), y),
                         SGD(LR, momentum=MOMENTUM, weight_decay=WD),
                         {"x": ((RB, RC, RS, RS), dt), "y": ((RB,), "int64")})
        return caramba_train_prep(runner, step, {name.replace(".", "_"): v for name, v in params.items()},
                                  {"x": inputs["x"], "y": inputs["y"]}, "TrainStep: one graph, fused SGD, resident state")

    def torch(self, case, inputs):
        step, fresh = _torch_trainer(self._params(inputs), inputs["x"], inputs["y"], np.dtype(case.params["dtype"]))
        return torch_train_prep(step, fresh, "eager autograd + torch.optim.SGD")

    def jax(self, case, inputs):
        import jax
        import jax.numpy as jnp
        from jax import lax

        dt = case.params["dtype"]
        params = self._params(inputs)

        def fwd(p, x):
            return resnet_forward(
                p, x, lambda h, w, s, pad: lax.conv_general_dilated(h, w, (s, s), [(pad, pad)] * 2),
                lambda h: lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), [(0, 0), (0, 0), (1, 1), (1, 1)]),
                jax.nn.relu, lambda h: h.mean(axis=(2, 3)), lambda v: v.reshape(1, -1, 1, 1))

        with jax.enable_x64(True):
            def loss_fn(ps, x, y):
                logits = fwd(ps, x)
                lse = jax.nn.logsumexp(logits, axis=-1)
                return jnp.mean(lse - jnp.take_along_axis(logits, y[:, None], axis=-1)[:, 0])

            def step(ps, bufs, x, y):
                loss, gs = jax.value_and_grad(loss_fn)(ps, x, y)
                # torch's rule: b = m*b + (g + wd*p) (its first step's b = g: the same from zero)
                bufs = {k: MOMENTUM * bufs[k] + (g + WD * ps[k]) for k, g in gs.items()}
                ps = {k: (p - LR * bufs[k]).astype(dt) for k, p in ps.items()}
                return ps, bufs, loss

            jstep = jax.jit(step, donate_argnums=(0, 1))
            x, y = jax.device_put(inputs["x"]), jax.device_put(inputs["y"])

            def fresh():
                ps = {k: jax.device_put(v) for k, v in params.items()}
                return [ps, {k: jnp.zeros_like(p) for k, p in ps.items()}]

            state = fresh()

        def run():
            state[0], state[1], loss = jstep(*state, x, y)
            return jax.block_until_ready(loss)

        def check():
            with jax.enable_x64(True):
                s = fresh()
                losses = []
                for _ in range(2):
                    s[0], s[1], loss = jstep(*s, x, y)
                    losses.append(float(loss))
                return np.array(losses)

        return Prepared(run, fetch=lambda r: np.asarray(r), check=check, context=lambda: jax.enable_x64(True),
                        note="jit(value_and_grad + SGD momentum), donated state")
