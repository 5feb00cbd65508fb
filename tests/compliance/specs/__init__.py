"""Compliance spec tables, one module per op family, discovered automatically.

Each public module here defines ``ROWS``: a list of ``harness.Row``, one per op ID. Adding a
family is adding a module; modules whose name starts with ``_`` hold shared helpers.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..harness import Row


def families() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def load_rows() -> list[Row]:
    rows: list[Row] = []
    for name in families():
        mod = importlib.import_module(f"{__name__}.{name}")
        if not hasattr(mod, "ROWS"):
            raise AttributeError(f"compliance spec module {mod.__name__} defines no ROWS")
        rows.extend(mod.ROWS)
    return rows
