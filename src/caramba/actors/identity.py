"""Ed25519 identities of actors, and the canonical JSON that they sign.

Every actor incarnation signs its evidence with its own key; the Notary records which public
key belongs to which actor, and checks signatures again whenever it judges validity.

Binding and rotation: the first registration of an actor name binds it to a key (with proof
of possession: the key's signature over ``registration_bytes``). Another key for that name is
accepted only as a rotation: a signature over ``rotation_bytes(actor, old, new)`` by the old
key, or by the **operator**. The operator is whoever holds the Notary's key (``notary.key``,
mode 0600, next to the ledger): that key also countersigns every ledger row and signs tree
heads. The Notary never signs a rotation on anyone's request; an operator does, on purpose:
``Identity.load_or_create(".../notary/notary.key", "notary").sign(rotation_bytes(...))``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from caramba.errors import CarambaError


class IdentityError(CarambaError):
    """A key could not be loaded or a signature is malformed."""


def canonical(obj: Any) -> bytes:
    """The one byte form of JSON data that is hashed and signed: sorted keys, no spaces, UTF-8.
    Non-finite floats are kept (``NaN``) because a diverged metric is evidence too."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True).encode()


class Identity:
    """An actor's Ed25519 key pair. ``public_key`` is hex; ``sign`` returns a hex signature."""

    def __init__(self, name: str, private_key: Ed25519PrivateKey) -> None:
        self.name = name
        self._key = private_key
        raw = private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.public_key = raw.hex()

    @classmethod
    def generate(cls, name: str) -> "Identity":
        return cls(name, Ed25519PrivateKey.generate())

    @classmethod
    def load_or_create(cls, path: str | os.PathLike, name: str) -> "Identity":
        """A persistent identity: the raw private key lives in ``path`` (mode 0600)."""
        p = Path(path)
        if p.exists():
            data = p.read_bytes()
            if len(data) != 32:
                raise IdentityError(f"key file {p} is not a raw 32-byte Ed25519 private key")
            return cls(name, Ed25519PrivateKey.from_private_bytes(data))
        ident = cls.generate(name)
        p.parent.mkdir(parents=True, exist_ok=True)
        raw = ident._key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        tmp = p.with_name(f".{p.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        try:
            os.link(tmp, p)  # atomic and exclusive: if another process won the race, use its key
        except FileExistsError:
            return cls.load_or_create(p, name)
        finally:
            os.unlink(tmp)
        return ident

    def sign(self, data: bytes) -> str:
        return self._key.sign(data).hex()

    def __repr__(self) -> str:
        return f"<Identity {self.name} {self.public_key[:12]}…>"


def registration_bytes(actor: str, public_key: str) -> bytes:
    """What a key signs to prove possession when it is registered for ``actor``."""
    return canonical({"register": actor, "public_key": public_key})


def rotation_bytes(actor: str, old_key: str, new_key: str) -> bytes:
    """What the old key (or the operator key) signs to move ``actor`` from ``old_key`` to ``new_key``."""
    return canonical({"rotate": actor, "from": old_key, "to": new_key})


def verify_signature(public_key: str, signature: str, data: bytes) -> bool:
    """True if ``signature`` (hex) over ``data`` was made by ``public_key`` (hex)."""
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key)).verify(bytes.fromhex(signature), data)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True
