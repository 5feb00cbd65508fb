"""The cpu backend with this machine's tuned settings against its defaults.

    python -m benchmarks.cpu_tuning [--budget 20] [--rounds 7]

The settings are this machine's entry of the tuning file (``caramba backends --tune``); when
there is none, a tuning is measured now (``--budget`` seconds) and used without being stored.
Each case is compiled twice, once under each setting (the settings are read when a kernel is
made), and the two executables are timed in alternating samples, each going first in every
other round (the median of ``rounds`` samples each; a load change on a shared machine lands on
both alike). Both must agree with
NumPy: the settings choose between code paths that compute the same values.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# (label, x shape, w shape: a product, a dense+GELU, or None: the elementwise chain)
CASES: list[tuple[str, tuple[int, ...], tuple[int, ...] | None]] = [
    ("matmul [64,64]x[64,64]", (64, 64), (64, 64)),
    ("matmul [128,256]x[256,256]", (128, 256), (256, 256)),
    ("matmul [512,512]x[512,512]", (512, 512), (512, 512)),
    ("dense+gelu [256,512]x[512,512]", (256, 512), (512, 512)),
    ("exp(x)*tanh(x)+x [256,64]", (256, 64), None),
    ("exp(x)*tanh(x)+x [512,1024]", (512, 1024), None),
]


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return erf(x)


def _graph(label: str, a: tuple[int, ...], b: tuple[int, ...] | None):
    import caramba
    from caramba import ops

    with caramba.Graph(label.split(" ")[0]) as g:
        x = g.input("x", a)
        if b is None:
            y = ops.exp(x) * ops.tanh(x) + x
        else:
            w = g.input("w", b)
            y = ops.gelu(x @ w) if label.startswith("dense") else x @ w
        g.output("y", y)
    return g


def _reference(label: str, x: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    if w is None:
        return np.exp(x) * np.tanh(x) + x
    y = x @ w
    return 0.5 * y * (1.0 + _erf(y / np.sqrt(2.0))) if label.startswith("dense") else y


def _per_call(fn: Callable[[], Any], min_s: float = 5e-3) -> tuple[int, float]:
    fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t >= min_s or n >= 1 << 14:
            return n, t / n
        n *= 2


def measure(budget_s: float = 20.0, rounds: int = 7) -> dict[str, Any]:
    """{"source", "settings": {name: (default, tuned)}, "rows": [(case, default s, tuned s)]}."""
    from caramba.backends.cpu import tuning
    from caramba.compute import new

    tuning.activate()
    tuned, source = tuning.load()
    base = tuning.defaults()
    if not source.startswith("tuned on this machine"):
        tuned = tuning.validate(tuning.tune(budget_s)["settings"])
        source = f"measured now ({budget_s:.0f} s budget; not stored)"
    rng = np.random.default_rng(0)
    rows = []
    try:
        with new("cpu") as runner:
            for label, a, b in CASES:
                x = rng.uniform(-1, 1, a)
                w = rng.uniform(-1, 1, b) / np.sqrt(b[0]) if b is not None else None
                inputs = {"x": runner.upload(x)} | ({"w": runner.upload(w)} if w is not None else {})
                ref = _reference(label, x, w)
                exes = {}
                for name, t in (("default", base), ("tuned", tuned)):
                    tuning.apply(t)
                    exe = runner.compile(_graph(label, a, b))
                    got = exe.run(inputs)["y"].download()
                    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
                    exes[name] = exe
                calls = {k: _per_call(lambda e=e, i=inputs: e.run(i))[0] for k, e in exes.items()}
                samples: dict[str, list[float]] = {k: [] for k in exes}
                for r in range(rounds):
                    order = list(exes.items())
                    for k, e in order if r % 2 == 0 else order[::-1]:  # neither always goes first
                        e.run(inputs)
                        t0 = time.perf_counter()
                        for _ in range(calls[k]):
                            e.run(inputs)
                        samples[k].append((time.perf_counter() - t0) / calls[k])
                rows.append((label, statistics.median(samples["default"]), statistics.median(samples["tuned"])))
    finally:
        tuning.reset()
        tuning.activate()
    settings = {k: (getattr(base, k), getattr(tuned, k)) for k in base.as_dict()}
    return {"source": source, "settings": settings, "rows": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    r = measure(args.budget, args.rounds)
    print(f"settings: {r['source']}")
    for k, (d, t) in r["settings"].items():
        print(f"  {k:<18} default {d:<10g} tuned {t:g}")
    print(f"{'case':<34} {'default':>10} {'tuned':>10} {'tuned/default':>14}")
    for label, d, t in r["rows"]:
        print(f"{label:<34} {d * 1e6:>8.0f}µs {t * 1e6:>8.0f}µs {t / d:>13.2f}x")


if __name__ == "__main__":
    main()
