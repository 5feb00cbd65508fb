"""MLP train step, caramba (cpu, float64) side by side with JAX jit and PyTorch eager.

The step is the ``mlp_train_step`` workload: forward with exact GELU, softmax cross-entropy,
backward, Adam (lr 1e-3, betas 0.9/0.999, eps 1e-8), float64, parameters and optimizer state
resident in every implementation, the same initial parameters and batch. Timings are taken
interleaved in one process (the machine is noisy: compare ratios, not absolute numbers); each
sample is the mean of a few back-to-back steps, and the report gives medians and minimums.

    python -m benchmarks.train_step                 # both variants, every peer installed
    python -m benchmarks.train_step --variant small --samples 30
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 \
      XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
      python -m benchmarks.train_step                 # one thread each (robust on a loaded machine)

Before timing, one step from the same start is compared across implementations (loss and
last-layer weights, relative 1e-8), so the numbers are for the same computation.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

LR, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-8
VARIANTS = {
    "small": (128, (64, 256, 256, 10)),
    "wide": (256, (784, 1024, 1024, 10)),
}


def problem(variant: str, seed: int = 0) -> dict[str, Any]:
    batch, sizes = VARIANTS[variant]
    rng = np.random.default_rng(seed)
    params = []
    for a, b in itertools.pairwise(sizes):
        params.append(rng.standard_normal((a, b)) * math.sqrt(2.0 / (a + b)))
        params.append(np.zeros(b))
    return {"batch": batch, "sizes": sizes, "params": params,
            "x": rng.standard_normal((batch, sizes[0])), "y": rng.integers(0, sizes[-1], batch)}


# ---- caramba ----------------------------------------------------------------------------


def caramba_train_step(batch: int, sizes, lr: float = LR):
    """The caramba ``TrainStep`` of the workload (also used by ``benchmarks/workloads``)."""
    from caramba import ops
    from caramba.train import MLP, Adam, TrainStep, cross_entropy

    model = MLP(list(sizes), activation=lambda h: ops.gelu(h, approximate="none"))
    return TrainStep(model, lambda m, x, y: cross_entropy(m(x), y), Adam(lr, betas=(B1, B2), eps=EPS),
                     {"x": ((batch, sizes[0]), "float64"), "y": ((batch,), "int64")})


def caramba_impl(prob: dict[str, Any], runner: Any):
    """(step, check): ``step()`` runs one resident train step and waits for the loss."""
    from caramba.train import Trainer

    step = caramba_train_step(prob["batch"], prob["sizes"])
    names = list(step.model.parameters())

    def fresh() -> Any:
        trainer = Trainer(step, runner)
        for name in list(runner.state):
            del runner.state[name]
        for name, p in zip(names, prob["params"], strict=True):
            runner.state[name] = runner.upload(p)
        return trainer

    trainer = fresh()
    exe = trainer.executable(("loss",))
    batch = {"x": runner.upload(prob["x"]), "y": runner.upload(prob["y"])}

    def run() -> float:
        return float(exe.run(batch)["loss"].download())

    def check() -> np.ndarray:
        t = fresh()
        loss = t.step(batch)["loss"]
        return np.concatenate([[loss], runner.state[names[-2]].download().ravel()])

    return run, check


def caramba_prepared(variant: str, runner: Any, inputs: dict[str, np.ndarray]):
    """The harness's ``Prepared`` for ``benchmarks.workloads.mlp_train`` (inputs x, y, p0..p5)."""
    from benchmarks.harness import Prepared

    batch, sizes = VARIANTS[variant]
    n = sum(1 for k in inputs if k.startswith("p"))
    prob = {"batch": batch, "sizes": sizes, "params": [inputs[f"p{i}"] for i in range(n)], "x": inputs["x"], "y": inputs["y"]}
    run, check = caramba_impl(prob, runner)
    return Prepared(run, fetch=lambda r: np.asarray(r), check=check, note="TrainStep: one graph, fused Adam, resident state")


# ---- JAX jit ----------------------------------------------------------------------------


def jax_step(params, x, y):
    """The JAX peer of the train step: one jitted function (value_and_grad + Adam) with donated
    state, inputs on the device. Returns ``(run, check)``: ``run()`` does one step and returns
    the loss, ready (call it inside ``jax.enable_x64(True)``); ``check()`` does one step from the
    initial parameters and returns the loss and the last weight matrix."""
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):
        def loss_fn(ps, x, y):
            h = x
            n = len(ps) // 2
            for i in range(n):
                h = h @ ps[2 * i] + ps[2 * i + 1]
                if i < n - 1:
                    h = jax.nn.gelu(h, approximate=False)
            lse = jax.nn.logsumexp(h, axis=-1)
            return jnp.mean(lse - jnp.take_along_axis(h, y[:, None], axis=1)[:, 0])

        def step(ps, ms, vs, t, x, y):
            loss, gs = jax.value_and_grad(loss_fn)(ps, x, y)
            t = t + 1
            c1, c2 = 1 - B1**t, 1 - B2**t
            ms = [B1 * m + (1 - B1) * g for m, g in zip(ms, gs, strict=True)]
            vs = [B2 * v + (1 - B2) * g * g for v, g in zip(vs, gs, strict=True)]
            ps = [p - LR / c1 * m / (jnp.sqrt(v) / jnp.sqrt(c2) + EPS) for p, m, v in zip(ps, ms, vs, strict=True)]
            return ps, ms, vs, t, loss

        jstep = jax.jit(step, donate_argnums=(0, 1, 2))
        x, y = jax.device_put(x), jax.device_put(y)

        def fresh():
            ps = [jax.device_put(p) for p in params]
            return [ps, [jnp.zeros_like(p) for p in ps], [jnp.zeros_like(p) for p in ps], jnp.asarray(0.0)]

        state = fresh()

    def run():
        ps, ms, vs, t, loss = jstep(*state, x, y)
        state[:] = [ps, ms, vs, t]
        return jax.block_until_ready(loss)

    def check() -> np.ndarray:
        with jax.enable_x64(True):
            ps, *_, loss = jstep(*fresh(), x, y)
            return np.concatenate([[float(loss)], np.asarray(ps[-2]).ravel()])

    return run, check


def jax_impl(prob: dict[str, Any]):
    import jax

    step, check = jax_step(prob["params"], prob["x"], prob["y"])

    def run() -> float:
        with jax.enable_x64(True):
            return float(step())

    return run, check


# ---- PyTorch eager ------------------------------------------------------------------------


def torch_impl(prob: dict[str, Any]):
    import torch

    x, y = torch.from_numpy(prob["x"]), torch.from_numpy(prob["y"])

    def build():
        ps = [torch.tensor(p, requires_grad=True) for p in prob["params"]]
        return ps, torch.optim.Adam(ps, lr=LR, betas=(B1, B2), eps=EPS)

    def one_step(ps, opt) -> Any:
        opt.zero_grad(set_to_none=True)
        h = x
        n = len(ps) // 2
        for i in range(n):
            h = torch.addmm(ps[2 * i + 1], h, ps[2 * i])
            if i < n - 1:
                h = torch.nn.functional.gelu(h)
        loss = torch.nn.functional.cross_entropy(h, y)
        loss.backward()
        opt.step()
        return loss

    ps, opt = build()

    def run() -> float:
        return one_step(ps, opt).item()

    def check() -> np.ndarray:
        ps2, opt2 = build()
        loss = one_step(ps2, opt2).item()
        return np.concatenate([[loss], ps2[-2].detach().numpy().ravel()])

    return run, check


# ---- measuring ------------------------------------------------------------------------------


def measure(impls: dict[str, Callable[[], float]], samples: int, min_sample_s: float = 0.02) -> dict[str, list[float]]:
    """Interleaved samples: each round times every implementation once (a few calls each)."""
    calls = {}
    for name, run in impls.items():
        for _ in range(3):  # warm-up (compilation, caches)
            run()
        t0 = time.perf_counter()
        run()
        calls[name] = max(1, math.ceil(min_sample_s / max(time.perf_counter() - t0, 1e-6)))
    times: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(samples):
        for name, run in impls.items():
            n = calls[name]
            t0 = time.perf_counter()
            for _ in range(n):
                run()
            times[name].append((time.perf_counter() - t0) / n)
    return times


def peers(prob: dict[str, Any]) -> dict[str, tuple[Callable, Callable]]:
    out = {}
    for name, make in (("jax jit", jax_impl), ("torch eager", torch_impl)):
        try:
            out[name] = make(prob)
        except ImportError as exc:
            print(f"  ({name} skipped: {exc})")
    return out


def run_variant(variant: str, samples: int, backend: str = "cpu") -> dict[str, Any]:
    from caramba import compute

    prob = problem(variant)
    runner = compute.new(backend)
    impls = {f"caramba {backend}": caramba_impl(prob, runner), **peers(prob)}
    ref = impls[f"caramba {backend}"][1]()
    for name, (_, check) in impls.items():
        got = check()
        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        if err > 1e-8:
            raise AssertionError(f"{name} disagrees with caramba after one step: relative error {err:.2e}")
    times = measure({k: v[0] for k, v in impls.items()}, samples)
    runner.close()
    batch, sizes = VARIANTS[variant]
    return {"variant": variant, "label": f"[{batch},{sizes[0]}]→" + "→".join(map(str, sizes[1:])),
            "median": {k: statistics.median(v) for k, v in times.items()}, "min": {k: min(v) for k, v in times.items()}}


def table(results: list[dict[str, Any]], backend: str = "cpu") -> str:
    me = f"caramba {backend}"
    lines = ["| step | impl | median | min | caramba / impl (median) |", "|---|---|---|---|---|"]
    for r in results:
        for name, med in r["median"].items():
            ratio = r["median"][me] / med
            lines.append(f"| {r['label']} | {name} | {med * 1e3:.2f} ms | {r['min'][name] * 1e3:.2f} ms | "
                         f"{'-' if name == me else f'{ratio:.2f}×'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", choices=sorted(VARIANTS), action="append")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--backend", default="cpu")
    args = ap.parse_args(argv)
    import os

    threads = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "XLA_FLAGS") if k in os.environ}
    print(f"threads: {threads or 'library defaults'}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    results = []
    for v in args.variant or list(VARIANTS):
        print(f"{v}: measuring ...", flush=True)
        results.append(run_variant(v, args.samples, args.backend))
    print(table(results, args.backend))


if __name__ == "__main__":
    main()
