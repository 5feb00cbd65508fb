"""A recorded run's trained model out of the store, in a format other tools read.

``export_run(ref, out)`` finds the run, rebuilds its manifest as recorded (the text travels with
the run), reads its newest checkpoint after checking the digest the store recorded for it, and
writes the model's parameters as a Hugging Face directory (``caramba.pretrained.export``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from caramba.errors import ConfigError


def export_run(ref: str, out: str | os.PathLike[str], *, store: Any = None, fmt: str = "hf", dtype: str | None = None,
               lora: str = "merge") -> Path:
    """Write run ``ref``'s (ID, prefix or ``latest``) newest checkpoint as format ``fmt`` at ``out``."""
    from caramba.manifest.pretrained import param_specs
    from caramba.pretrained.export import export_hf
    from caramba.run.trained import load_trained

    if fmt != "hf":
        hint = ("`caramba export RUN --format onnx|safetensors` writes an inference graph or PyTorch-layout weights"
                if fmt in ("onnx", "safetensors") else None)
        raise ConfigError(f"unknown export format {fmt!r}; this command writes: hf (a Hugging Face folder)", hint=hint)
    run = load_trained(ref, store, purpose="export")
    prep, tensors = run.prep, run.params
    names = param_specs(prep)
    missing = sorted(set(names) - set(tensors))
    if missing:
        raise ConfigError(f"run {run.run_id}'s checkpoint lacks parameter '{missing[0]}' ({len(missing)} missing)")
    params = {k: tensors[k] for k in names}
    return export_hf(prep, params, out, dtype=dtype, lora=lora,
                     provenance={"run": run.run_id, "step": str(run.step), "checkpoint_sha256": run.checkpoint_sha256})


__all__ = ["export_run"]
