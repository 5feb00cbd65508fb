"""The benchmark harness: every workload through caramba and its peers, in one process run.

Machines here are noisy (±10-35% between runs), so every number that matters is a ratio of
two measurements taken in the same run. Each implementation of a case is warmed up
(compile/jit happens there) and calibrated, then all of them are timed in turns: sample k of
every implementation before sample k+1 of any, each sample averaging enough calls to last a
few milliseconds and preceded by an untimed call, so a load change on a shared machine lands
on all of them alike (timed one after the other, the MLP train step's caramba/JAX ratio swung
0.64-1.75x between runs).
Each is reported as the median and min of its samples. Every implementation's output is
checked against a float64 NumPy reference; a disagreement is a failure, never a silently
tabulated number.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from caramba.errors import PrecisionError, UnsupportedOperation


class NotYet(Exception):
    """The caramba piece a workload needs does not exist yet (it is listed, never faked)."""


class NotApplicable(Exception):
    """A peer cannot run this case (e.g. ONNX Runtime has no float64 Erf)."""


@dataclass
class Case:
    """One parametrization of a workload (e.g. GEMM n=512 float64)."""

    workload: str
    label: str
    params: dict[str, Any]
    flops: float | None = None
    suites: tuple[str, ...] = ("full",)
    rtol: float = 1e-9
    atol: float = 1e-12


@dataclass
class Prepared:
    """An implementation ready to time: ``run()`` does one call (synchronously),
    ``fetch(result)`` turns its result into a NumPy array for the agreement check."""

    run: Callable[[], Any]
    fetch: Callable[[Any], np.ndarray] = lambda r: np.asarray(r)
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    note: str = ""
    # For stateful work (train steps) the agreement check runs separately on fresh state.
    check: Callable[[], np.ndarray] | None = None


@dataclass
class Result:
    workload: str
    case: str
    impl: str
    status: str  # ok | fail (disagrees) | error | refused (lowering said no) | not yet | n/a
    median_s: float | None = None
    min_s: float | None = None
    samples: int = 0
    calls_per_sample: int = 0
    flops: float | None = None
    ratio: float | None = None  # median / best peer median (same case)
    max_rel_err: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def gflops(self) -> float | None:
        if self.flops and self.median_s:
            return self.flops / self.median_s / 1e9
        return None

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items()}
        d["gflops"] = self.gflops
        return d


@dataclass
class Timing:
    warmup: int = 2
    samples: int = 7
    min_sample_s: float = 0.01
    max_case_s: float = 6.0  # stop sampling an implementation after this long


QUICK = Timing(warmup=2, samples=5, min_sample_s=0.005, max_case_s=2.0)
FULL = Timing(warmup=3, samples=9, min_sample_s=0.02, max_case_s=6.0)


@dataclass
class _Timed:
    """One implementation under measurement: its calibration and the samples taken so far."""

    prep: Prepared
    calls: int = 1
    samples: int = 0  # how many it gets
    per_call: list[float] = field(default_factory=list)
    result: Any = None
    error: BaseException | None = None
    warm: bool = True  # start each turn with an untimed call (not for slow implementations)

    def sample(self) -> None:
        """One timed sample. Its turn starts with an untimed call: the implementation before it
        left the caches and thread pools its own, and a loop of one implementation's calls is
        what is measured (a 40 ms train step timed as one call right after another framework's
        read 10% slower)."""
        run, calls = self.prep.run, self.calls
        with self.prep.context():
            if self.warm:
                self.result = run()
            t0 = time.perf_counter()
            for _ in range(calls):
                self.result = run()
            self.per_call.append((time.perf_counter() - t0) / calls)


def _calibrate(t: _Timed, timing: Timing) -> None:
    """Warm up (the first call compiles / jits / uploads kernels) and choose calls per sample.

    A slow implementation (one call longer than a quarter of ``max_case_s``: a software GPU
    adapter running a transformer block, say) is warmed up once and sampled as often as the
    budget allows, at least once, so one slow backend cannot take a suite past its time limit."""
    prep = t.prep
    with prep.context():
        t.result = prep.run()
        one = _timed_call(t)
        slow = one > timing.max_case_s / 4
        if slow:  # confirmed by a second call: a one-off pause (seen: a 2.7 s second train step
            # deep into a full run, 17 ms after) must not leave a fast implementation 2 samples
            one = min(one, _timed_call(t))
            slow = one > timing.max_case_s / 4
        if not slow:
            for _ in range(max(timing.warmup - 2, 0)):
                t.result = prep.run()
            t0 = time.perf_counter()  # calibrate: enough calls per sample to last min_sample_s
            t.result = prep.run()
            one = max(time.perf_counter() - t0, 1e-7)
    t.calls = max(1, int(timing.min_sample_s / one))
    t.warm = not slow  # a call of seconds is not what the previous implementation's caches decide
    budget_samples = max(1 if slow else 3, int(timing.max_case_s / max(one * (t.calls + t.warm), 1e-9)))
    t.samples = min(timing.samples, budget_samples)
    if slow:
        t.per_call.append(one)  # a slow call's timing is a sample already


def _timed_call(t: _Timed) -> float:
    t0 = time.perf_counter()
    t.result = t.prep.run()
    return max(time.perf_counter() - t0, 1e-7)


# A pause after each sample when implementations take turns: the thread pools of PyTorch
# (OpenMP), JAX (Eigen) and OpenBLAS keep spinning for a while after their last call and would
# otherwise take a core from whichever implementation is sampled next (measured: caramba's
# dense+GELU float32 went from 17.6 ms sampled after JAX alone to 26 ms after PyTorch and NumPy).
SETTLE_S = 0.1


def measure_all(preps: list[Prepared], timing: Timing) -> list[_Timed]:
    """Every implementation calibrated in turn, then sampled in rounds (see the module doc).
    An implementation that raises keeps its error (``_Timed.error``); the others go on."""
    timed = [_Timed(p) for p in preps]
    for t in timed:
        try:
            _calibrate(t, timing)
        except Exception as exc:
            t.error = exc
    for k in range(max((t.samples for t in timed), default=0)):
        for t in timed:
            if t.error is None and k < t.samples and len(t.per_call) < t.samples:
                try:
                    t.sample()
                except Exception as exc:
                    t.error = exc
                if len(timed) > 1:
                    time.sleep(SETTLE_S)
    return timed


def rel_err(got: np.ndarray, ref: np.ndarray, atol: float) -> float:
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return float("inf")
    if not np.all(np.isfinite(got) == np.isfinite(ref)):
        return float("inf")
    denom = np.maximum(np.abs(ref), atol)
    diff = np.abs(got - ref)
    return float(np.max(diff / denom)) if diff.size else 0.0


ImplFactory = Callable[[Case, dict[str, np.ndarray]], Prepared]


class Workload:
    """Subclass per workload: ``cases()``, ``inputs()``, ``reference()``, ``caramba()`` and
    peer methods named after the peers (``numpy``, ``jax``, ``torch``, ``onnxruntime``)."""

    name: str = "?"
    description: str = ""
    peers: tuple[str, ...] = ("numpy", "jax", "torch", "onnxruntime")

    def cases(self) -> list[Case]:
        raise NotImplementedError

    def inputs(self, case: Case, rng: np.random.Generator) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def reference(self, case: Case, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """float64 NumPy reference of the case's output."""
        raise NotImplementedError

    def caramba(self, case: Case, runner: Any, inputs: dict[str, np.ndarray]) -> Prepared:
        raise NotImplementedError


def run_workloads(
    workloads: Iterable[Workload],
    suite: str,
    backends: list[str],
    peers: Iterable[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Result]:
    """Run every case of every workload in ``suite`` through caramba backends and peers."""
    from caramba.compute import new

    timing = QUICK if suite == "quick" else FULL
    wanted_peers = set(peers) if peers is not None else None
    results: list[Result] = []
    runners: dict[str, Any] = {}
    try:
        for w in workloads:
            for case in w.cases():
                if suite not in case.suites:
                    continue
                if progress:
                    progress(f"{w.name} {case.label}")
                rng = np.random.default_rng(0)
                inputs = w.inputs(case, rng)
                ref = w.reference(case, inputs)
                impls: list[tuple[str, ImplFactory]] = []
                for peer in w.peers:
                    if wanted_peers is None or peer in wanted_peers:
                        impls.append((peer, lambda c, i, w=w, p=peer: _peer(p, getattr(w, p)(c, i))))
                for spec in backends:
                    if spec not in runners:
                        runners[spec] = new(spec)
                    impls.append((f"caramba:{spec}", lambda c, i, w=w, r=runners[spec]: w.caramba(c, r, i)))
                case_results = _run_case(w, case, impls, inputs, ref, timing)
                _ratios(case_results)
                results.extend(case_results)
    finally:
        for r in runners.values():
            r.close()
    return results


def _peer(name: str, prep: Prepared) -> Prepared:
    """A peer's implementation as it runs on its own: NumPy's with OpenBLAS at the thread count
    the process chose. It shares the process with caramba's cpu runner, which leaves OpenBLAS
    at one thread after its small products (``backends/cpu/blas.py``): NumPy's products would
    run single-threaded and understate NumPy."""
    if name != "numpy":
        return prep
    inner = prep.context

    @contextlib.contextmanager
    def blas_threads():
        from threadpoolctl import threadpool_limits

        from caramba.backends.cpu.blas import chosen_threads

        n = chosen_threads()
        with (threadpool_limits(limits=n, user_api="blas") if n else contextlib.nullcontext()), inner():
            yield

    return replace(prep, context=blas_threads)


def _run_case(w: Workload, case: Case, impls: list[tuple[str, ImplFactory]], inputs, ref,
              timing: Timing) -> list[Result]:
    """Prepare every implementation of a case, time them together, judge each."""
    bases = [Result(w.name, case.label, impl, "error", flops=case.flops) for impl, _ in impls]
    prepared: list[Prepared | Result] = [_prepare(base, factory, case, inputs) for base, (_, factory) in zip(bases, impls)]
    timed = iter(measure_all([p for p in prepared if isinstance(p, Prepared)], timing))
    return [p if isinstance(p, Result) else _judge(base, next(timed), case, ref) for base, p in zip(bases, prepared)]


def _run_one(w: Workload, case: Case, impl: str, factory: ImplFactory, inputs, ref, timing: Timing) -> Result:
    """One implementation of a case, timed alone."""
    return _run_case(w, case, [(impl, factory)], inputs, ref, timing)[0]


def _prepare(base: Result, factory: ImplFactory, case: Case, inputs) -> Prepared | Result:
    """The implementation ready to time, or the Result that says why there is none."""
    try:
        return factory(case, inputs)
    except NotYet as exc:
        base.status, base.note = "not yet", str(exc)
    except (NotApplicable, ImportError, ModuleNotFoundError) as exc:
        base.status, base.note = "n/a", f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
    except (UnsupportedOperation, PrecisionError) as exc:
        return _refused(base, exc)
    except Exception as exc:  # a failure to set up is reported, not hidden
        _errored(base, exc)
    return base


def _judge(base: Result, t: _Timed, case: Case, ref) -> Result:
    """The measured implementation's Result: its times if its output agrees with the reference."""
    try:
        if t.error is not None:
            raise t.error
        prep = t.prep
        got = prep.check() if prep.check is not None else prep.fetch(t.result)
    except (UnsupportedOperation, PrecisionError) as exc:
        return _refused(base, exc)
    except Exception as exc:
        return _errored(base, exc)
    err = rel_err(got, ref, case.atol)
    status = "ok" if err <= case.rtol else "fail"
    note = t.prep.note
    if status == "fail":
        note = (note + "; " if note else "") + f"disagrees with the float64 reference: max rel err {err:.3g} > {case.rtol:g}"
    per_call = t.per_call
    return Result(base.workload, base.case, base.impl, status, float(np.median(per_call)), float(np.min(per_call)),
                  len(per_call), t.calls, case.flops, None, err, note)


def _errored(base: Result, exc: BaseException) -> Result:
    base.note = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    base.extra["traceback"] = "".join(traceback.format_exception(exc, limit=4))
    return base


def _refused(base: Result, exc: Exception) -> Result:
    """The backend's lowering refused the graph (an op it does not claim, a buffer larger than
    the device binds, ...): what its capabilities say, reported with the first reason."""
    lines = str(exc).splitlines()
    base.status, base.note = "refused", " ".join(line.strip() for line in lines[:2])[:240]
    return base


def _ratios(results: list[Result]) -> None:
    peers = [r for r in results if not r.impl.startswith("caramba") and r.status == "ok"]
    if not peers:
        return
    best = min(r.median_s for r in peers if r.median_s)
    for r in results:
        if r.status == "ok" and r.median_s:
            r.ratio = r.median_s / best
