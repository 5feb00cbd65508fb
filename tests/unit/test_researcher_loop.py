"""Issue 21's whole loop from the command line: a manifest with two tuner arms and two seeds is
run, `research compare` ranks the arms with mean and spread, `export --format onnx` runs in ONNX
Runtime with caramba's predictions at batch sizes 1 and 37, the safetensors export loads into an
equivalent torch.nn module with load_state_dict(strict=True) and reproduces the test accuracy,
and the MLflow export is read back with MLflow's own client."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from caramba.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ARMS = """
tuner:
  metric: test.loss
  mode: min
  arms:
    - {id: narrow, set: {variables.hidden: 16}}
    - {id: wide, set: {variables.hidden: 64}}
"""


def _ok(r):
    assert r.exit_code == 0, (r.output, r.exception)
    return r


@pytest.mark.slow
def test_run_compare_export_and_track_from_the_command_line(tmp_path, monkeypatch):
    ort = pytest.importorskip("onnxruntime")
    torch = pytest.importorskip("torch")
    pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)
    text = (EXAMPLES / "digits_mlp.yml").read_text().replace(
        "      - {id: seed0, seed: 0}", "      - {id: seed0, seed: 0}\n      - {id: seed1, seed: 1}") + ARMS
    (tmp_path / "m.yml").write_text(text)
    store = str(tmp_path / "store")
    cli = CliRunner()
    _ok(cli.invoke(app, ["research", "run", "m.yml", "--store", store, "-q", "--set", "trainer.steps=60",
                         "--set", "trainer.eval_every=60"]))

    # compare: the two arms ranked by test.loss, each the mean and spread of its two seeds
    cmp = json.loads(_ok(cli.invoke(app, ["research", "compare", "--experiment", "digits-mlp", "--json",
                                          "--store", store])).stdout)
    assert [a["arm"] for a in cmp["ranking"]] and {a["arm"] for a in cmp["ranking"]} == {"narrow", "wide"}
    runs = cmp["runs"]
    assert len(runs) == 4
    for arm in cmp["ranking"]:
        mine = [r["final"]["test.loss"] for r in runs if r["arm"] == arm["arm"]]
        assert arm["n"] == 2 and arm["mean"] == pytest.approx(np.mean(mine), rel=1e-12)
        assert arm["std"] == pytest.approx(np.std(mine, ddof=1), rel=1e-9)
    means = [a["mean"] for a in cmp["ranking"]]
    assert means == sorted(means)  # best (lowest test loss) first
    best_run = next(r["id"] for r in runs if r["arm"] == cmp["ranking"][0]["arm"])

    # export to ONNX: ONNX Runtime gives caramba's predictions at batch sizes 1 and 37
    from sklearn.datasets import load_digits

    from caramba.export.inference import inference_model
    from caramba.store.runs import RunStore

    _ok(cli.invoke(app, ["export", best_run, "--format", "onnx", "-o", "m.onnx", "--store", store]))
    inf = inference_model(best_run, RunStore(store))
    digits = load_digits()
    x_all, y_all = (digits.data / 16.0).astype(np.float64), digits.target
    session = ort.InferenceSession("m.onnx", providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    from caramba.compute import new

    runner = new("cpu")
    try:
        for k, v in inf.params.items():
            runner.state[k] = runner.upload(v)
        for batch in (1, 37):
            x = x_all[:batch]
            want = runner.execute(inf.graph(batch), inputs={name: runner.upload(x)})["logits"].download()
            (got,) = [o for o, meta in zip(session.run(None, {name: x}), session.get_outputs(), strict=True)
                      if meta.name == "logits"]
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
            assert (got.argmax(1) == want.argmax(1)).all()
    finally:
        runner.close()

    # safetensors: torch's own layout, strict load, the same accuracy as caramba's test split
    from safetensors.torch import load_file

    _ok(cli.invoke(app, ["export", best_run, "--format", "safetensors", "-o", "w.safetensors", "--store", store]))
    tensors = load_file("w.safetensors")
    hidden = tensors["fc1.weight"].shape[0]
    net = torch.nn.Sequential()
    net.add_module("fc1", torch.nn.Linear(64, hidden, dtype=torch.float64))
    net.add_module("act1", torch.nn.GELU())
    net.add_module("fc2", torch.nn.Linear(hidden, 10, dtype=torch.float64))
    net.load_state_dict(tensors, strict=True)
    with torch.no_grad():
        pred = net(torch.from_numpy(x_all)).argmax(1).numpy()
    rec = RunStore(store).get(best_run)
    caramba_acc = rec.summary["test.accuracy"]
    from caramba.manifest.compile import prepare

    test = prepare("m.yml").dataset.arrays("test")  # the split the run evaluated (the dataset's own seed)
    with torch.no_grad():
        test_pred = net(torch.from_numpy(test["x"].astype(np.float64))).argmax(1).numpy()
    assert np.mean(test_pred == test["y"]) == pytest.approx(caramba_acc, abs=1e-12)
    assert np.mean(pred == y_all) > 0.5  # and it is a digit classifier on the whole set too

    # MLflow: the runs read back with MLflow's client
    _ok(cli.invoke(app, ["research", "export", "mlruns", "--to", "mlflow", "--experiment", "digits-mlp",
                         "--store", store]))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"file:{os.path.abspath('mlruns')}")
    found = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(found) == 4
    one = next(r for r in found if r.data.params.get("arm") == cmp["ranking"][0]["arm"])
    assert "test.loss" in one.data.metrics and one.data.params["seed"] in ("0", "1")
