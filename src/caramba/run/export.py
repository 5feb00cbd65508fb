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
    from caramba.actors.experiment import RunSpec
    from caramba.manifest.pretrained import param_specs
    from caramba.pretrained.export import export_hf
    from caramba.run.driver import plan_from_spec
    from caramba.store.runs import open_runs
    from caramba.train.checkpoint import read_checkpoint

    if fmt != "hf":
        raise ConfigError(f"unknown export format {fmt!r}; this command writes: hf")
    store = store if store is not None else open_runs()
    rec = store.get(ref)
    if "spec" not in rec.config:
        raise ConfigError(f"run {rec.id} has no recorded run spec (it was made before runs recorded their manifest)")
    ckpts = store.artifacts(rec.id, "checkpoint")
    if not ckpts:
        raise ConfigError(f"run {rec.id} saved no checkpoint, so there are no trained weights to export")
    newest = ckpts[-1]
    prep = plan_from_spec(RunSpec.model_validate(rec.config["spec"])).prep
    tensors, info = read_checkpoint(newest.path, newest.sha256)
    names = param_specs(prep)
    missing = sorted(set(names) - set(tensors))
    if missing:
        raise ConfigError(f"run {rec.id}'s checkpoint lacks parameter '{missing[0]}' ({len(missing)} missing)")
    params = {k: tensors[k] for k in names}
    return export_hf(prep, params, out, dtype=dtype, lora=lora,
                     provenance={"run": rec.id, "step": str(info.step), "checkpoint_sha256": newest.sha256 or ""})


__all__ = ["export_run"]
