"""caramba.pretrained: Hugging Face checkpoints as caramba models.

``open(dir)`` maps a checkpoint (``config.json`` + safetensors) onto a model asset through the
architecture registry (``caramba/assets/architecture/``) and loads its weights::

    import caramba.pretrained as pt
    m = pt.open("path/to/llama", dtype="float64")
    logits = m.forward({"tokens": ids}, backend="cpu")["logits"]

A manifest does the same with ``topology: {from_safetensors: {source: ...}}`` (docs/pretrained.md).
This package imports nothing heavy: safetensors is imported when a tensor is read.
"""

from __future__ import annotations

from typing import Any


def open(source: Any, **kwargs: Any) -> Any:
    """A ``PretrainedModel`` for the checkpoint at ``source`` (see ``caramba.pretrained.model``)."""
    from caramba.pretrained.model import PretrainedModel

    return PretrainedModel.open(source, **kwargs)


__all__ = ["open"]
