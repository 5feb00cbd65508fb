"""state.*: resident state read and written by graphs (zeros/ones/external init, persistence)."""

from __future__ import annotations

import numpy as np
import pytest

from caramba.errors import StateError
from caramba.ir import Graph

from ..harness import ALL, BOOL, SUBJECT, Case, arg, bad, build, host_inputs, row, uniform

SHAPE = (3, 5)


def _name(case, d) -> str:
    return f"compliance.{case.op}.{case.label}.{d.value}"


def _read_build(init):
    def b(g, ins, d, precision):
        g.variable("s", SHAPE, d, init)  # declares the state (and adds one read)
        return g.read("s", id=SUBJECT)

    return b


def _fresh(runner, name):
    if name in runner.state:
        del runner.state[name]


def _renamed(graph: Graph, name: str) -> Graph:
    """The same graph with its state 's' under a name unique to the test (runners are shared)."""
    from caramba import ir

    d = ir.to_dict(graph)
    for s in d["state"]:
        s["name"] = name
    for n in d["nodes"]:
        if "name" in n["attrs"]:
            n["attrs"]["name"] = name
    return ir.from_dict(d)


def _check_read(init):
    def check(runner, case, d):
        name = _name(case, d)
        _fresh(runner, name)
        g = _renamed(build(case, d).graph, name)
        exe = runner.compile(g)
        if init == "external":
            with pytest.raises(StateError, match=f"state '{name}'.*is not set"):
                exe.run()
            value = host_inputs(Case("v", (arg(SHAPE, uniform(-3, 3, -100, 100)),), op=case.op), d)["x0"]
            runner.state[name] = runner.upload(value)
        else:
            value = np.full(SHAPE, 0 if init == "zeros" else 1, dtype=d.numpy)
        for _ in range(2):  # reading does not change it
            out = exe.run()["out"].download()
            assert out.dtype == d.numpy and out.shape == SHAPE
            np.testing.assert_array_equal(out, value)
        np.testing.assert_array_equal(runner.state[name].download(), value)
        _fresh(runner, name)

    return check


def _write_build(g, ins, d, precision):
    g.variable("s", SHAPE, d, "zeros")
    g.write("s", ins[0], id=SUBJECT)
    return {"after": g.read("s")}  # a read after the write sees the written value


def _check_write(runner, case, d):
    name = _name(case, d)
    _fresh(runner, name)
    b = build(case, d)
    g = _renamed(b.graph, name)
    exe = runner.compile(g)
    values = [host_inputs(Case(f"v{i}", (arg(SHAPE, uniform(-3, 3, -100, 100)),), op=case.op), d)["x0"] for i in range(2)]
    for v in values:
        out = exe.run({"x0": runner.upload(v)})["after"].download()
        np.testing.assert_array_equal(out, v)
        np.testing.assert_array_equal(runner.state[name].download(), v)  # persists after the run
    # another graph on the same runner sees it too
    with Graph("reader") as r:
        r.output("s", r.variable(name, SHAPE, d, "zeros"))
    np.testing.assert_array_equal(runner.compile(r).run()["s"].download(), values[-1])
    _fresh(runner, name)


def _counter_build(g, ins, d, precision):
    s = g.variable("s", (2,), d, "zeros")
    # the add computes: it carries the case's precision opt-in (the float32 contract)
    g.write("s", g.call("math.add", [s, g.constant(np.ones((2,), dtype=d.numpy))], precision=precision), id=SUBJECT)
    return {"before": s}


def _check_counter(runner, case, d):
    """read -> add 1 -> write, executed three times: state persists between executions."""
    name = _name(case, d)
    _fresh(runner, name)
    exe = runner.compile(_renamed(build(case, d).graph, name))
    seen = [exe.run()["before"].download().tolist() for _ in range(3)]
    assert seen == [[0, 0], [1, 1], [2, 2]], seen
    np.testing.assert_array_equal(runner.state[name].download(), np.full((2,), 3, dtype=d.numpy))
    _fresh(runner, name)


NUMBERS = ALL - {BOOL}  # the counter adds
ROWS = [
    row(
        "state.read",
        ALL,
        [Case(init, (), {}, build=_read_build(init), check=_check_read(init)) for init in ("zeros", "ones", "external")],
        [bad("missing required attribute 'name'", shape=[2], dtype="float64")],
    ),
    row(
        "state.write",
        ALL,
        [
            Case("write-read", (arg(SHAPE),), {}, build=_write_build, check=_check_write),
            Case("counter", (), {}, dtypes=NUMBERS, build=_counter_build, check=_check_counter),
        ],
        [bad("missing required attribute 'name'", ((2,), "float64"))],
    ),
]
