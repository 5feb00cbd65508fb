"""Run IDs in tests: they end in random hex, so a prefix that drops characters can match another
run recorded in the same second; take the shortest one that does not."""

from __future__ import annotations

from collections.abc import Iterable


def unique_prefix(run_id: str, others: Iterable[str], *, drop: int = 2) -> str:
    """The shortest prefix of `run_id`, at most `drop` characters short, that no other ID starts with."""
    others = [o for o in others if o != run_id]
    for k in range(len(run_id) - drop, len(run_id)):
        if not any(o.startswith(run_id[:k]) for o in others):
            return run_id[:k]
    return run_id
