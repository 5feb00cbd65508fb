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
    """Tests marked slow first (a stable sort: the others keep their order). xdist hands out
    the first quarter of the items one by one in turn, so the few that take minutes (the
    manifest fuzzers, the notary's byte flips, the diffusion quality check) start at once on
    different workers while the rest balances around them; collected last, they ran one after
    the other on one worker while the other sat idle (the last 12 minutes of a 45-minute run)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _no_manifest_assets_from_earlier_tests():
    """Validating a manifest puts the assets/ folder beside it on the asset search path of its
    thread (caramba.manifest.registry) until the next manifest: each test starts without one."""
    from caramba.manifest.registry import manifest_assets

    with manifest_assets(()):
        yield
