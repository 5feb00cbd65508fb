"""Cold start: the README's first command with empty caches, then again with warm ones.

    python -m benchmarks.cold_start [--runs 3]

Runs ``caramba research run examples/digits_mlp.yml`` (the Quickstart's experiment, cpu backend)
as a new process, from its start to its exit after the result table, with a fresh, empty
caramba cache directory (``CARAMBA_CACHE_DIR``: generated kernels, tuning) and Numba cache
(``NUMBA_CACHE_DIR``) and a fresh run store: everything caramba compiles and caches for itself
starts from nothing, as on the first run after ``pip install``. The warm run repeats it with
the caches the cold run left. Python's own bytecode caches are left as they are: a fresh venv
has them for its installed packages (pip compiles them at install time).

Reported: wall-clock seconds (median of ``runs`` cold/warm pairs), the process's CPU seconds,
and the load average when it ran (the number is only meaningful on a quiet machine).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "digits_mlp.yml"


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


def measure(runs: int = 3) -> dict[str, float]:
    """Median wall/CPU seconds of ``runs`` cold runs (each with empty caches) and warm reruns."""
    cold, warm, cold_cpu, warm_cpu = [], [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="caramba-cold-") as tmp:
            t = Path(tmp)
            env = dict(os.environ, CARAMBA_CACHE_DIR=str(t / "cache"), NUMBA_CACHE_DIR=str(t / "numba"),
                       CARAMBA_CPU_TUNING="defaults")
            env.pop("NUMBA_DISABLE_JIT", None)
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
