"""The optimizer loops' disk cache follows edits to the element rules they inline (ops/train.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("numba")

from caramba.backends.cpu.kernels import _train_loops as loops


def test_cached_loops_are_dropped_when_the_element_rules_change(tmp_path, monkeypatch):
    monkeypatch.setattr(loops._cache_probe._cache, "_cache_path", str(tmp_path))
    cached = ["_train_loops.adam-35.py311.nbi", "_train_loops.adam-35.py311.1.nbc"]
    other = "_loss_loops.rows-10.py311.nbi"  # another module's cache stays
    for name in [*cached, other]:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "_train_loops.elem-rules").write_text("the digest of older rules")

    loops._drop_stale_cache()
    assert sorted(p.name for p in tmp_path.iterdir()) == [other, "_train_loops.elem-rules"]

    # unchanged rules: what Numba cached since is kept
    for name in cached:
        (tmp_path / name).write_bytes(b"x")
    loops._drop_stale_cache()
    assert {p.name for p in tmp_path.iterdir()} >= set(cached)
