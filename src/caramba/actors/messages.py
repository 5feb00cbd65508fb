"""Typed messages and the wire codec every transport uses.

A message is a frozen pydantic model. On every transport, local included, a message crosses
as ``(type path, JSON bytes)`` and is validated again on arrival, so an actor that works
in-process works unchanged on Ray: nothing that cannot cross a process boundary gets through.
Replies are a message, ``None`` or plain JSON data (numbers, strings, lists, dicts).
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from caramba.errors import CarambaError

JSON = "json"  # type path of a plain-JSON reply
NONE = "none"


class Message(BaseModel):
    """Base of every actor message. Subclass it with typed fields; unknown fields are errors."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        ser_json_bytes="base64",
        val_json_bytes="base64",
        ser_json_inf_nan="constants",
    )


class MessageError(CarambaError):
    """A message could not be encoded or decoded (unknown type, invalid fields, not JSON data).

    Messages must be ``caramba.actors.Message`` subclasses defined at module level, and replies a
    message, ``None`` or JSON data, because every transport sends them as JSON."""


def type_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


_TYPES: dict[str, type[Message]] = {}


def resolve(path: str) -> type[Message]:
    """The Message class named by ``module:QualName`` (only Message subclasses resolve)."""
    cls = _TYPES.get(path)
    if cls is not None:
        return cls
    module, _, qual = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        raise MessageError(f"unknown message type {path!r}") from None
    if not (isinstance(obj, type) and issubclass(obj, Message)):
        raise MessageError(f"{path!r} is not a caramba.actors.Message")
    _TYPES[path] = obj
    return obj


def encode(value: Any) -> tuple[str, bytes]:
    """``value`` -> ``(type path, payload bytes)``."""
    if value is None:
        return NONE, b""
    if isinstance(value, Message):
        try:
            return type_path(type(value)), value.model_dump_json().encode()
        except (ValueError, TypeError) as exc:
            raise MessageError(f"cannot encode {type(value).__name__}: {exc}") from None
    try:
        return JSON, json.dumps(value, allow_nan=True).encode()
    except (TypeError, ValueError) as exc:
        raise MessageError(
            f"cannot send a {type(value).__name__}: {exc}",
            hint="return a caramba.actors.Message, None or JSON data (dict, list, str, number, bool)",
        ) from None


def decode(kind: str, payload: bytes) -> Any:
    if kind == NONE:
        return None
    if kind == JSON:
        return json.loads(payload)
    cls = resolve(kind)
    try:
        return cls.model_validate_json(payload)
    except ValidationError as exc:
        raise MessageError(f"invalid {cls.__name__} message: {exc}") from None
