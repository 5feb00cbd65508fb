"""caramba.actors: location-transparent actors (local and Ray transports) and the actors that run
experiments: Notary (the only judge of validity), Experiment, Model, Storage and Backend.

``import caramba.actors`` stays light: Ray is imported only by ``ActorSystem("ray")``.
"""

from caramba.actors.base import (
    NEVER,
    Actor,
    ActorDied,
    ActorError,
    ActorExists,
    ActorFailed,
    ActorNotFound,
    AskTimeout,
    Context,
    Deadlock,
    Placement,
    PlacementError,
    Supervision,
    UnknownMessage,
    handler,
)
from caramba.actors.messages import Message, MessageError
from caramba.actors.system import ActorRef, ActorSystem, LocalActorSystem

__all__ = [
    "NEVER", "Actor", "ActorDied", "ActorError", "ActorExists", "ActorFailed", "ActorNotFound", "ActorRef",
    "ActorSystem", "AskTimeout", "Context", "Deadlock", "LocalActorSystem", "Message", "MessageError",
    "Placement", "PlacementError", "Supervision", "UnknownMessage", "handler",
]
