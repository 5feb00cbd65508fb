"""`caramba research export --to mlflow DIR`: MLflow's own client reads back the params, the
metric histories (with steps) and the artifacts caramba recorded."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
from typer.testing import CliRunner

from caramba.errors import ConfigError
from caramba.export.to_mlflow import export_mlflow, params_of


def _client(path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps file stores behind this switch
    return MlflowClient(tracking_uri=path.resolve().as_uri())


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_mlflow_reads_back_params_and_metric_histories(trained, store, tmp_path, monkeypatch):
    run_id = trained("digits_mlp")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    res = export_mlflow(tmp_path / "mlruns", [run_id], store=store)
    import os

    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ  # the switch was only for the export's own client
    client = _client(tmp_path / "mlruns", monkeypatch)
    exp = client.get_experiment_by_name("digits-mlp")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.run_id == res.written[run_id] and run.info.status == "FINISHED"
    assert run.data.tags["caramba.run_id"] == run_id
    rec = store.get(run_id)
    assert run.data.params == params_of(rec)
    assert run.data.params["seed"] == "0" and run.data.params["trainer.steps"] == "20"
    assert run.data.params["override.trainer.steps"] == "20"
    assert run.data.params["trainer.optimizer.op"] == "optimizer.adamw"
    rows = store.metrics(run_id)
    keys = {f"{split}.{name}" for _, split, name, _ in rows}
    assert {"train.loss", "test.accuracy"} <= keys
    for key in keys:
        split, name = key.split(".", 1)
        want = [(s, v) for s, sp, n, v in rows if (sp, n) == (split, name)]
        got = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
        assert len(got) == len(want) and all(g[0] == w[0] and _same(g[1], w[1]) for g, w in zip(got, want))
    assert len(client.get_metric_history(run.info.run_id, "train.loss")) == 20  # one per step
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert "manifest.yml" in names and "checkpoints" in names
    (ck,) = client.list_artifacts(run.info.run_id, "checkpoints")
    assert ck.file_size == store.artifacts(run_id, "checkpoint")[-1].size


def test_export_again_skips_runs_already_there(trained, store, tmp_path):
    run_id = trained("digits_mlp")
    first = export_mlflow(tmp_path / "m", experiment="digits-mlp", store=store, artifacts=False)
    assert run_id in first.written
    again = export_mlflow(tmp_path / "m", [run_id], store=store, artifacts=False)
    assert again.written == {} and again.skipped == {run_id: first.written[run_id]}


def test_bad_requests_are_clear_errors(trained, store, tmp_path):
    run_id = trained("digits_mlp")
    with pytest.raises(ConfigError, match="not both"):
        export_mlflow(tmp_path / "m", [run_id], experiment="digits-mlp", store=store)
    with pytest.raises(ConfigError, match="no runs of experiment"):
        export_mlflow(tmp_path / "m", experiment="no-such-experiment", store=store)
    with pytest.raises(ConfigError, match="name the runs"):
        export_mlflow(tmp_path / "m", store=store)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        export_mlflow(tmp_path / "file", [run_id], store=store)


def test_cli_research_export(trained, store, tmp_path, monkeypatch):
    from caramba.cli import app

    run_id = trained("digits_mlp")
    cli = CliRunner()
    r = cli.invoke(app, ["research", "export", str(tmp_path / "ml"), run_id, "--to", "mlflow", "--no-artifacts",
                         "--store", str(store.root)])
    assert r.exit_code == 0, r.output
    assert f"{run_id} -> mlflow run" in r.output
    client = _client(tmp_path / "ml", monkeypatch)
    (run,) = client.search_runs([client.get_experiment_by_name("digits-mlp").experiment_id])
    assert client.list_artifacts(run.info.run_id) == []
    r = cli.invoke(app, ["research", "export", str(tmp_path / "ml"), run_id, "--to", "wandb", "--store", str(store.root)])
    assert r.exit_code != 0 and isinstance(r.exception, ConfigError) and "unknown tracker" in str(r.exception)


def test_odd_names_and_values_are_written(store, tmp_path, monkeypatch):
    """Keys MLflow refuses are made legal, long values cut, NaN metrics kept (the store is hostile)."""
    rec = store.create_run("odd experiment/ü", run_name="r", config={
        "overrides": ["variables.a[0]:x=1", "trainer.lr=" + "9" * 7000, "no-equals-sign"],
        "manifest": {"trainer": {"optimizer": {"op": "optimizer.sgd"}, "steps": 2}}})
    store.log_metrics(rec.id, 1, {"loss": float("nan"), "we!rd": 2.0})
    store.finish(rec.id, "failed")
    export_mlflow(tmp_path / "m", [rec.id], store=store)
    client = _client(tmp_path / "m", monkeypatch)
    (run,) = client.search_runs([client.get_experiment_by_name("odd experiment/ü").experiment_id])
    assert run.info.status == "FAILED"
    assert run.data.params["override.variables.a_0__x"] == "1"
    assert len(run.data.params["override.trainer.lr"]) == 6000
    assert run.data.params["trainer.optimizer.op"] == "optimizer.sgd"
    assert math.isnan(client.get_metric_history(run.info.run_id, "train.loss")[0].value)
    assert client.get_metric_history(run.info.run_id, "train.we_rd")[0].value == 2.0
