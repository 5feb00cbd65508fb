"""shape.update_rows on resident state: the cpu runner updates the state's array in place (a
KV-cache append costs its rows, not a copy of the cache), and no tensor a caller holds ever
changes because of it."""

from __future__ import annotations

import numpy as np
import pytest

from caramba import compute, ops
from caramba.ir.graph import Graph

B, C, D = 2, 8, 3


def _append_graph(extra_use: bool = False, output_state: bool = False) -> Graph:
    """cache [B, C, D] (zeros) <- rows of ``new`` [B, 1, D] at ``pos`` [B]; outputs the sum."""
    with Graph("append") as g:
        new = g.input("new", (B, 1, D))
        pos = g.input("pos", (B,), "int64")
        cache = g.variable("cache", (B, C, D), init="zeros")
        upd = ops.update_rows(cache, new, pos, axis=1)
        g.write("cache", upd)
        g.output("total", ops.sum(upd))
        if extra_use:  # the old value is read after the update: must stay the old value
            g.output("old_total", ops.sum(cache))
        if output_state:
            g.output("cache", upd)
    return g


@pytest.fixture
def runner():
    r = compute.new("cpu")
    yield r
    r.close()


def _step(exe, runner, value: float, pos: list[int]):
    new = np.full((B, 1, D), value)
    return exe.run({"new": runner.upload(new), "pos": runner.upload(np.array(pos, np.int64))})


def test_update_rows_appends_in_place(runner):
    exe = runner.compile(_append_graph())
    _step(exe, runner, 1.0, [0, 3])
    first = runner.state._values["cache"].array  # not lent: the runner's own buffer
    out = _step(exe, runner, 2.0, [1, 4])
    assert runner.state._values["cache"].array is first  # updated in place, not copied
    want = np.zeros((B, C, D))
    want[0, 0], want[1, 3], want[0, 1], want[1, 4] = 1, 1, 2, 2
    np.testing.assert_array_equal(runner.state["cache"].download(), want)
    assert out["total"].download() == want.sum()


def test_a_lent_state_tensor_never_changes(runner):
    exe = runner.compile(_append_graph())
    _step(exe, runner, 1.0, [0, 0])
    held = runner.state["cache"]  # handed to a caller: frozen
    before = held.download()
    _step(exe, runner, 5.0, [1, 1])
    np.testing.assert_array_equal(held.download(), before)
    assert runner.state["cache"].download()[:, 1].tolist() == [[5.0] * D] * B


def test_an_output_aliasing_state_never_changes(runner):
    exe = runner.compile(_append_graph(output_state=True))
    out = _step(exe, runner, 1.0, [0, 0])["cache"]
    before = out.download()
    _step(exe, runner, 7.0, [2, 2])
    np.testing.assert_array_equal(out.download(), before)


def test_a_second_use_of_the_old_value_keeps_it(runner):
    exe = runner.compile(_append_graph(extra_use=True))
    _step(exe, runner, 1.0, [0, 0])
    out = _step(exe, runner, 3.0, [1, 1])
    assert out["old_total"].download() == 2 * D  # before this step's rows
    assert out["total"].download() == 2 * D + 6 * D


def test_an_uploaded_state_array_is_not_written(runner):
    exe = runner.compile(_append_graph())
    mine = np.zeros((B, C, D))
    runner.state["cache"] = runner.upload(mine)
    _step(exe, runner, 4.0, [0, 0])
    assert not mine.any()
    assert runner.state["cache"].download()[:, 0].tolist() == [[4.0] * D] * B


def test_a_start_past_the_end_is_an_error_naming_the_node(runner):
    from caramba.errors import CarambaError

    exe = runner.compile(_append_graph())
    with pytest.raises(CarambaError, match="out of range"):
        _step(exe, runner, 1.0, [0, C])
