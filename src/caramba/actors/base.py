"""Actor, handlers, supervision and the cell that runs one actor on any transport.

An actor is a class with typed handlers::

    class Counter(Actor):
        def __init__(self, start: int = 0):
            self.n = start

        @handler
        def add(self, msg: Add) -> Total:
            self.n += msg.amount
            return Total(value=self.n)

Handlers run one message at a time. A handler that raises a ``CarambaError`` answers the
asker with that error and the actor carries on (the request was wrong, not the actor). Any
other exception is a crash: the asker gets ``ActorFailed`` and the actor's ``Supervision``
decides: restart it (a fresh instance from the same constructor arguments) or let it die;
later messages to a dead actor raise ``ActorDied`` naming it and the cause.
"""

from __future__ import annotations

import importlib
import inspect
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, Field

from caramba.actors.messages import Message, MessageError, decode, encode, type_path
from caramba.errors import CarambaError

if TYPE_CHECKING:
    from caramba.actors.identity import Identity
    from caramba.actors.system import ActorRef, ActorSystem


# ---- errors ---------------------------------------------------------------------------------
class ActorError(CarambaError):
    """Base of the actor-system errors; ``actor`` names the actor concerned."""

    def __init__(self, message: str, *, actor: str | None = None, **kw: Any) -> None:
        self.actor = actor
        super().__init__(message, **kw)


class ActorNotFound(ActorError):
    """No actor has that name in this system. Spawn it first, or check the name
    (``system.names()`` lists the live ones)."""


class ActorExists(ActorError):
    """An actor with that name is alive already; names are unique in a system."""


class ActorFailed(ActorError):
    """The actor crashed (an unexpected exception) while handling the message. The message
    names the actor, the message type and the original error; its Supervision decides
    whether it restarts."""


class ActorDied(ActorError):
    """The actor is dead: it crashed more often than its Supervision allows, was killed, or its
    process exited. The message says which actor and why; respawn it to continue."""


class AskTimeout(ActorError):
    """No reply within the timeout. The actor may be overloaded or stuck; the message names it."""


class Deadlock(ActorError):
    """An ask can never be answered: the actor asked is busy waiting, directly or indirectly, on
    the asker. Break the cycle with ``tell`` or restructure the protocol."""


class UnknownMessage(ActorError):
    """The actor has no handler for that message type; the message lists the ones it accepts."""


class PlacementError(ActorError):
    """No node can host the actor: the resources it asks for (a backend, a node) exist nowhere in
    the cluster. caramba never places an actor somewhere else instead."""


# ---- declarations -----------------------------------------------------------------------------
class Supervision(BaseModel):
    """What happens when an actor crashes.

    ``restart="on-failure"`` (default) builds a fresh instance with the same constructor
    arguments, up to ``max_restarts`` times within ``within_s`` seconds; beyond that, or with
    ``restart="never"``, the actor dies. On Ray, ``max_restarts`` also bounds restarts after the
    actor's process dies.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    restart: Literal["on-failure", "never"] = "on-failure"
    max_restarts: int = Field(3, ge=0)
    within_s: float = Field(60.0, gt=0)


NEVER = Supervision(restart="never", max_restarts=0)


class Placement(BaseModel):
    """Where an actor may run: on a node that has ``backend`` available, on a given ``node``, with
    extra custom ``resources``. Unsatisfiable placements raise PlacementError."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    backend: str | None = None
    node: str | None = None
    resources: dict[str, float] = Field(default_factory=dict)


def handler(fn: Callable) -> Callable:
    """Mark a method as the handler of the Message type its first parameter is annotated with."""
    fn.__caramba_handler__ = True  # type: ignore[attr-defined]
    return fn


class Context:
    """What an actor knows about its place: its name, node, system, and a ref to itself."""

    def __init__(self, system: "ActorSystem", name: str, node: str) -> None:
        self.system = system
        self.name = name
        self.node = node

    @property
    def self_ref(self) -> "ActorRef":
        return self.system.lookup(self.name)

    def lookup(self, name: str) -> "ActorRef":
        return self.system.lookup(name)

    def spawn(self, cls: type["Actor"], name: str, **kw: Any) -> "ActorRef":
        return self.system.spawn(cls, name, **kw)


class Actor:
    """Base class of every actor. Override ``started``/``stopped``/``restarted`` as needed."""

    _handlers: ClassVar[dict[type[Message], str]] = {}
    _context: Context | None = None
    _identity: "Identity | None" = None

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        table: dict[type[Message], str] = {}
        for base in reversed(cls.__mro__[1:]):
            table.update(getattr(base, "_handlers", {}))
        here: set[type[Message]] = set()
        for attr, fn in cls.__dict__.items():
            if not getattr(fn, "__caramba_handler__", False):
                continue
            params = list(inspect.signature(fn).parameters)
            if len(params) != 2:
                raise TypeError(f"handler {cls.__name__}.{attr} must take (self, message)")
            hints = get_type_hints(fn, vars(importlib.import_module(fn.__module__)))
            mtype = hints.get(params[1])
            if not (isinstance(mtype, type) and issubclass(mtype, Message)):
                raise TypeError(f"handler {cls.__name__}.{attr}: annotate the message parameter with a Message type")
            if mtype in here:
                raise TypeError(f"{cls.__name__} has two handlers for {mtype.__name__}")
            here.add(mtype)
            table[mtype] = attr
        cls._handlers = table

    # ---- hooks ---------------------------------------------------------------------------------
    def started(self) -> None:
        """Called once the actor is registered and may talk to others."""

    def stopped(self) -> None:
        """Called on a graceful stop (not when killed or crashed)."""

    def restarted(self, cause: str) -> None:
        """Called on the fresh instance after a crash, after ``started``."""

    # ---- helpers ---------------------------------------------------------------------------------
    @property
    def context(self) -> Context:
        if self._context is None:
            raise ActorError(f"{type(self).__name__} is not running in an actor system yet")
        return self._context

    @property
    def identity(self) -> "Identity":
        """This incarnation's Ed25519 identity, generated on first use and named
        ``<actor>#<incarnation>``: the Notary binds a name to its first key, and a restarted
        actor (a new process, a new key) is a new incarnation, not a key change of the old one."""
        if self._identity is None:
            import secrets

            from caramba.actors.identity import Identity

            self._identity = Identity.generate(f"{self.context.name}#{secrets.token_hex(4)}")
        return self._identity

    @classmethod
    def accepts(cls) -> list[str]:
        return sorted(m.__name__ for m in cls._handlers)


def actor_path(cls: type[Actor]) -> str:
    return type_path(cls)


def resolve_actor(path: str) -> type[Actor]:
    module, _, qual = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, Actor)):
        raise ActorError(f"{path!r} is not an Actor class")
    return obj


# ---- errors on the wire -----------------------------------------------------------------------
def error_reply(exc: BaseException, actor: str, msg_type: str | None) -> tuple:
    """Encode an exception for the asker (any transport)."""
    if isinstance(exc, CarambaError):
        return ("err", type_path(type(exc)), exc.message, exc.hint, getattr(exc, "actor", None) or actor)
    detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    what = f" handling {msg_type}" if msg_type else ""
    return ("err", type_path(ActorFailed), f"actor '{actor}' crashed{what}: {detail}", None, actor)


def raise_reply(reply: tuple) -> Any:
    """Decode a reply tuple: return the value or raise the error it carries."""
    if reply[0] == "ok":
        return decode(reply[1], reply[2])
    _, path, message, hint, actor = reply
    raise rebuild_error(path, message, hint, actor)


def rebuild_error(path: str, message: str, hint: str | None, actor: str | None) -> CarambaError:
    cls: Any = CarambaError
    try:
        module, _, qual = path.partition(":")
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
        if isinstance(obj, type) and issubclass(obj, CarambaError):
            cls = obj
    except (ImportError, AttributeError):
        pass
    exc = cls.__new__(cls)
    if issubclass(cls, ActorError):
        exc.actor = actor
    CarambaError.__init__(exc, message, hint=hint)
    return exc


# ---- the cell: one actor, its supervision and its dispatch ------------------------------------
class Cell:
    """Runs one actor: builds it, dispatches encoded messages, applies its Supervision.

    Transports own delivery (queues, processes); the cell is the same on all of them."""

    def __init__(
        self, cls: type[Actor], name: str, kwargs: dict[str, Any], supervision: Supervision, context: Context
    ) -> None:
        self.cls = cls
        self.name = name
        self.kwargs = kwargs
        self.supervision = supervision
        self.context = context
        self.instance: Actor | None = None
        self.dead: str | None = None  # cause of death
        self.restarts: deque[float] = deque()
        self.failures = 0

    def start(self) -> None:
        inst = self.cls(**self.kwargs)
        inst._context = self.context
        self.instance = inst
        inst.started()

    def handle(self, kind: str, payload: bytes) -> tuple:
        if self.dead is not None:
            return error_reply(ActorDied(f"actor '{self.name}' is dead: {self.dead}", actor=self.name), self.name, None)
        try:
            msg = decode(kind, payload)
        except CarambaError as exc:
            return error_reply(exc, self.name, None)
        assert self.instance is not None
        attr = self.cls._handlers.get(type(msg))
        if attr is None:
            exc = UnknownMessage(
                f"actor '{self.name}' ({self.cls.__name__}) has no handler for {type(msg).__name__}; "
                f"it accepts {', '.join(self.cls.accepts()) or 'nothing'}",
                actor=self.name,
            )
            return error_reply(exc, self.name, None)
        try:
            result = getattr(self.instance, attr)(msg)
            out_kind, out = encode(result)
        except CarambaError as exc:
            return error_reply(exc, self.name, type(msg).__name__)
        except Exception as exc:
            reply = error_reply(exc, self.name, type(msg).__name__)
            self._crashed(reply[2])
            return reply
        return ("ok", out_kind, out)

    def _crashed(self, cause: str) -> None:
        self.failures += 1
        policy = self.supervision
        now = time.monotonic()
        while self.restarts and now - self.restarts[0] > policy.within_s:
            self.restarts.popleft()
        if policy.restart == "never" or len(self.restarts) >= policy.max_restarts:
            n = len(self.restarts)
            self.dead = cause + (f" (after {n} restart{'s' * (n != 1)} within {policy.within_s:g}s)" if n else "")
            self.instance = None
            return
        self.restarts.append(now)
        try:
            self.start()
            assert self.instance is not None
            self.instance.restarted(cause)
        except Exception as exc:  # the restart itself failed: nothing left to supervise
            self.dead = f"{cause}; restart failed: {type(exc).__name__}: {exc}"
            self.instance = None

    def stop(self) -> None:
        if self.instance is not None and self.dead is None:
            try:
                self.instance.stopped()
            finally:
                self.instance = None
        self.dead = self.dead or "stopped"


def check_kwargs(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments must be JSON data on every transport (they may cross processes)."""
    import json

    try:
        return json.loads(json.dumps(kwargs, allow_nan=True))
    except (TypeError, ValueError) as exc:
        raise MessageError(f"arguments of actor '{name}' must be JSON data: {exc}") from None
