"""A recorded run's trained model: its manifest as recorded and its newest checkpoint.

What `caramba model export`, `caramba generate` and `caramba image` start from: the run spec
(the manifest text travels with the run, so the file may have changed or be gone) and the
newest checkpoint artifact, read only after its sha256 matches the store's record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from caramba.errors import ConfigError


@dataclass(frozen=True)
class TrainedRun:
    """A recorded run's prepared manifest and the tensors of its newest checkpoint."""

    run_id: str
    prep: Any
    params: dict[str, np.ndarray]  # every tensor of the checkpoint (parameters, and optimizer state)
    step: int
    backend: str
    checkpoint_sha256: str
    record: Any


def load_trained(ref: str, store: Any = None, *, purpose: str = "use",
                 check: Callable[[Any], None] | None = None, max_bytes: int | None = None) -> TrainedRun:
    """Run ``ref`` (ID, prefix or ``latest``) in ``store`` (default: the configured one).
    ``purpose`` completes "there are no trained weights to ..."; ``check(prep)`` may refuse the
    run's model (a ConfigError, reported with the run's ID) before the checkpoint is read;
    ``max_bytes`` refuses a checkpoint larger than that (ResourceError) before reading it."""
    from caramba.actors.experiment import RunSpec
    from caramba.run.driver import plan_from_spec
    from caramba.store.runs import open_runs
    from caramba.train.checkpoint import read_checkpoint

    store = store if store is not None else open_runs()
    rec = store.get(ref)
    if "spec" not in rec.config:
        raise ConfigError(f"run {rec.id} has no recorded run spec (it was made before runs recorded their manifest)")
    plan = plan_from_spec(RunSpec.model_validate(rec.config["spec"]))
    if check is not None:
        try:
            check(plan.prep)
        except ConfigError as exc:
            raise ConfigError(f"run {rec.id}: {exc.message}", hint=exc.hint) from None
    ckpts = store.artifacts(rec.id, "checkpoint")
    if not ckpts:
        raise ConfigError(f"run {rec.id} saved no checkpoint, so there are no trained weights to {purpose}",
                          hint="checkpoints: {at_end: true} (the default) saves one when a run ends")
    newest = ckpts[-1]
    if max_bytes is not None and newest.size > max_bytes:
        from caramba.errors import ResourceError

        raise ResourceError(f"run {rec.id}'s checkpoint is {newest.size / 2**20:.1f} MiB; this process allows "
                            f"{max_bytes / 2**20:.1f} MiB", hint="raise the limit, or use a smaller model")
    tensors, info = read_checkpoint(newest.path, newest.sha256)
    return TrainedRun(rec.id, plan.prep, dict(tensors), info.step, plan.backend, newest.sha256 or "", rec)


__all__ = ["TrainedRun", "load_trained"]
