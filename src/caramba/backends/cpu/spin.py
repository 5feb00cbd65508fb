"""A native spin-wait for the cpu workers: watch a counter without holding the GIL.

Waking a thread blocked on a lock takes ~50 µs on a small VM (the idle vCPU has to be woken),
which a split call paid twice: once to start a helper, once to wake the caller when the helper
finished. A short spin on a shared counter, in compiled code that releases the GIL, catches
both hand-offs while the other side is still running; only a longer wait falls back to a lock.
Imports Numba: ``workers.py`` uses it when Numba is installed and blocks on locks otherwise.
"""

from __future__ import annotations

import platform
import time

import numpy as np

from caramba.backends.cpu import jitcache

jitcache.setup()  # Numba's disk cache in the user cache, before any cached function is defined

from llvmlite import ir as llir  # noqa: E402
from numba import njit, types  # noqa: E402
from numba.extending import intrinsic  # noqa: E402


@intrinsic
def _load_acquire(typingctx, addr):
    """The int64 at address ``addr``, loaded atomically (never hoisted out of the loop)."""

    def codegen(context, builder, signature, args):
        ptr = builder.inttoptr(args[0], llir.IntType(64).as_pointer())
        return builder.load_atomic(ptr, "acquire", 8)

    return types.int64(types.int64), codegen


_X86 = platform.machine().lower() in ("x86_64", "amd64")


@intrinsic
def _pause(typingctx):
    """The CPU's spin-loop hint (x86 ``pause``; nothing elsewhere)."""

    def codegen(context, builder, signature, args):
        if _X86:
            fn = builder.module.declare_intrinsic("llvm.x86.sse2.pause", fnty=llir.FunctionType(llir.VoidType(), []))
            builder.call(fn, [])
        return context.get_dummy_value()

    return types.none(), codegen


@njit(nogil=True, cache=True)
def wait_change(addr, old, limit, settle):
    """Spin until the int64 at ``addr`` differs from ``old``, at most ``limit`` rounds, then
    ``settle`` rounds more; returns the value seen (``old`` after ``limit``).

    The settling rounds let the other thread, which changed the counter while holding the GIL,
    release it before this one asks for it: a thread that finds the GIL taken sleeps on a
    condition variable and pays the very wake-up this spin exists to avoid."""
    for _ in range(limit):
        v = _load_acquire(addr)
        if v != old:
            for _ in range(settle):
                _pause()
            return v
        _pause()
    return old


def rounds_for(seconds: float) -> int:
    """How many ``wait_change`` rounds last about ``seconds`` on this machine."""
    cell = np.zeros(1, np.int64)
    addr = cell.ctypes.data
    wait_change(addr, 0, 10, 0)  # compile (or load from the disk cache)
    n = 20000
    t = time.perf_counter()
    wait_change(addr, 0, n, 0)
    per_round = max((time.perf_counter() - t) / n, 1e-9)
    return max(100, int(seconds / per_round))
