"""This machine's settings for the cpu backend: measured once, stored in the user cache.

The cpu backend makes a few size decisions from constants calibrated on one machine (2 cores):

========================  ===================================  ==================================
setting                   what it decides                      default (module constant)
========================  ===================================  ==================================
``small_flops``           BLAS threads per size class: below   ``blas.SMALL_FLOPS`` 3e7
                          it a product runs on one BLAS thread
``block_flops``           the thread-split threshold of        ``blas.BLOCK_FLOPS`` 3e6
                          products: from it, row blocks on the
                          cpu workers, one BLAS thread each
``min_block_rows``        rows each such block gets at least   ``blas.MIN_BLOCK_ROWS`` 32
``parallel_min_work``     fusion limit: weighted element       ``fused.codegen.PARALLEL_MIN_WORK``
                          steps from which a fused kernel is   65536
                          split over the workers
``loop_split``            elements from which an optimizer     ``kernels.train.LOOP_SPLIT`` 32768
                          update is split over the workers
``conv_batch_min_pixels`` conv algorithm: output pixels per    ``conv.CONV_BATCH_MIN_PIXELS`` 64
                          image from which a convolution runs
                          as one GEMM per image (``batched``),
                          below it as one GEMM for the batch
                          (``flat``): ``backends/cpu/conv.py``
========================  ===================================  ==================================

``caramba backends --tune`` (``tune``) measures them here within a time budget and stores them
(``save``) in ``<cache_dir>/tuning/cpu.json``, keyed by a fingerprint of the machine (CPU
model, usable cores, BLAS vendor and version: ``fingerprint``), so a cache directory shared
between machines (a home folder on NFS) keeps each machine's own. The cpu backend applies the
stored settings of this machine when its first runner is made (``activate``); with none stored
it keeps the defaults. The file is input like any other: anything wrong with it (not JSON, a
wrong shape, a value of the wrong type or out of bounds, too large) is one clear warning and
the defaults, never an error. ``caramba backends -v`` shows what is in use.

Only sizes change: every setting selects between code paths that compute the same bits.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

FORMAT = 1
MAX_FILE_BYTES = 1 << 20  # a tuning file is a few hundred bytes per machine
MAX_MACHINES = 64  # entries kept in one file (oldest dropped first)

# field -> (module, attribute) the setting lives in (read when a kernel is made)
TARGETS: dict[str, tuple[str, str]] = {
    "small_flops": ("caramba.backends.cpu.blas", "SMALL_FLOPS"),
    "block_flops": ("caramba.backends.cpu.blas", "BLOCK_FLOPS"),
    "min_block_rows": ("caramba.backends.cpu.blas", "MIN_BLOCK_ROWS"),
    "parallel_min_work": ("caramba.backends.cpu.fused.codegen", "PARALLEL_MIN_WORK"),
    "loop_split": ("caramba.backends.cpu.kernels.train", "LOOP_SPLIT"),
    "conv_batch_min_pixels": ("caramba.backends.cpu.conv", "CONV_BATCH_MIN_PIXELS"),
}
# inclusive bounds a stored value must lie in (anything else is a damaged or hostile file)
BOUNDS: dict[str, tuple[float, float]] = {
    "small_flops": (1e3, 1e12),
    "block_flops": (1e3, 1e12),
    "min_block_rows": (1, 1 << 16),
    "parallel_min_work": (1 << 8, 1 << 26),
    "loop_split": (1 << 8, 1 << 26),
    "conv_batch_min_pixels": (1, 1 << 20),
}


class TuningWarning(UserWarning):
    """The stored cpu tuning could not be used; the cpu backend runs on its defaults. Cause: a
    tuning file that is damaged, from another caramba, or edited by hand. Fix: run
    ``caramba backends --tune`` to measure and rewrite it (or delete the file)."""


@dataclass(frozen=True)
class Tuning:
    """The cpu backend's size decisions (see the module docstring)."""

    small_flops: float = 3.0e7
    block_flops: float = 3.0e6
    min_block_rows: int = 32
    parallel_min_work: int = 1 << 16
    loop_split: int = 1 << 15
    conv_batch_min_pixels: int = 64

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


_LOCK = threading.Lock()
_DEFAULTS: list[Tuning] = []
_ACTIVE: dict[str, Any] = {}  # "tuning", "source" once activated in this process


def defaults() -> Tuning:
    """The settings the code ships with: the module constants as they were before any tuning
    was applied in this process."""
    with _LOCK:
        if not _DEFAULTS:
            _DEFAULTS.append(Tuning(**{f: _target_get(f) for f in TARGETS}))
        return _DEFAULTS[0]


def _target_get(name: str) -> Any:
    import importlib

    module, attr = TARGETS[name]
    return getattr(importlib.import_module(module), attr)


def apply(t: Tuning) -> None:
    """Make ``t`` the settings kernels made from now on use (kernels already made keep theirs)."""
    import importlib

    defaults()  # remember the shipped values first
    for name, (module, attr) in TARGETS.items():
        value = getattr(t, name)
        setattr(importlib.import_module(module), attr, int(value) if isinstance(getattr(Tuning(), name), int) else float(value))


# ---- the machine and the file ---------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()[:200]
    except OSError:
        pass
    return (platform.processor() or platform.machine() or "unknown")[:200]


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _blas() -> str:
    """NumPy's BLAS (the one products run on; other libraries' BLAS, loaded or not, are left
    out so the fingerprint does not depend on what else the process imported)."""
    try:
        import numpy  # noqa: F401  (its BLAS is loaded)
        from threadpoolctl import threadpool_info

        libs = [lib for lib in threadpool_info() if lib.get("user_api") == "blas"]
        libs.sort(key=lambda lib: ("numpy" not in str(lib.get("filepath", "")), str(lib.get("filepath", ""))))
        if libs:
            lib = libs[0]
            return f"{lib.get('internal_api')} {lib.get('version')} {lib.get('architecture') or ''}".strip()
    except Exception:  # no threadpoolctl, or it cannot inspect this process
        pass
    return "unknown"


def machine() -> dict[str, Any]:
    """What the fingerprint is made of."""
    return {"cpu": _cpu_model(), "cores": _cores(), "arch": platform.machine(), "blas": _blas()}


def fingerprint(info: dict[str, Any] | None = None) -> str:
    """A short stable key for this machine (CPU model, usable cores, architecture, BLAS)."""
    info = machine() if info is None else info
    return hashlib.sha256(json.dumps(info, sort_keys=True).encode()).hexdigest()[:16]


ENV = "CARAMBA_CPU_TUNING"  # a tuning file to use instead, or "defaults" to read none (tests, reproductions)


def path() -> Path:
    """``$CARAMBA_CPU_TUNING`` when it names a file, else ``<cache_dir>/tuning/cpu.json``
    (``cache_dir`` setting, ``CARAMBA_CACHE_DIR``)."""
    env = os.environ.get(ENV, "")
    if env and env != "defaults":
        return Path(env).expanduser()
    from caramba.config import settings

    return Path(settings().cache_dir).expanduser() / "tuning" / "cpu.json"


def _problem(where: Path, why: str) -> str:
    return (f"cpu tuning file {where} is not usable ({why}); the cpu backend uses its default settings. "
            "Run `caramba backends --tune` to measure this machine and rewrite it, or delete the file.")


def _read(where: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the file's document, or None; the reason it is not usable, or None: missing is fine)."""
    try:
        size = where.stat().st_size
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read it: {exc.strerror or exc}"
    if not where.is_file():
        return None, "not a regular file"
    if size > MAX_FILE_BYTES:
        return None, f"{size} bytes, more than the {MAX_FILE_BYTES} a tuning file can be"
    try:
        text = where.read_bytes()[:MAX_FILE_BYTES + 1].decode("utf-8")
        doc = json.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot read it: {exc}"
    except (ValueError, RecursionError) as exc:
        return None, f"not valid JSON: {str(exc)[:120]}"
    if not isinstance(doc, dict):
        return None, f"expected a JSON object, found {type(doc).__name__}"
    if doc.get("format") != FORMAT:
        return None, f"format {str(doc.get('format'))[:20]!r}, expected {FORMAT}"
    if not isinstance(doc.get("machines"), dict):
        return None, "no 'machines' object"
    return doc, None


def validate(settings: Any) -> Tuning:
    """A ``Tuning`` from a stored settings object; ValueError saying what is wrong with it."""
    if not isinstance(settings, dict):
        raise ValueError(f"settings must be an object, found {type(settings).__name__}")
    names = {f.name for f in fields(Tuning)}
    unknown = sorted(str(k)[:40] for k in settings if k not in names)
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(unknown[:5])}; known: {', '.join(sorted(names))}")
    out = {}
    for name, value in settings.items():
        lo, hi = BOUNDS[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name} must be a number, found {type(value).__name__}")
        if not math.isfinite(value) or not lo <= value <= hi:
            raise ValueError(f"{name} = {str(value)[:30]} is outside [{lo:g}, {hi:g}]")
        if isinstance(getattr(Tuning(), name), int) and value != int(value):
            raise ValueError(f"{name} must be a whole number, found {value}")
        out[name] = value
    return replace(defaults(), **out)


def load(where: Path | None = None, key: str | None = None) -> tuple[Tuning, str]:
    """(this machine's stored settings, where they came from) or (the defaults, why); a file
    that is there but not usable warns (``TuningWarning``) and gives the defaults."""
    if where is None and os.environ.get(ENV, "") == "defaults":
        return defaults(), f"defaults ({ENV}=defaults)"
    where = path() if where is None else where
    doc, why = _read(where)
    if doc is None:
        if why is not None:
            warnings.warn(_problem(where, why), TuningWarning, stacklevel=2)
            return defaults(), f"defaults (tuning file not usable: {why})"
        return defaults(), "defaults (not tuned on this machine: caramba backends --tune)"
    key = fingerprint() if key is None else key
    entry = doc["machines"].get(key)
    if entry is None:
        return defaults(), "defaults (not tuned on this machine: caramba backends --tune)"
    try:
        if not isinstance(entry, dict):
            raise ValueError(f"the entry for this machine must be an object, found {type(entry).__name__}")
        t = validate(entry.get("settings"))
    except ValueError as exc:
        warnings.warn(_problem(where, f"machine {key}: {exc}"), TuningWarning, stacklevel=2)
        return defaults(), f"defaults (tuning file not usable: {exc})"
    when = entry.get("measured_at")
    return t, f"tuned on this machine ({key}{', ' + str(when)[:32] if isinstance(when, str) else ''})"


def save(result: dict[str, Any], where: Path | None = None) -> Path:
    """Store a ``tune`` result as this machine's entry (other machines' entries are kept,
    a damaged file is replaced); written atomically."""
    from caramba.errors import ConfigError

    where = path() if where is None else where
    doc, _ = _read(where)
    machines = dict(doc["machines"]) if doc is not None else {}
    machines.pop(result["fingerprint"], None)
    machines[result["fingerprint"]] = {k: result[k] for k in ("machine", "measured_at", "settings", "measurements", "notes")}
    while len(machines) > MAX_MACHINES:
        machines.pop(next(iter(machines)))
    text = json.dumps({"format": FORMAT, "machines": machines}, indent=1, sort_keys=False)
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        tmp = where.with_name(f".{where.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, where)
    except OSError as exc:
        raise ConfigError(f"cannot write the cpu tuning to {where}: {exc.strerror or exc}",
                          hint="set a writable cache directory: CARAMBA_CACHE_DIR=/path or cache_dir in caramba.yml") from None
    return where


def activate() -> tuple[Tuning, str]:
    """Apply this machine's stored settings once per process (the cpu backend calls this when
    it makes a runner); returns (settings, where they came from)."""
    with _LOCK:
        done = "tuning" in _ACTIVE
    if not done:
        from caramba.errors import CarambaError

        try:
            t, source = load()
        except CarambaError as exc:  # the settings (cache_dir) cannot be read: a runner still works
            warnings.warn(f"cpu tuning not read ({exc}); the cpu backend uses its default settings", TuningWarning,
                          stacklevel=2)
            t, source = defaults(), "defaults (settings not readable)"
        apply(t)
        with _LOCK:
            _ACTIVE.update(tuning=t, source=source)
    return _ACTIVE["tuning"], _ACTIVE["source"]


def reset() -> None:
    """Back to the defaults, and read the file again at the next ``activate`` (tests, --tune)."""
    apply(defaults())
    with _LOCK:
        _ACTIVE.clear()


def describe(fresh: bool = False) -> str:
    """One line: the settings in use in this process (once a runner was made), else, or with
    ``fresh``, those the file holds for this machine (what a new process would use)."""
    with _LOCK:
        active = dict(_ACTIVE)
    if active and not fresh:
        t, source = active["tuning"], active["source"]
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TuningWarning)
            t, source = load()
    shown = ", ".join(f"{k} {_fmt(v)}" for k, v in t.as_dict().items())
    return f"{source}: {shown}"


def _fmt(v: float | int) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


# ---- measuring ------------------------------------------------------------------------------


def _time(fn: Callable[[], Any], min_s: float = 2e-3, repeats: int = 5) -> float:
    """Seconds per call: the best of ``repeats`` samples, each enough calls to last ``min_s``."""
    fn()
    n, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t >= min_s or n >= 1 << 16:
            break
        n *= 2
    best = t / n
    for _ in range(repeats - 1):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def _crossover(points: list[tuple[float, float, float]], margin: float = 0.95) -> float | None:
    """The size from which the second variant wins (time < margin x the first) at every larger
    measured size: geometric mean of the last losing size and the first winning one; None if it
    never wins; the smallest size / 2 if it always does. ``points``: (size, t_first, t_second)."""
    points = sorted(points)
    first_win = None
    for i in range(len(points) - 1, -1, -1):
        _, a, b = points[i]
        if b < margin * a:
            first_win = i
        else:
            break
    if first_win is None:
        return None
    if first_win == 0:
        return points[0][0] / 2
    return math.sqrt(points[first_win - 1][0] * points[first_win][0])


def _blas_classes(deadline: float, notes: list[str], log: Callable[[str], None]) -> tuple[float | None, list[Any]]:
    """small_flops: square float64 products on one BLAS thread against the count the process
    chose, growing sizes until the budget is spent."""
    import numpy as np

    from caramba.backends.cpu import blas

    policy = blas._policy()
    if policy is None:
        notes.append("small_flops: not measured (the BLAS is not an OpenBLAS whose threads caramba sets)")
        return None, []
    many = policy.sync()
    if many < 2:
        notes.append("small_flops: not measured (BLAS runs on one thread here)")
        return None, []
    rng = np.random.default_rng(0)
    points, rows, cut = [], [], False
    try:
        for n in (32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512):
            if time.perf_counter() > deadline:
                cut = True
                notes.append(f"small_flops: budget spent after [{rows[-1]['n']}x{rows[-1]['n']}]" if rows else
                             "small_flops: budget spent before the first size")
                break
            a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
            out = np.empty((n, n))
            policy.set(1)
            one = _time(lambda a=a, b=b, out=out: np.matmul(a, b, out))
            policy.set(many)
            all_ = _time(lambda a=a, b=b, out=out: np.matmul(a, b, out))
            flops = 2.0 * n ** 3
            points.append((flops, one, all_))
            rows.append({"n": n, "flops": flops, "one_thread_s": one, f"{many}_threads_s": all_})
            log(f"BLAS [{n}x{n}] float64: 1 thread {one * 1e6:.0f} µs, {many} threads {all_ * 1e6:.0f} µs")
    finally:
        policy.set(many)
        policy.ours = many
    x = _crossover(points) if points else None
    if x is None and points and not cut:
        x = points[-1][0] * 2
        notes.append(f"small_flops: one BLAS thread was as fast up to {points[-1][0]:.3g} flops (the largest size)")
    return x, rows


def _product_split(deadline: float, notes: list[str], log: Callable[[str], None]) -> tuple[float | None, list[Any]]:
    """block_flops: products in row blocks on the cpu workers (one BLAS thread each) against one
    BLAS call (as ``matmul_for`` would make it without the split), growing sizes."""
    import numpy as np

    from caramba.backends.cpu import blas, workers
    from caramba.ir.dtypes import DType

    parts = workers.count()
    if parts < 2 or blas._policy() is None:
        notes.append("block_flops: not measured (one worker, or a BLAS whose threads caramba does not set)")
        return None, []
    rng = np.random.default_rng(1)
    points, rows, cut = [], [], False
    saved = blas.BLOCK_FLOPS, blas.MIN_BLOCK_ROWS
    try:
        for m, k, n in ((64, 32, 64), (64, 64, 64), (128, 64, 128), (128, 64, 256), (128, 128, 256), (256, 128, 256),
                        (256, 256, 256), (512, 256, 512)):
            if time.perf_counter() > deadline:
                cut = True
                notes.append("block_flops: budget spent" + (f" after [{rows[-1]['shape']}]" if rows else " before the first size"))
                break
            if m < 2 * parts:
                continue
            x, w = rng.standard_normal((m, k)), rng.standard_normal((k, n))
            out = np.empty((m, n))
            blas.BLOCK_FLOPS, blas.MIN_BLOCK_ROWS = 0.0, 1
            split = blas.matmul_for((m, k), (k, n), (m, n), DType.float64)
            blas.BLOCK_FLOPS = float("inf")
            whole = blas.matmul_for((m, k), (k, n), (m, n), DType.float64)
            t_whole = _time(lambda x=x, w=w, out=out, f=whole: f(x, w, out))
            t_split = _time(lambda x=x, w=w, out=out, f=split: f(x, w, out))
            flops = 2.0 * m * k * n
            points.append((flops, t_whole, t_split))
            rows.append({"shape": f"{m}x{k}x{n}", "flops": flops, "one_call_s": t_whole, "row_blocks_s": t_split})
            log(f"product [{m},{k}]x[{k},{n}]: one call {t_whole * 1e6:.0f} µs, {parts} row blocks {t_split * 1e6:.0f} µs")
    finally:
        blas.BLOCK_FLOPS, blas.MIN_BLOCK_ROWS = saved
    x = _crossover(points) if points else None
    if x is None and points and not cut:
        x = points[-1][0] * 2
        notes.append(f"block_flops: row blocks never won up to {points[-1][0]:.3g} flops (the largest size)")
    return x, rows


def _update_split(deadline: float, notes: list[str], log: Callable[[str], None]) -> float | None:
    """loop_split: an SGD-with-momentum update (``kernels.train``'s Numba loop) on growing
    parameters, whole on this thread against split in blocks over the cpu workers."""
    import numpy as np

    from caramba.backends.cpu import workers
    from caramba.backends.cpu.kernels import train as tk

    parts = workers.count()
    if parts < 2 or tk._loops() is None:
        notes.append("loop_split: not measured (one worker, or no Numba)")
        return None
    from caramba.ops.train import sgd_elem

    spare = tk.Spare(tk.SPARE_KEEP)
    rng = np.random.default_rng(2)
    saved = tk.LOOP_SPLIT
    points, cut = [], False
    scalars = (0.01, 1.0, 0.9, 0.0, False, 0.0)  # lr, grad scale, momentum, dampening, nesterov, weight decay
    try:
        for log2 in range(11, 21):
            if time.perf_counter() > deadline:
                cut = True
                notes.append(f"loop_split: budget spent after 2^{points[-1][3]} elements" if points else
                             "loop_split: budget spent before the first size")
                break
            n = 1 << log2
            arrays = (rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n))
            tk.LOOP_SPLIT = 1 << 40
            t_whole = _time(lambda arrays=arrays: tk._run(spare, "sgd", sgd_elem, arrays, scalars))
            tk.LOOP_SPLIT = 0
            t_split = _time(lambda arrays=arrays: tk._run(spare, "sgd", sgd_elem, arrays, scalars))
            points.append((float(n), t_whole, t_split, log2))
            log(f"sgd update of {n} float64: whole {t_whole * 1e6:.0f} µs, {parts} blocks {t_split * 1e6:.0f} µs")
    finally:
        tk.LOOP_SPLIT = saved
    x = _crossover([p[:3] for p in points]) if points else None
    if x is None and points and not cut:
        x = points[-1][0] * 2
        notes.append(f"loop_split: blocks never won up to {points[-1][0]:.0f} elements (the largest size)")
    return x


def _conv_layout(deadline: float, notes: list[str], log: Callable[[str], None]) -> tuple[float | None, list[Any]]:
    """conv_batch_min_pixels: a float32 3x3 convolution (batch 8, 64 -> 64 channels, padding 1)
    on growing images, one GEMM for the batch (``flat``) against one per image (``batched``)."""
    import numpy as np

    from caramba.backends.cpu import conv

    if conv._loops() is None:
        notes.append("conv_batch_min_pixels: not measured (no Numba: convolutions run on NumPy)")
        return None, []
    rng = np.random.default_rng(3)
    points, rows, cut = [], [], False
    for side in (2, 4, 8, 12, 16, 24):
        if time.perf_counter() > deadline:
            cut = True
            notes.append("conv_batch_min_pixels: budget spent" + (f" after {rows[-1]['image']}" if rows else " before the first size"))
            break
        xs, ws = (8, 64, side, side), (64, 64, 3, 3)
        x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
        t = {alg: _time(lambda f=conv.conv_kernel(xs, ws, (1, 1), (1, 1), (1, 1), 1, np.float32, alg), x=x, w=w: f(x, w),
                        repeats=3)
             for alg in ("flat", "batched")}
        points.append((float(side * side), t["flat"], t["batched"]))
        rows.append({"image": f"{side}x{side}", "pixels": side * side, "flat_s": t["flat"], "batched_s": t["batched"]})
        log(f"conv 3x3 8x64x{side}x{side} float32: flat {t['flat'] * 1e6:.0f} µs, batched {t['batched'] * 1e6:.0f} µs")
    x = _crossover(points) if points else None
    if x is None and points and not cut:
        x = points[-1][0] * 2
        notes.append(f"conv_batch_min_pixels: one GEMM per image never won up to {points[-1][0]:g} pixels (the largest size)")
    return x, rows


def _pow2(x: float) -> int:
    return 1 << max(0, round(math.log2(max(x, 1.0))))


def _clamp(name: str, value: float) -> float:
    lo, hi = BOUNDS[name]
    return min(max(value, lo), hi)


def tune(budget_s: float = 30.0, log: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Measure this machine's settings within about ``budget_s`` seconds (plus the first
    compile of a small native helper when its cache is empty); returns the entry ``save``
    stores: fingerprint, machine, measured_at, settings, measurements, notes.

    A size class cut short by the budget keeps its default unless a crossover was seen.
    Products and optimizer updates are measured directly (on the code paths the settings
    choose between); the fused-kernel split threshold keeps the defaults' ratio to the
    optimizer's (two weighted element steps per update element)."""
    from caramba.backends.cpu import workers

    start = time.perf_counter()
    budget_s = max(0.05, float(budget_s))
    base = defaults()
    notes: list[str] = []
    info = machine()
    settings = base.as_dict()
    small, blas_rows = _blas_classes(start + 0.35 * budget_s, notes, log)
    if small is not None:
        settings["small_flops"] = float(_clamp("small_flops", small))
    block, split_rows = _product_split(start + 0.6 * budget_s, notes, log)
    if block is not None:
        settings["block_flops"] = float(_clamp("block_flops", block))
    loop = _update_split(start + 0.85 * budget_s, notes, log)
    if loop is not None:
        settings["loop_split"] = int(_clamp("loop_split", _pow2(loop)))
        # a fused kernel's weighted steps cost about half an update element's: the defaults' ratio
        ratio = base.parallel_min_work / base.loop_split
        settings["parallel_min_work"] = int(_clamp("parallel_min_work", _pow2(loop * ratio)))
    pixels, conv_rows = _conv_layout(start + budget_s, notes, log)
    if pixels is not None:
        settings["conv_batch_min_pixels"] = int(_clamp("conv_batch_min_pixels", _pow2(pixels)))
    validate(settings)  # what is stored must load back
    return {
        "fingerprint": fingerprint(info),
        "machine": info,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": settings,
        "measurements": {"blas_threads": blas_rows, "product_split": split_rows, "conv_layout": conv_rows,
                         "workers": workers.count(), "seconds": round(time.perf_counter() - start, 3)},
        "notes": notes,
    }
