"""`caramba research compare|tag|annotate|delete` against a temporary store."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from caramba.cli import app
from caramba.store.runs import RunStore

TUNER = {"metric": "val.loss", "arms": [{"id": "a", "set": {"trainer.lr": 0.01}}, {"id": "b", "set": {"trainer.lr": 0.1}}]}


def invoke(*args, input=None):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"}, input=input)


def said(r) -> str:
    """What the command printed, and the message of the caramba error it ended with (what
    ``caramba.cli.main`` prints in place of a traceback)."""
    from caramba.errors import CarambaError

    if r.exception is not None and not isinstance(r.exception, (CarambaError, SystemExit)):
        raise r.exception  # a traceback: a bug, not an answer
    return r.output + (str(r.exception) if isinstance(r.exception, CarambaError) else "")


@pytest.fixture
def sweep(tmp_path):
    """Two arms x two seeds recorded like the engine records them, with known val.loss rows."""
    store = RunStore(tmp_path / "store")
    losses = {("a", 0): [1.0, 0.8], ("a", 1): [0.9, 0.6], ("b", 0): [0.7, 0.3], ("b", 1): [0.6, 0.5]}
    ids = {}
    for (arm, seed), vals in losses.items():
        rec = store.create_run("sw", arm=arm, target="cpu", run_name=f"s{seed}", seed=seed,
                               config={"manifest": {"tuner": TUNER}, "spec": {"config": {"overrides": ["trainer.steps=2"]}}})
        store.log_rows(rec.id, [(i, "val", {"loss": v}) for i, v in enumerate(vals, 1)])
        store.finish(rec.id)
        ids[(arm, seed)] = rec.id
    return str(tmp_path / "store"), ids, losses


def test_compare_prints_params_finals_and_the_arm_ranking(sweep):
    store, ids, losses = sweep
    r = invoke("research", "compare", "--experiment", "sw", "--store", store)
    assert r.exit_code == 0, r.output
    assert "trainer.lr" in r.output and "trainer.steps" in r.output and "val.loss final" in r.output
    b = [losses[("b", s)][-1] for s in (0, 1)]
    assert f"{np.mean(b):.4g} ± {np.std(b, ddof=1):.4g} (n=2)" in r.output
    assert r.output.index("│ 1    │ b") < r.output.index("│ 2    │ a")
    r = invoke("research", "compare", ids[("a", 0)], ids[("b", 1)], "--store", store, "--json")
    data = json.loads(r.output)
    assert {x["id"] for x in data["runs"]} == {ids[("a", 0)], ids[("b", 1)]}
    assert data["ranking"][0]["arm"] == "b" and data["ranking"][0]["n"] == 1 and data["ranking"][0]["std"] is None
    assert [a["id"] for a in data["arms"]] == ["a", "b"]


def test_compare_errors_are_messages_not_tracebacks(sweep):
    store, _, _ = sweep
    for args, words in ((["--experiment", "nope"], "no runs of experiment 'nope'"),
                        (["--experiment", "sw", "--metric", "val.los"], "did you mean"),
                        (["--experiment", "sw", "--mode", "up"], "min or max"),
                        ([], "nothing to compare"),
                        (["zzz-unknown"], "no run 'zzz-unknown'")):
        r = invoke("research", "compare", *args, "--store", store)
        assert r.exit_code != 0 and words in said(r), (args, said(r))


def test_plot_writes_a_png(sweep, tmp_path):
    pytest.importorskip("matplotlib")
    from caramba.run.plot import read_png_size

    store, _, _ = sweep
    out = tmp_path / "curves.png"
    r = invoke("research", "compare", "--experiment", "sw", "--store", store, "--plot", str(out), "--x", "seconds")
    assert r.exit_code == 0, r.output
    assert read_png_size(out.read_bytes()) == (800, 480)


def test_tag_annotate_delete_round_trip(sweep):
    store, ids, _ = sweep
    rid = ids[("a", 1)]
    r = invoke("research", "tag", rid, "keep", "sweep:1", "--store", store)
    assert r.exit_code == 0 and r.output.strip() == f"{rid}: keep sweep:1"
    r = invoke("research", "tag", rid, "--remove", "keep", "--store", store)
    assert r.output.strip() == f"{rid}: sweep:1"
    r = invoke("research", "annotate", rid, "diverged at step 2", "--store", store)
    assert r.exit_code == 0 and RunStore(store).get(rid).note == "diverged at step 2"
    r = invoke("research", "compare", "--experiment", "sw", "--tag", "sweep:1", "--store", store)
    assert r.exit_code == 0 and "1 runs" in r.output and "diverged at step 2" in r.output
    r = invoke("research", "tag", rid, "../../etc", "--store", store)
    assert r.exit_code != 0 and "is not a tag" in said(r)
    r = invoke("research", "delete", rid, "--store", store, input="n\n")
    assert r.exit_code != 0 and RunStore(store).get(rid).id == rid  # declined: still there
    r = invoke("research", "delete", rid, "--store", store, "--yes", "--reason", "bad seed")
    assert r.exit_code == 0 and f"deleted run {rid}" in r.output
    r = invoke("research", "status", rid, "--store", store)
    assert r.exit_code != 0 and "was deleted" in said(r) and "bad seed" in said(r)
    r = invoke("research", "compare", "--experiment", "sw", "--store", store, "--json")
    assert rid not in r.output and len(json.loads(r.output)["runs"]) == 3
