"""The tuner's decisions (strategy, step, chosen arm, belief) as columns of ``research compare``
and on the API's compare response, from a real tuned experiment (active_inference, budget 3:
each arm once, then the better one) and from hand-recorded rows with hostile values."""

from __future__ import annotations

import math

import pytest

from caramba.run.compare import TUNER_COLUMNS, compare_runs, tuner_cells, tuner_decision
from caramba.run.engine import run_experiment
from caramba.store import RunStore

from .test_tuner import BLOBS


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("tuned") / "store")
    decisions = []
    res = run_experiment(BLOBS % 3, store=store, on_decision=decisions.append)
    return store, res, decisions


def test_compare_rows_carry_the_decision_that_started_each_run(tuned):
    store, res, decisions = tuned
    c = compare_runs(store, experiment="tuned")
    by_id = {r.id: r for r in c.runs}
    for run, dec in zip(res.runs, decisions):
        t = by_id[run.run_id].tuner
        assert t["strategy"] == "active_inference" and t["step"] == dec.step and t["arm"] == dec.arm_id
        want = dec.beliefs.get(dec.arm_id)
        if want:  # the chosen arm's belief when it was chosen
            assert t["belief"]["n"] == want["n"] and t["belief"]["q"] == pytest.approx(want["q"], rel=1e-12)
            assert t["belief"]["mean"] == pytest.approx(want["mean"], rel=1e-12)
    assert any("belief" in r.tuner for r in c.runs)  # the third step chose from beliefs
    table = c.table()
    header = table.splitlines()[0]
    for col in TUNER_COLUMNS:
        assert col in header
    third = by_id[res.runs[2].run_id]
    line = next(ln for ln in table.splitlines() if third.id in ln)
    assert "active_inference" in line and "q " in line and "G " in line


def test_the_cli_prints_the_tuner_columns(tuned):
    from typer.testing import CliRunner

    from caramba.cli import app

    store, _res, _ = tuned
    r = CliRunner().invoke(app, ["research", "compare", "--experiment", "tuned", "--store", str(store.root)],
                           env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "chosen arm" in r.output and "active_inference" in r.output


def test_runs_without_a_tuner_have_no_tuner_columns(tmp_path):
    store = RunStore(tmp_path)
    rec = store.create_run("plain", target="cpu", run_name="s0", config={"manifest": {"name": "plain"}})
    store.start(rec.id)
    store.log_rows(rec.id, [(1, "val", {"loss": 0.5})])
    store.finish(rec.id)
    c = compare_runs(store, experiment="plain")
    assert c.runs[0].tuner == {} and "chosen arm" not in c.table()
    assert c.as_dict()["runs"][0]["tuner"] == {}


def test_hostile_recorded_decisions_are_read_safely():
    class Rec:
        def __init__(self, tuner):
            self.config = {"tuner": tuner}

    assert tuner_decision(Rec("grid")) == {}
    assert tuner_decision(Rec({"strategy": 3})) == {}
    d = tuner_decision(Rec({"strategy": "active_inference", "step": True, "arm": "a",
                            "beliefs": {"a": {"mean": math.inf, "q": 0.5, "G": "x", "n": 2}}}))
    assert d["step"] is None and d["belief"] == {"mean": None, "q": 0.5, "n": 2}
    assert tuner_cells({}) == ["-", "-", "-", "-"]
    assert tuner_cells({"strategy": "grid", "step": 4, "arm": "b", "reason": "round-robin"}) == \
        ["grid", "4", "b", "round-robin"]


def test_the_api_compare_response_has_the_decisions(tuned):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from caramba.api import create_app
    from caramba.config import Settings

    store, res, decisions = tuned
    app = create_app(Settings(store=str(store.root), api_token="t0k3n-abc"), hosts=("testserver",))
    with TestClient(app) as client:
        r = client.get("/api/v1/compare", params={"experiment": "tuned"})
    assert r.status_code == 200, r.text
    runs = {x["id"]: x for x in r.json()["runs"]}
    for run, dec in zip(res.runs, decisions):
        t = runs[run.run_id]["tuner"]
        assert (t["strategy"], t["step"], t["arm"]) == ("active_inference", dec.step, dec.arm_id)
    assert runs[res.runs[2].run_id]["tuner"]["belief"]["q"] is not None
