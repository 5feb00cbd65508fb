"""The server's actors: Storage, Notary and Model services and the experiments it runs.

They live on one in-process ActorSystem rooted at ``<store>/cluster``, where ``caramba research
run --cluster local`` keeps its ledger, blobs and model versions, so the API reads the same
Notary and models the CLI writes. The local transport delivers messages on the caller's
thread; a pump thread delivers the experiments' own ticks a few messages at a time, so a
request that asks an actor something waits at most for the step in progress.

Nothing starts until it is needed: reading an empty ledger starts no actor and writes no file.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from caramba.api.errors import Conflict
from caramba.errors import CarambaError

PUMP_BATCH = 4  # messages per turn of the pump; between turns requests get the system


class ActorHost:
    def __init__(self, root: Path, run_store: Path) -> None:
        self.root = Path(root)
        self.run_store = Path(run_store)
        self.system: Any = None
        self.services: Any = None
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.thread: threading.Thread | None = None
        self.experiments: dict[str, str] = {}  # ledger run ID -> experiment actor name

    # ---- lifecycle ---------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self.system is not None

    def has_ledger(self) -> bool:
        return self.started or (self.root / "notary" / "ledger.sqlite").exists()

    def ensure(self) -> Any:
        """The actor system with its services, started on first use."""
        with self.lock:
            if self.closing.is_set():
                raise Conflict("the server is shutting down")
            if self.system is None:
                from caramba.actors.services import start_services
                from caramba.actors.system import ActorSystem

                system = ActorSystem("local")
                self.services = start_services(system, self.root)
                self.system = system
                self.thread = threading.Thread(target=self._pump, name="caramba-actors", daemon=True)
                self.thread.start()
            return self.system

    def _pump(self) -> None:
        while not self.closing.is_set():
            if not self.system.run_until_idle(PUMP_BATCH):
                self.closing.wait(0.02)

    def close(self) -> None:
        """Cancel running experiments (recorded as cancelled), then stop every actor."""
        with self.lock:
            system = self.system
        if system is None:
            self.closing.set()
            return
        from caramba.actors.experiment import Cancel

        for name in list(self.experiments.values()):
            try:
                system.lookup(name).ask(Cancel(reason="the server shut down"))
            except CarambaError:  # an experiment that already ended or died has nothing to cancel
                pass
        self.closing.set()
        if self.thread is not None:
            self.thread.join(timeout=10)
        system.shutdown()

    # ---- asking ------------------------------------------------------------------------------
    def ask(self, actor: str, msg: Any) -> Any:
        return self.ensure().lookup(actor).ask(msg)

    def notary(self, msg: Any) -> Any:
        self.ensure()
        return self.ask(self.services.notary, msg)

    def models(self, msg: Any) -> Any:
        self.ensure()
        return self.ask(self.services.models, msg)

    # ---- experiments -------------------------------------------------------------------------
    def spawn(self, spec: Any) -> str:
        """Start the Experiment actor for ``spec``; it records the run in the run store."""
        from caramba.actors.base import ActorExists
        from caramba.actors.services import spawn_experiment

        system = self.ensure()
        name = f"experiment:{spec.run_id}"
        try:
            spawn_experiment(system, spec, self.services, name=name, run_store=str(self.run_store),
                             keys=str(self.root / "keys"))  # the run's own key: only it speaks for the run
        except ActorExists:
            raise Conflict(f"run '{spec.run_id}' is already executing in this server") from None
        self.experiments[spec.run_id] = name
        return name

    def steer(self, ledger_run: str, verb: str) -> Any:
        """Pause, resume or cancel a live experiment; returns its ExperimentStatus."""
        from caramba.actors.experiment import Cancel, ExperimentError, Pause, Resume

        name = self.experiments.get(ledger_run)
        if name is None:
            raise Conflict(f"run '{ledger_run}' is not executing in this server")
        msg = {"pause": Pause(), "resume": Resume(), "cancel": Cancel(reason="cancelled through the API")}[verb]
        try:
            return self.ask(name, msg)
        except ExperimentError as exc:
            raise Conflict(exc.message) from None

    def state(self, ledger_run: str) -> str | None:
        """The live experiment's state (``running``, ``paused``...), None when it is not live."""
        from caramba.actors.experiment import GetStatus

        name = self.experiments.get(ledger_run)
        if name is None or self.system is None:
            return None
        try:
            status = self.system.lookup(name).ask(GetStatus())
        except CarambaError:  # a dead actor is simply not live
            self.experiments.pop(ledger_run, None)
            return None
        if status.done:  # its driver is closed; free the actor too
            self.experiments.pop(ledger_run, None)
            try:
                self.system.stop(name)
            except CarambaError:  # already gone
                pass
            return None
        return status.state
