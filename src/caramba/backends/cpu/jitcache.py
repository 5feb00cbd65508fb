"""Where the cpu backend's compiled Numba code is cached, and what it is compiling right now.

**Cache.** Numba's default is a ``__pycache__`` beside each source file: inside the installed
package (shared by every user, often read-only, thrown away by a reinstall). The cpu backend
puts it in the per-user caramba cache instead, ``<cache_dir>/numba/compiled`` (``cache_dir``
setting, ``CARAMBA_CACHE_DIR``; default ``~/.caramba/cache``), next to the generated fused
kernel sources (``fused/jit.py``). ``NUMBA_CACHE_DIR``, when set, wins: Numba reads it itself and
caramba leaves it alone. ``setup()`` runs before any module of the cpu backend defines a cached
Numba function (a cached function's location is fixed when it is defined); it sets Numba's
``config.CACHE_DIR`` for this process and changes no environment variable.

**Compile reports.** A first run compiles the loops and fused kernels its graphs use (about a
second each on a small machine) and, before, sat silently at step 0. ``compiling(callback)``
calls ``callback(what)`` as each Numba compilation (a cache miss) starts, with a short name of
what is compiled, so a front end can say so (``caramba research run`` shows it on its
progress line). Loads from the disk cache are not compilations and report nothing.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from caramba.errors import CarambaError

_LOCK = threading.Lock()
_CALLBACKS: list[Callable[[str], None]] = []
_STATE: dict[str, Any] = {"dir": None, "listener": False}


def numba_cache_dir() -> Path:
    """The folder Numba caches compiled cpu code in: ``NUMBA_CACHE_DIR`` when set, else
    ``<cache_dir>/numba/compiled`` of caramba's settings."""
    env = os.environ.get("NUMBA_CACHE_DIR", "")
    if env:
        return Path(env).expanduser()
    from caramba.config import settings

    return Path(settings().cache_dir).expanduser() / "numba" / "compiled"


def setup() -> Path:
    """Point Numba's disk cache at ``numba_cache_dir()`` (unless ``NUMBA_CACHE_DIR`` is set) and
    install the compile listener; returns the folder. Cheap after the first call; call it again
    before defining cached functions later in the process (a ``NUMBA_*`` variable changed since
    makes Numba reload its config, which resets the folder)."""
    from numba.core import config

    with _LOCK:
        if os.environ.get("NUMBA_CACHE_DIR", ""):
            folder = Path(config.CACHE_DIR or os.environ["NUMBA_CACHE_DIR"])
        else:
            if _STATE["dir"] is None:
                try:
                    _STATE["dir"] = str(numba_cache_dir())
                except CarambaError:  # unreadable settings: reported where they are used; Numba's default here
                    _STATE["dir"] = config.CACHE_DIR or ""
            if _STATE["dir"] and config.CACHE_DIR != _STATE["dir"]:
                config.CACHE_DIR = _STATE["dir"]
            folder = Path(_STATE["dir"] or ".")
        if not _STATE["listener"]:
            _install_listener()
            _STATE["listener"] = True
    return folder


def write_source(folder: Path, name: str, source: str) -> Path:
    """Put generated kernel source ``folder/name`` in the cache (written once: a temporary file,
    then a rename, so a concurrent reader never imports half a file); returns its path."""
    import tempfile

    from caramba.errors import ConfigError

    path = folder / name
    if path.exists():
        return path
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(
            f"cannot write fused cpu kernels to {folder}: {exc}",
            hint="set a writable cache directory: CARAMBA_CACHE_DIR=/path or cache_dir in caramba.yml",
        ) from None
    return path


def drop_stale(probe: Any, module_file: str, sources: str) -> None:
    """Drop ``module_file``'s cached compiled code when ``sources`` (the source of what its loops
    inline from other files, which Numba's cache does not watch) changed since it was cached.
    ``probe``: a cached dispatcher of that module (its cache says where the module's code is)."""
    import hashlib

    digest = hashlib.sha256(sources.encode()).hexdigest()
    where = getattr(probe._cache, "_cache_path", None)
    if not where or not os.path.isdir(where):
        return
    stamp = os.path.join(where, os.path.splitext(os.path.basename(module_file))[0] + ".elem-rules")
    try:
        with open(stamp) as f:
            if f.read() == digest:
                return
    except OSError:
        pass
    stem = os.path.splitext(os.path.basename(module_file))[0] + "."
    for name in os.listdir(where):
        if name.startswith(stem) and name.endswith((".nbi", ".nbc")):
            try:
                os.remove(os.path.join(where, name))
            except OSError:  # another process got there first
                pass
    tmp = f"{stamp}.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(digest)
        os.replace(tmp, stamp)
    except OSError:  # a cache Numba cannot write either: nothing stale can pile up there
        pass


_TWIN_TYPES: list[Any] = []
_SHARED: dict[int, tuple[Any, set[tuple[Any, ...]]]] = {}  # id -> (dispatcher, kept alive; twins registered)
MAX_TWINS = 16  # writable variants registered per compiled signature (2**4: four read-only arrays)


def _twin_choices(n: int):
    """Which of n read-only arrays to make writable, most useful first and never all 2**n
    (a kernel with 20 read-only inputs would enumerate a million): every combination when n is
    small, else all of them, then each one alone, then all but one."""
    from itertools import combinations

    if n <= 4:
        for k in range(n, 0, -1):
            yield from combinations(range(n), k)
        return
    yield tuple(range(n))
    for i in range(n):
        yield (i,)
    for i in range(n):
        yield tuple(j for j in range(n) if j != i)


def share_writable(dispatcher: Any, arg_types: list[Any] | tuple[Any, ...]) -> int:
    """Let calls that pass writable arrays where ``arg_types`` has read-only ones run the code
    compiled (or loaded) for ``arg_types``; returns how many variants were registered.

    Numba compiles a new specialization for each combination of writable and read-only array
    arguments (its dispatcher matches types exactly while it may compile), although the
    machine code is the same: read-only is a typing restriction only (the code compiled for it
    cannot write the array), and both pass the same array structure. A kernel first called with
    read-only state (fresh uploads) and then with the writable arrays a step produced compiled
    twice per process and cached both on disk. Uses Numba's dispatcher table (``_insert``);
    where that is not there, nothing is shared and Numba compiles the variant as before."""
    from numba import types

    args = tuple(arg_types)
    cres = getattr(dispatcher, "overloads", {}).get(args)
    insert = getattr(dispatcher, "_insert", None)
    if cres is None or insert is None:
        return 0
    with _LOCK:
        shared = _SHARED.setdefault(id(dispatcher), (dispatcher, set()))[1]
    ro = [i for i, t in enumerate(args) if isinstance(t, types.Array) and not t.mutable]
    count = 0
    for writable in _twin_choices(len(ro)):
        if count >= MAX_TWINS:
            break
        twin = list(args)
        for j in writable:
            twin[ro[j]] = args[ro[j]].copy(readonly=False)
        if tuple(twin) in dispatcher.overloads or tuple(twin) in shared:
            continue  # registered already: a signature twice in the table matches neither
        try:
            insert([t._code for t in twin], cres.entry_point, cres.objectmode)
        except Exception:  # another Numba: it compiles the variant when it is called
            return count
        # Numba interns types weakly: a twin type nobody holds is dropped, and the next one made
        # for the same key gets another code, which the table above would not match
        _TWIN_TYPES.extend(twin)
        shared.add(tuple(twin))
        count += 1
    return count


def on_disk(dispatcher: Any, key: Any) -> bool:
    """Whether Numba's disk cache holds ``dispatcher``'s code for ``key`` (what its ``compile``
    is given). Reads Numba's cache index (``_cache``); True where that cannot be told (an
    uncached dispatcher, another Numba): the caller then takes the code as there."""
    try:
        cache = dispatcher._cache
        index = cache._cache_file._load_index()
        return index.get(cache._index_key(key, dispatcher.targetctx.codegen())) is not None
    except Exception:
        return True


def reset() -> None:
    """Forget the folder chosen (tests that change the ``cache_dir`` setting in one process)."""
    with _LOCK:
        _STATE["dir"] = None


# ---- compile reports -----------------------------------------------------------------------


def describe(dispatcher: Any) -> str:
    """A short name for what a Numba dispatcher compiles: ``module.function`` for the cpu
    backend's own loops, the generated module's first docstring line for a fused kernel."""
    fn = getattr(dispatcher, "py_func", None)
    if fn is None:
        return type(dispatcher).__name__
    module = getattr(fn, "__module__", "") or ""
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", "?"))
    if module.startswith("caramba_fused_k_"):
        doc = getattr(sys.modules.get(module), "__doc__", "") or ""
        found = re.match(r"Generated by [\w.]+: (.+?)\. Do not edit", doc.strip())
        kind = found.group(1) if found else "fused"
        return f"{kind} kernel {module.removeprefix('caramba_fused_k_')[:8]} ({name})"
    short = module.removeprefix("caramba.backends.cpu.")
    return f"{short}.{name}" if short else name


def _install_listener() -> None:
    from numba.core import event

    class _Listener(event.Listener):
        def on_start(self, ev: Any) -> None:
            callbacks = list(_CALLBACKS)
            if not callbacks:
                return
            data = ev.data if isinstance(ev.data, dict) else {}
            dispatcher = data.get("dispatcher")
            module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
            if not module.startswith("caramba"):  # Numba's own helpers compiled inside ours
                return
            what = describe(dispatcher)
            for cb in callbacks:
                try:
                    cb(what)
                except Exception:  # a front end's display must never break a compile
                    pass

        def on_end(self, ev: Any) -> None:
            return None

    event.register("numba:compile", _Listener())


def silence_reports() -> None:
    """Report no compiles from this process (a forked compile helper: the display it would
    write to is its parent's)."""
    with _LOCK:
        _CALLBACKS.clear()


@contextmanager
def compiling(callback: Callable[[str], None]) -> Iterator[None]:
    """Call ``callback(what)`` as each Numba compilation starts inside this block (from any
    thread of the process). Imports nothing: the listener is installed by ``setup()``, which
    runs when the cpu backend first loads Numba code."""
    with _LOCK:
        _CALLBACKS.append(callback)
    try:
        yield
    finally:
        with _LOCK:
            if callback in _CALLBACKS:
                _CALLBACKS.remove(callback)
