"""``caramba research run --cluster`` with a sequential tuner (``grid``, ``random``,
``active_inference``): the tuner chooses each run from the results so far, so the runs go to the
cluster one at a time (each still placed on a worker, leased, verified and recorded like any
cluster run). A step submits the chosen arm's run, waits for its verdict, reads ``tuner.metric``
from the run store (a run that is not verified, or lacks a finite value, is a failure
observation), records the decision in the run's config (``config.tuner``; ``tuner_final`` on the
last run), and chooses again. Decisions and seeds are those of ``caramba.run.engine.run_tuned``.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from caramba.errors import ConfigError


def sequential_tuner(manifest_path: str | os.PathLike, overrides: list[str], backend: str | None,
                     target: str | None) -> tuple[list[Any], Any] | None:
    """``(plans, tuner)`` when the manifest's tuner chooses its runs one by one, else ``None``."""
    from caramba.run import plan_runs
    from caramba.run.tuner import SEQUENTIAL

    plans = plan_runs(Path(manifest_path).absolute(), overrides, backend=backend, target=target)
    tuner = plans[0].prep.manifest.tuner if plans else None
    if tuner is None or tuner.strategy not in SEQUENTIAL:
        return None
    return plans, tuner


def run_cluster_tuned(manifest_path: str | os.PathLike, plans: list[Any], tuner: Any, cluster_factory: Any,
                      run_store: Any, timeout: float) -> Any:
    """Run the tuner's ``budget`` steps on the cluster ``cluster_factory()`` makes; returns its report."""
    from caramba.run import run_spec
    from caramba.run.tuner import TunedPlans
    from caramba.store.runs import open_runs

    path = Path(manifest_path).absolute()
    for p in plans:
        if p.run.mode != "train":
            raise ConfigError(f"run '{p.label}' is an eval run; cluster runs train (evaluate with `caramba research run`)")
    seq = TunedPlans(tuner, plans)
    store = open_runs(str(run_store))
    last: str | None = None
    with cluster_factory() as c:
        for decision, plan in seq:
            m = plan.prep.manifest
            run_id = re.sub(r"[^A-Za-z0-9._\-=+@:,/]", "-", f"{m.name}-{plan.prep.sha256[:10]}/{plan.label}")
            spec = run_spec(plan, run_id, None)
            spec = spec.model_copy(update={"model": m.name, "config": {**spec.config, "manifest": str(path),
                                                                        "tuner": decision.to_json()}})
            c.submit([spec])
            jobs = c.wait(timeout)
            job = next(jb for jb in reversed(jobs) if jb.name == run_id)
            recs = [r for r in store.list(10_000) if r.config.get("ledger_run") == run_id]
            value = None
            if recs:
                rec = recs[0]
                store.update_config(rec.id, {"tuner": decision.to_json()})
                last = rec.id
                v = rec.summary.get(tuner.metric) if isinstance(rec.summary, dict) else None
                verified = (job.result or {}).get("state") == "verified"
                if verified and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                    value = float(v)
            seq.observe(decision, value)
        if last is not None:
            store.update_config(last, {"tuner_final": seq.final()})
        return c.report()
