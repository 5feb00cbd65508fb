"""A real run store for the index tests, made once per test process and copied for tests that
change it: two runs of a small manifest through the run engine (one tagged and annotated), and
two runs of the linear driver through the Experiment actor that commit model versions lin@1
and lin@2 (the second trained from the first)."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from caramba.store.runs import RunStore

from ..blobs_manifest import blobs_manifest

MANIFEST = blobs_manifest("tinyblobs", n=60, trainer="{loss: loss, lr: 0.05, batch_size: 16, steps: 6, log_every: 2, "
                                                     "checkpoint_every: 3, eval_every: 3}")
NOTE = "warmup looked unstable; NEAR the edge of divergence (see \"run log\")"
TAGS = ["baseline", "paper:fig2"]

_BUILT: dict[str, Path] = {}


def _build(root: Path) -> None:
    from caramba.actors.experiment import RunSpec
    from caramba.actors.services import run_experiment as run_actor
    from caramba.actors.services import start_services
    from caramba.actors.system import ActorSystem
    from caramba.run import ledger_root, run_experiment

    store = RunStore(root)
    result = run_experiment(MANIFEST, store=store)
    assert result.ok, [r.error for r in result.runs]
    first = result.runs[0].run_id
    store.tag(first, add=TAGS)
    store.annotate(first, NOTE)
    with ActorSystem("local") as system:
        services = start_services(system, ledger_root(store))
        for rid, base in (("lin-a", None), ("lin-b", "latest")):
            st = run_actor(system, RunSpec(run_id=rid, steps=6, checkpoint_every=3, model="lin", base_version=base),
                           services, run_store=str(store.root))
            assert st.state == "verified", st


def built(factory) -> Path:
    """The store's folder (made on first use; do not change it)."""
    if "root" not in _BUILT:
        root = factory.mktemp("index-store") / "store"
        _build(root)
        _BUILT["root"] = root
    return _BUILT["root"]


def copy(factory) -> RunStore:
    """A private copy of the store, free to change."""
    dst = factory.mktemp("index-copy") / "store"
    shutil.copytree(built(factory), dst, ignore=shutil.ignore_patterns("index"))
    return RunStore(dst)


def by_ledger_run(store: RunStore, name: str) -> str:
    """The run-store ID of the actor run named ``name`` in the ledger."""
    return next(r.id for r in store.list(100) if r.config.get("ledger_run") == name)


def unique(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{secrets.token_hex(3)}"
