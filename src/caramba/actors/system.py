"""ActorSystem and ActorRef, and the local (in-process, deterministic) transport.

``ActorSystem("local")`` (the default) runs every actor in this process on the caller's
thread. Delivery is deterministic: one FIFO of envelopes, processed in order, so a run gives
the same interleaving every time. An ``ask`` from outside any actor processes queued
messages until its reply is ready; an ask from inside a handler runs only the target's
mailbox (in order) up to its message, so an actor never runs on top of one that is waiting.
``run_until_idle`` drains the queue. ``ActorSystem("ray")`` runs the same actor
classes as Ray actors (see ``caramba.actors.ray_transport``).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Any

from caramba.actors.base import (
    Actor,
    ActorDied,
    ActorExists,
    ActorNotFound,
    Cell,
    Context,
    Deadlock,
    Placement,
    PlacementError,
    Supervision,
    check_kwargs,
    error_reply,
    raise_reply,
)
from caramba.actors.messages import Message, encode
from caramba.errors import ConfigError, did_you_mean

TRANSPORTS = ("local", "ray")


class ActorRef(ABC):
    """A location-transparent handle on an actor: ``ask`` waits for the reply, ``tell`` does not."""

    name: str

    @abstractmethod
    def ask(self, msg: Message, timeout: float | None = None) -> Any:
        """Send ``msg`` and return the reply (or raise the error the actor answered with)."""

    @abstractmethod
    def tell(self, msg: Message) -> None:
        """Send ``msg`` without waiting; failures are logged by the system, not raised here."""

    def __repr__(self) -> str:
        return f"<ActorRef {self.name}>"


class ActorSystem(ABC):
    """Spawns and finds actors. ``ActorSystem()`` / ``ActorSystem("local")`` or ``ActorSystem("ray")``."""

    transport: str = "?"

    def __new__(cls, transport: str = "local", **options: Any) -> "ActorSystem":
        if cls is ActorSystem:
            if transport == "local":
                cls = LocalActorSystem
            elif transport == "ray":
                from caramba.actors.ray_transport import RayActorSystem

                cls = RayActorSystem
            else:
                raise ConfigError(f"unknown actor transport '{transport}'; {did_you_mean(transport, TRANSPORTS)}")
        return super().__new__(cls)

    @abstractmethod
    def spawn(
        self,
        cls: type[Actor],
        name: str,
        *,
        kwargs: dict[str, Any] | None = None,
        supervision: Supervision | None = None,
        placement: Placement | None = None,
    ) -> ActorRef:
        """Create actor ``name`` running ``cls(**kwargs)``; its ``started()`` has run on return."""

    @abstractmethod
    def lookup(self, name: str) -> ActorRef:
        """The live actor called ``name`` (raises ActorNotFound)."""

    @abstractmethod
    def stop(self, name: str) -> None:
        """Stop gracefully (``stopped()`` runs); the name becomes free."""

    @abstractmethod
    def kill(self, name: str) -> None:
        """Stop abruptly, as a crash would (no hooks run). Later asks raise ActorDied."""

    def run_until_idle(self) -> None:  # noqa: B027 - only the local transport queues in-process
        """Process every queued message (local transport); other transports run on their own."""

    @property
    def node(self) -> str:
        """The node this system's caller runs on."""
        return "local"

    @abstractmethod
    def shutdown(self) -> None: ...

    def __enter__(self) -> "ActorSystem":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


# ---- local transport ----------------------------------------------------------------------------
class _Pending:
    __slots__ = ("reply",)

    def __init__(self) -> None:
        self.reply: tuple | None = None


class LocalRef(ActorRef):
    def __init__(self, system: "LocalActorSystem", name: str) -> None:
        self.system = system
        self.name = name

    def ask(self, msg: Message, timeout: float | None = None) -> Any:
        return raise_reply(self.system._ask(self.name, msg))

    def tell(self, msg: Message) -> None:
        self.system._post(self.name, msg, None)


class LocalActorSystem(ActorSystem):
    """Every actor in this process; deterministic delivery (see the module docstring).

    ``resources`` names what this node offers for placement (default: the backends available
    here as ``backend:<name>``)."""

    transport = "local"

    def __init__(self, transport: str = "local", *, resources: dict[str, float] | None = None) -> None:
        self._cells: dict[str, Cell] = {}
        self._parents: dict[str, str | None] = {}  # child -> the actor that spawned it (fate sharing)
        self._dead: dict[str, str] = {}
        self._queue: list[tuple[str, str, bytes, _Pending | None]] = []
        self._busy: list[str] = []  # actors in a handler, innermost last
        self._lock = threading.RLock()
        self._resources = resources
        self.dead_letters: list[str] = []  # failures of told messages, for inspection

    # ---- lifecycle --------------------------------------------------------------------------------
    def spawn(self, cls, name, *, kwargs=None, supervision=None, placement=None) -> ActorRef:
        with self._lock:
            if name in self._cells:
                raise ActorExists(f"an actor named '{name}' is already running", actor=name)
            self._check_placement(name, placement)
            kwargs = check_kwargs(name, kwargs or {})
            cell = Cell(cls, name, kwargs, supervision or Supervision(), Context(self, name, self.node))
            self._cells[name] = cell
            self._parents[name] = self._busy[-1] if self._busy else None
            self._dead.pop(name, None)
            self._busy.append(name)
            try:
                cell.start()
            except Exception as exc:
                del self._cells[name]
                self._parents.pop(name, None)
                reply = error_reply(exc, name, None)
                raise_reply(("err", reply[1], f"actor '{name}' failed to start: {reply[2]}", reply[3], name))
            finally:
                self._busy.pop()
            return LocalRef(self, name)

    def _check_placement(self, name: str, placement: Placement | None) -> None:
        if placement is None:
            return
        if placement.node not in (None, self.node):
            raise PlacementError(f"actor '{name}' asks for node '{placement.node}'; this system has only '{self.node}'", actor=name)
        offered = self.resources()
        wanted = dict(placement.resources)
        if placement.backend:
            wanted[f"backend:{placement.backend}"] = 0.001
        missing = sorted(k for k in wanted if k not in offered)
        if missing:
            raise PlacementError(
                f"actor '{name}' needs {', '.join(missing)}, which no node offers (this node offers "
                f"{', '.join(sorted(offered)) or 'nothing'})",
                actor=name,
            )

    def resources(self) -> dict[str, float]:
        if self._resources is None:
            from caramba.cluster.profile import backend_resources

            self._resources = backend_resources()
        return self._resources

    def lookup(self, name: str) -> ActorRef:
        with self._lock:
            if name not in self._cells and name not in self._dead:
                raise ActorNotFound(f"no actor named '{name}'; {did_you_mean(name, self.names())}", actor=name)
            return LocalRef(self, name)

    def names(self) -> list[str]:
        return sorted(n for n, c in self._cells.items() if c.dead is None)

    def _children(self, name: str) -> list[str]:
        return [c for c, p in self._parents.items() if p == name and c in self._cells]

    def stop(self, name: str) -> None:
        """Stop ``name`` and, first, the actors it spawned (as Ray does with owned actors)."""
        with self._lock:
            if name not in self._cells:
                raise ActorNotFound(f"no actor named '{name}'", actor=name)
            for child in self._children(name):
                self.stop(child)
            cell = self._cells.pop(name)
            self._parents.pop(name, None)
            cell.stop()

    def kill(self, name: str, cause: str = "killed") -> None:
        """Kill ``name`` and the actors it spawned: they share its fate, as on Ray."""
        with self._lock:
            if name not in self._cells:
                raise ActorNotFound(f"no actor named '{name}'", actor=name)
            for child in self._children(name):
                self.kill(child, f"its parent '{name}' was killed")
            self._cells.pop(name)
            self._parents.pop(name, None)
            self._dead[name] = cause
            self._queue = [e for e in self._queue if e[0] != name or e[3] is not None]

    def shutdown(self) -> None:
        with self._lock:
            for name in reversed(list(self._cells)):
                cell = self._cells.pop(name, None)
                if cell is not None:
                    cell.stop()
            self._queue.clear()

    # ---- delivery -----------------------------------------------------------------------------------
    def _post(self, name: str, msg: Message, pending: _Pending | None) -> None:
        kind, payload = encode(msg)
        with self._lock:
            if name not in self._cells:
                if name in self._dead:
                    err = ActorDied(f"actor '{name}' is dead: {self._dead[name]}", actor=name)
                    if pending is None:
                        self.dead_letters.append(f"{type(msg).__name__} to {name}: {err}")
                        return
                    pending.reply = error_reply(err, name, None)
                    return
                raise ActorNotFound(f"no actor named '{name}'; {did_you_mean(name, self.names())}", actor=name)
            self._queue.append((name, kind, payload, pending))

    def _ask(self, name: str, msg: Message) -> tuple:
        pending = _Pending()
        with self._lock:
            self._post(name, msg, pending)
            nested = bool(self._busy)
            while pending.reply is None:
                if nested:
                    # inside a handler: run only the target's mailbox, in order, up to our message,
                    # so no unrelated actor runs on top of the waiting ones
                    if name in self._busy:
                        chain = " -> ".join([*self._busy, name])
                        raise Deadlock(f"ask to '{name}' can never be answered: {chain} wait on each other", actor=name)
                    i = next(i for i, e in enumerate(self._queue) if e[0] == name)
                    self._process(i)
                elif not self._step():
                    raise Deadlock(f"ask to '{name}' can never be answered", actor=name)
            return pending.reply

    def _step(self) -> bool:
        """Process the first envelope whose actor is not busy; False if there is none."""
        for i, (name, *_rest) in enumerate(self._queue):
            if name not in self._busy:
                self._process(i)
                return True
        return False

    def _process(self, i: int) -> None:
        name, kind, payload, pending = self._queue.pop(i)
        cell = self._cells.get(name)
        if cell is None:
            reply = error_reply(ActorDied(f"actor '{name}' is dead: {self._dead.get(name, 'stopped')}", actor=name), name, None)
        else:
            self._busy.append(name)
            try:
                reply = cell.handle(kind, payload)
            finally:
                self._busy.pop()
        if pending is not None:
            pending.reply = reply
        elif reply[0] == "err":
            self.dead_letters.append(f"{kind.rsplit(':', 1)[-1]} to {name}: {reply[2]}")

    def run_until_idle(self, max_messages: int | None = None) -> int:
        """Process queued messages until none is left (or ``max_messages``); returns how many ran."""
        n = 0
        with self._lock:
            while (max_messages is None or n < max_messages) and self._step():
                n += 1
        return n

    @property
    def pending(self) -> int:
        return len(self._queue)
