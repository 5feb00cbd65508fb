"""Hardware profiles: what a node can run (backends with their build info), its memory, cores
and measured float64 GEMM throughput. The orchestrator matches jobs against these."""

from __future__ import annotations

import os
import platform
import socket
import time

from pydantic import BaseModel, ConfigDict, Field


class BackendInfo(BaseModel):
    """One backend as a node sees it (a serializable ``compute.BuildInfo``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    available: bool
    location: str | None = None
    reason: str | None = None
    versions: dict[str, str] = Field(default_factory=dict)


class HardwareProfile(BaseModel):
    """A node's hardware and software: ``backends`` by name (available or not, with why),
    ``memory_bytes``, ``cpus``, ``gflops`` (measured float64 GEMM, 0 if not measured) and
    free-form ``labels``. ``slots`` is how many jobs it runs at once."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    node_id: str
    hostname: str = ""
    cpus: int = Field(1, ge=1)
    memory_bytes: int = Field(0, ge=0)
    gflops: float = Field(0.0, ge=0)
    slots: int = Field(1, ge=1)
    backends: dict[str, BackendInfo] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)

    def has_backend(self, name: str) -> bool:
        info = self.backends.get(name)
        return info is not None and info.available

    @property
    def available_backends(self) -> list[str]:
        return sorted(n for n, b in self.backends.items() if b.available)


def backend_infos(names: list[str] | None = None) -> dict[str, BackendInfo]:
    """Build info of the registered backends (cheap: no heavy toolkit import where avoidable)."""
    from caramba.compute.registry import BACKENDS, build_info

    out = {}
    for name in names if names is not None else list(BACKENDS):
        try:
            b = build_info(name)
            out[name] = BackendInfo(
                name=name, available=b.available, location=b.location, reason=b.reason, versions=dict(b.versions)
            )
        except Exception as exc:  # a broken backend package must not hide the others
            out[name] = BackendInfo(name=name, available=False, reason=f"{type(exc).__name__}: {exc}")
    return out


def backend_resources(infos: dict[str, BackendInfo] | None = None) -> dict[str, float]:
    """Placement resources this node offers: ``backend:<name>`` for each available backend."""
    infos = backend_infos() if infos is None else infos
    return {f"backend:{n}": 1000.0 for n, b in infos.items() if b.available}


def memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def measure_gflops(n: int = 256, repeats: int = 3) -> float:
    """Best-of-``repeats`` float64 GEMM throughput of this node's NumPy BLAS, in GFLOP/s."""
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    a @ b  # warm up the BLAS pools
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2.0 * n**3 / max(best, 1e-9) / 1e9


def probe(
    node_id: str | None = None,
    *,
    measure: bool = True,
    slots: int | None = None,
    backends: list[str] | None = None,
    labels: dict[str, str] | None = None,
) -> HardwareProfile:
    """The profile of the machine this runs on."""
    cpus = os.cpu_count() or 1
    return HardwareProfile(
        node_id=node_id or socket.gethostname(),
        hostname=socket.gethostname(),
        cpus=cpus,
        memory_bytes=memory_bytes(),
        gflops=round(measure_gflops(), 2) if measure else 0.0,
        slots=slots or 1,
        backends=backend_infos(backends),
        labels={"machine": platform.machine(), **(labels or {})},
    )
