"""Session-wide test settings.

Under pytest-xdist every worker is its own process on a 2-core machine: each keeps its BLAS,
OpenMP and Numba pools to one thread, so two workers use the two cores instead of four
spinning thread pools fighting over them. Tests never depend on thread counts.
"""

import os

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    try:  # numpy may already be loaded by a plugin: cap its pools too
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover - threadpoolctl is a core dependency
        pass

# A `caramba backends --tune` result in the developer's cache would change thread thresholds under
# the tests: they run with the cpu backend's defaults (tests of tuning pass their own files).
os.environ.setdefault("CARAMBA_CPU_TUNING", "defaults")

# ONNX Runtime keeps a telemetry database under $HOME/.cache unless told not to.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (the default, see pyproject's addopts): one worker per logical CPU, at most 8
    (each worker imports JAX, ONNX Runtime and wgpu; more would trade memory for little)."""
    return max(1, min(os.cpu_count() or 1, 8))


def pytest_collection_modifyitems(config, items):
    """The tests marked slow one by one first (the minute-long ones: the manifest fuzzers, the
    notary's byte flips, the diffusion quality check), then the modules marked slow as a whole
    (thousands of short conformance cases), then the rest, each group in collection order.
    Collected last, the long ones ran one after another on one worker while the other sat idle
    (the last 12 minutes of a 45-minute run); first, they run while the rest is shared out."""

    def group(item) -> int:
        if any(m.name == "slow" for m in item.own_markers):
            return 0
        return 1 if item.get_closest_marker("slow") is not None else 2

    items.sort(key=group)


@pytest.fixture(autouse=True)
def _no_manifest_assets_from_earlier_tests():
    """Validating a manifest puts the assets/ folder beside it on the asset search path of its
    thread (caramba.manifest.registry) until the next manifest: each test starts without one."""
    from caramba.manifest.registry import manifest_assets

    with manifest_assets(()):
        yield
