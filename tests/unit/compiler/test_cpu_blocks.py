"""The cpu backend's parallel work in row blocks on its own worker threads.

Large fused kernels take ``lo, hi`` and run on ``workers.count()`` blocks; large products of a
fused linear run as one-thread BLAS calls per block followed by the epilogue on those rows.
Under pytest-xdist every worker holds BLAS to one thread, so these tests raise the count
(``threadpool_limits``) while the kernels are made: three blocks, uneven on purpose.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import caramba
from caramba import ops
from caramba.backends.cpu import blas, workers
from caramba.backends.cpu import fused as cpu_fused
from caramba.compute import new

from ._util import assert_close, run, unoptimized

needs_numba = pytest.mark.skipif(not cpu_fused.available(), reason="numba is not installed")
needs_openblas = pytest.mark.skipif(blas.chosen_threads() is None, reason="NumPy's BLAS is not an OpenBLAS we control")
RNG = np.random.default_rng(11)


def test_blocks_cover_the_range_evenly():
    assert workers.blocks(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert workers.blocks(2, 8) == [(0, 1), (1, 2)]  # never an empty block
    assert workers.blocks(5, 1) == [(0, 5)]


def test_run_uses_the_workers_and_reraises_the_first_error():
    seen: list[tuple[int, int, str]] = []
    lock = threading.Lock()

    def fn(lo, hi):
        with lock:
            seen.append((lo, hi, threading.current_thread().name))
        time.sleep(0.05)  # long enough for the helpers to claim their blocks

    workers.run(fn, workers.blocks(9, 3))
    assert sorted((lo, hi) for lo, hi, _ in seen) == [(0, 3), (3, 6), (6, 9)]
    assert seen and any(name.startswith("caramba-cpu") for _, _, name in seen)
    assert (0, 3, threading.current_thread().name) in seen  # the caller takes the first block

    def bad(lo, hi):
        if lo > 0:
            raise ValueError(f"block {lo}")

    with pytest.raises(ValueError, match="block 3"):
        workers.run(bad, workers.blocks(9, 3))


def test_every_block_runs_exactly_once_whoever_claims_it():
    """Tiny blocks: the caller often finishes first and takes its helpers' blocks itself."""
    counts = [0] * 6
    lock = threading.Lock()

    def fn(lo, hi):
        with lock:
            for i in range(lo, hi):
                counts[i] += 1

    for _ in range(3000):
        workers.run(fn, workers.blocks(6, 3))
    assert counts == [3000] * 6
    with pytest.raises(ValueError, match="block 4"):  # errors come back from a claimed block too
        workers.run(lambda lo, hi: (_ for _ in ()).throw(ValueError(f"block {lo}")) if lo == 4 else None,
                    workers.blocks(6, 3))
    workers.run(fn, workers.blocks(6, 3))  # and the helpers still work afterwards
    assert counts == [3001] * 6


@needs_numba
def test_native_spin_sees_a_change_made_by_another_thread_and_times_out_otherwise():
    from caramba.backends.cpu import spin

    cell = np.zeros(1, np.int64)
    addr = cell.ctypes.data
    assert spin.wait_change(addr, 0, 1000, 0) == 0  # nothing changed: gives up after the rounds
    timer = threading.Timer(0.02, lambda: cell.__setitem__(0, 7))
    timer.start()
    assert spin.wait_change(addr, 0, 10**12, 10) == 7  # the GIL is released while it spins
    timer.join()
    assert spin.rounds_for(1e-4) >= 100


def test_a_split_call_made_from_inside_a_block_runs_inline():
    seen = []
    workers.run(lambda lo, hi: workers.run(lambda a, b: seen.append((a, b)), [(lo, hi), (lo, hi)]),
                workers.blocks(4, 2))
    assert sorted(seen) == [(0, 2), (0, 2), (2, 4), (2, 4)]  # a nested split runs on its own thread


FORK_CHILD = """
import os
from caramba.backends.cpu import workers
workers.run(lambda lo, hi: None, workers.blocks(4, 2))  # the parent's helper thread exists
pid = os.fork()
if pid == 0:
    out = []
    workers.run(lambda lo, hi: out.append((lo, hi)), workers.blocks(4, 2))
    os._exit(0 if sorted(out) == [(0, 2), (2, 4)] else 3)
_, status = os.waitpid(pid, 0)
raise SystemExit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_starts_its_own_helpers():
    # in a fresh interpreter: this test process has other libraries' threads (JAX) to fork with
    done = subprocess.run([sys.executable, "-c", FORK_CHILD], timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # was a hang: the child waited on the parent's threads


@needs_openblas
def test_openblas_is_found_and_its_thread_count_followed():
    assert blas._openblas_threads() is not None  # a threadpoolctl change once hid it silently
    with threadpool_limits(3, user_api="blas"):
        assert blas.chosen_threads() == 3 and workers.count() == 3
        blas.one_thread()
        assert blas._openblas_threads()[0]() == 1
        assert blas.chosen_threads() == 3  # our own setting is not taken for the process's choice
    assert blas.row_blocks((256, 1024), (1024, 512), (256, 512), 2) == 256
    assert blas.row_blocks((2, 128, 1024), (1024, 512), (2, 128, 512), 2) == 256
    assert blas.row_blocks((256, 1024), (1024, 512), (256, 512), 1) == 0  # one worker: one BLAS call
    assert blas.row_blocks((16, 1024), (1024, 4096), (16, 4096), 2) == 0  # too few rows per block
    assert blas.row_blocks((64, 32), (32, 32), (64, 32), 2) == 0  # small: one thread anyway
    assert blas.row_blocks((256, 1024), (3, 1024, 512), (3, 256, 512), 2) == 0  # batched weights


def _posted(pool) -> np.ndarray:
    from caramba.backends.cpu import native

    return np.zeros(2, np.int64) if pool is None else pool.boxes[:2, native.POSTED].copy()


def _agree(g, inputs, monkeypatch, min_split_calls):
    """Run ``g`` split in three blocks (on the native helpers where they run, else the Python
    ones: both are counted) and compare with the unfused graph."""
    calls = []
    real = workers.run

    def counting(fn, ranges):
        calls.append(len(ranges))
        real(fn, ranges)

    monkeypatch.setattr(workers, "run", counting)
    runner = new("cpu")
    pool = workers.native_pool(3)
    try:
        before = _posted(pool)
        got = run(runner, g, inputs)
        posted = _posted(pool) - before
        assert posted[0] == posted[1], posted  # every native split call posted a block to each helper
        assert len(calls) + posted[0] >= min_split_calls and set(calls) <= {3}, (calls, posted)
        want = unoptimized(runner, g, inputs)
    finally:
        runner.close()
    for k in want:
        assert_close(got[k], want[k], 1e-12, what=k)


@needs_numba
@needs_openblas
@pytest.mark.parametrize("x_shape", [(200, 256), (2, 100, 256)], ids=str)
@pytest.mark.parametrize("act", [None, ops.gelu, ops.relu])
def test_linear_in_row_blocks_matches_unfused(x_shape, act, monkeypatch):
    assert blas.row_blocks(x_shape, (256, 384), x_shape[:-1] + (384,), 3)
    with caramba.Graph("dense") as g:
        x, w, b = g.input("x", x_shape), g.input("w", (256, 384)), g.input("b", (384,))
        y = x @ w + b
        g.output("o", act(y) if act else y)
    inputs = {"x": RNG.standard_normal(x_shape), "w": RNG.standard_normal((256, 384)) / 16,
              "b": RNG.standard_normal(384)}
    with threadpool_limits(3, user_api="blas"):
        _agree(g, inputs, monkeypatch, 1)


@needs_numba
@needs_openblas
def test_split_kernels_of_every_kind_match_unfused(monkeypatch):
    shape = (301, 1200)  # > 2**20 element-steps: every kernel below is split
    with caramba.Graph("g") as g:
        x, r = g.input("x", shape), g.input("r", shape)
        g.output("e", ops.tanh(x * 2.0 + r) - ops.exp(r))
        g.output("s", ops.sum(ops.sin(x) * r, axes=(1,)))
        g.output("m", ops.softmax(x * 3.0, axis=-1))
        g.output("n", ops.layer_norm(x + r, axis=-1))
    inputs = {"x": RNG.uniform(-2, 2, shape), "r": RNG.uniform(-2, 2, shape)}
    with threadpool_limits(3, user_api="blas"):
        _agree(g, inputs, monkeypatch, 4)
