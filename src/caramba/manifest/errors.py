"""ManifestError and source locations (file:line:col, dotted path, include/repeat notes)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from caramba.errors import CarambaError

PathPart = "str | int"


@dataclass(frozen=True, slots=True)
class Loc:
    """Where a value was written: file, 1-based line and column, and how it got here
    (``notes``: the include chain and repeat iterations it was expanded through)."""

    file: str
    line: int
    col: int
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def noted(self, notes: tuple[str, ...]) -> "Loc":
        if not notes:
            return self
        return Loc(self.file, self.line, self.col, self.notes + tuple(n for n in notes if n not in self.notes))

    def origin(self, path: "Sequence[Any] | str | None" = None, note: str | None = None) -> Any:
        """This location as an ``ir.Origin`` (what IR nodes carry)."""
        from caramba.ir.graph import Origin

        dotted = path if isinstance(path, str) or path is None else format_path(path)
        notes = "; ".join(n for n in (*self.notes, note) if n)
        return Origin(self.file, self.line, self.col, dotted or None, notes or None)


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (a huge int is described, not printed)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an int of {value.bit_length()} bits"
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_path(parts: Iterable[Any]) -> str:
    """``("topology", "nodes", 3, "config")`` -> ``topology.nodes[3].config``."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out


class ManifestError(CarambaError):
    """A manifest could not be loaded, validated or lowered.

    The message starts with ``file:line:col`` and the dotted path of the offending value, and
    lists the include chain or repeat iteration that produced it. Fix the manifest at that
    place; unknown names come with the valid ones (``did you mean``). An error about several
    independent problems (``ManifestError.combine``) lists them in ``errors`` and in its text,
    one per line; its own fields (``line``, ``path``, ``message``) are the first one's.
    """

    def __init__(
        self,
        message: str,
        *,
        loc: Loc | None = None,
        path: "Sequence[Any] | str | None" = None,
        hint: str | None = None,
        node: str | None = None,
        op: str | None = None,
    ) -> None:
        self.loc = loc
        self.path = path if isinstance(path, str) or path is None else format_path(path)
        self.errors: list[ManifestError] = []  # every problem, when this error reports several
        super().__init__(message, node=node, op=op, hint=hint, origin=loc)

    @classmethod
    def combine(cls, errors: "Sequence[ManifestError]") -> "ManifestError":
        """One error for several independent problems: it reads (type, message, ``loc``,
        ``line``, ``path``) as the first and lists all of them in ``errors`` and in its text,
        each at its own line. A single problem is returned as it is."""
        flat: list[ManifestError] = []
        seen: set[str] = set()
        for e in errors:
            for sub in e.errors or [e]:
                text = sub._render_one()
                if text not in seen:  # the same problem found twice is reported once
                    seen.add(text)
                    flat.append(sub)
        if not flat:
            raise ValueError("combine() needs at least one error")
        if len(flat) == 1:
            return flat[0]
        first = flat[0]
        out = cls(first.message, loc=first.loc, path=first.path, hint=first.hint, node=first.node, op=first.op)
        out.errors = flat
        out.args = (out._render(),)
        return out

    @property
    def file(self) -> str | None:
        return self.loc.file if self.loc else None

    @property
    def line(self) -> int | None:
        return self.loc.line if self.loc else None

    @property
    def col(self) -> int | None:
        return self.loc.col if self.loc else None

    def _render(self) -> str:
        if len(getattr(self, "errors", ())) > 1:  # each problem in full, the first first
            return "\n".join(e._render_one() for e in self.errors)
        return self._render_one()

    def _render_one(self) -> str:
        text = ""
        if self.loc is not None:
            text += f"{self.loc}: "
        if self.path:
            text += f"{self.path}: "
        text += self.message
        if self.node is not None and f"'{self.node}'" not in self.message:
            text += f" [node '{self.node}']"
        for note in self.loc.notes if self.loc else ():
            text += f"\n  {note}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text
