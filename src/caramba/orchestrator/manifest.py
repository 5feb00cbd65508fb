"""A manifest's runs as RunSpecs for the Experiment actor (``run_cluster(manifest_path, ...)``)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from caramba.actors.experiment import RunSpec
from caramba.errors import ConfigError, did_you_mean


def run_specs(
    manifest_path: str | os.PathLike,
    runs: Iterable[str] | None = None,
    *,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
    backend: str | None = None,
    target: str | None = None,
    data_roots: list[str] | None = None,
) -> list[RunSpec]:
    """One RunSpec per planned run (tuner arms x targets x runs). ``runs`` selects by run ID or
    by label (``target/run``, ``arm/target/run``). Run IDs carry the manifest's content hash, so
    a changed manifest never reuses the ledger history of an old one, and re-running the same
    manifest finds its verified runs instead of training them again."""
    from caramba.run import plan_runs, run_spec

    path = Path(manifest_path).absolute()
    items = list(overrides.items()) if isinstance(overrides, Mapping) else None
    ov = [f"{k}={v}" for k, v in items] if items is not None else list(overrides or [])
    plans = plan_runs(path, ov, backend=backend, target=target)
    wanted = set(runs) if runs is not None else None
    specs = []
    for p in plans:
        if wanted is not None and p.run.id not in wanted and p.label not in wanted:
            continue
        if p.run.mode != "train":
            raise ConfigError(f"run '{p.label}' is an eval run; cluster runs train (evaluate with `caramba research run`)")
        m = p.prep.manifest
        run_id = re.sub(r"[^A-Za-z0-9._\-=+@:,/]", "-", f"{m.name}-{p.prep.sha256[:10]}/{p.label}")
        spec = run_spec(p, run_id, None, data_roots)  # the same spec a local run gets, plus the model to commit to
        specs.append(spec.model_copy(update={"model": m.name, "config": {**spec.config, "manifest": str(path)}}))
    if wanted is not None:
        found = {s.config["run"] for s in specs} | {s.run_id.split("/", 1)[1] for s in specs}
        missing = sorted(w for w in wanted if w not in found)
        if missing:
            labels = [p.label for p in plans]
            raise ConfigError(f"manifest {path} has no run {missing[0]!r}; {did_you_mean(missing[0], labels)}")
    return specs
