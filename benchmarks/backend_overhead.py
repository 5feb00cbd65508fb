"""What caramba's xla and onnx backends cost on top of JAX and ONNX Runtime used directly.

    python -m benchmarks.backend_overhead                  # every case
    python -m benchmarks.backend_overhead --quick          # the small shapes only

Cases: dense + exact GELU (float64 and float32) and the MLP train step (forward, softmax
cross-entropy, backward, Adam; float64). Peers, prepared as a careful user would:

* **JAX**: ``jax.jit`` of the same computation (``jax.nn.gelu(approximate=False)``;
  ``value_and_grad`` + Adam with donated state for the train step), inputs already on the
  device, float64 through ``jax.enable_x64``; timed call = dispatch + ``block_until_ready``.
* **ONNX Runtime, same model**: the ONNX model caramba exported for the case, run by an
  ``InferenceSession`` with IO binding that binds its inputs and outputs once (ORT then writes
  every run into the same output buffers: the cheapest possible call). The ratio is caramba's
  own per-call cost: input checks, fresh output buffers (so earlier results stay valid),
  state bookkeeping.
* **xla:sync** (small dense cases, informational): caramba's opt-in synchronous CPU client,
  which runs a program on the calling thread instead of handing it to XLA's worker threads.
* **ONNX Runtime, idiomatic model** (dense + GELU float32 only): MatMul + Add + ``Gelu``
  (opset 20) with its float32 ``Erf``. float64 has no such model (no float64 ``Erf`` kernel).

caramba and its peer run in one process in short alternating pairs (each sample the mean of
back-to-back calls lasting ~10 ms); the overhead is the median of the per-pair ratios, so the
slow load changes of a shared machine cancel out of it, and the times shown are the medians of
the samples. Every case is set up first, then the pairs are taken in rounds over all cases
(a few pairs of each case per round), so each row samples the whole run: on a small graph
the overhead depends on the machine's load (~3 µs of Python per call, amplified while XLA's or
ORT's threads wake), and the load changes over tens of seconds (41 pairs taken at once read
+2% to +21% for the same code in different runs). Results agree with each other to 1e-9
(float64) before timing.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

DENSE = ((8, 128, 256), (32, 512, 1024), (256, 1024, 4096))
QUICK_DENSE = ((8, 128, 256), (32, 512, 1024))
PAIRS = 41
ROUNDS = 5  # the pairs of each case are taken in this many rounds over all cases
SYNC_ROW_MAX = 1 << 20  # m*k*n up to which the dense case also times xla:sync (a dispatch-bound graph)


Row = tuple[str, str, float, float, float]  # case, "backend / peer", caramba s, peer s, median paired ratio


def _calls_for(fn: Callable[[], object], target_s: float) -> int:
    """How many back-to-back calls of ``fn`` last about ``target_s`` (after two warm-up calls)."""
    fn()
    fn()
    t = time.perf_counter()
    fn()
    return max(1, int(target_s / max(time.perf_counter() - t, 1e-7)))


def _sample(fn: Callable[[], object], calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls


@dataclass
class Contest:
    """caramba and its peer on one case, ready to time (both warmed up, results agreeing)."""

    case: str
    pair: str  # "backend / peer"
    caramba: Callable[[], object]
    peer: Callable[[], object]
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext


def timed(contests: list[Contest], pairs: int, rounds: int = ROUNDS, target_s: float = 0.01) -> list[Row]:
    """Each contest's caramba and peer timed in short back-to-back pairs, the order alternating,
    taken in ``rounds`` rounds over all contests (``pairs`` in all per contest, rounded up).

    A row is (case, pair, median caramba time, median peer time, median of the per-pair
    ratios). The ratio of each pair compares two samples taken ~10 ms apart, so the slow drifts
    of a shared machine cancel out of it; the rounds spread each contest over the whole run."""
    calls = []
    for c in contests:
        with c.context():
            calls.append((_calls_for(c.caramba, target_s), _calls_for(c.peer, target_s)))
    per_round = max(1, math.ceil(pairs / rounds))
    times: list[tuple[list[float], list[float], list[float]]] = [([], [], []) for _ in contests]
    for r in range(rounds):
        for c, (n_c, n_p), (tc, tp, ratios) in zip(contests, calls, times):
            with c.context():
                for i in range(per_round):
                    if (r * per_round + i) % 2:
                        a = _sample(c.caramba, n_c)
                        b = _sample(c.peer, n_p)
                    else:
                        b = _sample(c.peer, n_p)
                        a = _sample(c.caramba, n_c)
                    tc.append(a)
                    tp.append(b)
                    ratios.append(a / b)
    return [(c.case, c.pair, statistics.median(tc), statistics.median(tp), statistics.median(ratios))
            for c, (tc, tp, ratios) in zip(contests, times)]


def paired(caramba: Callable[[], object], peer: Callable[[], object], pairs: int,
           target_s: float = 0.01) -> tuple[float, float, float]:
    """One contest timed alone (``timed`` in one round): (median caramba time, median peer
    time, median of the per-pair ratios)."""
    (_, _, c, p, ratio), = timed([Contest("", "", caramba, peer)], pairs, rounds=1, target_s=target_s)
    return c, p, ratio


def _x64() -> contextlib.AbstractContextManager:
    """The context the JAX peers run in: float64 enabled, as caramba's xla runner scopes it."""
    import jax

    return jax.enable_x64(True)


# ---- dense + GELU -------------------------------------------------------------------------
def dense_contests(m: int, k: int, n: int, dtype: str, closing: contextlib.ExitStack) -> list[Contest]:
    """dense + exact GELU through xla and onnx, each beside its peer (runners closed by ``closing``)."""
    import jax
    import jax.numpy as jnp
    import onnxruntime as ort
    from onnx import helper

    import caramba
    from caramba import compute, ops

    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k)).astype(dtype)
    w = (rng.standard_normal((k, n)) / math.sqrt(k)).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    g = caramba.trace(lambda x, w, b: ops.gelu(x @ w + b), ((m, k), dtype), ((k, n), dtype), ((n,), dtype), name="dense")
    label = f"dense+gelu {m}x{k}x{n} {dtype}"
    contests = []

    # xla vs JAX
    xr = closing.enter_context(compute.new("xla"))
    exe = xr.compile(g)
    xt = {"x": xr.upload(x), "w": xr.upload(w), "b": xr.upload(b)}

    def caramba_xla():
        exe.run(xt)["out"].wait()

    with jax.enable_x64(True):
        dev = [jax.device_put(a) for a in (x, w, b)]
        jf = jax.jit(lambda x, w, b: jax.nn.gelu(jnp.matmul(x, w, precision=jax.lax.Precision.HIGHEST) + b, approximate=False))

        def direct_jax():
            jax.block_until_ready(jf(*dev))

        ref = np.asarray(jf(*dev))
    tol = 1e-9 if dtype == "float64" else 1e-4
    np.testing.assert_allclose(exe.run(xt)["out"].download(), ref, rtol=tol, atol=tol)
    contests.append(Contest(label, "xla / JAX jit", caramba_xla, direct_jax, _x64))

    if m * k * n <= SYNC_ROW_MAX:  # informational: the opt-in synchronous client on a dispatch-bound graph
        sr = closing.enter_context(compute.new("xla:sync"))
        sexe = sr.compile(g)
        st = {"x": sr.upload(x), "w": sr.upload(w), "b": sr.upload(b)}

        def caramba_xla_sync():
            sexe.run(st)["out"].wait()

        np.testing.assert_allclose(sexe.run(st)["out"].download(), ref, rtol=tol, atol=tol)
        contests.append(Contest(label, "xla:sync / JAX jit (informational)", caramba_xla_sync, direct_jax, _x64))

    # onnx vs ORT on the same exported model
    orr = closing.enter_context(compute.new("onnx"))
    oexe = orr.compile(g)
    ot = {"x": orr.upload(x), "w": orr.upload(w), "b": orr.upload(b)}

    def caramba_onnx():
        oexe.run(ot)

    sess = oexe.session
    binding = sess.io_binding()
    for name, onnx_name in oexe.exported.inputs.items():
        binding.bind_ortvalue_input(onnx_name, ot[name].value)
    binding.bind_output(oexe.exported.outputs["out"], "cpu")

    def direct_ort():
        sess.run_with_iobinding(binding)

    np.testing.assert_allclose(oexe.run(ot)["out"].download(), ref, rtol=tol, atol=tol)
    contests.append(Contest(label, "onnx / ORT same model", caramba_onnx, direct_ort))

    if dtype == "float32":  # the idiomatic ORT model: Gelu(opset 20) with float32 Erf
        nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"]),
                 helper.make_node("Gelu", ["y"], ["out"], approximate="none")]
        f32 = 1
        gr = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info(nm, f32, list(a.shape)) for nm, a in (("x", x), ("w", w), ("b", b))],
                               [helper.make_tensor_value_info("out", f32, None)])
        model = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
        so = ort.SessionOptions()
        so.log_severity_level = 3
        s2 = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        b2 = s2.io_binding()
        vals = {nm: ort.OrtValue.ortvalue_from_numpy(a) for nm, a in (("x", x), ("w", w), ("b", b))}
        for nm, v in vals.items():
            b2.bind_ortvalue_input(nm, v)
        b2.bind_output("out", "cpu")

        def idiomatic_ort():
            s2.run_with_iobinding(b2)

        contests.append(Contest(label, "onnx / ORT idiomatic Gelu op (informational)", caramba_onnx, idiomatic_ort))
    return contests


# ---- MLP train step -----------------------------------------------------------------------
def train_contests(variant: str, closing: contextlib.ExitStack) -> list[Contest]:
    """The MLP train step through xla (donating) and onnx, each beside its peer."""

    from benchmarks.train_step import caramba_train_step, jax_step, problem
    from caramba import compute
    from caramba.train import Trainer

    prob = problem(variant)
    label = f"MLP train step {variant} {prob['batch']}x{'-'.join(map(str, prob['sizes']))} float64"
    contests = []
    runners = {}
    steps = {}
    for spec in ("xla", "onnx"):
        # the JAX peer donates its state buffers: caramba's xla runner does too (xla:donate)
        r = closing.enter_context(compute.new("xla:donate" if spec == "xla" else spec))
        step = caramba_train_step(prob["batch"], prob["sizes"])
        names = list(step.model.parameters())
        trainer = Trainer(step, r)
        for name, p in zip(names, prob["params"], strict=True):
            r.state[name] = r.upload(p)
        exe = trainer.executable(("loss",))
        batch = {"x": r.upload(prob["x"]), "y": r.upload(prob["y"])}
        runners[spec] = r
        steps[spec] = (exe, batch)

    def caramba_step(spec):
        exe, batch = steps[spec]

        def run():
            exe.run(batch)["loss"].wait()

        return run

    direct_jax, _ = jax_step(prob["params"], prob["x"], prob["y"])
    contests.append(Contest(label, "xla:donate / JAX jit (both donate state)", caramba_step("xla"), direct_jax, _x64))

    exe, batch = steps["onnx"]
    sess = exe.session
    binding = sess.io_binding()
    r = runners["onnx"]
    for name, onnx_name in exe.exported.inputs.items():
        binding.bind_ortvalue_input(onnx_name, batch[name].value)
    for name, onnx_name in exe.exported.state_inputs.items():
        binding.bind_ortvalue_input(onnx_name, r.state.ensure(exe.graph.state[name]).value)
    for onnx_name in list(exe.exported.outputs.values()) + list(exe.exported.state_outputs.values()):
        binding.bind_output(onnx_name, "cpu")

    def direct_ort():  # the same step graph; state is not fed back (ORT alone has no resident state)
        sess.run_with_iobinding(binding)

    contests.append(Contest(label, "onnx / ORT same model", caramba_step("onnx"), direct_ort))
    return contests


def study(shapes=DENSE, variants=("small", "wide"), pairs: int = PAIRS, rounds: int = ROUNDS) -> list[Row]:
    """Every case set up, then timed in rounds over all of them (see the module doc)."""
    with contextlib.ExitStack() as closing:
        contests = [c for m, k, n in shapes for dtype in ("float64", "float32") for c in dense_contests(m, k, n, dtype, closing)]
        contests += [c for variant in variants for c in train_contests(variant, closing)]
        return timed(contests, pairs, rounds)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small shapes only")
    ap.add_argument("--pairs", type=int, default=PAIRS, help="timed caramba/peer pairs per case")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="rounds over all cases the pairs are spread over")
    args = ap.parse_args(argv)
    rows = study(QUICK_DENSE if args.quick else DENSE, ("small",) if args.quick else ("small", "wide"), args.pairs, args.rounds)
    print("| case | caramba backend / peer | caramba | peer | overhead |")
    print("|---|---|---:|---:|---:|")
    for label, pair, c, p, ratio in rows:
        print(f"| {label} | {pair} | {c * 1e6:.1f} us | {p * 1e6:.1f} us | {100 * (ratio - 1):+.1f}% |")


if __name__ == "__main__":
    main()
