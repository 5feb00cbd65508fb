"""The cpu backend's Numba code: cached in the user cache, compiled only when used, reported
while it compiles, and compiled once for read-only and writable arrays alike."""

from __future__ import annotations

import gc
import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("numba")

from numba import njit, types

from caramba.backends.cpu import jitcache

PROBE = textwrap.dedent("""
    import json, os, sys
    from numba.core import event
    compiled = []
    class L(event.Listener):
        def on_start(self, ev): compiled.append(ev.data["dispatcher"].py_func.__qualname__)
        def on_end(self, ev): pass
    event.register("numba:compile", L())
    from caramba.backends.cpu.kernels import _train_loops as loops
    from caramba.backends.cpu import native, spin
    at_import = list(compiled)
    import numpy as np
    spin.wait_change(np.zeros(1, np.int64).ctypes.data, 1, 1, 0)  # compiles (or loads) one function
    print(json.dumps({"at_import": at_import, "spin_cache": spin.wait_change._cache._cache_path,
                      "loops_cache": loops.adam._cache._cache_path,
                      "blocks_made": loops._compiled_block.cache_info().currsize,
                      "gemm_made": native._compiled_gemm_block.cache_info().currsize}))
""")


def _probe(env_extra: dict[str, str], tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "CARAMBA_CACHE_DIR")}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh interpreter and an empty cache: a few seconds
def test_numba_caches_in_the_user_cache_and_nothing_compiles_at_import(tmp_path):
    got = _probe({"CARAMBA_CACHE_DIR": str(tmp_path / "cache")}, tmp_path)
    compiled_dir = str(tmp_path / "cache" / "numba" / "compiled")
    assert got["spin_cache"].startswith(compiled_dir) and got["loops_cache"].startswith(compiled_dir)
    assert list((tmp_path / "cache" / "numba" / "compiled").rglob("spin.wait_change-*.nbi"))
    # importing the optimizer loops and the native helpers compiles nothing: the seven
    # optimizers' C blocks and the product block are made when first asked for
    assert got["at_import"] == [] and got["blocks_made"] == 0 and got["gemm_made"] == 0


@pytest.mark.slow
def test_numba_cache_dir_set_by_the_user_wins(tmp_path):
    mine = tmp_path / "mine"
    got = _probe({"NUMBA_CACHE_DIR": str(mine), "CARAMBA_CACHE_DIR": str(tmp_path / "cache")}, tmp_path)
    assert got["spin_cache"].startswith(str(mine))
    assert not (tmp_path / "cache" / "numba" / "compiled").exists()


def test_numba_cache_dir_follows_the_settings(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("CARAMBA_CACHE_DIR", str(tmp_path))
    assert jitcache.numba_cache_dir() == tmp_path / "numba" / "compiled"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "n"))
    assert jitcache.numba_cache_dir() == tmp_path / "n"


@pytest.mark.slow  # compiles one optimizer block when the cache is empty
def test_an_optimizer_block_is_compiled_on_first_use_only():
    from caramba.backends.cpu.kernels import _train_loops as loops

    assert loops.sgd_block.address == loops.sgd_block.address  # made once, then the same
    with pytest.raises(AttributeError):
        loops.nadam_block  # noqa: B018  (not a rule)


def _two_writes():
    @njit(cache=False)
    def f(a, o):
        o[0, 0] = a[0] + 1.0

    return f


def test_writable_arrays_share_the_code_compiled_for_read_only_ones():
    f = _two_writes()
    ro, w2 = types.Array(types.float64, 1, "C", readonly=True), types.Array(types.float64, 2, "C")
    f.compile(types.none(ro, w2))
    assert jitcache.share_writable(f, [ro, w2]) == 1
    assert jitcache.share_writable(f, [ro, w2]) == 0  # registered once: twice would match neither
    gc.collect()  # the twin's type must stay the one calls are typed as
    a, o = np.array([2.0, 0.0]), np.zeros((2, 2))
    f(a, o)
    a.flags.writeable = False
    f(a, o)
    assert o[0, 0] == 3.0 and len(f.signatures) == 1  # no second compile for the writable call


def test_share_writable_does_nothing_for_an_uncompiled_signature():
    f = _two_writes()
    assert jitcache.share_writable(f, [types.Array(types.float64, 1, "C", readonly=True)]) == 0


def test_compiling_reports_each_compile_with_a_name():
    seen: list[str] = []
    jitcache.setup()
    scope = {"__name__": "caramba_fused_k_0123456789abcdef", "njit": njit}
    exec("@njit(cache=False)\ndef kernel(x):\n    return x + 1\n", scope)  # a generated module's function
    with jitcache.compiling(seen.append):
        scope["kernel"](1.0)
    scope["kernel"](2)  # outside: not reported
    assert seen == ["fused kernel 01234567 (kernel)"]


def test_compiling_ignores_numba_internals_and_failing_callbacks():
    jitcache.setup()

    @njit(cache=False)
    def outside_caramba(x):
        return x * 2

    def boom(what):
        raise RuntimeError("a display that fails")

    with jitcache.compiling(boom):
        assert outside_caramba(2.0) == 4.0  # a failing callback never breaks a compile


def test_describe_names_the_cpu_loops():
    from caramba.backends.cpu.kernels import _train_loops as loops

    assert jitcache.describe(loops.adam) == "kernels._train_loops.adam"


def test_research_bar_shows_what_it_compiles():
    from rich.console import Console

    from caramba.cli.research import _Bar

    buf = io.StringIO()
    bar = _Bar(Console(file=buf, width=200, force_terminal=False), quiet=False)
    bar.compiling("kernels._train_loops.adam")
    bar.compiling("fused.elementwise kernel 86de996b (kernel)")
    bar.close()
    text = buf.getvalue()
    assert "compiling cpu kernels on first use" in text and str(jitcache.numba_cache_dir()) in text
    assert bar.compiles == 2
    quiet = _Bar(Console(file=io.StringIO()), quiet=True)
    quiet.compiling("x")
    assert quiet.compiles == 1


def test_a_fused_kernel_specialized_for_read_only_inputs_runs_writable_ones_without_compiling(tmp_path, monkeypatch):
    """Regression: state is read-only when fresh and writable after a step; every kernel that
    took it compiled twice (the quickstart: 3 of its fused kernels and Adam's loop)."""
    from caramba.backends.cpu.fused import jit
    from caramba.ir.dtypes import DType
    from caramba.ir.types import ValueType

    monkeypatch.setenv("CARAMBA_CACHE_DIR", str(tmp_path))
    source = "from numba import njit\n\n\n@njit(cache=True)\ndef kernel(a, o):\n    o[0, 0] = 2.0 * a[1]\n"
    fn = jit.load(source)
    t1, t2 = ValueType((2,), DType.float64), ValueType((1, 1), DType.float64)
    jit.specialize(fn, [jit.array_type(t1, readonly=True), jit.array_type(t2)])
    seen: list[str] = []
    a, o = np.array([0.0, 3.0]), np.zeros((1, 1))
    with jitcache.compiling(seen.append):
        fn(a, o)  # writable: the read-only code
        a.flags.writeable = False
        fn(a, o)
    assert o[0, 0] == 6.0 and len(fn.signatures) == 1 and seen == []


@pytest.mark.slow  # compiles a few fused kernels when the cache is empty
def test_a_step_on_stepped_state_compiles_nothing_new():
    """Regression (cold start): fused kernels reading state compiled once for the fresh
    (read-only) state and again for the state a step wrote; the second step compiles nothing."""
    import caramba
    from caramba import ops
    from caramba.compute import new

    rng = np.random.default_rng(3)
    with caramba.Graph("stepped") as g:
        x = g.input("x", (4, 5))
        w = g.variable("w", (5, 3))
        b = g.variable("b", (3,))
        y = ops.tanh(x @ w + b) * 0.5 + ops.exp(b)  # a fused linear epilogue and an elementwise kernel on state
        g.write("b", b * 0.9 + 0.01)
        g.output("y", y)
    runner = new("cpu")
    try:
        runner.state["w"] = runner.upload(rng.standard_normal((5, 3)))
        runner.state["b"] = runner.upload(rng.standard_normal(3))
        exe = runner.compile(g)
        inputs = {"x": runner.upload(rng.standard_normal((4, 5)))}
        exe.run(inputs)  # fresh state
        seen: list[str] = []
        with jitcache.compiling(seen.append):
            for _ in range(2):
                exe.run(inputs)  # state the previous step wrote
        assert seen == []
    finally:
        runner.close()
