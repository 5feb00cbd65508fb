"""caramba.export: a recorded run's trained model and history out, in formats other tools read.

- ``export_onnx(ref, out)``: the inference graph (no labels, losses or metrics) as an ONNX
  model with the trained weights as initializers and a dynamic batch dimension
  (``caramba.export.to_onnx``).
- ``export_safetensors(ref, out)``: the trained parameters in the layouts ``torch.nn`` expects,
  optimizer state left out, a name map in the metadata (``caramba.export.to_safetensors``).
- ``export_mlflow(dir, runs)``: runs' params, metric histories and artifacts into an MLflow
  file store (``caramba.export.to_mlflow``; needs the ``mlflow`` extra).

All of them start from ``caramba.run.trained.load_trained`` (the run's manifest as recorded and
its newest checkpoint, read after its digest is checked). Nothing heavy is imported here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

FORMATS = ("onnx", "safetensors")


def export_model(ref: str, out: str | os.PathLike[str] | None = None, *, fmt: str = "onnx", store: Any = None,
                 dtype: str | None = None) -> Path:
    """Write run ``ref``'s trained model as ``fmt`` (``onnx`` or ``safetensors``) at ``out``
    (default: ``<run id>.<fmt>`` in the current folder); returns the path written."""
    from caramba.errors import ConfigError

    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; caramba export writes: {', '.join(FORMATS)}",
                          hint="`caramba model export RUN` writes a Hugging Face folder")
    if fmt == "onnx":
        from caramba.export.to_onnx import export_onnx

        return export_onnx(ref, out, store=store, dtype=dtype)
    from caramba.export.to_safetensors import export_safetensors

    return export_safetensors(ref, out, store=store, dtype=dtype)


__all__ = ["FORMATS", "export_model"]
