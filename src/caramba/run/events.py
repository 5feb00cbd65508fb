"""What a run tells the caller while it runs: ``Progress`` callbacks and ``RunCancelled``.

A caller (the CLI's progress bar, the API's event stream) registers a ``Progress`` for a run
ID with ``observe``; the run engine looks it up by ID. Observers live in this process only: a
run on another machine reports through the run store and the ledger instead.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from caramba.errors import CarambaError


class RunCancelled(CarambaError):
    """Raised by a Progress callback to stop a run; the run is recorded as cancelled."""


class Progress:
    """Callbacks a caller receives; all optional. A callback may raise RunCancelled to stop
    the run (it is recorded as cancelled, with the message as the reason)."""

    def start(self, plan: Any, run_id: str, total: int) -> None: ...

    def step(self, step: int, total: int, values: Mapping[str, float], samples_per_s: float) -> None: ...

    def evaluate(self, step: int, split: str, values: Mapping[str, float]) -> None: ...

    def end(self, result: Any) -> None: ...

    def message(self, text: str) -> None: ...


_observers: dict[str, Progress] = {}
_lock = threading.Lock()


@contextmanager
def observe(run_id: str, progress: Progress | None) -> Iterator[None]:
    """Route the progress of run ``run_id`` (driven in this process) to ``progress``."""
    if progress is None:
        yield
        return
    with _lock:
        _observers[run_id] = progress
    try:
        yield
    finally:
        with _lock:
            if _observers.get(run_id) is progress:
                del _observers[run_id]


def observer(run_id: str) -> Progress | None:
    with _lock:
        return _observers.get(run_id)


__all__ = ["Progress", "RunCancelled", "observe", "observer"]
