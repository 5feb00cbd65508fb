"""Start the standard service actors (Storage, Notary, Model) and run experiments with them."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from caramba.actors.base import AskTimeout
from caramba.actors.experiment import Experiment, ExperimentStatus, GetStatus, RunSpec, Services, Start
from caramba.actors.model import ModelActor
from caramba.actors.notary import Notary
from caramba.actors.storage import Storage
from caramba.actors.system import ActorRef, ActorSystem


def start_services(
    system: ActorSystem, root: str | os.PathLike, *, storage_url: str | None = None, names: Services | None = None
) -> Services:
    """Spawn Storage (``root/blobs`` or ``storage_url``), Notary (``root/notary``) and the Model
    actor (``root/models``) under the default names; returns the names."""
    names = names or Services()
    root = Path(root).expanduser().absolute()  # "~/lab" is the home folder, not a folder named "~"
    if storage_url is None:  # a remote store's services keep their blobs in it too
        from caramba.store.registry import storage_url_of

        storage_url = storage_url_of(root)
    system.spawn(Storage, names.storage, kwargs={"url": storage_url or str(root / "blobs")})
    system.spawn(Notary, names.notary, kwargs={"root": str(root / "notary"), "storage": names.storage})
    system.spawn(ModelActor, names.models, kwargs={"root": str(root / "models"), "notary": names.notary})
    return names


def spawn_experiment(
    system: ActorSystem, spec: RunSpec, services: Services | None = None, *, name: str | None = None, **options: Any
) -> ActorRef:
    """Spawn the Experiment actor for ``spec`` (named ``experiment:<run_id>``) and start it."""
    ref = system.spawn(
        Experiment,
        name or f"experiment:{spec.run_id}",
        kwargs={"spec": spec.model_dump(mode="json"), "services": (services or Services()).model_dump(), **options},
    )
    ref.tell(Start())
    return ref


def wait(system: ActorSystem, ref: ActorRef, timeout: float = 600.0, poll: float = 0.05) -> ExperimentStatus:
    """Until the experiment is verified, voided, failed or cancelled; returns its status."""
    deadline = time.monotonic() + timeout
    while True:
        system.run_until_idle()
        status = ref.ask(GetStatus())
        if status.done:
            return status
        if system.transport == "local" and getattr(system, "pending", 1) == 0:
            from caramba.actors.experiment import ExperimentError

            raise ExperimentError(f"experiment '{ref.name}' is {status.state} at step {status.step} and has no work queued")
        if time.monotonic() > deadline:
            raise AskTimeout(f"experiment '{ref.name}' still {status.state} at step {status.step} after {timeout:g}s", actor=ref.name)
        if system.transport != "local":
            time.sleep(poll)


def run_experiment(system: ActorSystem, spec: RunSpec, services: Services | None = None, **options: Any) -> ExperimentStatus:
    """Spawn, start and wait for one experiment."""
    return wait(system, spawn_experiment(system, spec, services, **options))
