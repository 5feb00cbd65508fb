"""caramba.run.compare and caramba.run.manage: runs side by side, arms ranked over seeds, tags,
notes, and deleting a run without breaking the Notary's chain.

Numbers are checked against the metric rows the store holds and against NumPy (mean, sample
std), never against caramba's own arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from caramba.errors import ConfigError
from caramba.run.compare import compare_runs, curves, direction, rank_arms
from caramba.store.runs import RunDeleted, RunNotFound, RunStore

from ..run_ids import unique_prefix

TUNER = {"metric": "val.loss", "mode": "min",
         "arms": [{"id": "slow", "set": {"trainer.lr": 0.01}}, {"id": "fast", "set": {"trainer.lr": 0.1}}]}


def fake_run(store: RunStore, arm: str, seed: int, val: list[float], acc: list[float], *, status: str = "finished",
             overrides: list[str] = ("trainer.steps=4",), experiment: str = "sweep") -> str:
    """A run recorded the way the engine records one (config: manifest with a tuner, run spec
    with the --set overrides), with val.loss/val.accuracy at steps 1..n and train.lr."""
    rec = store.create_run(experiment, arm=arm, target="cpu", run_name=f"s{seed}", seed=seed, backend="cpu", steps=len(val),
                           config={"manifest": {"name": experiment, "tuner": TUNER}, "arm": arm,
                                   "spec": {"config": {"overrides": list(overrides), "arm": arm}}})
    rows = []
    for i, (v, a) in enumerate(zip(val, acc), 1):
        rows += [(i, "val", {"loss": v, "accuracy": a}), (i, "train", {"lr": 0.5 / i, "loss": v + 0.1})]
    store.log_rows(rec.id, rows)
    store.finish(rec.id, status)
    return rec.id


@pytest.fixture
def sweep(tmp_path):
    store = RunStore(tmp_path / "store")
    rng = np.random.default_rng(7)
    ids = {}
    for arm, base in (("slow", 1.0), ("fast", 0.5)):
        for seed in (0, 1, 2):
            val = list(base + rng.random(4))
            acc = list(rng.random(4))
            ids[(arm, seed)] = fake_run(store, arm, seed, val, acc)
    return store, ids


def test_table_numbers_are_the_metric_rows(sweep):
    store, _ = sweep
    c = compare_runs(store, experiment="sweep")
    assert c.metric == "val.loss" and c.mode == "min"  # the tuner's
    assert c.params == ["trainer.lr", "trainer.steps"]
    assert [a["id"] for a in c.arms] == ["slow", "fast"]
    for row in c.runs:
        rows = store.metrics(row.id)
        for key in ("val.loss", "val.accuracy", "train.loss", "train.lr"):
            split, name = key.split(".")
            values = [v for _, s, n, v in rows if s == split and n == name]
            assert row.final[key] == values[-1]
        val = [v for _, s, n, v in rows if (s, n) == ("val", "loss")]
        acc = [v for _, s, n, v in rows if (s, n) == ("val", "accuracy")]
        assert row.best["val.loss"] == min(val) and row.best["val.accuracy"] == max(acc)
        assert row.best_step["val.loss"] == 1 + int(np.argmin(val))
        assert "train.lr" not in row.best  # a learning rate is not a quality
        assert row.params == {"trainer.lr": {"slow": 0.01, "fast": 0.1}[row.arm], "trainer.steps": 4}
    text = c.table()
    assert "arms ranked by val.loss (min)" in text and "fast" in text


def test_arms_ranked_by_mean_over_seeds_with_sample_std(sweep):
    store, ids = sweep
    c = compare_runs(store, experiment="sweep")
    assert [a.arm for a in c.ranking] == ["fast", "slow"]  # fast's losses are 0.5 lower by construction
    for a in c.ranking:
        finals = [store.series(ids[(a.arm, s)], "loss", "val")[1][-1] for s in (0, 1, 2)]
        assert a.n == 3 and a.seeds == [0, 1, 2]
        assert a.mean == pytest.approx(np.mean(finals), rel=1e-12)
        assert a.std == pytest.approx(np.std(finals, ddof=1), rel=1e-12)
        assert "(n=3)" in a.spread() and "±" in a.spread()
    by_acc = compare_runs(store, experiment="sweep", metric="val.accuracy")
    assert by_acc.mode == "max"  # higher accuracy is better
    means = [a.mean for a in by_acc.ranking]
    assert means == sorted(means, reverse=True)


def test_unfinished_runs_are_not_counted_and_a_lone_run_has_no_std(tmp_path):
    store = RunStore(tmp_path / "s")
    fake_run(store, "slow", 0, [1.0, 0.9], [0.1, 0.2])
    failed = fake_run(store, "slow", 1, [0.1, 0.05], [0.9, 0.95], status="failed")
    fake_run(store, "fast", 0, [0.8, 0.7], [0.3, 0.4])
    fake_run(store, "fast", 1, [0.6, float("nan")], [0.3, 0.4])  # diverged: not finite, not counted
    c = compare_runs(store, experiment="sweep")
    slow = next(a for a in c.ranking if a.arm == "slow")
    fast = next(a for a in c.ranking if a.arm == "fast")
    assert slow.n == 1 and slow.std is None and slow.excluded == [failed] and slow.mean == 0.9
    assert fast.n == 1 and fast.mean == 0.7 and len(fast.excluded) == 1
    assert [a.arm for a in c.ranking] == ["fast", "slow"]
    assert c.as_dict()["runs"][0]["final"]["val.loss"] is None or math.isfinite(c.as_dict()["runs"][0]["final"]["val.loss"])


def test_rank_arms_puts_arms_without_values_last():
    from caramba.run.compare import RunRow

    rows = [RunRow("a", "e", "finished", arm="x", final={"m": 2.0}), RunRow("b", "e", "failed", arm="y", final={"m": 1.0}),
            RunRow("c", "e", "finished", arm="z", final={"m": 3.0})]
    assert [a.arm for a in rank_arms(rows, "m", "min")] == ["x", "z", "y"]
    assert [a.arm for a in rank_arms(rows, "m", "max")] == ["z", "x", "y"]


def test_direction_of_metric_names():
    assert direction("val.loss") == "min" and direction("test.accuracy") == "max"
    assert direction("val.top1_acc") == "max" and direction("train.lr") is None and direction("mse") == "min"


def test_selection_by_ids_and_tags_and_bad_requests(sweep):
    store, ids = sweep
    a, b = ids[("slow", 0)], ids[("fast", 1)]
    c = compare_runs(store, [a, unique_prefix(b, ids.values())])  # a unique prefix works
    assert {r.id for r in c.runs} == {a, b}
    store.tag(a, ["keep", "paper:fig2"])
    store.tag(b, ["keep"])
    assert {r.id for r in compare_runs(store, experiment="sweep", tags=["keep"]).runs} == {a, b}
    assert [r.id for r in compare_runs(store, experiment="sweep", tags=["keep", "paper:fig2"]).runs] == [a]
    with pytest.raises(ConfigError, match="val.los' .*did you mean 'val.loss'|did you mean"):
        compare_runs(store, experiment="sweep", metric="val.los")
    with pytest.raises(ConfigError, match="no runs of experiment 'swep'.*sweep"):
        compare_runs(store, experiment="swep")
    with pytest.raises(ConfigError, match="nothing to compare"):
        compare_runs(store)
    with pytest.raises(RunNotFound):
        compare_runs(store, ["no-such-run"])
    with pytest.raises(ConfigError, match="tags"):
        compare_runs(store, experiment="sweep", tags=["nobody-has-it"])


def test_tags_and_notes_round_trip_and_refuse_hostile_values(tmp_path):
    store = RunStore(tmp_path / "s")
    rid = fake_run(store, "slow", 0, [1.0], [0.5])
    assert store.tag(rid, ["b", "a", "b"]).tags == ["b", "a"]
    assert store.tag(rid, ["c"], remove=["b"]).tags == ["a", "c"]
    assert store.annotate(rid, "lr too low — ünïcode ok").note == "lr too low — ünïcode ok"
    assert RunStore(tmp_path / "s").get(rid).note.startswith("lr too low")  # stored, not cached
    for bad in ("", "../x", "a b", "x" * 65, "-lead", "semi;colon", "\x00"):
        with pytest.raises(ConfigError, match="is not a tag"):
            store.tag(rid, [bad])
    with pytest.raises(ConfigError, match="at most 32"):
        store.tag(rid, [f"t{i}" for i in range(40)])
    with pytest.raises(ConfigError, match="NUL"):
        store.annotate(rid, "a\x00b")
    with pytest.raises(ConfigError, match="at most"):
        store.annotate(rid, "x" * 20_001)
    with pytest.raises(ConfigError, match="surrogate"):
        store.annotate(rid, "\ud800")
    assert store.get(rid).tags == ["a", "c"]


def test_curves_carry_wall_time(sweep):
    store, ids = sweep
    rid = ids[("fast", 0)]
    (c,) = curves(store, [rid], "val.loss")
    assert c["steps"] == [1, 2, 3, 4] and c["values"] == store.series(rid, "loss", "val")[1]
    assert all(s >= 0 for s in c["seconds"]) and c["seconds"] == sorted(c["seconds"])
    with pytest.raises(ConfigError, match="split.name"):
        curves(store, [rid], "loss")


def test_plot_overlays_curves_or_names_the_missing_extra(sweep, tmp_path, monkeypatch):
    from caramba.run.compare import plot
    from caramba.run.plot import read_png_size

    store, _ = sweep
    c = compare_runs(store, experiment="sweep")
    pytest.importorskip("matplotlib")
    out = plot(store, c, tmp_path / "c.png", x="seconds", log=True)
    assert read_png_size(out.read_bytes()) == (800, 480)
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    with pytest.raises(ConfigError, match=r"caramba\[plot\]"):
        plot(store, c, tmp_path / "d.png")


# ---- real runs through the engine and the Notary ---------------------------------------------------
SWEEP = """\
name: tinysweep
topology:
  inputs:
    x: {shape: [batch, 2]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: mlp, op: model.mlp_classifier, in: [x], config: {classes: 2, hidden: 4}}
    - {id: loss, op: loss.cross_entropy, in: [mlp, label]}
    - {id: accuracy, op: metric.accuracy, in: [mlp, label]}
datasets:
  xor: {source: generated, kind: xor, n: 64, feed: {label: y}}
trainer: {loss: loss, lr: 0.05, batch_size: 16, steps: 3, eval_every: 3}
metrics: [accuracy]
tuner:
  metric: test.loss
  arms:
    - {id: slow, set: {trainer.lr: 0.01}}
    - {id: fast, set: {trainer.lr: 0.2}}
targets:
  - name: cpu
    backend: cpu
    runs: [{id: s0, seed: 0}, {id: s1, seed: 1}]
"""


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Two arms x two seeds of a tiny classifier, run by the engine (Experiment actor, Notary)."""
    from caramba.run import run_experiment

    root = tmp_path_factory.mktemp("real")
    m = root / "sweep.yml"
    m.write_text(SWEEP)
    store = RunStore(root / "store")
    result = run_experiment(m, store=store)
    assert result.ok, [r.error for r in result.runs]
    return store, result


@pytest.mark.slow  # four real runs (~3 s each on a loaded 2-core machine), made once
def test_real_sweep_ranks_arms_from_the_stored_rows(real):
    store, _ = real
    c = compare_runs(store, experiment="tinysweep")
    assert c.metric == "test.loss" and len(c.runs) == 4 and {a.arm for a in c.ranking} == {"slow", "fast"}
    for a in c.ranking:
        finals = [store.series(rid, "loss", "test")[1][-1] for rid in a.runs]
        assert a.n == 2 and sorted(a.seeds) == [0, 1]
        assert a.mean == pytest.approx(np.mean(finals), rel=1e-12)
        assert a.std == pytest.approx(np.std(finals, ddof=1), rel=1e-12)
    for r in c.runs:
        assert r.params["trainer.lr"] == {"slow": 0.01, "fast": 0.2}[r.arm]
        assert r.final["test.loss"] == pytest.approx(store.get(r.id).summary["test.loss"], rel=1e-12)
        (cv,) = curves(store, [r.id], "train.loss")
        assert cv["steps"] == [1, 2, 3] and cv["seconds"][-1] >= cv["seconds"][0] >= 0


@pytest.mark.slow  # four real runs (~3 s each on a loaded 2-core machine), made once
def test_delete_is_recorded_by_the_notary_and_the_ledger_still_verifies(real):
    from caramba.actors.notary import verify_ledger
    from caramba.run import ledger_root
    from caramba.run.manage import delete_run

    store, result = real
    before = verify_ledger(ledger_root(store))
    assert before.ok and not before.deleted
    victim = result.runs[0].run_id
    blobs = sorted((ledger_root(store) / "blobs").rglob("*"))
    done = delete_run(store, victim, reason="wrong data")
    assert done.ledger_entry and done.removed and all(k.startswith(f"runs/{victim}/") for k in done.removed)
    assert not store.run_dir(victim).exists() and store.metrics(victim) == []
    with pytest.raises(RunDeleted, match="was deleted.*wrong data"):
        store.get(victim)
    report = verify_ledger(ledger_root(store))
    assert report.ok, report.as_text()
    assert report.entries == before.entries + 1
    assert any(victim in d and "wrong data" in d for d in report.deleted)
    assert f"deleted: run {victim}" in report.as_text()
    assert blobs  # the ledger's own files are still there
    # the other runs are untouched and still compare
    assert len(compare_runs(store, experiment="tinysweep").runs) == 3
    with pytest.raises(RunDeleted):
        delete_run(store, victim)


@pytest.mark.slow  # four real runs (~3 s each on a loaded 2-core machine), made once
def test_a_deletion_covers_only_its_own_run_and_bytes_still_there_are_checked(real):
    """Removing another run's blob is still damage; a deleted run's blob that is still stored
    but altered is still caught."""
    from caramba.actors.notary import RecordDeletion, verify_ledger
    from caramba.actors.services import start_services
    from caramba.actors.system import ActorSystem
    from caramba.run import ledger_root
    from caramba.store.blobs import LocalBlobStore

    store, result = real
    root = ledger_root(store)
    alive = next(r.run_id for r in result.runs[1:] if store.get(r.run_id).status == "finished")
    blobs = LocalBlobStore(str(root / "blobs"))
    key = next(r.key for r in blobs.list(f"runs/{alive}/"))
    ref = blobs.stat(key)
    path = blobs.object_path(ref.sha256)
    original = path.read_bytes()
    try:
        path.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))  # a flipped bit
        report = verify_ledger(root)
        assert not report.ok and any("changed" in str(p) for p in report.problems)
        system = ActorSystem("local")  # now the operator "deletes" it without removing the bytes
        try:
            names = start_services(system, root)
            system.lookup(names.notary).ask(RecordDeletion(subject=alive, payload={"reason": "test"}))
        finally:
            system.shutdown()
        report = verify_ledger(root)
        assert not report.ok and any("changed" in str(p) for p in report.problems), report.as_text()
    finally:
        path.write_bytes(original)
        blobs.close()
    assert verify_ledger(root).ok


def test_a_live_run_is_not_deleted(tmp_path):
    from caramba.run.manage import delete_run

    store = RunStore(tmp_path / "s")
    rec = store.create_run("live")
    store.start(rec.id)  # running in this process
    with pytest.raises(ConfigError, match="live run cannot be deleted"):
        delete_run(store, rec.id)
    assert store.get(rec.id).status == "running"
    store.finish(rec.id, "cancelled")
    assert delete_run(store, rec.id).ledger_entry == ""  # no ledger in this store: nothing to record
    with pytest.raises(RunDeleted):
        store.get(rec.id)


def test_odd_override_values_come_out_as_json(tmp_path):
    import json

    store = RunStore(tmp_path / "s")
    fake_run(store, "slow", 0, [1.0], [0.5], overrides=["a.b=!!binary aGk=", "x.when=2020-01-01", "no-equals",
                                                       "y.z=[1, {k: .inf}]", "w=!!python/object:os.system x"])
    row = compare_runs(store, experiment="sweep").runs[0]
    assert row.params["x.when"] == "2020-01-01" and row.params["a.b"] == "b'hi'" and "no-equals" not in row.params
    assert row.params["w"] == "!!python/object:os.system x"  # a tag safe_load refuses stays text, never runs
    json.dumps(row.as_dict(), allow_nan=False)
