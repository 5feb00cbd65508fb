"""The cpu backend's own worker threads, which run its parallel work in row blocks.

Large fused kernels and large matrix products are split into row blocks; each block runs as a
serial Numba kernel (which releases the GIL) or a one-thread BLAS call, on these workers, with
the calling thread taking the first block. Idle workers spin briefly in native code without
the GIL (``spin.py``), then sleep on a lock. The alternative, Numba's OpenMP pool next to OpenBLAS's pthreads pool, had
both pools' idle threads spinning on the same few cores after every call, and the OpenMP
runtime is one per process (PyTorch and Numba load the same ``libgomp.so.1``), so whichever
library loaded it first chose the spin policy for everyone. On 2 cores with PyTorch loaded
first, dense+bias+GELU [256,1024]x[1024,4096] float64 went from 52 ms to 33 ms this way.

The worker count is the BLAS thread count the process chose (``threadpool_limits``,
``cpu:threads=N``, OPENBLAS_NUM_THREADS; else the core count), read when a kernel is made.
"""

from __future__ import annotations

import _thread
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

_LOCK = threading.Lock()  # guards _HELPERS
_RUNNING = threading.Lock()  # held while a split call runs
_HELPERS: list[_Helper] = []


def count() -> int:
    """How many threads parallel work is split over (the BLAS count the process chose)."""
    from caramba.backends.cpu.blas import chosen_threads

    n = chosen_threads()
    if n is None:
        n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, n)


class _Helper:
    """One daemon thread running one block at a time.

    Two bare locks hand the block over (``go``: released once per block posted; ``done``:
    released once per block the helper is through with; each acquired exactly once per block)
    and a pair of counters (blocks posted, blocks finished) lets both sides spin-wait in native
    code, without the GIL (``spin.py``), for a short while before blocking on a lock: a blocked
    thread takes ~50 µs to wake on a small VM, which a split call paid twice (start and finish).

    A block is claimed before it runs (a non-blocking acquire of its own ``claim`` lock), by the
    helper or, when the helper has not started it by the time the caller finished its own block
    (preempted on a busy machine), by the caller, which then runs it itself instead of waiting."""

    def __init__(self, name: str) -> None:
        self.go = _thread.allocate_lock()
        self.go.acquire()
        self.done = _thread.allocate_lock()
        self.done.acquire()
        self.counts = np.zeros(2, np.int64)  # [blocks posted, blocks finished]
        # the block for the helper to read, and the caller's own reference to it; each side drops
        # its reference when done, so a finished block's arrays are not kept alive by its closure
        self.job: tuple[Callable[[int, int], object], int, int, Any] | None = None
        self.posted: tuple[Callable[[int, int], object], int, int, Any] | None = None
        self.error: BaseException | None = None
        self.owed = False  # the caller took the last block; the helper's `done` is still to come
        threading.Thread(target=self._loop, name=name, daemon=True).start()

    def _loop(self) -> None:
        spin, addr, seen = _SPIN, self.counts.ctypes.data, 0
        while True:
            if spin is not None:
                spin.wait(addr, seen, spin.idle_rounds, spin.settle_rounds)  # back when a block is posted
            self.go.acquire()  # at once when posted during the spin, else sleeps until it is
            seen += 1
            fn, lo, hi, claim = self.job
            self.job = None
            if claim.acquire(False):  # not taken by the caller
                try:
                    fn(lo, hi)
                except BaseException as exc:  # handed to the caller, who re-raises it
                    self.error = exc
            del fn
            self.counts[1] = seen
            self.done.release()

    def start(self, fn: Callable[[int, int], object], lo: int, hi: int) -> None:
        if self.owed:  # the helper's release for the block the caller took
            self._await_done()
            self.owed = False
        self.job = self.posted = (fn, lo, hi, _thread.allocate_lock())
        self.counts[0] += 1
        self.go.release()

    def finish(self) -> BaseException | None:
        """Run the posted block here if the helper has not claimed it, else wait for it."""
        fn, lo, hi, claim = self.posted
        self.posted = None
        if claim.acquire(False):
            self.owed = True
            try:
                fn(lo, hi)
            except BaseException as exc:
                return exc
            return None
        self._await_done()
        err, self.error = self.error, None
        return err

    def _await_done(self) -> None:
        """Take the helper's ``done`` for the last block posted (spinning first)."""
        spin = _SPIN
        if spin is not None:
            posted = int(self.counts[0])
            spin.wait(self.counts.ctypes.data + 8, posted - 1, spin.busy_rounds, spin.settle_rounds)
        self.done.acquire()


class _Spin:
    """``spin.wait_change`` and its round counts: idle helpers spin ~0.1 ms for the next block,
    a caller ~0.2 ms for its helpers to finish (longer spins only hold a core that a preempted
    helper could use on a busy machine)."""

    def __init__(self) -> None:
        from caramba.backends.cpu import spin

        self.wait = spin.wait_change
        self.idle_rounds = spin.rounds_for(1e-4)
        self.busy_rounds = 2 * self.idle_rounds
        self.settle_rounds = max(1, self.idle_rounds // 20)  # ~5 µs: the other side drops the GIL


def _make_spin() -> _Spin | None:
    try:
        return _Spin()
    except Exception:  # no Numba (or no compiler): helpers block on their locks only
        return None


_SPIN: _Spin | None = None


def _helpers(n: int) -> list[_Helper]:
    global _SPIN
    with _LOCK:
        if _SPIN is None and not _HELPERS:
            _SPIN = _make_spin()
        while len(_HELPERS) < n:
            _HELPERS.append(_Helper(f"caramba-cpu-{len(_HELPERS) + 1}"))
        return _HELPERS[:n]


def _forget_helpers_after_fork() -> None:
    """A forked child has none of the parent's threads: start its own helpers when needed."""
    global _LOCK, _RUNNING
    _HELPERS.clear()
    _LOCK, _RUNNING = threading.Lock(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers_after_fork)


# Blocks a split kernel is cut into per worker thread on the native helpers, which take the next
# block as they free up: a helper that starts late (woken from sleep, or preempted) then costs
# the call at most a block, not half of its work after the caller has finished its own half.
BLOCKS_PER_THREAD = 4


def blocks(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering ``0..n`` (sizes differ by at most one)."""
    parts = max(1, min(parts, n))
    return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]


def describe() -> str:
    """Which threads run split work in this process (build info: imports nothing heavy)."""
    import importlib.util
    import platform

    if platform.system() != "Linux" or importlib.util.find_spec("numba") is None:
        return f"{count()} block(s) a call; Python helper threads (native helpers need Linux and Numba)"
    return (f"{count()} block(s) a call; native helpers (compiled, no GIL); Python helper threads for "
            "non-contiguous arrays and products on a BLAS without cblas_?gemm64_")


def native_pool(parts: int) -> Any:
    """The native helper pool (``native.py``) for calls split in ``parts`` blocks, with a helper
    for each worker thread past this one (blocks beyond that are shared out as threads free up),
    or None where it cannot run (no Numba, not Linux): callers then use ``run`` and these
    Python helpers."""
    if parts < 2:
        return None
    try:
        from caramba.backends.cpu import native
    except ImportError:  # no Numba
        return None
    return native.pool(max(1, min(parts, count()) - 1))


def run_native_call(call: Callable[[], Any], busy: Callable[[], Any]) -> Any:
    """``call()`` (a native split call) holding the one-split-call-at-a-time lock, or
    ``busy()`` when another split call holds it."""
    if not _RUNNING.acquire(blocking=False):
        return busy()
    try:
        return call()
    finally:
        _RUNNING.release()


def run(fn: Callable[[int, int], object], ranges: list[tuple[int, int]]) -> None:
    """``fn(lo, hi)`` for every range, the first on this thread and the rest on the helper
    threads; returns when all are done and re-raises the first error. One split call runs at a
    time; a call made while another is running (from another thread, or from inside a block)
    runs its blocks on its own thread instead of waiting."""
    if len(ranges) == 1 or not _RUNNING.acquire(blocking=False):
        for lo, hi in ranges:
            fn(lo, hi)
        return
    try:
        helpers = _helpers(len(ranges) - 1)
        for h, (lo, hi) in zip(helpers, ranges[1:], strict=True):
            h.start(fn, lo, hi)
        first: BaseException | None = None
        try:
            fn(*ranges[0])
        except BaseException as exc:
            first = exc
        errors = [h.finish() for h in helpers]
    finally:
        _RUNNING.release()
    for e in [first, *errors]:
        if e is not None:
            raise e
