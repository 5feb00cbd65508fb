"""The local run store (directory + SQLite) and the PNG line chart used by `research inspect`."""

import pytest

from caramba.run.plot import line_chart, read_png_size
from caramba.store import RunNotFound, RunStore


def test_runs_metrics_and_artifacts_round_trip(tmp_path):
    store = RunStore(tmp_path)
    r = store.create_run("digits-mlp", target="cpu", run_name="seed0", seed=3, backend="cpu", steps=10,
                         config={"trainer": {"lr": 0.01}})
    assert r.status == "created" and r.dir.is_dir() and r.config["trainer"]["lr"] == 0.01
    store.start(r.id)
    store.log_metrics(r.id, 1, {"loss": 2.0, "lr": 0.01})
    store.log_metrics(r.id, 5, {"loss": 1.0})
    store.log_metrics(r.id, 5, {"loss": 1.5, "accuracy": 0.7}, split="test")
    assert store.series(r.id, "loss", "train") == ([1, 5], [2.0, 1.0])
    assert store.get(r.id).step == 5 and store.get(r.id).status == "running"
    art = store.add_artifact(r.id, "plots/loss.png", b"\x89PNG", kind="plot")
    assert art.path.read_bytes() == b"\x89PNG" and art.size == 4 and len(art.sha256) == 64
    assert [a.name for a in store.artifacts(r.id)] == ["plots/loss.png"]
    with pytest.raises(Exception, match="relative path"):
        store.add_artifact(r.id, "../escape", b"x")
    store.finish(r.id, summary={"test.accuracy": 0.7})
    done = store.get(r.id[:20])
    assert done.status == "finished" and done.summary == {"test.accuracy": 0.7} and done.seconds >= 0
    assert store.get("latest").id == r.id
    with pytest.raises(RunNotFound, match="no run 'nope'"):
        store.get("nope")
    r2 = store.create_run("digits-mlp")
    with pytest.raises(RunNotFound, match="matches several runs"):
        store.get("digits-mlp")
    assert [x.id for x in store.list()] == [r2.id, r.id]


def test_line_chart_writes_a_png(tmp_path):
    data = line_chart([("train loss", [0, 1, 2], [3.0, 2.0, 1.5]), ("val loss", [0, 2], [3.1, 1.9])],
                      tmp_path / "loss.png", title="loss", baseline=("unigram", 2.5))
    assert read_png_size(data) == (800, 480) and (tmp_path / "loss.png").read_bytes() == data
    assert read_png_size(line_chart([], None)) == (800, 480)
