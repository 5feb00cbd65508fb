"""Matrix products on NumPy's BLAS: row blocks on the cpu workers for large float ones, one
BLAS thread for small ones.

A float product of a matrix-like left operand and a 2-D right one, from ``BLOCK_FLOPS`` and
with ``MIN_BLOCK_ROWS`` per block, runs as one-thread OpenBLAS calls on row blocks, one per
cpu worker (``workers.py``): OpenBLAS's own pool is never woken, so its threads never spin
against the workers (a [128,64] MLP train step once took 16-19 ms instead of 3.8 ms on 2
cores that way). Any other product is one BLAS call: on one thread below ``SMALL_FLOPS``, on
the count the process chose above. The choice is made from the shapes when the kernel is
made and costs one C call per product (about 0.2 µs).

The thread count is process-wide in OpenBLAS: a product running concurrently in another
thread may briefly run on one thread too (speed only). The choice depends only on the shapes,
so a graph's results are as reproducible as before.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from caramba.ir.dtypes import DType
from caramba.ops.cost import matmul_flops

# Below this many flops (2*M*N*K over the batch) a product runs on one BLAS thread.
SMALL_FLOPS = 3.0e7


def _symbol(lib: Any, name: str) -> Any:
    """The C function ``name`` of a threadpoolctl OpenBLAS controller, not its Python wrapper
    (threadpoolctl >= 3.5 returns the function, older versions its decorated name)."""
    sym = lib._get_symbol(name)
    return lib.dynlib[sym] if isinstance(sym, str) else sym


@functools.cache
def _openblas_lib() -> Any:
    """threadpoolctl's controller of the OpenBLAS NumPy uses, or None."""
    try:
        from threadpoolctl import ThreadpoolController

        for lib in ThreadpoolController().select(internal_api="openblas").lib_controllers:
            if "numpy" in lib.filepath:
                return lib
    except Exception:  # no threadpoolctl, or it cannot inspect this process
        return None
    return None


@functools.cache
def cblas_gemm() -> tuple[int, int] | None:
    """Addresses of (dgemm, sgemm) of NumPy's OpenBLAS when it is an ILP64 build with the
    ``64_`` symbol suffix (the int64 interface ``native.gemm_block`` calls), else None."""
    lib = _openblas_lib()
    if lib is None:
        return None
    import ctypes

    for prefix in ("scipy_", ""):
        try:
            d, s = (getattr(lib.dynlib, f"{prefix}cblas_{t}gemm64_") for t in "ds")
        except AttributeError:
            continue
        return ctypes.cast(d, ctypes.c_void_p).value, ctypes.cast(s, ctypes.c_void_p).value
    return None


@functools.cache
def _openblas_threads() -> tuple[Callable[[], int], Callable[[int], None], int] | None:
    """(get, set, count at first use) of the thread count of the OpenBLAS NumPy uses; None for
    another BLAS (MKL, Accelerate, BLIS: their threads do not spin between calls the same way)."""
    lib = _openblas_lib()
    if lib is None:
        return None
    try:
        get, set_ = _symbol(lib, "openblas_get_num_threads"), _symbol(lib, "openblas_set_num_threads")
        get.restype, set_.restype = int, None
        return get, set_, max(1, int(get()))
    except Exception:  # a build without these symbols: leave BLAS alone
        return None


class _Policy:
    """The BLAS thread count products get: 1 for small ones, else the count the process chose
    (``threadpool_limits``, ``cpu:threads=N``, OPENBLAS_NUM_THREADS). A count found that this
    policy did not set was set by someone else, and becomes the count for large products."""

    def __init__(self, get: Callable[[], int], set_: Callable[[int], None], initial: int) -> None:
        self.get, self.set, self.chosen, self.ours = get, set_, initial, initial

    def sync(self) -> int:
        """The count the process chose (a count found that this policy did not set)."""
        n = self.get()
        if n != self.ours:
            self.chosen = self.ours = n
        return n

    def use(self, small: bool) -> None:
        n = self.sync()
        want = 1 if small else self.chosen
        if n != want:
            self.set(want)
        self.ours = want


@functools.cache
def _policy() -> _Policy | None:
    threads = _openblas_threads()
    return None if threads is None else _Policy(*threads)


def chosen_threads() -> int | None:
    """The BLAS thread count the process chose; None where BLAS is not an OpenBLAS we control."""
    policy = _policy()
    if policy is None:
        return None
    policy.sync()
    return policy.chosen


# A product is split in row blocks (one BLAS thread each, on the cpu workers) from this many
# flops (a split call costs ~15 µs: [128,64]x[64,256] float64 went 105 -> 73 µs and
# [128,256]x[256,256] 395 -> 238 µs on 2 cores), when every block gets at least MIN_BLOCK_ROWS
# rows (fewer would repack the whole right operand too often).
BLOCK_FLOPS = 3.0e6
MIN_BLOCK_ROWS = 32


def row_blocks(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...], parts: int) -> int:
    """Rows of ``a @ b`` (leading dims flattened) to split over ``parts`` workers, or 0 to run it
    as one BLAS call. Split: a large product of a matrix-like ``a`` by a 2-D ``b``, under an
    OpenBLAS whose thread count we control, with enough rows for every worker."""
    if parts < 2 or len(b) != 2 or len(a) < 2 or _policy() is None or matmul_flops(a, out) < BLOCK_FLOPS:
        return 0
    rows = 1
    for n in a[:-1]:
        rows *= n
    return rows if rows >= MIN_BLOCK_ROWS * parts else 0


def one_thread() -> None:
    """Set BLAS to one thread for products that are run in blocks from several threads."""
    policy = _policy()
    if policy is not None:
        policy.use(True)


def row_blocked(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...],
                dtype: DType | None = None) -> tuple[int, Callable[..., None], bool] | None:
    """``(rows, run, native)`` when ``a @ b`` is to run in row blocks (``row_blocks``; float
    only), else None; ``native``: its blocks can run on the native helpers. ``run(x, w, o, after=None, native_after=None)`` writes ``x @ w`` into the C-contiguous
    ``o`` block by block on the cpu workers, one BLAS thread each, calling ``after(o2, lo, hi)``
    on each block's rows of the 2-D view ``o2`` right after its product (a fused epilogue, while
    they are in cache). On the native helpers the epilogue is ``native_after(o2)`` instead: (the
    address of a ``BLOCK_SIG`` C function, its argument block), or None to use the Python path."""
    from caramba.backends.cpu import workers

    parts = workers.count()
    rows = row_blocks(a, b, out, parts) if dtype is None or dtype.is_float else 0
    if not rows:
        return None
    ranges, k, n, matmul = workers.blocks(rows, parts), a[-1], out[-1], np.matmul
    native = _native_gemm(len(ranges), ranges)

    def run(x, w, o, after=None, native_after=None):
        one_thread()
        x2, o2 = x.reshape(rows, k), o.reshape(rows, n)  # o is C-contiguous: a view
        if native is not None and x2.ndim == w.ndim == 2:
            epilogue = native_after(o2) if native_after is not None else (0, _NO_ARGS)
            if epilogue is not None and native(x2, w, o2, *epilogue):
                return

        def block(lo, hi):
            matmul(x2[lo:hi], w, o2[lo:hi])
            if after is not None:
                after(o2, lo, hi)

        workers.run(block, ranges)

    return rows, run, native is not None


_NO_ARGS = np.zeros(1, np.int64)


def _native_gemm(parts: int, ranges: list[tuple[int, int]]) -> Callable[..., bool] | None:
    """``f(x2, w, o2, epi, epi_args) -> bool``: the row-blocked product on the native helpers
    (``native.gemm_split``; False: strides BLAS cannot take, nothing done), or None where the
    native helpers or an ILP64 ``cblas_?gemm64_`` are not available."""
    from caramba.backends.cpu import workers

    gemm = cblas_gemm()
    pool = workers.native_pool(parts) if gemm is not None else None
    if pool is None:
        return None
    from caramba.backends.cpu import native

    dgemm, sgemm = gemm
    table, block, split = np.array(ranges, np.int64), native.gemm_block.address, native.gemm_split

    def product(x2, w, o2, epi, epi_args):
        fn = sgemm if o2.dtype == np.float32 else dgemm
        return workers.run_native_call(lambda: split(x2, w, o2, fn, epi, epi_args, pool.boxes, table, block, pool.ctl),
                                       lambda: False)

    return product


def matmul_for(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...],
               dtype: DType | None = None) -> Callable[..., Any]:
    """``np.matmul`` for these shapes (called ``f(a, b[, out])``): a small product runs on one
    BLAS thread; a large float one in row blocks on the cpu workers (``row_blocks``), else on
    the count the process chose.

    The count is switched only when a product needs the other one, not restored after each
    call: waking OpenBLAS's pool on every restore is what makes its threads spin."""
    policy = _policy()
    if policy is None:
        return np.matmul
    small = matmul_flops(a, out) < SMALL_FLOPS
    use, matmul = policy.use, np.matmul
    blocked = row_blocked(a, b, out, dtype)
    if blocked is not None:
        run = blocked[1]

        def blocked_matmul(x, w, o=None):
            if o is None:
                o = np.empty(out, np.result_type(x, w))
            run(x, w, o)
            return o

        return blocked_matmul

    def policed_matmul(x, w, out=None):
        use(small)
        return matmul(x, w, out)

    batched = _native_batched(a, b, out, dtype, policed_matmul)
    return batched if batched is not None else policed_matmul


def _native_batched(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...], dtype: DType | None,
                    fallback: Callable[..., Any]) -> Callable[..., Any] | None:
    """``f(x, w[, o])`` for a batched product of two stacks of matrices of one batch shape (the
    attention products of a training step: [B, H, T, T] @ [B, H, T, D] and their transposes):
    one single-thread BLAS call per matrix from compiled code, the matrices split over the native
    helpers, each read in place through its strides (``native.bgemm_args``; ``fallback`` where
    BLAS cannot read them). None where it does not apply: a product under ``BLOCK_FLOPS``, a
    broadcast batch, not float, no native helpers or no ILP64 ``cblas_?gemm64_``."""
    from caramba.backends.cpu import workers

    if (dtype is not None and not dtype.is_float) or len(a) < 3 or len(b) != len(a) or a[:-2] != b[:-2]:
        return None
    n = 1
    for d in a[:-2]:
        n *= d
    parts = min(workers.count(), n)
    gemm = cblas_gemm()
    if parts < 2 or gemm is None or matmul_flops(a, out) < BLOCK_FLOPS or 0 in out:
        return None
    pool = workers.native_pool(parts)
    if pool is None:
        return None
    from caramba.backends.cpu import native

    lead = (n // a[-3], a[-3])
    ranges = workers.blocks(n, parts)
    table, block = np.array(ranges, np.int64), native.bgemm_block.address

    def in_turn(args: np.ndarray) -> None:
        for lo, hi in ranges:
            native.bgemm_run(args, lo, hi)

    def batched_matmul(x, w, o=None):
        if x.dtype != w.dtype:
            return fallback(x, w, o)
        target = o if o is not None and o.flags.c_contiguous else np.empty(out, x.dtype)
        args = np.zeros(native.B_WORDS, np.int64)
        x4, w4 = x.reshape(*lead, *x.shape[-2:]), w.reshape(*lead, *w.shape[-2:])  # views where they can be
        if not native.bgemm_args(x4, w4, target, gemm[1] if x.dtype == np.float32 else gemm[0], args):
            return fallback(x, w, o)
        one_thread()
        workers.run_native_call(lambda: native.run_now(pool.boxes, table, block, args, pool.ctl), lambda: in_turn(args))
        if o is not None and target is not o:
            o[...] = target
            return o
        return target

    return batched_matmul
