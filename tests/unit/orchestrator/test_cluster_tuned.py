"""``research run --cluster`` with a sequential tuner: the tuner's choices run on the cluster
one at a time (budget runs, not every arm x run), each recording its decision in the run store,
and ``research compare`` shows them."""

from __future__ import annotations

import pytest

from caramba.orchestrator.run import ClusterError, run_cluster
from caramba.run.compare import compare_runs
from caramba.store.runs import RunStore
from tests.unit.run.test_tuner import BLOBS

GOOD = BLOBS.replace("{id: boom, set: {trainer.lr: 1.0e+300}}", "{id: slow, set: {trainer.lr: 0.001}}")


@pytest.mark.parametrize("strategy", ["active_inference", "grid"])
def test_cluster_runs_the_tuners_choices_one_at_a_time(tmp_path, strategy):
    manifest = tmp_path / "tuned.yml"
    manifest.write_text((GOOD % 3).replace("strategy: active_inference", f"strategy: {strategy}"))
    report = run_cluster(manifest, cluster="local", workers=1, root=tmp_path / "cluster", run_store=tmp_path / "runs")
    assert len(report.outcomes) == 3 and report.ledger_ok, report.as_text()
    store = RunStore(tmp_path / "runs")
    recs = sorted(store.list(100), key=lambda r: r.config["tuner"]["step"])
    assert [r.config["tuner"]["step"] for r in recs] == [0, 1, 2]
    arms = [r.config["tuner"]["arm"] for r in recs]
    assert arms[:2] == ["slow", "ok"] and [r.arm for r in recs] == arms
    if strategy == "grid":
        assert arms == ["slow", "ok", "slow"]
    else:  # the third choice is made from beliefs over both arms
        beliefs = recs[2].config["tuner"]["beliefs"]
        assert set(beliefs) == {"slow", "ok"} and beliefs["ok"]["n"] == beliefs["slow"]["n"] == 1
        # the metric was read from each verified run: the arms' beliefs differ (two failures would not)
        assert beliefs["ok"]["mean"] != beliefs["slow"]["mean"]
    assert "tuner_final" in recs[2].config
    c = compare_runs(store, experiment="tuned")
    assert sorted((r.tuner["step"], r.tuner["arm"]) for r in c.runs) == [(i, a) for i, a in enumerate(arms)]


def test_a_run_selection_with_a_sequential_tuner_is_refused(tmp_path):
    manifest = tmp_path / "tuned.yml"
    manifest.write_text(GOOD % 3)
    with pytest.raises(ClusterError, match="tuner"):
        run_cluster(manifest, ["ok/cpu/s0"], cluster="local", root=tmp_path / "c", run_store=tmp_path / "r")
