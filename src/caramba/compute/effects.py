"""Host effects: what a kernel of an effectful op hands to the host instead of doing I/O itself.

Kernels compute; they never open files. ``train.checkpoint.save`` (``Effect.checkpoint``) gives
its tensors to the checkpoint sink in force, which by default writes a safetensors file
atomically (``caramba.compute.safetensors``). A caller redirects checkpoints, e.g. to memory in
a test or to a remote store, with::

    with effects.checkpoint_sink(lambda path, tensors, meta: saved.append((path, tensors))):
        runner.run(...)

The sink is a context variable: it applies to the thread (or task) that runs the graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

CheckpointSink = Callable[[str, Mapping[str, np.ndarray], Mapping[str, str]], None]


def write_file(path: str, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> None:
    """The default sink: a safetensors file at ``path`` (temporary file, then rename)."""
    from caramba.compute import safetensors

    safetensors.save(path, tensors, metadata)


_SINK: ContextVar[CheckpointSink] = ContextVar("caramba_checkpoint_sink", default=write_file)


def checkpoint(path: str, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> None:
    """Hand one checkpoint to the sink in force (called by backends' checkpoint kernels)."""
    _SINK.get()(path, tensors, metadata)


@contextmanager
def checkpoint_sink(sink: CheckpointSink) -> Iterator[CheckpointSink]:
    """Send the checkpoints of graphs run inside the block to ``sink`` instead of files."""
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)
