"""Manifest text sent over HTTP becomes a file in its own folder under the store.

The manifest package loads manifests from paths (tuner arms re-load the file with their
overrides), so a submitted manifest is written to ``<store>/submissions/<id>/<name>`` and
loaded from there. That folder is also its whole world: ``!include`` and relative dataset
paths resolve inside it and find nothing else on the server. Error locations name the file
as the client called it (``manifest.yml:5:1``), not the server's folder.
"""

from __future__ import annotations

import dataclasses
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from caramba.errors import CarambaError


def submissions_root(store_root: Path) -> Path:
    return store_root / "submissions"


def relocate(exc: CarambaError, folder: Path) -> CarambaError:
    """Rewrite ``<folder>/name`` to ``name`` in the error's message and locations (in place)."""
    prefix = f"{folder}/"
    for sub in getattr(exc, "errors", None) or ():  # each problem of an error that reports several
        if sub is not exc:
            relocate(sub, folder)
    exc.message = exc.message.replace(prefix, "")
    if exc.hint:
        exc.hint = exc.hint.replace(prefix, "")
    origin = exc.origin
    if dataclasses.is_dataclass(origin) and isinstance(getattr(origin, "file", None), str):
        changes = {"file": origin.file.replace(prefix, "")}
        if isinstance(getattr(origin, "notes", None), tuple):
            changes["notes"] = tuple(n.replace(prefix, "") for n in origin.notes)
        exc.origin = dataclasses.replace(origin, **changes)
        if hasattr(exc, "loc"):
            exc.loc = exc.origin  # ManifestError keeps its Loc twice
    exc.args = (exc._render(),)
    return exc


@contextmanager
def staged(store_root: Path, text: str, name: str, *, keep: bool = False, folder: str | None = None) -> Iterator[Path]:
    """Write ``text`` to a fresh folder as ``name`` and yield its path; caramba errors raised
    inside are relocated to ``name``. The folder is removed afterwards unless ``keep``."""
    where = submissions_root(store_root) / (folder or secrets.token_hex(8))
    where.mkdir(parents=True, exist_ok=False)
    path = where / name
    path.write_text(text, encoding="utf-8")
    ok = False
    try:
        yield path
        ok = True
    except CarambaError as exc:
        raise relocate(exc, where) from None
    finally:
        if not (keep and ok):
            shutil.rmtree(where, ignore_errors=True)
