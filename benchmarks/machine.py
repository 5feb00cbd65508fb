"""Machine facts printed beside every benchmark table (CPU, cores, BLAS kernel, versions)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
from importlib import metadata


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas_info() -> list[dict]:
    try:
        from threadpoolctl import threadpool_info

        return [
            {k: d.get(k) for k in ("internal_api", "version", "architecture", "num_threads", "user_api", "filepath")}
            for d in threadpool_info()
        ]
    except Exception:  # threadpoolctl missing: say so rather than guess
        return []


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("caramba", "numpy", "scipy", "numba", "jax", "jaxlib", "torch", "onnxruntime"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return out


def machine_info() -> dict:
    return {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "blas": blas_info(),
        "versions": versions(),
    }
