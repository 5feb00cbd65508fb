"""GPT workloads: the char-level GPT train step of examples/char_gpt.yml and a GPT-2-small-shaped
forward.

``char_gpt_train_step``: 2 pre-LN blocks, 4 heads, width 64, context 64, vocabulary 128, tied LM
head, exact GELU, batch 16; softmax cross-entropy, gradients clipped to global norm 1.0, AdamW
(lr 3e-3, weight decay 0.01, constant rate), float64 and float32. The timed call is one whole
step with parameters and optimizer state resident in every implementation. The agreement check
runs two steps from the same initial parameters and batch and compares both losses (the second
depends on every parameter the first step updated); the reference is PyTorch's eager step in
float64 (a hand-written NumPy backward of a GPT would be a project of its own).

``gpt2_small_forward``: GPT-2 small's shapes (12 blocks, 12 heads, width 768, MLP 3072,
vocabulary 50257, tied head), random weights, float32, sequence 128, batch 1 and 8: logits.
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.harness import Case, Prepared, Workload
from benchmarks.peers import caramba_train_prep, torch_train_prep, torch_two_losses

# ---- the model, once per framework ---------------------------------------------------------


def block_names(i: int) -> list[str]:
    return [f"b{i}.{m}.{p}" for m in ("ln1", "q", "k", "v", "proj", "ln2", "fc1", "fc2") for p in ("weight", "bias")]


def caramba_gpt(layers: int, d: int, heads: int, vocab: int, context: int, dtype: str, eps: float = 1e-5):
    """The model as a ``caramba.train.Module``: ``model(ids) -> logits``."""
    from caramba import ops
    from caramba.train import LayerNorm, Linear, Module, Parameter, init

    class Block(Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = LayerNorm(d, eps, dtype=dtype)
            self.q, self.k, self.v, self.proj = (Linear(d, d, dtype=dtype) for _ in range(4))
            self.ln2 = LayerNorm(d, eps, dtype=dtype)
            self.fc1 = Linear(d, 4 * d, dtype=dtype)
            self.fc2 = Linear(4 * d, d, dtype=dtype)

        def __call__(self, x):
            h = self.ln1(x)
            q, k, v = (ops.view_as_heads(lin(h), num_heads=heads) for lin in (self.q, self.k, self.v))
            x = x + self.proj(ops.merge_heads(ops.sdpa(q, k, v, causal=True)))
            return x + self.fc2(ops.gelu(self.fc1(self.ln2(x)), approximate="none"))

    class Gpt(Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = Parameter((vocab, d), init.normal(0.0, 0.02), dtype)
            self.pos = Parameter((context, d), init.normal(0.0, 0.02), dtype)
            for i in range(layers):
                setattr(self, f"b{i}", Block())
            self.lnf = LayerNorm(d, eps, dtype=dtype)
            self.layers = layers

        def __call__(self, ids):
            tok = self.tok.read()
            x = ops.embedding(ids, tok) + self.pos.read()
            for i in range(self.layers):
                x = getattr(self, f"b{i}")(x)
            return self.lnf(x) @ ops.transpose(tok)

    return Gpt()


def torch_forward(p, ids, layers: int, d: int, heads: int, eps: float = 1e-5):
    """The same model in PyTorch (functional, parameters by the caramba names)."""
    import torch.nn.functional as fn

    b, t = ids.shape
    x = p["tok"][ids] + p["pos"][:t]
    split = lambda z: z.reshape(b, t, heads, d // heads).transpose(1, 2)
    for i in range(layers):
        q_ = f"b{i}."
        h = fn.layer_norm(x, (d,), p[q_ + "ln1.weight"], p[q_ + "ln1.bias"], eps)
        q, k, v = (split(h @ p[q_ + f"{m}.weight"] + p[q_ + f"{m}.bias"]) for m in "qkv")
        a = fn.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + a @ p[q_ + "proj.weight"] + p[q_ + "proj.bias"]
        h = fn.layer_norm(x, (d,), p[q_ + "ln2.weight"], p[q_ + "ln2.bias"], eps)
        x = x + fn.gelu(h @ p[q_ + "fc1.weight"] + p[q_ + "fc1.bias"]) @ p[q_ + "fc2.weight"] + p[q_ + "fc2.bias"]
    return fn.layer_norm(x, (d,), p["lnf.weight"], p["lnf.bias"], eps) @ p["tok"].T


def jax_forward(p, ids, layers: int, d: int, heads: int, eps: float = 1e-5):
    """The same model in JAX."""
    import jax
    import jax.numpy as jnp

    b, t = ids.shape

    def ln(z, g, bb):
        mu = z.mean(-1, keepdims=True)
        var = ((z - mu) ** 2).mean(-1, keepdims=True)
        return (z - mu) / jnp.sqrt(var + eps) * g + bb

    split = lambda z: z.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)
    mask = jnp.tril(jnp.ones((t, t), dtype=bool))
    x = p["tok"][ids] + p["pos"][:t]
    for i in range(layers):
        q_ = f"b{i}."
        h = ln(x, p[q_ + "ln1.weight"], p[q_ + "ln1.bias"])
        q, k, v = (split(h @ p[q_ + f"{m}.weight"] + p[q_ + f"{m}.bias"]) for m in "qkv")
        s = jnp.where(mask, q @ k.transpose(0, 1, 3, 2) / math.sqrt(d // heads), -jnp.inf)
        a = (jax.nn.softmax(s, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        x = x + a @ p[q_ + "proj.weight"] + p[q_ + "proj.bias"]
        h = ln(x, p[q_ + "ln2.weight"], p[q_ + "ln2.bias"])
        x = x + jax.nn.gelu(h @ p[q_ + "fc1.weight"] + p[q_ + "fc1.bias"], approximate=False) @ p[q_ + "fc2.weight"] + p[q_ + "fc2.bias"]
    return ln(x, p["lnf.weight"], p["lnf.bias"]) @ p["tok"].T


def initial_params(model, seed: int = 0) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in model.initial_values(seed).items()}


# ---- the char-GPT train step ---------------------------------------------------------------

CB, CT, CD, CH, CV, CL = 16, 64, 64, 4, 128, 2
LR, WD, CLIP, BETAS, EPS = 3e-3, 0.01, 1.0, (0.9, 0.999), 1e-8


def _torch_trainer(params: dict[str, np.ndarray], x, y, dtype):
    """(step, fresh): ``step(state)`` runs one eager step and returns the loss tensor."""
    import torch

    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def fresh():
        ps = {k: torch.tensor(v.astype(dtype), requires_grad=True) for k, v in params.items()}
        opt = torch.optim.AdamW(list(ps.values()), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
        return ps, opt

    def step(state):
        ps, opt = state
        opt.zero_grad(set_to_none=True)
        logits = torch_forward(ps, tx, CL, CD, CH)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, CV), ty.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(ps.values()), CLIP)
        opt.step()
        return loss

    return step, fresh


class CharGptTrain(Workload):
    name = "char_gpt_train_step"
    description = f"char-level GPT train step ({CL} layers, {CH} heads, width {CD}, context {CT}, vocab {CV}, batch {CB}; AdamW, clip 1.0)"
    peers = ("jax", "torch")

    def cases(self):
        per_token = 6 * (CL * 12 * CD * CD + CV * CD) + 6 * CL * CT * CD  # matmuls fwd+bwd, attention
        flops = float(per_token * CB * CT)
        return [Case(self.name, f"{CB}x{CT} {dt}", {"dtype": dt}, flops,
                     ("full",), 1e-8 if dt == "float64" else 2e-4, 1e-12)
                for dt in ("float64", "float32")]

    def inputs(self, case, rng):
        dt = case.params["dtype"]
        params = initial_params(caramba_gpt(CL, CD, CH, CV, CT, dt))
        out = {f"p:{k}": v for k, v in params.items()}
        out["x"] = rng.integers(0, CV, (CB, CT))
        out["y"] = rng.integers(0, CV, (CB, CT))
        return out

    @staticmethod
    def _params(inputs):
        return {k[2:]: v for k, v in inputs.items() if k.startswith("p:")}

    def reference(self, case, inputs):
        step, fresh = _torch_trainer(self._params(inputs), inputs["x"], inputs["y"], np.float64)
        return torch_two_losses(step, fresh())

    def caramba(self, case, runner, inputs):
        from caramba.train import AdamW, TrainStep, cross_entropy

        dt = case.params["dtype"]
        model = caramba_gpt(CL, CD, CH, CV, CT, dt)
        step = TrainStep(model, lambda m, x, y: cross_entropy(m(x), y),
                         AdamW(LR, betas=BETAS, eps=EPS, weight_decay=WD, clip_norm=CLIP),
                         {"x": ((CB, CT), "int64"), "y": ((CB, CT), "int64")})
        return caramba_train_prep(runner, step, self._params(inputs), {"x": inputs["x"], "y": inputs["y"]},
                                  "TrainStep: one graph, fused AdamW, resident state")

    def torch(self, case, inputs):
        dt = np.dtype(case.params["dtype"])
        step, fresh = _torch_trainer(self._params(inputs), inputs["x"], inputs["y"], dt)
        return torch_train_prep(step, fresh, "eager autograd + torch.optim.AdamW")

    def jax(self, case, inputs):
        import jax
        import jax.numpy as jnp

        dt = case.params["dtype"]
        params = self._params(inputs)
        b1, b2 = BETAS

        with jax.enable_x64(True):
            def loss_fn(ps, x, y):
                logits = jax_forward(ps, x, CL, CD, CH)
                lse = jax.nn.logsumexp(logits, axis=-1)
                return jnp.mean(lse - jnp.take_along_axis(logits, y[..., None], axis=-1)[..., 0])

            def step(ps, ms, vs, t, x, y):
                loss, gs = jax.value_and_grad(loss_fn)(ps, x, y)
                norm = jnp.sqrt(sum(jnp.sum(g.astype(jnp.float64) ** 2) for g in jax.tree_util.tree_leaves(gs)))
                scale = jnp.minimum(1.0, CLIP / (norm + 1e-6)).astype(dt)
                t = t + 1
                c1, c2 = 1 - b1**t, 1 - b2**t
                gs = {k: g * scale for k, g in gs.items()}
                ms = {k: b1 * ms[k] + (1 - b1) * g for k, g in gs.items()}
                vs = {k: b2 * vs[k] + (1 - b2) * g * g for k, g in gs.items()}
                ps = {k: (p * (1 - LR * WD) - (LR / c1) * ms[k] / (jnp.sqrt(vs[k]) / jnp.sqrt(c2) + EPS)).astype(dt)
                      for k, p in ps.items()}
                return ps, ms, vs, t, loss

            jstep = jax.jit(step, donate_argnums=(0, 1, 2))
            x, y = jax.device_put(inputs["x"]), jax.device_put(inputs["y"])

            def fresh():
                ps = {k: jax.device_put(v) for k, v in params.items()}
                return [ps, {k: jnp.zeros_like(p) for k, p in ps.items()}, {k: jnp.zeros_like(p) for k, p in ps.items()},
                        jnp.asarray(0, dtype=dt)]

            state = fresh()

        def run():
            state[0], state[1], state[2], state[3], loss = jstep(*state, x, y)
            return jax.block_until_ready(loss)

        def check():
            with jax.enable_x64(True):
                s = fresh()
                losses = []
                for _ in range(2):
                    s[0], s[1], s[2], s[3], loss = jstep(*s, x, y)
                    losses.append(float(loss))
                return np.array(losses)

        return Prepared(run, fetch=lambda r: np.asarray(r), check=check, context=lambda: jax.enable_x64(True),
                        note="jit(value_and_grad + clip + AdamW), donated state")


# ---- GPT-2 small forward -------------------------------------------------------------------

GL, GD, GH, GV, GT = 12, 768, 12, 50257, 128


class Gpt2SmallForward(Workload):
    name = "gpt2_small_forward"
    description = f"GPT-2-small-shaped forward ({GL} layers, width {GD}, {GH} heads, vocab {GV}), float32, seq {GT}: logits"
    peers = ("jax", "torch")

    def cases(self):
        per_token = 2 * (GL * 12 * GD * GD + GV * GD) + 4 * GL * GT * GD
        return [Case(self.name, f"{b}x{GT} float32", {"batch": b}, float(per_token * b * GT),
                     ("full",), 1e-2, 1e-2) for b in (1, 8)]  # float32 through 12 blocks

    def inputs(self, case, rng):
        params = initial_params(caramba_gpt(GL, GD, GH, GV, GT, "float32"))
        out = {f"p:{k}": v for k, v in params.items()}
        out["ids"] = rng.integers(0, GV, (case.params["batch"], GT))
        return out

    @staticmethod
    def _params(inputs, dtype=None):
        return {k[2:]: (v if dtype is None else v.astype(dtype)) for k, v in inputs.items() if k.startswith("p:")}

    def reference(self, case, inputs):
        import torch

        ps = {k: torch.from_numpy(v) for k, v in self._params(inputs, np.float64).items()}
        with torch.no_grad():
            return torch_forward(ps, torch.from_numpy(inputs["ids"]), GL, GD, GH).numpy()

    def caramba(self, case, runner, inputs):
        from caramba.ir.graph import Graph

        model = caramba_gpt(GL, GD, GH, GV, GT, "float32")
        g = Graph("gpt2_small_forward")
        with g:
            g.output("out", model(g.input("ids", (case.params["batch"], GT), "int64")))
        for name in list(runner.state):
            del runner.state[name]
        for name, v in self._params(inputs).items():
            runner.state[name] = runner.upload(v)
        exe = runner.compile(g)
        ids = {"ids": runner.upload(inputs["ids"])}

        def run():
            out = exe.run(ids)["out"]
            out.wait()
            return out

        return Prepared(run, fetch=lambda r: r.download(), note="weights resident (runner state)")

    def torch(self, case, inputs):
        import torch

        ps = {k: torch.from_numpy(v) for k, v in self._params(inputs).items()}
        ids = torch.from_numpy(inputs["ids"])

        def run():
            with torch.no_grad():
                return torch_forward(ps, ids, GL, GD, GH)

        return Prepared(run, fetch=lambda r: r.numpy())

    def jax(self, case, inputs):
        import jax

        ps = {k: jax.device_put(v) for k, v in self._params(inputs).items()}
        ids = jax.device_put(inputs["ids"])
        f = jax.jit(lambda p, i: jax_forward(p, i, GL, GD, GH))

        def run():
            return jax.block_until_ready(f(ps, ids))

        return Prepared(run, fetch=lambda r: np.asarray(r))
