"""The cpu backend's per-machine tuning: measured in a bounded time, stored per machine in the
user cache, applied by the backend, shown by `caramba backends -v`, and a damaged or hostile
tuning file is a warning and the defaults, never a crash."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from caramba.backends.cpu import blas, tuning
from caramba.backends.cpu.fused import codegen
from caramba.backends.cpu.kernels import train as train_kernels


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("CARAMBA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(tuning.ENV, raising=False)  # tests/conftest.py sets it for every other test
    tuning.reset()
    yield
    tuning.reset()


def _write(doc, key: str | None = None) -> None:
    p = tuning.path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))


def _entry(settings) -> dict:
    return {"format": 1, "machines": {tuning.fingerprint(): {"machine": tuning.machine(), "measured_at": "then",
                                                              "settings": settings, "measurements": {}, "notes": []}}}


def test_defaults_are_the_module_constants():
    d = tuning.defaults()
    assert (d.small_flops, d.block_flops, d.min_block_rows) == (blas.SMALL_FLOPS, blas.BLOCK_FLOPS, blas.MIN_BLOCK_ROWS)
    assert d.parallel_min_work == codegen.PARALLEL_MIN_WORK and d.loop_split == train_kernels.LOOP_SPLIT
    assert d == tuning.Tuning()  # the dataclass documents the same values


def test_missing_file_is_the_defaults_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t, source = tuning.load()
    assert t == tuning.defaults() and "not tuned" in source


def test_the_environment_names_another_file_or_no_file(tmp_path, monkeypatch):
    _write(_entry({"small_flops": 1.0e5}))
    monkeypatch.setenv(tuning.ENV, "defaults")
    t, source = tuning.load()
    assert t == tuning.defaults() and source == "defaults (CARAMBA_CPU_TUNING=defaults)"
    other = tmp_path / "elsewhere.json"
    other.write_text(json.dumps(_entry({"small_flops": 2.0e5})))
    monkeypatch.setenv(tuning.ENV, str(other))
    assert tuning.path() == other and tuning.load()[0].small_flops == 2.0e5


def test_fingerprint_is_stable_and_names_the_machine():
    info = tuning.machine()
    assert set(info) == {"cpu", "cores", "arch", "blas"} and info["cores"] >= 1
    assert tuning.fingerprint() == tuning.fingerprint(dict(info)) and len(tuning.fingerprint()) == 16
    assert tuning.fingerprint({**info, "cores": info["cores"] + 1}) != tuning.fingerprint()


def test_a_stored_tuning_is_applied_by_the_backend_and_reset_restores_the_defaults():
    from caramba.compute import new

    _write(_entry({"small_flops": 1.0e5, "loop_split": 4096, "parallel_min_work": 8192}))
    runner = new("cpu")
    try:
        assert blas.SMALL_FLOPS == 1.0e5 and train_kernels.LOOP_SPLIT == 4096 and codegen.PARALLEL_MIN_WORK == 8192
        assert blas.BLOCK_FLOPS == tuning.defaults().block_flops  # not stored: default
        t, source = tuning.activate()
        assert t.small_flops == 1.0e5 and "tuned on this machine" in source
    finally:
        runner.close()
    tuning.reset()
    assert blas.SMALL_FLOPS == tuning.defaults().small_flops and train_kernels.LOOP_SPLIT == tuning.defaults().loop_split


def test_another_machines_entry_is_not_used():
    doc = _entry({"small_flops": 1.0e5})
    doc["machines"] = {"0000000000000000": doc["machines"][tuning.fingerprint()]}
    _write(doc)
    t, source = tuning.load()
    assert t == tuning.defaults() and "not tuned" in source


HOSTILE = {
    "not json": "{not json",
    "a list": "[1, 2, 3]",
    "another format": json.dumps({"format": 99, "machines": {}}),
    "machines not an object": json.dumps({"format": 1, "machines": [1]}),
    "entry not an object": None,  # built below: the entry is a string
    "settings a string": "settings",
    "a string value": {"small_flops": "fast"},
    "a bool value": {"min_block_rows": True},
    "NaN": {"small_flops": float("nan")},
    "infinite": {"block_flops": float("inf")},
    "huge": {"small_flops": 1e308},
    "negative": {"loop_split": -5},
    "zero rows": {"min_block_rows": 0},
    "a fraction of a row": {"min_block_rows": 2.5},
    "unknown key": {"small_flops": 1e6, "rm -rf": 1},
    "nested": {"small_flops": {"a": [1]}},
    "deep nesting": "[" * 100000 + "]" * 100000,
    "not utf-8": b"\xff\xfe\x00garbage",
    "too large": " " * (tuning.MAX_FILE_BYTES + 1) + "{}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_damaged_or_hostile_file_warns_and_gives_the_defaults(name):
    value = HOSTILE[name]
    if name == "entry not an object":
        doc = _entry({})
        doc["machines"][tuning.fingerprint()] = "surprise"
        _write(doc)
    elif isinstance(value, bytes):
        tuning.path().parent.mkdir(parents=True, exist_ok=True)
        tuning.path().write_bytes(value)
    elif isinstance(value, str) and name != "settings a string":
        _write(value)
    else:
        _write(_entry(value))
    with pytest.warns(tuning.TuningWarning, match="caramba backends --tune"):
        t, source = tuning.load()
    assert t == tuning.defaults() and "not usable" in source


def test_a_directory_in_place_of_the_file_warns():
    tuning.path().mkdir(parents=True)
    with pytest.warns(tuning.TuningWarning, match="not a regular file"):
        assert tuning.load()[0] == tuning.defaults()


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no named pipes here")
def test_a_pipe_or_device_in_place_of_the_file_is_not_read():
    import os

    tuning.path().parent.mkdir(parents=True)
    os.mkfifo(tuning.path())  # reading it would block forever
    with pytest.warns(tuning.TuningWarning, match="not a regular file"):
        assert tuning.load()[0] == tuning.defaults()
    tuning.path().unlink()
    tuning.path().symlink_to("/dev/zero")
    with pytest.warns(tuning.TuningWarning, match="not a regular file"):
        assert tuning.load()[0] == tuning.defaults()


def test_a_hostile_file_does_not_stop_the_backend():
    import caramba
    from caramba import ops
    from caramba.compute import new

    _write(_entry({"small_flops": "'; DROP TABLE"}))
    with pytest.warns(tuning.TuningWarning):
        runner = new("cpu")
    try:
        with caramba.Graph("g") as g:
            x = g.input("x", (4, 3))
            g.output("y", ops.exp(x) @ ops.transpose(x))
        x = np.arange(12.0).reshape(4, 3) / 10
        out = runner.execute(g, inputs={"x": runner.upload(x)})["y"].download()
        np.testing.assert_allclose(out, np.exp(x) @ x.T, rtol=1e-12)
    finally:
        runner.close()
    assert blas.SMALL_FLOPS == tuning.defaults().small_flops


@pytest.mark.slow  # a tiny budget, but the first compile of each measured path comes on top
def test_tune_is_bounded_and_its_result_loads_back():
    result = tuning.tune(budget_s=0.6)
    assert result["fingerprint"] == tuning.fingerprint()
    assert result["measurements"]["seconds"] < 15  # the budget, plus at most one first compile per phase
    t = tuning.validate(result["settings"])
    for name, (lo, hi) in tuning.BOUNDS.items():
        assert lo <= getattr(t, name) <= hi
    where = tuning.save(result)
    assert where == tuning.path()
    loaded, source = tuning.load()
    assert loaded == t and result["fingerprint"] in source


def test_save_keeps_other_machines_and_replaces_a_damaged_file():
    _write("{damaged")
    result = {"fingerprint": tuning.fingerprint(), "machine": tuning.machine(), "measured_at": "now",
              "settings": {"small_flops": 2.0e6}, "measurements": {}, "notes": []}
    tuning.save(result)
    other = dict(result, fingerprint="ffffffffffffffff", settings={"small_flops": 3.0e6})
    tuning.save(other)
    doc = json.loads(tuning.path().read_text())
    assert set(doc["machines"]) == {tuning.fingerprint(), "ffffffffffffffff"}
    assert tuning.load()[0].small_flops == 2.0e6


def test_crossover_picks_the_size_from_which_the_second_wins_for_good():
    pts = [(1.0, 1.0, 2.0), (2.0, 1.0, 1.5), (4.0, 1.0, 0.5), (8.0, 1.0, 0.4)]
    assert tuning._crossover(pts) == pytest.approx((2.0 * 4.0) ** 0.5)
    assert tuning._crossover([(1.0, 1.0, 2.0), (2.0, 1.0, 0.5), (4.0, 1.0, 1.2)]) is None  # lost at the largest
    assert tuning._crossover([(1.0, 1.0, 0.5), (2.0, 1.0, 0.5)]) == 0.5


def _cli(*args):
    from caramba.cli import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "240"})


def test_verbose_cpu_details_show_the_tuning_and_a_damaged_file():
    from caramba.cli.backends import _cpu_extra

    _write(_entry({"small_flops": 1.0e5}))
    text = "\n".join(_cpu_extra())
    assert "tuned on this machine" in text and "small_flops 1e+05" in text and tuning.fingerprint() in text
    assert "numba cache" in text
    _write("[]")
    text = "\n".join(_cpu_extra())
    assert "tuning warning" in text and "defaults (tuning file not usable" in text


@pytest.mark.slow  # build info of every backend (imports JAX, ONNX Runtime, ...)
def test_cli_verbose_shows_the_tuning():
    _write(_entry({"small_flops": 1.0e5}))
    r = _cli("backends", "-v")
    assert r.exit_code == 0, r.output
    assert "tuned on this machine" in r.output and "small_flops 1e+05" in r.output and "numba cache" in r.output


def test_cli_tune_budget_is_checked():
    from caramba.errors import ConfigError

    for budget in ("0", "-1", "3600", "nan"):
        r = _cli("backends", "--tune", "--budget", budget)
        assert r.exit_code != 0
        assert isinstance(r.exception, ConfigError) and "--budget" in str(r.exception), (budget, r.output)
    assert not tuning.path().exists()


@pytest.mark.slow
def test_cli_tune_writes_this_machines_entry():
    r = _cli("backends", "--tune", "--budget", "1")
    assert r.exit_code == 0, r.output
    assert "cpu tuning for this machine" in r.output
    doc = json.loads(tuning.path().read_text())
    assert tuning.fingerprint() in doc["machines"]


@pytest.mark.slow  # compiles each case twice when the cache is empty
def test_the_benchmark_study_times_tuned_against_default_settings():
    from benchmarks.cpu_tuning import CASES, measure

    _write(_entry({"small_flops": 1.0e5, "parallel_min_work": 4096, "loop_split": 4096}))
    r = measure(budget_s=0.5, rounds=1)  # a stored tuning: nothing is measured before the cases
    assert r["source"].startswith("tuned on this machine")
    assert r["settings"]["small_flops"] == (tuning.defaults().small_flops, 1.0e5)
    assert [row[0] for row in r["rows"]] == [c[0] for c in CASES]
    assert all(d > 0 and t > 0 for _, d, t in r["rows"])  # and both agreed with NumPy (checked inside)
    assert blas.SMALL_FLOPS == 1.0e5  # the process's own tuning is back in force afterwards


def test_unreadable_settings_do_not_stop_the_backend(monkeypatch):
    from caramba.errors import ConfigError

    def broken():
        raise ConfigError("config file caramba.yml is not valid YAML")

    monkeypatch.setattr(tuning, "path", broken)
    with pytest.warns(tuning.TuningWarning, match="not valid YAML"):
        t, source = tuning.activate()
    assert t == tuning.defaults() and "not readable" in source
