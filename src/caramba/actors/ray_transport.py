"""The Ray transport: each caramba actor runs as one Ray actor, unchanged.

A Ray actor here is a thin host around the same ``Cell`` the local transport uses, so
dispatch, supervision and errors are identical; messages cross as the same ``(type, JSON)``
pairs. Names are Ray named actors in one namespace; placement uses custom resources
(``backend:<name>`` on nodes that have the backend) and node affinity, and an unsatisfiable
placement is an error, never a silent wait or a move. An actor spawned by another actor is
owned by it: when the owner's process dies, Ray kills it too (the local transport does the
same). A dead process surfaces as ``ActorDied`` naming the actor.

Starting Ray (``ray.init``) happens only here, when ``ActorSystem("ray")`` is created in a
process where Ray is not running yet. In tests, always inside ``../shared/tools/netns-run``
with ``RAY_USAGE_STATS_ENABLED=0`` and ``RAY_AUTH_MODE=disabled``.
"""

from __future__ import annotations

import os
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from caramba.actors.base import (
    Actor,
    ActorDied,
    ActorExists,
    ActorNotFound,
    AskTimeout,
    Cell,
    Context,
    Placement,
    PlacementError,
    Supervision,
    actor_path,
    check_kwargs,
    error_reply,
    raise_reply,
    resolve_actor,
)
from caramba.actors.messages import Message, encode
from caramba.actors.system import ActorRef, ActorSystem


class _Host:
    """The Ray actor that hosts one caramba actor (a Cell)."""

    def __init__(self, cls_path: str, name: str, kwargs: dict, supervision: str, namespace: str, ask_timeout: float) -> None:
        system = RayActorSystem(namespace=namespace, ask_timeout=ask_timeout, _attach=True)
        system._handles[name] = ray.get_runtime_context().current_actor
        self.name = name
        self.start_error: tuple | None = None
        try:
            cls = resolve_actor(cls_path)
            self.cell = Cell(cls, name, kwargs, Supervision.model_validate_json(supervision), Context(system, name, system.node))
            self.cell.start()
        except Exception as exc:  # reported by spawn(), which then removes this actor
            self.start_error = error_reply(exc, name, None)

    def ready(self) -> tuple:
        return self.start_error or ("ok", "none", b"")

    def receive(self, kind: str, payload: bytes) -> tuple:
        return self.cell.handle(kind, payload)

    def stop(self) -> None:
        self.cell.stop()

    def pid(self) -> int:
        return os.getpid()


_HOST: Any = None


def _host_class() -> Any:
    global _HOST
    if _HOST is None:
        _HOST = ray.remote(_Host)
    return _HOST


def _death(name: str, exc: BaseException) -> ActorDied:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ActorDied(
        f"actor '{name}' died: its Ray process is gone ({type(exc).__name__}: {first})",
        actor=name,
        hint="a dead actor stays dead unless its Supervision allows restarts; respawn it to continue",
    )


class RayRef(ActorRef):
    def __init__(self, system: "RayActorSystem", name: str, handle: Any) -> None:
        self.system = system
        self.name = name
        self.handle = handle

    def ask(self, msg: Message, timeout: float | None = None) -> Any:
        kind, payload = encode(msg)
        wait = timeout if timeout is not None else self.system.ask_timeout
        try:
            reply = ray.get(self.handle.receive.remote(kind, payload), timeout=wait)
        except GetTimeoutError:
            raise AskTimeout(f"actor '{self.name}' did not answer {type(msg).__name__} within {wait:g}s", actor=self.name) from None
        except RayActorError as exc:
            self.system._handles.pop(self.name, None)
            raise _death(self.name, exc) from None
        return raise_reply(reply)

    def tell(self, msg: Message) -> None:
        kind, payload = encode(msg)
        self.handle.receive.remote(kind, payload)

    def pid(self) -> int:
        """The OS process id of the actor (for fault tests that kill processes)."""
        return ray.get(self.handle.pid.remote(), timeout=self.system.ask_timeout)


class RayActorSystem(ActorSystem):
    """Actors as Ray actors. Starts Ray (``ray.init``) unless it is already running here.

    ``address``: an existing cluster (``"auto"``) or None for a new local one; ``num_cpus``
    and ``resources`` are passed to ``ray.init`` (default resources: ``backend:<name>`` for
    every backend available on this machine); ``ask_timeout`` bounds every ask."""

    transport = "ray"

    def __init__(
        self,
        transport: str = "ray",
        *,
        address: str | None = None,
        namespace: str = "caramba",
        num_cpus: int | None = None,
        resources: dict[str, float] | None = None,
        ask_timeout: float = 300.0,
        init_options: dict[str, Any] | None = None,
        _attach: bool = False,
    ) -> None:
        self.namespace = namespace
        self.ask_timeout = ask_timeout
        self._handles: dict[str, Any] = {}
        self._owns = False
        if not ray.is_initialized():
            if _attach:
                raise ActorNotFound("Ray is not running in this process")
            if resources is None and address is None:
                from caramba.cluster.profile import backend_resources

                resources = backend_resources()
            ray.init(
                address=address, namespace=namespace, num_cpus=num_cpus, resources=resources,
                include_dashboard=False, **(init_options or {}),
            )
            self._owns = True

    @property
    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    # ---- placement ----------------------------------------------------------------------------
    def _placement_options(self, name: str, placement: Placement | None) -> dict[str, Any]:
        if placement is None:
            return {}
        opts: dict[str, Any] = {}
        wanted = dict(placement.resources)
        if placement.backend:
            wanted[f"backend:{placement.backend}"] = 0.001
        if wanted:
            offered = ray.cluster_resources()
            missing = sorted(k for k in wanted if k not in offered)
            if missing:
                have = sorted(k for k in offered if k.startswith("backend:"))
                raise PlacementError(
                    f"actor '{name}' needs {', '.join(missing)}, which no node of the Ray cluster offers "
                    f"(backends offered: {', '.join(have) or 'none'})",
                    actor=name,
                )
            opts["resources"] = wanted
        if placement.node:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
            if placement.node not in alive:
                raise PlacementError(f"actor '{name}' asks for node {placement.node}, which is not alive in the Ray cluster", actor=name)
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=placement.node, soft=False)
        return opts

    # ---- lifecycle -----------------------------------------------------------------------------
    def spawn(self, cls: type[Actor], name: str, *, kwargs=None, supervision=None, placement=None) -> ActorRef:
        kwargs = check_kwargs(name, kwargs or {})
        sup = supervision or Supervision()
        options = {
            "name": name,
            "namespace": self.namespace,
            "num_cpus": 0,  # actors wait for messages; compute is bounded by the backends they use
            "max_restarts": 0 if sup.restart == "never" else sup.max_restarts,
            "max_task_retries": 0,
            "max_concurrency": 1,
            **self._placement_options(name, placement),
        }
        try:
            handle = _host_class().options(**options).remote(
                actor_path(cls), name, kwargs, sup.model_dump_json(), self.namespace, self.ask_timeout
            )
        except ValueError as exc:
            if "already" in str(exc).lower() or "exists" in str(exc).lower():
                raise ActorExists(f"an actor named '{name}' is already running", actor=name) from None
            raise
        try:
            status = ray.get(handle.ready.remote(), timeout=self.ask_timeout)
        except RayActorError as exc:
            raise _death(name, exc) from None
        except GetTimeoutError:
            ray.kill(handle, no_restart=True)
            raise AskTimeout(f"actor '{name}' did not start within {self.ask_timeout:g}s", actor=name) from None
        if status[0] == "err":
            ray.kill(handle, no_restart=True)
            raise_reply(("err", status[1], f"actor '{name}' failed to start: {status[2]}", status[3], name))
        self._handles[name] = handle
        return RayRef(self, name, handle)

    def _handle(self, name: str) -> Any:
        h = self._handles.get(name)
        if h is None:
            try:
                h = ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                raise ActorNotFound(f"no actor named '{name}' in Ray namespace '{self.namespace}'", actor=name) from None
            self._handles[name] = h
        return h

    def lookup(self, name: str) -> ActorRef:
        return RayRef(self, name, self._handle(name))

    def stop(self, name: str) -> None:
        h = self._handle(name)
        try:
            ray.get(h.stop.remote(), timeout=self.ask_timeout)
        except RayActorError:
            pass
        ray.kill(h, no_restart=True)
        self._handles.pop(name, None)

    def kill(self, name: str) -> None:
        ray.kill(self._handle(name), no_restart=True)
        self._handles.pop(name, None)

    def shutdown(self) -> None:
        self._handles.clear()
        if self._owns and ray.is_initialized():
            ray.shutdown()
            self._owns = False
