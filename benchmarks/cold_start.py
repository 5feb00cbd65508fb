"""Cold start: the README's first command with empty caches, then again with warm ones.

    python -m benchmarks.cold_start [--runs 3]

Runs ``caramba research run examples/digits_mlp.yml`` (the Quickstart's experiment, cpu backend)
as a new process, from its start to its exit after the result table, with a fresh, empty
caramba cache directory (``CARAMBA_CACHE_DIR``: generated kernels, tuning) and Numba cache
(``NUMBA_CACHE_DIR``) and a fresh run store: everything caramba compiles and caches for itself
starts from nothing, as on the first run after ``pip install``. The warm run repeats it with
the caches the cold run left. caramba itself is imported from a fresh copy of its package with
no bytecode (``pip install -e`` compiles none: the first run compiles caramba's modules and
writes their ``.pyc``, as Python does by default; ``PYTHONDONTWRITEBYTECODE`` is cleared for the
child). The installed dependencies keep their bytecode (pip compiles it at install time).

Reported: wall-clock seconds (median of ``runs`` cold/warm pairs), the process's CPU seconds,
and the load average when it ran (the number is only meaningful on a quiet machine).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "digits_mlp.yml"


def _fresh_package(dest: Path) -> Path:
    """A copy of the caramba package under ``dest/src`` without bytecode; returns ``dest/src``."""
    import caramba

    src = Path(caramba.__file__).resolve().parent
    shutil.copytree(src, dest / "src" / "caramba", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest / "src"


def _one(env: dict[str, str], store: Path) -> tuple[float, float]:
    """(wall s, CPU s of the child) for one run of the Quickstart command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", "from caramba.cli import main; main()", "research", "run", str(EXAMPLE), "--store", str(store)],
                          env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"the Quickstart command failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _check_copy(env: dict[str, str], src: Path) -> None:
    out = subprocess.run([sys.executable, "-c", "import caramba; print(caramba.__file__)"],
                         env=dict(env, PYTHONDONTWRITEBYTECODE="1"),  # leaves the copy without bytecode
                         capture_output=True, text=True, timeout=120)
    if not out.stdout.strip().startswith(str(src)):
        raise RuntimeError(f"the child imports caramba from {out.stdout.strip() or out.stderr[-500:]}, not the fresh copy")


def measure(runs: int = 3) -> dict[str, float]:
    """Median wall/CPU seconds of ``runs`` cold runs (each with empty caches) and warm reruns."""
    cold, warm, cold_cpu, warm_cpu = [], [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="caramba-cold-") as tmp:
            t = Path(tmp)
            src = _fresh_package(t)
            env = dict(os.environ, CARAMBA_CACHE_DIR=str(t / "cache"), NUMBA_CACHE_DIR=str(t / "numba"),
                       CARAMBA_CPU_TUNING="defaults",
                       PYTHONPATH=os.pathsep.join([str(src), *filter(None, [os.environ.get("PYTHONPATH")])]))
            for var in ("NUMBA_DISABLE_JIT", "PYTHONDONTWRITEBYTECODE", "CARAMBA_CPU_FORK_COMPILE"):
                env.pop(var, None)
            _check_copy(env, src)
            w, c = _one(env, t / "store")
            cold.append(w)
            cold_cpu.append(c)
            w, c = _one(env, t / "store")
            warm.append(w)
            warm_cpu.append(c)
    return {"cold_s": statistics.median(cold), "warm_s": statistics.median(warm),
            "cold_cpu_s": statistics.median(cold_cpu), "warm_cpu_s": statistics.median(warm_cpu),
            "runs": runs, "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    r = measure(ap.parse_args().runs)
    print(f"cold {r['cold_s']:.1f} s (cpu {r['cold_cpu_s']:.1f} s), warm {r['warm_s']:.1f} s "
          f"(cpu {r['warm_cpu_s']:.1f} s); median of {r['runs']}; load average {r['load']:.1f}")


if __name__ == "__main__":
    main()
