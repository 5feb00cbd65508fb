"""Experiments end to end on small generated data: train, evaluate, record, tune, resume, fail."""

import pytest

from caramba.manifest import ManifestError
from caramba.manifest.experiment import plan_runs, run_experiment
from caramba.store import RunStore

BLOBS = """\
name: blobs
variables: {hidden: 16}
topology:
  inputs:
    x: {shape: [batch, 2]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: mlp, op: model.mlp_classifier, in: [x], config: {classes: 3, hidden: "${hidden}"}}
    - {id: loss, op: loss.cross_entropy, in: [mlp, label]}
    - {id: accuracy, op: metric.accuracy, in: [mlp, label]}
datasets:
  blobs: {source: generated, kind: blobs, n: 300, classes: 3, split: {train: 0.6, val: 0.2, test: 0.2}, feed: {label: y}}
trainer:
  loss: loss
  optimizer: {op: optimizer.adamw, weight_decay: 0.0}
  lr: 0.03
  schedule: {kind: cosine, warmup_steps: 5}
  batch_size: 32
  steps: 60
  grad_clip: 1.0
  eval_every: 20
  log_every: 10
metrics: [loss, accuracy]
targets:
  - name: cpu
    backend: cpu:threads=1
    runs: [{id: s0, seed: 0}]
"""


@pytest.fixture
def store(tmp_path):
    return RunStore(tmp_path / "store")


def test_train_evaluate_and_record(store):
    res = run_experiment(BLOBS, store=store)
    assert res.ok, [r.error for r in res.runs]
    (r,) = res.runs
    s = r.summary
    assert s["steps"] == 60 and s["params"] == 2 * 16 + 16 + 16 * 3 + 3
    assert s["test.accuracy"] > 0.6 and s["val.loss"] < 1.0  # chance: 1/3 and log(3) = 1.1
    rec = store.get(r.run_id)
    assert rec.status == "finished" and rec.step == 60 and rec.target == "cpu" and rec.run_name == "s0"
    steps, losses = store.series(r.run_id, "loss", "train")
    assert steps[0] == 1 and steps[-1] == 60 and losses[-1] < losses[0]
    assert store.series(r.run_id, "accuracy", "val")[0] == [20, 40, 60]
    kinds = {a.kind for a in store.artifacts(r.run_id)}
    assert {"manifest", "ir", "checkpoint", "plot"} <= kinds
    assert "train.loss" in res.table() and "s0" in res.table()


def test_same_seed_same_result_and_overrides(store):
    a = run_experiment(BLOBS, ["trainer.steps=10"], store=store).runs[0].summary
    b = run_experiment(BLOBS, {"trainer.steps": 10}, store=store).runs[0].summary
    assert a["steps"] == 10 and a["test.loss"] == b["test.loss"]


def test_tuner_arms_are_separate_runs_compared_in_one_table(store):
    text = BLOBS + """\
tuner:
  metric: val.loss
  mode: min
  arms:
    - {id: tiny_lr, set: {trainer.lr: 1.0e-4}}
    - {id: wide, set: {variables.hidden: 32}}
"""
    res = run_experiment(text, ["trainer.steps=20"], store=store)
    assert res.ok and [r.label for r in res.runs] == ["tiny_lr/cpu/s0", "wide/cpu/s0"]
    assert res.ranked()[0].label == "wide/cpu/s0"  # a usable lr beats 1e-4
    assert res.runs[1].summary["params"] == 2 * 32 + 32 + 32 * 3 + 3
    assert {store.get(r.run_id).group_id for r in res.runs} == {res.group_id}
    lines = res.table().splitlines()
    assert lines[0].split()[0] == "run" and lines[1].startswith("wide/cpu/s0")


def test_eval_run_from_a_checkpoint(store):
    first = run_experiment(BLOBS, store=store).runs[0]
    text = BLOBS.replace("runs: [{id: s0, seed: 0}]", f"runs: [{{id: ev, mode: eval, checkpoint: {first.run_id}}}]")
    (ev,) = run_experiment(text, store=store).runs
    assert ev.status == "finished", ev.error
    assert ev.summary["steps"] == 0 and ev.summary["test.accuracy"] == pytest.approx(first.summary["test.accuracy"])


def test_a_failing_run_is_recorded_and_the_rest_still_run(store):
    text = BLOBS.replace("runs: [{id: s0, seed: 0}]", "runs: [{id: s0, seed: 0, steps: 5}, {id: s1, seed: 1, steps: 5}]")
    text = text.replace("lr: 0.03", "lr: 1.0e+300")  # the loss overflows
    res = run_experiment(text, store=store)
    assert not res.ok and [r.status for r in res.runs] == ["failed", "failed"]
    assert "the loss became" in res.runs[0].error
    assert store.get(res.runs[0].run_id).status == "failed"


def test_plan_picks_targets_and_backends():
    text = BLOBS.replace("targets:\n", "targets:\n  - {name: other, runs: [{id: a}, {id: b}]}\n")
    plans = plan_runs(text)
    assert [p.label for p in plans] == ["other/a", "other/b", "cpu/s0"]
    assert plans[2].backend == "cpu:threads=1"
    assert [p.backend for p in plan_runs(text, backend="cpu")] == ["cpu"] * 3
    assert [p.label for p in plan_runs(text, target="cpu")] == ["cpu/s0"]
    with pytest.raises(ManifestError, match="no target 'cpux'; did you mean 'cpu'"):
        plan_runs(text, target="cpux")


def test_model_only_manifest_has_nothing_to_run():
    text = "topology:\n  inputs: {x: {shape: [2, 3]}}\n  nodes: [{id: r, op: activation.relu, in: [x]}]\n"
    with pytest.raises(ManifestError, match="nothing to run"):
        plan_runs(text)


def test_a_progress_callback_can_cancel_a_run(store):
    from caramba.manifest import Progress, RunCancelled

    class Stop(Progress):
        def step(self, step, total, values, samples_per_s):
            if step == 3:
                raise RunCancelled("stopped by the caller")

    (r,) = run_experiment(BLOBS, store=store, progress=Stop()).runs
    assert r.status == "cancelled" and store.get(r.run_id).status == "cancelled" and store.get(r.run_id).step <= 3


def test_targets_may_disable_optional_compiler_passes(store):
    text = BLOBS.replace("    backend: cpu:threads=1\n", "    backend: cpu:threads=1\n    disable_passes: [fuse, cse]\n")
    (r,) = run_experiment(text, ["trainer.steps=5"], store=store).runs
    assert r.status == "finished", r.error
    with pytest.raises(ManifestError, match="'lower' is not a pass that can be disabled") as e:
        plan_runs(text.replace("[fuse, cse]", "[fuse, lower]"))
    assert e.value.path == "targets[0].disable_passes[1]"
