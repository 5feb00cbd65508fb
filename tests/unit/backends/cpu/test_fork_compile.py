"""fork_compile: a batch of kernel compiles shared with a forked copy of the process.

The mechanism is checked with stand-in jobs (which process ran what, a child that stalls or
fails), then end to end: a graph's new fused kernels compiled on two processes run with the
bits of the same graph compiled in one.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

from caramba.backends.cpu.fused import fork_compile

pytestmark = pytest.mark.skipif(not (sys.platform.startswith("linux") and len(os.sched_getaffinity(0)) >= 2),
                                reason="needs Linux and two CPUs")


@pytest.fixture(autouse=True)
def _not_in_ray(monkeypatch):
    """Another test of this worker may have left Ray connected, where forks are off by design."""
    monkeypatch.setattr(fork_compile, "in_ray", lambda: False)
    monkeypatch.delenv(fork_compile.ENV, raising=False)


class _Stub:
    """Stand-in dispatcher: ``targetctx``/``typingctx`` as Numba's, refreshing nothing."""

    class _Ctx:
        def refresh(self):
            return None

        def codegen(self):
            return None

    targetctx = typingctx = _Ctx()


def _jobs(n):
    return [(_Stub(), (k,)) for k in range(n)]


def _recorder(tmp_path, parent, child_action=None, seconds=0.15):
    """compile_one that notes (pid, job) in a file per call; the child does ``child_action``."""

    def compile_one(fn, args):
        if os.getpid() != parent and child_action is not None:
            child_action()
        (tmp_path / f"{os.getpid()}-{args[0]}-{time.monotonic_ns()}").touch()
        if os.getpid() != parent:
            time.sleep(seconds)  # the child's work: long enough that both sides take some
        else:
            time.sleep(seconds)

    return compile_one


def _calls(tmp_path):
    out = []
    for p in tmp_path.iterdir():
        pid, job, _ = p.name.split("-")
        out.append((int(pid), int(job)))
    return out


def test_both_processes_take_jobs_and_the_parent_loads_the_childs(tmp_path):
    parent = os.getpid()
    done_by_child = fork_compile.compile_all(_jobs(8), _recorder(tmp_path, parent))
    calls = _calls(tmp_path)
    mine = sorted(j for pid, j in calls if pid == parent)
    theirs = sorted(j for pid, j in calls if pid != parent)
    assert done_by_child == len(theirs) >= 1 and len(mine) - len(theirs) >= 1
    # every job ran here exactly once: compiled (taken here) or loaded (the child's), and the
    # child's were also compiled by the child
    assert mine == list(range(8))
    assert set(theirs) < set(range(8))


def test_a_stalled_child_is_killed_and_its_job_compiled_here(tmp_path, monkeypatch):
    monkeypatch.setattr(fork_compile, "STALL_S", 0.5)
    parent = os.getpid()
    t0 = time.monotonic()
    done_by_child = fork_compile.compile_all(_jobs(4), _recorder(tmp_path, parent, lambda: time.sleep(3600)))
    assert time.monotonic() - t0 < 30
    assert done_by_child == 0
    assert sorted(j for pid, j in _calls(tmp_path) if pid == parent) == [0, 1, 2, 3]


def test_a_failing_child_leaves_its_jobs_to_the_parent(tmp_path):
    parent = os.getpid()

    def fail():
        raise RuntimeError("child compile failed")

    done_by_child = fork_compile.compile_all(_jobs(5), _recorder(tmp_path, parent, fail))
    assert done_by_child == 0
    assert sorted(j for pid, j in _calls(tmp_path) if pid == parent) == [0, 1, 2, 3, 4]


def test_an_error_here_stops_the_child_and_is_raised(tmp_path):
    parent = os.getpid()

    def compile_one(fn, args):
        if os.getpid() == parent and args[0] == 1:
            raise ValueError("bad kernel")
        time.sleep(0.2)

    with pytest.raises(ValueError, match="bad kernel"):
        fork_compile.compile_all(_jobs(6), compile_one)


def test_a_process_connected_to_ray_does_not_fork(tmp_path, monkeypatch):
    monkeypatch.setattr(fork_compile, "in_ray", lambda: True)
    parent = os.getpid()
    assert not fork_compile.enabled()
    assert fork_compile.compile_all(_jobs(3), _recorder(tmp_path, parent, seconds=0)) == 0
    assert {pid for pid, _ in _calls(tmp_path)} == {parent}


def test_switched_off_or_one_job_compiles_here_only(tmp_path, monkeypatch):
    parent = os.getpid()
    assert fork_compile.compile_all(_jobs(1), _recorder(tmp_path, parent, seconds=0)) == 0
    for off in ("0", "false", " OFF ", "No"):  # the spellings of off a user may write
        monkeypatch.setenv(fork_compile.ENV, off)
        assert not fork_compile.enabled()
    assert fork_compile.compile_all(_jobs(3), _recorder(tmp_path, parent, seconds=0)) == 0
    assert {pid for pid, _ in _calls(tmp_path)} == {parent}
    for on in ("1", "yes", "on"):  # anything else leaves it to the machine (>= 2 CPUs here)
        monkeypatch.setenv(fork_compile.ENV, on)
        assert fork_compile.enabled() == (len(os.sched_getaffinity(0)) >= 2)


def test_a_graphs_new_kernels_compiled_on_two_processes_give_the_same_bits(tmp_path, monkeypatch):
    """End to end on a fresh cache: the child compiles some of the graph's fused kernels into
    Numba's disk cache, this process loads them, and the outputs are those of the same graph
    compiled here alone (another cache)."""
    import caramba
    from caramba import ops
    from caramba.backends.cpu import jitcache
    from caramba.backends.cpu.fused import jit
    from caramba.compute import new

    def graph():
        with caramba.Graph("fork_compile") as g:
            x, y = g.input("x", (64, 48)), g.input("y", (64, 48))
            a = ops.tanh(x * 1.5 + y)
            b = ops.gelu(a - y * 0.25)
            g.output("p", ops.softmax(b * 3.0 + x, axis=-1))
            g.output("q", ops.exp(-ops.abs(x - b)) * 2.0)
        return g

    rng = np.random.default_rng(3)
    inputs = {"x": rng.standard_normal((64, 48)), "y": rng.standard_normal((64, 48))}
    counts = []
    real = fork_compile.compile_all

    def counting(jobs, compile_one):
        counts.append((len(jobs), real(jobs, compile_one)))
        return counts[-1][1]

    monkeypatch.setattr(fork_compile, "compile_all", counting)
    results = {}
    # a distinct text per mode (a comment in the kernels would not do: the cache key is the
    # text) comes from a fresh cache folder each, and a changed constant keeps the two sets of
    # kernels apart in this process's module table
    for mode in ("1", "0"):
        monkeypatch.setenv("CARAMBA_CACHE_DIR", str(tmp_path / mode))
        monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / mode / "compiled"))
        monkeypatch.setenv(fork_compile.ENV, mode)
        jitcache.reset()
        jit._LOADED.clear()
        jit._EXPANDED.clear()
        runner = new("cpu")
        try:
            exe = runner.compile(graph())
            outs = exe.run({k: runner.upload(v) for k, v in inputs.items()})
            results[mode] = {k: t.download() for k, t in outs.items()}
        finally:
            runner.close()
    assert counts and counts[0][0] >= 2 and counts[0][1] >= 1, counts  # the child compiled some
    for k in results["0"]:
        assert results["1"][k].tobytes() == results["0"][k].tobytes(), k


def test_a_prefetched_loop_is_compiled_with_the_batch_for_its_first_call():
    """``jit.prefetch`` (the optimizer and loss loops): compiled when the batch ends, for the
    types the first call has, so that call compiles nothing; outside a batch it does nothing;
    a guess with other types leaves the call to compile as before."""
    from numba import njit
    from numba import types as nt

    from caramba.backends.cpu.fused import jit

    @njit(cache=False)
    def loop(x, out, k):
        for i in range(x.shape[0]):
            out[i] = x[i] * k

    ro, w = nt.Array(nt.float64, 1, "C", readonly=True), nt.Array(nt.float64, 1, "C")
    jit.prefetch(loop, (ro, w, nt.float64))
    assert not loop.overloads  # no batch: nothing
    with jit.batch():
        jit.prefetch(loop, (ro, w, nt.float64))
        assert not loop.overloads  # at the end of the batch
    assert (ro, w, nt.float64) in loop.overloads
    x = np.arange(4.0)
    x.setflags(write=False)
    out = np.empty(4)
    loop(x, out, 2.0)
    assert len(loop.overloads) == 1 and out.tolist() == [0.0, 2.0, 4.0, 6.0]
    loop(np.arange(4.0), out, 3.0)  # a writable x runs the same code (its twin is registered)
    assert len(loop.overloads) == 1 and out.tolist() == [0.0, 3.0, 6.0, 9.0]
    loop(x, out, 2)  # an int scalar: compiled on the call, as without the guess
    assert len(loop.overloads) == 2
