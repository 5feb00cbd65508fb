"""Compile a batch of Numba specializations on two cores: this process and a forked copy of it.

A first run compiles every generated kernel its graph uses, one after another, each a few
tenths of a second of Numba and LLVM on one core while the other idles (the Quickstart's
train step: five kernels, ~3 s). Threads cannot share the work (Numba compiles under one
global lock), and a fresh process would first spend ~1.5 s importing Numba and setting up its
target. A *fork* of this process has all of that already: the two take kernels from one list,
longest first (the caller's order), whoever is free taking the next, and the child writes what
it compiles to Numba's disk cache; this process then loads those from the cache (~10 ms each).

Nothing about the result depends on who compiled it: the cache holds the machine code LLVM
made from the same IR with the same target, and a kernel whose cached code is not there (the
child failed, was killed, or could not write the cache) is compiled here as before. The child
only compiles: it never touches the parent's files, threads or display, and leaves with
``os._exit``. One that makes no progress for ``STALL_S`` (a lock held by another thread at the
fork, say) is killed and its kernels compiled here.

Only where it can pay: Linux, at least two CPUs allowed, at least two kernels not compiled
before (their sources are new in this process), not connected to Ray, and
``CARAMBA_CPU_FORK_COMPILE`` not ``0`` (or ``false``, ``no``, ``off``).
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

ENV = "CARAMBA_CPU_FORK_COMPILE"
OFF = ("0", "false", "no", "off")  # what ENV may say to turn forked compiles off
STALL_S = 30.0  # a child with no kernel finished for this long is taken to be stuck
_POLL_S = 0.002

Job = tuple[Any, tuple[Any, ...]]  # (Numba dispatcher, argument types)
TAKEN_HERE, TAKEN_BY_CHILD, COMPILED_BY_CHILD = 1, 2, 3  # a job's word in the shared memory (0: free)


def in_ray() -> bool:
    """A process connected to Ray (a worker, or a driver after ``ray.init``): its gRPC runtime
    has fork handlers of its own, and a fork is left alone there."""
    ray = sys.modules.get("ray")
    try:
        return bool(ray is not None and ray.is_initialized())
    except Exception:
        return True


def enabled() -> bool:
    """Whether a batch may fork a compile helper on this machine and in this process."""
    if os.environ.get(ENV, "1").strip().lower() in OFF or not sys.platform.startswith("linux") or in_ray():
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) >= 2


def compile_all(jobs: Sequence[Job], compile_one: Callable[[Any, tuple[Any, ...]], None]) -> int:
    """Run ``compile_one(fn, args)`` for every job, sharing them with a forked child when that
    is ``enabled()`` and there are two or more (give them longest first: each side takes the
    next free one); returns how many the child compiled."""
    if len(jobs) < 2 or not enabled():
        for fn, args in jobs:
            compile_one(fn, args)
        return 0
    _prepare(jobs[0][0])
    n = len(jobs)
    # shared words: [next job (both sides take from the front: the caller orders the jobs
    # longest first, so the last ones, taken by whoever is free, are short), the end of the list,
    # then one per job: 0 free, or TAKEN_HERE, TAKEN_BY_CHILD, COMPILED_BY_CHILD]
    shm = mmap.mmap(-1, 8 * (2 + n))
    _put(shm, 0, 0)
    _put(shm, 1, n)
    import multiprocessing

    lock = multiprocessing.get_context("fork").Lock()
    with warnings.catch_warnings():
        # Python 3.12's "multi-threaded, use of fork() may lead to deadlocks" and JAX's "JAX is
        # multithreaded": the child runs none of those threads' code and takes none of their locks
        # (it compiles with Numba, whose lock this thread holds no part of, and leaves with
        # os._exit); a child that stalls anyway is killed (STALL_S)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        pid = os.fork()
    if pid == 0:
        _child(jobs, shm, lock, compile_one)  # never returns
    try:
        _take_jobs(jobs, shm, lock, compile_one, TAKEN_HERE)
        done_by_child = _wait(pid, shm, n)
    except BaseException:
        _kill(pid)
        raise
    finally:
        shm_state = [_get(shm, 2 + k) for k in range(n)]
        shm.close()
    for k, state in enumerate(shm_state):
        if state != TAKEN_HERE:  # the child's (loaded from the disk cache) or nobody's (compiled now)
            compile_one(*jobs[k])
    return done_by_child


def _prepare(fn: Any) -> None:
    """Set up Numba's target in this process before the fork, so the child starts compiling at
    once and this process does not pay for it again (the first compile of a process spends
    ~0.6 s loading Numba's implementation registries)."""
    fn.targetctx.refresh()
    fn.typingctx.refresh()
    fn.targetctx.codegen()


def _child(jobs: Sequence[Job], shm: mmap.mmap, lock: Any, compile_one: Callable[..., None]) -> None:
    code = 1
    try:
        from caramba.backends.cpu import jitcache

        jitcache.silence_reports()  # the parent's display is not ours to write to
        _take_jobs(jobs, shm, lock, compile_one, TAKEN_BY_CHILD)
        code = 0
    finally:
        os._exit(code)  # no atexit handlers, finalizers or buffered output of the parent's


def _take_jobs(jobs: Sequence[Job], shm: mmap.mmap, lock: Any, compile_one: Callable[..., None], mark: int) -> None:
    """Take the next free job and compile it until none is left; ``mark`` says who took it (the
    child's become COMPILED_BY_CHILD when done)."""
    while True:
        with lock:
            i, end = _get(shm, 0), _get(shm, 1)
            if i >= end:
                return
            _put(shm, 0, i + 1)
            _put(shm, 2 + i, mark)
        compile_one(*jobs[i])
        if mark == TAKEN_BY_CHILD:
            _put(shm, 2 + i, COMPILED_BY_CHILD)


def _wait(pid: int, shm: mmap.mmap, n: int) -> int:
    """Wait for the child to finish the kernels it took; kill it if it stalls. Returns how
    many it compiled."""
    last, since = -1, time.monotonic()
    while True:
        finished, _status = os.waitpid(pid, os.WNOHANG)
        done = sum(1 for k in range(n) if _get(shm, 2 + k) == COMPILED_BY_CHILD)
        if finished:
            return done
        if done != last:
            last, since = done, time.monotonic()
        elif time.monotonic() - since > STALL_S:
            _kill(pid)
            return done
        time.sleep(_POLL_S)


def _kill(pid: int) -> None:
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _get(shm: mmap.mmap, k: int) -> int:
    return struct.unpack_from("q", shm, 8 * k)[0]


def _put(shm: mmap.mmap, k: int, v: int) -> None:
    struct.pack_into("q", shm, 8 * k, v)
