"""The cpu backend: the float64 reference implementation of every op (NumPy + SciPy)."""

from __future__ import annotations

import platform

from caramba.compute.buildinfo import BuildInfo
from caramba.compute.registry import MAX_THREADS, Option

OPTIONS = (
    Option("threads", "int", "BLAS threads while this runner lives (default: all cores)", maximum=MAX_THREADS),
    Option("debug", "flag", "check every kernel output's shape and dtype against the graph"),
)


def build_info() -> BuildInfo:
    import numpy

    from caramba.backends.cpu import workers

    versions = {"numpy": numpy.__version__}
    try:
        import scipy

        versions["scipy"] = scipy.__version__
    except ImportError:  # pragma: no cover - scipy is a core dependency
        return BuildInfo("cpu", False, reason="scipy is missing", install_hint="pip install scipy")
    return BuildInfo(
        "cpu",
        True,
        location="cpu",
        versions=versions,
        details={"machine": platform.machine(), "python": platform.python_version(), "parallel work": workers.describe()},
    )


def create(options: dict) -> "CpuRunner":  # noqa: F821
    from caramba.backends.cpu import tuning
    from caramba.backends.cpu.runner import CpuRunner

    tuning.activate()  # this machine's stored size settings (caramba backends --tune), once per process

    return CpuRunner(threads=options.get("threads"), debug=options.get("debug", False))
