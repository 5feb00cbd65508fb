"""Evaluation-only runs: a run with no steps (``mode: eval``, or ``steps: 0``) builds no backward
pass or optimizer update, so a model with no trainable parameter (a parameter-free topology, a
frozen model) is evaluated and recorded like any run: run store, Notary ledger, ``research
inspect``. Reference values come from scikit-learn on the same test split."""

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, mean_squared_error
from typer.testing import CliRunner

from caramba.cli import app
from caramba.errors import ConfigError
from caramba.manifest.compile import check
from caramba.manifest.errors import ManifestError
from caramba.run import ledger_root, run_experiment
from caramba.store import RunStore

# x itself are the class scores: no parameter anywhere
NO_PARAMS = """\
name: noparam
topology:
  inputs: {{x: {{shape: [batch, 2]}}, label: {{shape: [batch], dtype: int64}}}}
  nodes:
    - {{id: target, op: nn.one_hot, in: [label], config: {{classes: 2}}}}
    - {{id: loss, op: loss.mse, in: [x, target]}}
    - {{id: accuracy, op: metric.accuracy, in: [x, label]}}
datasets:
  xor: {{source: generated, kind: xor, n: 200, seed: 4, split: {{train: 0.5, val: 0.0, test: 0.5}}, feed: {{label: y}}}}
trainer: {trainer}
metrics: [accuracy]
targets:
  - {{name: cpu, backend: cpu, runs: [{runs}]}}
"""


def _reference() -> tuple[float, float]:
    from caramba.data.sources import load_dataset

    ds = load_dataset("xor", {"source": "generated", "kind": "xor", "n": 200, "seed": 4,
                              "split": {"train": 0.5, "val": 0.0, "test": 0.5}})
    test = ds.arrays("test")
    x, y = test["x"], test["y"]
    return float(mean_squared_error(np.eye(2)[y], x)), float(accuracy_score(y, x.argmax(axis=1)))


@pytest.mark.parametrize("trainer, runs", [
    ("{loss: loss, batch_size: 16}", "{id: e, mode: eval}"),       # an eval run
    ("{loss: loss, batch_size: 16, steps: 0}", "{id: e}"),         # a run of no steps
    ("{loss: loss, batch_size: 16}", "{id: e, steps: 0}"),
])
def test_a_model_without_parameters_is_evaluated_recorded_and_signed(tmp_path, trainer, runs):
    from caramba.actors.notary import Query
    from caramba.actors.services import start_services
    from caramba.actors.system import ActorSystem

    text = NO_PARAMS.format(trainer=trainer, runs=runs)
    check(text)  # validates: nothing trains, so nothing needs a parameter
    store = RunStore(tmp_path / "store")
    result = run_experiment(text, store=store)
    assert result.ok, [r.error for r in result.runs]
    mse, acc = _reference()
    (r,) = result.runs
    rec = store.get(r.run_id)
    assert rec.status == "finished" and rec.summary["steps"] == 0 and rec.summary["params"] == 0
    assert rec.summary["test.loss"] == pytest.approx(mse, rel=1e-12)
    assert rec.summary["test.accuracy"] == pytest.approx(acc, rel=1e-12)
    assert {(s, n) for _, s, n, _ in store.metrics(r.run_id)} >= {("test", "loss"), ("test", "accuracy")}
    assert rec.summary["verdict"] == "verified"
    with ActorSystem("local") as system:
        start_services(system, ledger_root(store))
        claims = system.lookup("notary").ask(Query(subject=rec.id, kind="claim", name="final")).entries
    assert len(claims) == 1 and claims[0].payload["metrics"]["test.accuracy"] == pytest.approx(acc, rel=1e-12)
    ir = next(a for a in store.artifacts(r.run_id, "ir"))
    assert "train.optimizer" not in ir.path.read_text()  # evaluation only: no update in the step graph


def test_training_a_model_without_parameters_is_refused_clearly(tmp_path):
    text = NO_PARAMS.format(trainer="{loss: loss, batch_size: 16, steps: 5}", runs="{id: t}")
    with pytest.raises(ManifestError, match="no parameters to train") as info:
        check(text)
    assert info.value.line is not None and "mode: eval" in str(info.value)
    result = run_experiment(text, store=RunStore(tmp_path / "s"))  # a run is refused, recorded failed
    (r,) = result.runs
    assert r.status == "failed" and "no trainable parameters" in r.error and "mode: eval" in r.error


def test_an_eval_only_loss_needs_no_gradient():
    """accuracy is a float scalar without a gradient: fine as the loss a run only evaluates."""
    text = NO_PARAMS.format(trainer="{loss: accuracy, batch_size: 16}", runs="{id: e, mode: eval}")
    check(text)


def test_a_frozen_model_evaluates_a_trained_checkpoint(tmp_path, blobs):
    """A frozen model (model.freeze: every parameter) evaluated from a trained run's checkpoint
    gives that run's metrics; training it would leave nothing to train, and says so."""
    store = RunStore(tmp_path / "store")
    trained = run_experiment(blobs("frozen", "{loss: loss, lr: 0.05, batch_size: 16, steps: 30}", "{id: s0}"),
                             store=store)
    assert trained.ok, [r.error for r in trained.runs]
    run_id = trained.runs[0].run_id
    frozen = blobs("frozen", "{loss: loss, batch_size: 16, steps: 30}",
                   f"{{id: ev, mode: eval, checkpoint: {run_id}}}") + 'model: {freeze: ["*"]}\n'
    check(frozen)
    result = run_experiment(frozen, store=store)
    assert result.ok, [r.error for r in result.runs]
    got, want = store.get(result.runs[0].run_id).summary, store.get(run_id).summary
    for key in ("val.loss", "val.accuracy", "test.loss", "test.accuracy"):
        assert got[key] == pytest.approx(want[key], rel=1e-12), key
    with pytest.raises(ManifestError, match="leaves no parameter to train"):
        check(frozen.replace("mode: eval, ", ""))


def test_cli_runs_and_inspects_an_eval_only_manifest(tmp_path):
    m = tmp_path / "noparam.yml"
    m.write_text(NO_PARAMS.format(trainer="{loss: loss, batch_size: 16}", runs="{id: e, mode: eval}"))
    store = str(tmp_path / "store")
    env = {"COLUMNS": "200"}
    r = CliRunner().invoke(app, ["manifest", "validate", str(m)], env=env)
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["research", "run", str(m), "--store", store], env=env)
    assert r.exit_code == 0, r.output
    assert "finished" in r.output and "test.accuracy" in r.output
    r = CliRunner().invoke(app, ["research", "inspect", "latest", "--store", store, "--png", str(tmp_path / "l.png")],
                           env=env)
    assert r.exit_code == 0, r.output
    _, acc = _reference()
    assert "accuracy" in r.output and f"{acc:.4g}"[:4] in r.output
    r = CliRunner().invoke(app, ["notary", "verify", "--store", store], env=env)
    assert r.exit_code == 0, r.output


def test_train_step_evaluates_without_an_optimizer():
    """``TrainStep(optimizer=None)``: forward, loss and step counter, nothing updated."""
    from caramba import compute, train
    from caramba.train.layers import Module

    class Square(Module):  # no parameters at all
        def __call__(self, x):
            return (x * x).mean()

    with pytest.raises(ConfigError, match="no trainable parameters"):
        train.TrainStep(Square(), lambda model, x: model(x), train.SGD(train.constant(0.1)), {"x": ((4,), "float64")})
    step = train.TrainStep(Square(), lambda model, x: model(x), None, {"x": ((4,), "float64")})
    assert set(step.graph.outputs) == {"loss", "step"}
    trainer = train.Trainer(step, compute.new("cpu"))
    trainer.init(seed=0)
    x = np.array([1.0, 2.0, 3.0, 4.0])
    out = trainer.step({"x": x}, ("loss", "step"))
    assert out["loss"] == pytest.approx(float(np.mean(x**2))) and out["step"] == 1
