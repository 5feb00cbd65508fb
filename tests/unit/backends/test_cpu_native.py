"""The cpu backend's native helpers (``backends/cpu/native.py``): blocks handed over and run in
compiled code, without the GIL, each exactly once, whoever (helper or caller) claims it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from caramba.backends.cpu import blas, native, workers  # noqa: E402

pytestmark = pytest.mark.skipif(native.pool(1) is None, reason="native helpers need Linux semaphores")


@numba.cfunc(native.BLOCK_SIG)
def _count(a, lo, hi):
    """args [address of an int64 counter array, its length]: counts[i] += 1 for lo <= i < hi."""
    counts = numba.carray(native.ptr_int64(a[0]), (a[1],))
    for i in range(lo, hi):
        counts[i] += 1


def _run(pool, counts: np.ndarray, ranges: list[tuple[int, int]]) -> None:
    args = np.array([counts.ctypes.data, counts.size], np.int64)
    native.run_now(pool.boxes, np.array(ranges, np.int64), _count.address, args, pool.ctl)


def test_every_block_runs_exactly_once_whoever_claims_it():
    """Tiny blocks: the caller often finishes first and takes its helpers' blocks itself."""
    pool = native.pool(3)
    counts = np.zeros(8, np.int64)
    for _ in range(5000):
        _run(pool, counts, workers.blocks(8, 4))
    assert (counts == 5000).all()
    deadline = time.monotonic() + 5  # a helper whose blocks the caller took catches up later
    while (pool.boxes[:3, native.DONE] != pool.boxes[:3, native.POSTED]).any() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert (pool.boxes[:3, native.DONE] == pool.boxes[:3, native.POSTED]).all()  # every post was answered


def test_more_blocks_than_threads_are_shared_out_each_once():
    """Blocks beyond one per thread go to whichever thread frees up first (a shared counter);
    a call with one helper and 64 blocks, or 2 blocks, or 1, runs each block exactly once."""
    pool = native.pool(1)
    for n_blocks in (64, 2, 1):
        counts = np.zeros(1000, np.int64)
        for _ in range(300):
            _run(pool, counts, workers.blocks(1000, n_blocks))
        assert (counts == 300).all(), n_blocks


def test_sleeping_helpers_wake_for_the_next_post():
    pool = native.pool(2)
    counts = np.zeros(3, np.int64)
    for _ in range(5):
        time.sleep(0.02)  # far past the ~0.1 ms idle spin: the helpers sleep on their semaphores
        _run(pool, counts, workers.blocks(3, 3))
    assert (counts == 5).all()


def test_helpers_run_blocks_in_parallel_without_the_gil():
    """A block that waits for every other block to have started can only finish when all run
    at once; the caller holds no GIL while it waits either (a Python thread keeps running)."""
    pool = native.pool(1)

    @numba.cfunc(native.BLOCK_SIG)
    def rendezvous(a, lo, hi):
        flags = numba.carray(native.ptr_int64(a[0]), (2,))
        flags[lo] = 1
        for _ in range(10**9):  # bounded: ~seconds at worst
            if flags[1 - lo] == 1:
                return

    flags = np.zeros(2, np.int64)
    args = np.array([flags.ctypes.data], np.int64)
    t0 = time.perf_counter()
    native.run_now(pool.boxes, np.array([[0, 1], [1, 2]], np.int64), rendezvous.address, args, pool.ctl)
    assert (flags == 1).all() and time.perf_counter() - t0 < 5


def _last_cpu(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])  # field 39: the CPU it last ran on


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to move between")
def test_a_helper_on_its_callers_cpu_moves_off_it_and_keeps_its_cpus():
    """The scheduler may stack a helper on its caller's CPU (then each gets half a core); the
    helper moves itself off, and may still use every CPU it could before."""
    import threading

    pool = native.pool(1)
    helper = next(t.native_id for t in threading.enumerate() if t.name == "caramba-native-1")
    allowed = os.sched_getaffinity(0)
    here = threading.get_native_id()
    cpu = min(allowed)
    counts = np.zeros(4, np.int64)
    try:
        os.sched_setaffinity(here, {cpu})
        os.sched_setaffinity(helper, {cpu})  # stacked
        for _ in range(50):
            _run(pool, counts, workers.blocks(4, 4))  # posts from `cpu`
        deadline = time.monotonic() + 5
        while (os.sched_getaffinity(helper) != allowed or _last_cpu(helper) == cpu) and time.monotonic() < deadline:
            _run(pool, counts, workers.blocks(4, 4))
            time.sleep(0.0001)
        assert os.sched_getaffinity(helper) == allowed  # its own CPUs again, not narrowed for good
        assert _last_cpu(helper) != cpu
        assert (counts == counts[0]).all()
    finally:
        os.sched_setaffinity(here, allowed)
        os.sched_setaffinity(helper, allowed)


@pytest.mark.skipif(blas.cblas_gemm() is None, reason="NumPy's BLAS is not an ILP64 OpenBLAS")
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_row_blocked_products_on_the_helpers_match_numpy(dtype, layout):
    """Transposed operands go to BLAS as they are (no copy): every layout, both float types."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((256, 100) if layout[0] == "n" else (100, 256)).astype(dtype)
    w = rng.standard_normal((100, 70) if layout[1] == "n" else (70, 100)).astype(dtype)
    x2, w2 = (x if layout[0] == "n" else x.T), (w if layout[1] == "n" else w.T)
    pool = native.pool(2)
    out = np.full((256, 70), np.nan, dtype)
    fn = blas.cblas_gemm()[dtype == np.float32]
    ranges = np.array(workers.blocks(256, 3), np.int64)
    assert native.gemm_split(x2, w2, out, fn, 0, np.zeros(1, np.int64), pool.boxes, ranges,
                             native.gemm_block.address, pool.ctl)
    tol = 1e-12 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(out, x2 @ w2, rtol=tol, atol=tol)
    strided = np.zeros((256, 200), dtype)[:, ::2]  # no unit stride: refused, nothing written
    assert not native.gemm_split(strided, w2[:100, :], out, fn, 0, np.zeros(1, np.int64), pool.boxes, ranges,
                                 native.gemm_block.address, pool.ctl)


FORK_CHILD = """
import os
import numpy as np
from caramba.backends.cpu import native, workers
from tests.unit.backends.test_cpu_native import _run
counts = np.zeros(4, np.int64)
_run(native.pool(1), counts, workers.blocks(4, 2))  # the parent's helper exists
pid = os.fork()
if pid == 0:
    _run(native.pool(1), counts, workers.blocks(4, 2))
    os._exit(0 if (counts == 2).all() else 3)
_, status = os.waitpid(pid, 0)
raise SystemExit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_starts_its_own_native_helpers():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    done = subprocess.run([sys.executable, "-c", FORK_CHILD], timeout=120, capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr  # a hang here: the child waited on its parent's helpers


def test_concurrent_split_calls_from_two_threads_stay_correct():
    """One split call runs on the helpers at a time; a call made meanwhile from another thread
    runs its whole range on its own thread (fused kernels, products and updates alike)."""
    import threading

    from threadpoolctl import threadpool_limits

    import caramba
    from caramba import compute, ops

    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((256, 300)), rng.standard_normal((300, 400)) / 20
    with threadpool_limits(2, user_api="blas"):
        runner = compute.new("cpu")
        try:
            g = caramba.trace(lambda x, w: ops.gelu(x @ w) * 2.0 + ops.exp(x @ w * 0.1), ((256, 300), "float64"),
                              ((300, 400), "float64"))
            exe = runner.compile(g)
            ins = {"x": runner.upload(x), "w": runner.upload(w)}
            want = exe.run(ins)["out"].download()
            errors: list[BaseException] = []

            def worker():
                try:
                    for _ in range(20):
                        np.testing.assert_array_equal(exe.run(ins)["out"].download(), want)
                except BaseException as exc:  # reported below
                    errors.append(exc)

            threads = [threading.Thread(target=worker) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            assert not errors and not any(t.is_alive() for t in threads)
        finally:
            runner.close()


@numba.njit
def _flip(flags, lo, hi):
    for i in range(lo, hi):
        flags[i] = not flags[i]


def _flip_where_true(a, lo, hi):
    """args [address of a bool array, its length]: flags[i] = not flags[i] for lo <= i < hi,
    through a kernel taking the array (as the generated fused kernels do)."""
    _flip(numba.carray(native.ptr_bool(a[0]), (a[1],)), lo, hi)


def test_boolean_arrays_pass_through_native_blocks():
    """A bool array is one byte per element in memory: the native blocks view it as such (a
    fused kernel with a boolean mask input, e.g. causal attention, failed to compile)."""
    kernel = numba.cfunc(native.BLOCK_SIG)(_flip_where_true)
    flags = np.array([True, False, True, True, False, False, True], np.bool_)
    args = np.array([flags.ctypes.data, flags.size], np.int64)
    pool = native.pool(2)
    native.run_now(pool.boxes, np.array(workers.blocks(flags.size, 3), np.int64), kernel.address, args, pool.ctl)
    assert flags.tolist() == [False, True, False, False, True, True, False]
