"""One error hierarchy for all of caramba.

Every error can name the node, op, backend and manifest origin it is about, so a message
raised deep in a backend still points back to the line of YAML that caused it.
"""

from __future__ import annotations

from typing import Any


class CarambaError(Exception):
    """Base of every error caramba raises on purpose.

    Fields (all optional) are appended to the message so that every error says *where*:
    ``node`` (IR node ID), ``op`` (op ID), ``backend`` (location) and ``origin``
    (manifest file:line:col or other provenance).
    """

    def __init__(
        self,
        message: str,
        *,
        node: str | None = None,
        op: str | None = None,
        backend: str | None = None,
        origin: Any = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.node = node
        self.op = op
        self.backend = backend
        self.origin = origin
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.node is not None:
            where.append(f"node '{self.node}'")
        if self.op is not None:
            where.append(f"op {self.op}")
        if self.backend is not None:
            where.append(f"backend {self.backend}")
        if self.origin is not None:
            where.append(f"at {self.origin}")
        text = self.message
        if where:
            text = f"{text} [{', '.join(where)}]"
        if self.hint:
            text = f"{text}\n  hint: {self.hint}"
        return text


class GraphError(CarambaError):
    """A graph could not be built: wrong shape, dtype, arity or attribute.

    Raised while the graph is being built, naming the node. Fix the call that built it.
    """


class VerificationError(CarambaError):
    """A graph broke an IR invariant (unknown op, bad arity, type mismatch, cycle, ...).

    If you built the graph by hand, fix the named node. If a compiler pass produced it, that
    pass has a bug: the message names the pass and the passes before it.
    """


class UnsupportedOperation(CarambaError):
    """The backend does not support an op, dtype or shape used by the graph.

    caramba never falls back to another backend or a slower path. Pick a backend that claims
    the op (``caramba backends`` lists them) or change the graph.
    """


class PrecisionError(CarambaError):
    """A node requires more precision than the backend computes at.

    Either run on a backend that offers the precision, or opt in to lower precision on that
    node (``precision=float32``, or ``config: {precision: float32}`` in a manifest).
    """


class BackendUnavailable(CarambaError):
    """The requested backend cannot run on this machine (toolkit, driver or device missing).

    caramba never picks another backend for you. The message carries the backend's build
    info; install the extra it names (``pip install caramba[xla]``) or pick another backend.
    """


class TransferError(CarambaError):
    """A tensor was used where it does not live.

    Tensors never move implicitly: upload host data with ``runner.upload(array)`` and move
    data between backends by ``tensor.download()`` and another ``runner.upload``.
    """


class RunnerClosed(CarambaError):
    """The runner was closed; create a new one with ``caramba.compute.new``."""


class ResourceError(CarambaError):
    """The machine cannot provide what a graph needs (its working memory): the graph is valid,
    but too large for here. Make it smaller (batch, model) or run it on a larger machine."""


class ConfigError(CarambaError):
    """A setting, backend option or config string is invalid; the message lists valid ones."""


class CodecError(CarambaError):
    """A serialized graph could not be decoded (wrong format, version or content)."""


class StateError(CarambaError):
    """Graph state is missing, has the wrong type, or was used before it was initialized."""


def did_you_mean(name: str, choices: "list[str] | tuple[str, ...] | set[str]") -> str:
    """Return a short ' (did you mean X?)' suffix, or a listing of the valid choices."""
    import difflib

    ordered = sorted(choices)
    close = difflib.get_close_matches(name, ordered, n=3, cutoff=0.6)
    if close:
        return f"did you mean {', '.join(repr(c) for c in close)}?"
    if len(ordered) <= 40:
        return f"valid: {', '.join(ordered)}"
    return f"{len(ordered)} valid names; see `caramba asset list` / the docs"
