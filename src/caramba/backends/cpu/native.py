"""Native helper threads: split work handed over and run without the GIL on either side.

``workers.py``'s helpers are Python threads: to start a block a helper has to take the GIL,
which the caller holds while it dispatches its own block, so every split call paid a GIL
hand-off (a futex wake-up, ~20-40 µs on a small VM) before the helper started, and another
when it finished: measured on the [128,64] MLP train step, helpers started 27 µs late (median)
and callers waited 52 µs after their own block, ten times a step.

Here a helper thread enters ``helper_loop`` once and stays in compiled code for good. A split
call posts (C function, argument block, block table) into the mailboxes of as many helpers as
it has blocks to share, with atomic stores; then the caller and every helper that has joined
take blocks from one shared counter until none is left, and the caller waits for the helpers
that joined, all in one compiled call (``run_blocks``). A helper that has not joined by then
(asleep, or preempted before it saw the post) is struck off, so a late helper costs the call at
most the block it is running, never a block waiting for it (with one block per thread, a helper
woken late took the second half of the work after the caller had finished the first: the call
took 1.5-2x its time alone). Blocks are ``cfunc``s of signature ``BLOCK_SIG``: ``block(args, lo, hi)``
where ``args`` is an int64 array of array addresses, shapes and scalars that the block unpacks
(``ptr_<dtype>`` + ``numba.carray``). An idle helper spins ~0.1 ms, then sleeps on a POSIX
semaphore that the next post wakes (a Dekker hand-shake on the ``SLEEPING`` and ``POSTED``
words, both sequentially consistent, so a post is never missed).

Linux/glibc (unnamed POSIX semaphores) and Numba are required; ``available()`` says whether
they are here, and ``workers.py`` keeps its Python helpers otherwise.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from typing import Any

import numpy as np
from llvmlite import ir as llir
from numba import cfunc, njit, types
from numba.extending import intrinsic

from caramba.backends.cpu.spin import _load_acquire, _pause

# int64 words of one helper's mailbox (a row of ``Pool.boxes``; 16 words: one cache line pair):
# TABLE is the address of the call's [n, 2] int64 block table, NEXT the address of its counter
# CALLER_CPU the CPU the posting thread ran on (a helper on the same CPU sleeps instead of spinning)
POSTED, DONE, FN, ARGS, TABLE, N_BLOCKS, CLAIM, SLEEPING, NEXT, CALLER_CPU = range(10)
BOX_WORDS = 16
# words of the ``ctl`` array a split call passes to ``run_blocks`` (CTL_NEXT: the block counter
# of the call in progress, alone on its cache line; one split call runs at a time)
CTL_SEM_POST, CTL_YIELD, CTL_BUSY, CTL_SEMS, CTL_SEM_BYTES, CTL_HELPERS, CTL_GETCPU = range(7)
CTL_NEXT = 8
CTL_WORDS = 16
SEM_BYTES = 64  # room for a sem_t (32 bytes on x86-64 glibc)
CPU_CHECK_ROUNDS = 64  # idle spin rounds between two looks at which CPU the helper is on (~30 ns a look)
MASK_WORDS = 16  # a cpu_set_t (1,024 CPUs) as int64 words

BLOCK_SIG = types.void(types.CPointer(types.int64), types.int64, types.int64)

_I64 = llir.IntType(64)


def _ptr(builder, addr):
    return builder.inttoptr(addr, _I64.as_pointer())


@intrinsic
def _store(typingctx, addr, value):
    """Sequentially consistent store of an int64 (a post, or the sleeping flag)."""

    def codegen(context, builder, signature, args):
        builder.store_atomic(args[1], _ptr(builder, args[0]), "seq_cst", 8)
        return context.get_dummy_value()

    return types.none(types.int64, types.int64), codegen


@intrinsic
def _load(typingctx, addr):
    """Sequentially consistent load of an int64."""

    def codegen(context, builder, signature, args):
        return builder.load_atomic(_ptr(builder, args[0]), "seq_cst", 8)

    return types.int64(types.int64), codegen


@intrinsic
def _claim(typingctx, addr):
    """Atomically 0 -> 1; True for the one thread that did it."""

    def codegen(context, builder, signature, args):
        pair = builder.cmpxchg(_ptr(builder, args[0]), _I64(0), _I64(1), "seq_cst", "seq_cst")
        return builder.extract_value(pair, 1)

    return types.boolean(types.int64), codegen


@intrinsic
def _take(typingctx, addr):
    """Atomically add one to the int64 at ``addr``; the value before (a block number to run)."""

    def codegen(context, builder, signature, args):
        return builder.atomic_rmw("add", _ptr(builder, args[0]), _I64(1), "seq_cst")

    return types.int64(types.int64), codegen


@intrinsic
def _call_block(typingctx, fn, args, lo, hi):
    """Call the C function at ``fn`` as ``void block(int64 *args, int64 lo, int64 hi)``."""

    def codegen(context, builder, signature, a):
        fnty = llir.FunctionType(llir.VoidType(), [_I64.as_pointer(), _I64, _I64])
        target = builder.inttoptr(a[0], fnty.as_pointer())
        builder.call(target, [_ptr(builder, a[1]), a[2], a[3]])
        return context.get_dummy_value()

    return types.none(types.int64, types.int64, types.int64, types.int64), codegen


@intrinsic
def _call_c(typingctx, fn, arg):
    """Call the C function at ``fn`` as ``int f(void *arg)`` (sem_wait, sem_post, sched_yield)."""

    def codegen(context, builder, signature, a):
        i8p = llir.IntType(8).as_pointer()
        fnty = llir.FunctionType(llir.IntType(32), [i8p])
        target = builder.inttoptr(a[0], fnty.as_pointer())
        builder.call(target, [builder.inttoptr(a[1], i8p)])
        return context.get_dummy_value()

    return types.none(types.int64, types.int64), codegen


@intrinsic
def _call_int(typingctx, fn):
    """Call the C function at ``fn`` as ``int f(void)`` (sched_getcpu); its result as int64."""

    def codegen(context, builder, signature, a):
        fnty = llir.FunctionType(llir.IntType(32), [])
        return builder.sext(builder.call(builder.inttoptr(a[0], fnty.as_pointer()), []), _I64)

    return types.int64(types.int64), codegen


def _pointer_intrinsic(nb_type):
    @intrinsic
    def as_pointer(typingctx, addr):
        def codegen(context, builder, signature, args):
            # the type as stored in memory: a boolean is i1 as a value but one byte (i8) in an array
            return builder.inttoptr(args[0], context.get_data_type(nb_type).as_pointer())

        return types.CPointer(nb_type)(types.int64), codegen

    return as_pointer


# ``numba.carray(ptr_float64(address), shape)``: an array over memory named by its address
ptr_float64 = _pointer_intrinsic(types.float64)
ptr_float32 = _pointer_intrinsic(types.float32)
ptr_int64 = _pointer_intrinsic(types.int64)
ptr_int32 = _pointer_intrinsic(types.int32)
ptr_bool = _pointer_intrinsic(types.boolean)


@intrinsic
def _set_affinity(typingctx, fn, mask):
    """Call ``sched_setaffinity(0, MASK_WORDS * 8, mask)`` (this thread) at the address ``fn``."""

    def codegen(context, builder, signature, a):
        i32, i8p = llir.IntType(32), llir.IntType(8).as_pointer()
        fnty = llir.FunctionType(i32, [i32, _I64, i8p])
        target = builder.inttoptr(a[0], fnty.as_pointer())
        builder.call(target, [i32(0), _I64(8 * MASK_WORDS), builder.inttoptr(a[1], i8p)])
        return context.get_dummy_value()

    return types.none(types.int64, types.int64), codegen


@njit(nogil=True, inline="always")
def _move_off(cpu, set_affinity, allowed, scratch):
    """Move this thread off ``cpu`` now: its allowed CPUs less that one (the kernel migrates it
    before the call returns), then all of them again. False where it may use no other CPU."""
    if cpu < 0 or cpu >= 64 * MASK_WORDS:
        return False
    other = 0
    for w in range(MASK_WORDS):
        v = _load(allowed + 8 * w)
        if w == cpu // 64:
            v &= ~(1 << (cpu % 64))
        _store(scratch + 8 * w, v)
        other |= v
    if other == 0:
        return False
    _set_affinity(set_affinity, scratch)
    _set_affinity(set_affinity, allowed)
    return True


@njit(nogil=True, cache=True)
def helper_loop(box, sem, sem_wait, getcpu, set_affinity, allowed, scratch, idle_rounds):
    """A helper's life: wait for a post (spin, then sleep on ``sem``), run the block if it can
    still claim it, report it done. Never returns.

    A helper that finds itself on the CPU its caller last posted from moves off it (``_move_off``:
    ``allowed`` is the address of the CPUs it may use, a cpu_set_t of ``MASK_WORDS`` words,
    ``scratch`` its own room for another). The scheduler stacks the two on one core: a helper
    woken by the caller lands on the caller's CPU when the scheduler's idle search is cut short
    (a busy LLC), and a thread that keeps running is not moved off a busy core for tens of ms.
    Stacked, a spinning helper took half the caller's time and a split call ran at half its
    one-thread speed, the other core idle (softmax [4,8,32,128]: 300 -> 450-700 µs for whole
    20 ms samples). Where it may use no other CPU, it sleeps instead, leaving the caller the core."""
    seen = 0
    while True:
        posted = seen
        for k in range(idle_rounds):
            posted = _load_acquire(box + 8 * POSTED)
            if posted != seen:
                break
            if k % CPU_CHECK_ROUNDS == 0:
                cpu = _call_int(getcpu)
                if cpu == _load(box + 8 * CALLER_CPU) and not _move_off(cpu, set_affinity, allowed, scratch):
                    break  # nowhere else to go: sleep (posted == seen)
            _pause()
        if posted == seen:
            _store(box + 8 * SLEEPING, 1)
            if _load(box + 8 * POSTED) == seen:
                _call_c(sem_wait, sem)  # the poster saw SLEEPING (or will): it posts the semaphore
            _store(box + 8 * SLEEPING, 0)
            continue
        seen = posted
        if _claim(box + 8 * CLAIM):  # joined: take blocks until none is left
            cpu = _call_int(getcpu)
            if cpu == _load(box + 8 * CALLER_CPU):  # woken onto the caller's CPU: run beside it, not in turn
                _move_off(cpu, set_affinity, allowed, scratch)
            _run_taken(_load(box + 8 * FN), _load(box + 8 * ARGS), _load(box + 8 * TABLE), _load(box + 8 * N_BLOCKS),
                       _load(box + 8 * NEXT))
        _store(box + 8 * DONE, seen)


@njit(nogil=True, inline="always")
def _run_taken(fn, args, table, n, next_addr):
    """Blocks of the [n, 2] table at ``table`` as the shared counter at ``next_addr`` hands them out."""
    i = _take(next_addr)
    while i < n:
        row = table + 16 * i
        _call_block(fn, args, _load(row), _load(row + 8))
        i = _take(next_addr)


@njit(nogil=True, inline="always")
def run_blocks(boxes, ranges, fn, args, ctl):
    """The blocks of ``ranges`` ([n, 2] int64, C-contiguous) shared by this thread and up to
    n - 1 helpers (as many as the pool has started), each taking the next block not taken yet;
    then wait for the helpers that joined. Which thread runs a block changes nothing in it (a
    kernel that sums per block finds its block from ``lo``). Inline in each generated ``split``."""
    base = boxes.ctypes.data
    n = ranges.shape[0]
    table = ranges.ctypes.data
    next_addr = ctl.ctypes.data + 8 * CTL_NEXT
    helpers = min(n - 1, ctl[CTL_HELPERS])
    _store(next_addr, 0)
    cpu = _call_int(ctl[CTL_GETCPU]) if helpers > 0 else -1
    for i in range(helpers):
        box = base + 8 * BOX_WORDS * i
        posted = _load(box + 8 * POSTED) + 1
        _store(box + 8 * CALLER_CPU, cpu)
        _store(box + 8 * FN, fn)
        _store(box + 8 * ARGS, args)
        _store(box + 8 * TABLE, table)
        _store(box + 8 * N_BLOCKS, n)
        _store(box + 8 * NEXT, next_addr)
        _store(box + 8 * CLAIM, 0)
        _store(box + 8 * POSTED, posted)
        if _load(box + 8 * SLEEPING) != 0:
            _call_c(ctl[CTL_SEM_POST], ctl[CTL_SEMS] + ctl[CTL_SEM_BYTES] * i)
    _run_taken(fn, args, table, n, next_addr)
    for i in range(helpers):
        box = base + 8 * BOX_WORDS * i
        if _claim(box + 8 * CLAIM):  # never joined: struck off (every block is done)
            continue
        posted = _load(box + 8 * POSTED)
        rounds = 0
        while _load_acquire(box + 8 * DONE) != posted:
            rounds += 1
            if rounds < ctl[CTL_BUSY]:
                _pause()
            else:  # a preempted helper: let it have the core
                _call_c(ctl[CTL_YIELD], 0)


@njit(nogil=True, cache=True)
def run_now(boxes, ranges, fn, args, ctl):
    """``run_blocks`` called from Python (``args``: the int64 argument block array)."""
    run_blocks(boxes, ranges, fn, args.ctypes.data, ctl)


# ---- matrix products in row blocks: one-thread BLAS calls from the helpers ------------------

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
# words of a product's argument block
(G_FN, G_F32, G_A, G_LDA, G_TA, G_B, G_LDB, G_TB, G_C, G_LDC, G_N, G_K, G_EPI, G_EPI_ARGS, G_SIZE,
 G_WORDS) = range(16)


def _gemm_intrinsic(real):
    """``cblas_?gemm`` of an ILP64 OpenBLAS at a run-time address (enums int, sizes int64)."""

    @intrinsic
    def gemm(typingctx, fn, order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        def codegen(context, builder, signature, args):
            i32, i8p = llir.IntType(32), llir.IntType(8).as_pointer()
            fnty = llir.FunctionType(llir.VoidType(), [i32, i32, i32, _I64, _I64, _I64, real, i8p, _I64, i8p, _I64,
                                                       real, i8p, _I64])
            target = builder.inttoptr(args[0], fnty.as_pointer())
            (_, order_, ta_, tb_, m_, n_, k_, alpha_, a_, lda_, b_, ldb_, beta_, c_, ldc_) = args
            ints = [builder.trunc(v, i32) for v in (order_, ta_, tb_)]
            scal = [builder.fptrunc(v, real) if real != llir.DoubleType() else v for v in (alpha_, beta_)]
            ptrs = [builder.inttoptr(v, i8p) for v in (a_, b_, c_)]
            builder.call(target, [*ints, m_, n_, k_, scal[0], ptrs[0], lda_, ptrs[1], ldb_, scal[1], ptrs[2], ldc_])
            return context.get_dummy_value()

        i = types.int64
        return types.none(i, i, i, i, i, i, i, types.float64, i, i, i, i, types.float64, i, i), codegen

    return gemm


_dgemm = _gemm_intrinsic(llir.DoubleType())
_sgemm = _gemm_intrinsic(llir.FloatType())


def _gemm_block(a, lo, hi):
    """Rows lo..hi of C = A @ B (one BLAS call), then the epilogue block on them, if any."""
    if hi > lo:
        size = a[G_SIZE]
        rows_a = a[G_A] + (lo * size if a[G_TA] else lo * a[G_LDA] * size)
        rows_c = a[G_C] + lo * a[G_LDC] * size
        ta = TRANS if a[G_TA] else NO_TRANS
        tb = TRANS if a[G_TB] else NO_TRANS
        if a[G_F32]:
            _sgemm(a[G_FN], ROW_MAJOR, ta, tb, hi - lo, a[G_N], a[G_K], 1.0, rows_a, a[G_LDA], a[G_B], a[G_LDB], 0.0,
                   rows_c, a[G_LDC])
        else:
            _dgemm(a[G_FN], ROW_MAJOR, ta, tb, hi - lo, a[G_N], a[G_K], 1.0, rows_a, a[G_LDA], a[G_B], a[G_LDB], 0.0,
                   rows_c, a[G_LDC])
    if a[G_EPI] != 0:
        _call_block(a[G_EPI], a[G_EPI_ARGS], lo, hi)


@functools.cache
def _compiled_gemm_block() -> Any:
    return cfunc(BLOCK_SIG, cache=True)(_gemm_block)


def __getattr__(name: str) -> Any:
    """``gemm_block``, the row-block product as a C function, compiled (or loaded from the disk
    cache) on first use rather than at import: a ``cfunc`` compiles when it is defined."""
    if name == "gemm_block":
        return _compiled_gemm_block()
    if name == "bgemm_block":
        return _compiled_bgemm_block()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@njit(cache=True)
def _operand(x, a, at, ld, trans):
    """Address, leading dimension and transposition of a 2-D BLAS operand; False if its
    strides are not a BLAS layout (one unit stride, the other at least the row length)."""
    size = x.itemsize
    s0, s1 = x.strides[0], x.strides[1]
    if s1 == size and s0 >= max(1, x.shape[1]) * size and s0 % size == 0:
        a[ld], a[trans] = s0 // size, 0
    elif s0 == size and s1 >= max(1, x.shape[0]) * size and s1 % size == 0:
        a[ld], a[trans] = s1 // size, 1
    else:
        return False
    a[at] = x.ctypes.data
    return True


@njit(nogil=True, cache=True)
def gemm_split(x, w, o, gemm, epi, epi_args, boxes, ranges, block, ctl):
    """o = x @ w in the row blocks of ``ranges`` on the native helpers (2-D x, w; C-contiguous
    o), each block followed by the epilogue block ``epi`` (0: none). False, with nothing done,
    when x or w has strides BLAS cannot take."""
    a = np.zeros(G_WORDS, np.int64)
    if not (_operand(x, a, G_A, G_LDA, G_TA) and _operand(w, a, G_B, G_LDB, G_TB)):
        return False
    a[G_FN], a[G_F32], a[G_SIZE] = gemm, x.itemsize == 4, x.itemsize
    a[G_C], a[G_LDC], a[G_N], a[G_K] = o.ctypes.data, o.shape[1], o.shape[1], x.shape[1]
    a[G_EPI] = epi
    a[G_EPI_ARGS] = epi_args.ctypes.data
    run_blocks(boxes, ranges, block, a.ctypes.data, ctl)
    return True


# ---- batched products: one single-thread BLAS call per matrix, matrices split over the helpers

# words of a batched product's argument block (strides in elements; batch = [B0, B1])
(B_FN, B_F32, B_N1, B_A, B_AS0, B_AS1, B_LDA, B_TA, B_B, B_BS0, B_BS1, B_LDB, B_TB, B_C, B_M, B_N, B_K,
 B_WORDS) = range(18)


@njit(nogil=True, cache=True)
def bgemm_run(a, lo, hi):
    """Matrices lo..hi of C[b] = A[b] @ B[b] (C C-contiguous [batch, M, N]) on this thread: the
    helpers' block, and a busy pool's blocks run in turn."""
    size = 4 if a[B_F32] else 8
    m, n, k, n1 = a[B_M], a[B_N], a[B_K], a[B_N1]
    ta = TRANS if a[B_TA] else NO_TRANS
    tb = TRANS if a[B_TB] else NO_TRANS
    for b in range(lo, hi):
        b0 = b // n1
        b1 = b - b0 * n1
        pa = a[B_A] + (b0 * a[B_AS0] + b1 * a[B_AS1]) * size
        pb = a[B_B] + (b0 * a[B_BS0] + b1 * a[B_BS1]) * size
        pc = a[B_C] + b * m * n * size
        if a[B_F32]:
            _sgemm(a[B_FN], ROW_MAJOR, ta, tb, m, n, k, 1.0, pa, a[B_LDA], pb, a[B_LDB], 0.0, pc, n)
        else:
            _dgemm(a[B_FN], ROW_MAJOR, ta, tb, m, n, k, 1.0, pa, a[B_LDA], pb, a[B_LDB], 0.0, pc, n)


def _bgemm_block(a, lo, hi):
    bgemm_run(a, lo, hi)


@functools.cache
def _compiled_bgemm_block() -> Any:
    return cfunc(BLOCK_SIG, cache=True)(_bgemm_block)


@njit(cache=True)
def _operand4(x, a, at, s0, s1, ld, trans):
    """Address, batch strides, leading dimension and transposition of a [B0, B1, r, c] operand
    whose matrices BLAS can read in place; False if their strides are not a BLAS layout."""
    size = x.itemsize
    r0, r1 = x.strides[2], x.strides[3]
    for st in x.strides:
        if st % size:
            return False
    if r1 == size and r0 >= max(1, x.shape[3]) * size:
        a[ld], a[trans] = r0 // size, 0
    elif r0 == size and r1 >= max(1, x.shape[2]) * size:
        a[ld], a[trans] = r1 // size, 1
    else:
        return False
    a[at], a[s0], a[s1] = x.ctypes.data, x.strides[0] // size, x.strides[1] // size
    return True


@njit(nogil=True, cache=True)
def bgemm_args(x, w, o, gemm, a):
    """Fill ``a`` (``B_WORDS``) for o[b] = x[b] @ w[b] (4-D x, w of one batch shape; o C-contiguous
    [batch, M, N]); False, with ``a`` unusable, when a matrix has strides BLAS cannot take."""
    if not (_operand4(x, a, B_A, B_AS0, B_AS1, B_LDA, B_TA) and _operand4(w, a, B_B, B_BS0, B_BS1, B_LDB, B_TB)):
        return False
    a[B_FN], a[B_F32], a[B_N1] = gemm, x.itemsize == 4, x.shape[1]
    a[B_C], a[B_M], a[B_N], a[B_K] = o.ctypes.data, x.shape[2], w.shape[3], x.shape[3]
    return True


MAX_HELPERS = 255  # mailboxes are allocated for this many; threads start as they are needed


class Pool:
    """The native helpers of this process: mailboxes, semaphores and the threads started so far."""

    def __init__(self, idle_rounds: int, busy_rounds: int, libc: ctypes.CDLL) -> None:
        self.libc, self.idle_rounds = libc, idle_rounds
        # Mailboxes and semaphores in memory that is never freed: helper threads outlive the
        # interpreter's teardown (daemons in compiled code), and a helper still spinning on a
        # mailbox NumPy had freed could read a "post" from garbage and call through it.
        self.boxes = _forever(libc, (MAX_HELPERS, BOX_WORDS), np.int64)
        self.sems = _forever(libc, (MAX_HELPERS, SEM_BYTES), np.uint8)
        self.ctl = np.zeros(CTL_WORDS, np.int64)
        self.ctl[CTL_SEM_POST] = _address(libc.sem_post)
        self.ctl[CTL_YIELD] = _address(libc.sched_yield)
        self.ctl[CTL_BUSY] = busy_rounds
        self.ctl[CTL_SEMS] = self.sems.ctypes.data
        self.ctl[CTL_SEM_BYTES] = SEM_BYTES
        self.ctl[CTL_GETCPU] = _address(libc.sched_getcpu)
        self.boxes[:, CALLER_CPU] = -1  # no caller yet
        # row MAX_HELPERS: the CPUs this process may use; row i: helper i's room for another set
        self.masks = _forever(libc, (MAX_HELPERS + 1, MASK_WORDS), np.int64)
        for cpu in os.sched_getaffinity(0):
            if cpu < 64 * MASK_WORDS:
                self.masks[MAX_HELPERS].view(np.uint64)[cpu // 64] |= np.uint64(1 << (cpu % 64))
        self.helpers = 0

    def ensure(self, helpers: int) -> None:
        """Start helper threads until there are ``helpers`` (at most ``MAX_HELPERS``)."""
        sem_wait = _address(self.libc.sem_wait)
        while self.helpers < min(helpers, MAX_HELPERS):
            i = self.helpers
            box, sem = self.boxes[i].ctypes.data, self.sems[i].ctypes.data
            if self.libc.sem_init(ctypes.c_void_p(sem), 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "sem_init failed")
            affinity = (_address(self.libc.sched_setaffinity), self.masks[MAX_HELPERS].ctypes.data, self.masks[i].ctypes.data)
            threading.Thread(target=helper_loop, args=(box, sem, sem_wait, self.ctl[CTL_GETCPU], *affinity, self.idle_rounds),
                             name=f"caramba-native-{i + 1}", daemon=True).start()
            self.helpers += 1
            self.ctl[CTL_HELPERS] = self.helpers


def _forever(libc: ctypes.CDLL, shape: tuple[int, int], dtype: Any) -> np.ndarray:
    """A zeroed array over ``calloc`` memory that nothing frees (the array is only a view)."""
    libc.calloc.restype, libc.calloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_size_t]
    n = shape[0] * shape[1] * np.dtype(dtype).itemsize
    addr = libc.calloc(1, n)
    if not addr:
        raise OSError("calloc failed for the native helpers' mailboxes")
    return np.frombuffer((ctypes.c_char * n).from_address(addr), dtype).reshape(shape)


def _address(c_function: Any) -> int:
    return ctypes.cast(c_function, ctypes.c_void_p).value


_POOL: list[Pool] = []
_LOCK = threading.Lock()


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if os.uname().sysname != "Linux":  # unnamed POSIX semaphores: Linux only (macOS lacks sem_init)
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return libc if hasattr(libc, "sched_getcpu") and hasattr(libc, "sched_setaffinity") else None  # glibc, musl


def pool(helpers: int) -> Pool | None:
    """The native pool with at least ``helpers`` helpers started, or None where native helpers
    cannot run here (not Linux, or ``sem_init`` failed) or more than ``MAX_HELPERS`` are asked for."""
    libc = _libc()
    if libc is None or not 1 <= helpers <= MAX_HELPERS:
        return None
    with _LOCK:
        if not _POOL:
            from caramba.backends.cpu.spin import rounds_for

            idle = rounds_for(1e-4)
            _POOL.append(Pool(idle, 2 * idle, libc))
        p = _POOL[0]
        try:
            p.ensure(helpers)
        except OSError:
            return None
        return p


def _forget_after_fork() -> None:
    """A forked child has none of the parent's helper threads: make a new pool when needed."""
    global _LOCK
    _POOL.clear()
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
