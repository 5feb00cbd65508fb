"""Every pass keeps the graph's meaning: on every available backend, random graphs give the
same float64 results (to 1e-12 relative) with the full pipeline as with every optional pass
disabled. The memory plan of each is proven safe by an independent checker."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from caramba.compute import available, new
from caramba.errors import PrecisionError, UnsupportedOperation

from ._graphs import graphs
from ._util import assert_close, check_plan, run, unoptimized

BACKENDS = available()
_RUNNERS: dict = {}


def _runner(name):
    if name not in _RUNNERS:
        _RUNNERS[name] = new(name)
    return _RUNNERS[name]


@pytest.fixture(scope="module", autouse=True)
def _close_runners():
    yield
    for r in _RUNNERS.values():
        r.close()
    _RUNNERS.clear()


def _fresh_state(runner, graph):
    for name in graph.state:
        if name in set(runner.state):  # (StateStore raises StateError, not KeyError, on a miss)
            del runner.state[name]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=graphs())
def test_full_pipeline_matches_unoptimized(backend, case):
    graph, inputs = case
    runner = _runner(backend)
    try:
        _fresh_state(runner, graph)
        want = unoptimized(runner, graph, inputs)
    except (UnsupportedOperation, PrecisionError):
        return  # this backend does not run the graph at all; nothing to compare
    want_state = {k: runner.state[k].download() for k in graph.state}
    _fresh_state(runner, graph)
    exe = runner.compile(graph)
    got = run(runner, graph, inputs)
    assert set(got) == set(want)
    for k in want:
        assert_close(got[k], want[k], 1e-12, what=f"output {k} on {backend}\n{exe.graph.as_text()}")
    for k, v in want_state.items():
        assert_close(runner.state[k].download(), v, 1e-12, what=f"state {k} on {backend}")
    plan = getattr(exe.report, "memory", None)
    if plan is not None:
        check_plan(exe.graph, plan, runner.capabilities.buffers)
    # A second run reuses the planned buffers: earlier outputs must be unaffected by it.
    _fresh_state(runner, graph)
    first = exe.run({k: runner.upload(v) for k, v in inputs.items()})
    _fresh_state(runner, graph)
    exe.run({k: runner.upload(v * 0.5) for k, v in inputs.items()})
    for k in want:
        assert_close(first[k].download(), want[k], 1e-12, what=f"output {k} after a second run")
