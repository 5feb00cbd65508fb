"""A graph whose planned working memory the host cannot allocate is refused with one clear
ResourceError when it is compiled, not a MemoryError from deep inside NumPy."""

import numpy as np
import pytest

import caramba
from caramba.compute import new
from caramba.errors import ResourceError


def test_an_arena_too_large_for_the_host_is_a_resource_error():
    from caramba.backends.cpu.runner import _arena

    with pytest.raises(ResourceError, match=r"needs 32768\.0 GiB of working memory") as exc:
        _arena(2**45)
    assert "batch" in (exc.value.hint or "")


def test_compiling_such_a_graph_fails_cleanly_and_the_runner_stays_usable(monkeypatch):
    import caramba.backends.cpu.runner as cpu

    with caramba.Graph("chain") as g:
        x = g.input("x", (64, 64))
        h = x
        for _ in range(4):  # matmuls between activations: values the memory planner puts in its arena
            h = caramba.ops.gelu(h @ x)
        g.output("y", h)
    with new("cpu") as runner:
        real = cpu._arena
        monkeypatch.setattr(cpu, "_arena", lambda nbytes: real(2**45))  # as if the plan were that large
        with pytest.raises(ResourceError):
            runner.compile(g)
        monkeypatch.setattr(cpu, "_arena", real)
        out = runner.compile(g).run({"x": runner.upload(np.ones((64, 64)))})["y"].download()
        assert out.shape == (64, 64)
