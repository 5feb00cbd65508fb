"""Compile generated kernel source with Numba, once per process and once on disk.

The source is written to ``<cache_dir>/numba/k_<sha256 of source>.py`` (content-addressed:
never rewritten, so Numba's on-disk cache next to it stays valid) and imported; its
``@njit(cache=True)`` function is compiled eagerly for the argument types the runner expects,
and again lazily (also cached) if an argument arrives with another layout or writability.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from caramba.ir.dtypes import DType
from caramba.ir.types import ValueType

_LOCK = threading.Lock()
_LOADED: dict[str, Any] = {}  # key of the expanded source -> module
_EXPANDED: dict[str, Any] = {}  # source as generated -> module (expanding costs ~1 ms)
_NEW: set[str] = set()  # modules whose source this process wrote: nothing of theirs is cached yet
_BATCH = threading.local()  # .jobs: the specializations a batch() has recorded


def cache_dir() -> Path:
    from caramba.config import settings

    return Path(settings().cache_dir).expanduser() / "numba"


def load(source: str, name: str = "kernel") -> Any:
    """The Numba dispatcher ``name`` defined by ``source`` (compiled lazily until ``specialize``).

    The runtime helpers the source calls are inlined into it as text first (``inline.expand``:
    Numba's own inlining of them was most of a cold start's compile time); the cache key is
    the expanded text."""
    mod = _EXPANDED.get(source)
    if mod is not None:
        return getattr(mod, name)
    from .inline import expand

    text = expand(source)
    key = hashlib.sha256(text.encode()).hexdigest()[:32]
    with _LOCK:
        mod = _LOADED.get(key)
        if mod is not None:
            _EXPANDED[source] = mod
            return getattr(mod, name)
        from caramba.backends.cpu import jitcache

        mod_name = f"caramba_fused_k_{key}"
        if not (cache_dir() / f"k_{key}.py").exists():
            _NEW.add(mod_name)
        path = jitcache.write_source(cache_dir(), f"k_{key}.py", text)
        jitcache.setup()  # the generated module's cached functions go to the user cache
        spec = importlib.util.spec_from_file_location(mod_name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mod
        spec.loader.exec_module(mod)
        _LOADED[key] = mod
        _EXPANDED[source] = mod
        return getattr(mod, name)


def index_type() -> Any:
    """The Numba type of the ``lo, hi`` block bounds of a split kernel (Python ints)."""
    from numba import types

    return types.int64


def array_type(t: ValueType, contiguous: bool = True, readonly: bool = False) -> Any:
    """The Numba type of a host array holding a value of type ``t``."""
    from numba import types

    scalar = {
        DType.float64: types.float64, DType.float32: types.float32, DType.int64: types.int64,
        DType.int32: types.int32, DType.bool: types.boolean,
    }[t.dtype]
    return types.Array(scalar, t.rank, "C" if contiguous else "A", readonly=readonly)


def specialize(fn: Any, arg_types: list[Any]) -> None:
    """Compile ``fn`` for ``arg_types`` (loaded from the disk cache when it is there): now, or
    inside a ``batch()`` when the batch ends."""
    jobs = getattr(_BATCH, "jobs", None)
    if jobs is not None:
        jobs.append((fn, tuple(arg_types)))
        return
    _specialize(fn, tuple(arg_types))


def _specialize(fn: Any, arg_types: tuple[Any, ...]) -> None:
    from numba import types

    from caramba.backends.cpu import jitcache

    if arg_types not in fn.overloads:
        fn.compile(_key(fn, arg_types) if fn in _PREFETCHED else types.none(*arg_types))
    jitcache.share_writable(fn, arg_types)  # writable twins of read-only inputs run the same code


_PREFETCHED: set[Any] = set()  # the cpu backend's own loops (module-level: never freed) asked for by prefetch()


def _key(fn: Any, arg_types: tuple[Any, ...]) -> Any:
    return arg_types  # what a call compiles for: the argument types alone (Numba's disk key too)


def prefetch(fn: Any, arg_types: tuple[Any, ...]) -> None:
    """Inside a ``batch()``: compile one of the cpu backend's own loops (a Numba dispatcher
    compiled on its first call) for ``arg_types`` with the batch, as its first call would (a
    guess that misses costs a compile on the call, as before). Outside a batch: nothing."""
    jobs = getattr(_BATCH, "jobs", None)
    if jobs is None or arg_types in fn.overloads:
        return
    _PREFETCHED.add(fn)
    jobs.append((fn, tuple(arg_types)))


@contextmanager
def batch() -> Iterator[None]:
    """Within the block ``specialize`` only records what to compile; at its end everything is
    compiled, the kernels new to this process shared with a forked helper on another core
    (``fork_compile``). A kernel called inside the block before then compiles on the call."""
    if getattr(_BATCH, "jobs", None) is not None:  # nested: the outer batch compiles
        yield
        return
    _BATCH.jobs = []
    try:
        yield
        jobs = list(dict.fromkeys(_BATCH.jobs))
    finally:
        _BATCH.jobs = None
    new = []
    for fn, args in jobs:
        if args not in fn.overloads and _cold(fn, args):
            new.append((fn, args))
        else:  # compiled already, or its code is on disk: loaded here
            _specialize(fn, args)
    if new:
        from .fork_compile import compile_all

        new.sort(key=_source_size, reverse=True)  # longest first: the last ones taken are short
        compile_all(new, _specialize)


def _cold(fn: Any, arg_types: tuple[Any, ...]) -> bool:
    """Nothing on disk to load: a generated kernel whose source this process wrote, or a loop
    whose compiled code Numba's cache does not hold."""
    if fn.py_func.__module__ in _NEW:
        return True
    if fn in _PREFETCHED:
        from caramba.backends.cpu import jitcache

        return not jitcache.on_disk(fn, _key(fn, arg_types))
    return False


def _source_size(job: tuple[Any, tuple[Any, ...]]) -> int:
    """A kernel's compile cost, roughly: the size of its function's bytecode (a generated kernel
    is expanded: its helpers are in it)."""
    return len(job[0].py_func.__code__.co_code)
