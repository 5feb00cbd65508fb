"""One run engine: local runs go through the Experiment actor and the Notary like cluster runs,
and both transports train the same run to the same bits."""

import pytest
from typer.testing import CliRunner

from caramba.actors.notary import Query
from caramba.cli import app
from caramba.run import Progress, ledger_root, resume_run, run_experiment
from caramba.store import RunStore
from caramba.train import read_checkpoint

TRAINER = "{loss: loss, lr: 0.05, batch_size: 16, steps: 40, log_every: 5, checkpoint_every: 10, eval_every: 20}"
TWO_RUNS = "{id: s0, seed: 0}, {id: s1, seed: 1}"


@pytest.fixture
def manifest(blobs):
    return blobs("engine", TRAINER, TWO_RUNS)


def _final(store: RunStore, run_id: str) -> dict[str, bytes]:
    a = store.artifacts(run_id, "checkpoint")[-1]
    tensors, _ = read_checkpoint(a.path, a.sha256)
    return {k: v.tobytes() for k, v in tensors.items()}


def test_every_local_run_is_recorded_and_signed_by_the_notary(tmp_path, manifest):
    store = RunStore(tmp_path / "store")
    result = run_experiment(manifest, store=store)
    assert result.ok, [r.error for r in result.runs]
    from caramba.actors.services import start_services
    from caramba.actors.system import ActorSystem

    with ActorSystem("local") as system:
        start_services(system, ledger_root(store))
        notary = system.lookup("notary")
        for r in result.runs:
            rec = store.get(r.run_id)
            assert rec.summary["verdict"] == "verified" and rec.config["ledger_run"] == rec.id
            intents = notary.ask(Query(subject=rec.id, kind="intent")).entries
            claims = notary.ask(Query(subject=rec.id, kind="claim", name="final")).entries
            progress = notary.ask(Query(subject=rec.id, kind="event", name="progress")).entries
            assert len(intents) == 1 and len(claims) == 1 and [e.payload["step"] for e in progress] == [10, 20, 30, 40]
            assert claims[0].hash == rec.summary["claim"]
            # signed with the run's own key, kept beside the ledger: only it speaks for the run
            assert {e.actor for e in [*intents, *claims, *progress]} == {f"experiment:{rec.id}"}
            assert claims[0].payload["metrics"]["test.loss"] == rec.summary["test.loss"]
    res = CliRunner().invoke(app, ["notary", "verify", "--store", str(store.root)])
    assert res.exit_code == 0, res.output


def test_local_and_cluster_transports_train_the_same_bits(tmp_path, manifest):
    from caramba.orchestrator.run import run_cluster

    path = tmp_path / "engine.yml"
    path.write_text(manifest)
    local = RunStore(tmp_path / "local")
    mine = {r.label: r.run_id for r in run_experiment(path, store=local).runs}
    cluster = RunStore(tmp_path / "cluster")
    report = run_cluster(path, cluster="local", workers=1, run_store=str(cluster.root), root=str(ledger_root(cluster)))
    assert report.ok, report.as_text()
    theirs = {f"{r.target}/{r.run_name}": r.id for r in cluster.list(10)}
    assert sorted(mine) == sorted(theirs)
    for label in mine:
        assert _final(local, mine[label]) == _final(cluster, theirs[label]), label
        drop = ("samples_per_s",)
        a = [(s, sp, n, v) for s, sp, n, v in local.metrics(mine[label]) if n not in drop]
        b = [(s, sp, n, v) for s, sp, n, v in cluster.metrics(theirs[label]) if n not in drop]
        assert a == b, label


class _CtrlC(Progress):
    """A user pressing Ctrl-C at step 25."""

    def step(self, step, total, values, samples_per_s):
        if step == 25:
            raise KeyboardInterrupt


def test_ctrl_c_leaves_a_resumable_run(tmp_path, blobs):
    one = blobs("engine", TRAINER, "{id: s0, seed: 0}")
    whole = RunStore(tmp_path / "whole")
    ref = run_experiment(one, store=whole).runs[0]
    store = RunStore(tmp_path / "store")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(one, store=store, progress=_CtrlC())
    rec = store.list(1)[0]
    assert rec.status == "interrupted" and "resume" in rec.error
    done = resume_run(rec.id, store)
    assert done.status == "finished", done.error
    assert _final(store, rec.id) == _final(whole, ref.run_id)
    steps = [s for s, sp, n, _ in store.metrics(rec.id) if sp == "train" and n == "loss"]
    assert steps == list(range(1, 41))


def test_a_run_whose_ledger_cannot_be_opened_is_recorded_failed(tmp_path, manifest):
    """Every run records its outcome: a damaged ledger fails the run, with the reason, and the
    engine goes on to the next run instead of raising."""
    store = RunStore(tmp_path / "store")
    ledger = ledger_root(store) / "notary" / "ledger.sqlite"
    ledger.parent.mkdir(parents=True)
    ledger.write_bytes(b"this is not a database" * 100)
    result = run_experiment(manifest, store=store)
    assert [r.status for r in result.runs] == ["failed", "failed"]
    for r in result.runs:
        rec = store.get(r.run_id)
        assert rec.status == "failed" and "ledger" in rec.error.lower(), rec.error


def test_a_bug_in_a_run_is_recorded_failed_with_its_traceback(tmp_path, blobs, monkeypatch):
    from caramba.run.driver import ManifestRun

    real = ManifestRun.step

    def buggy(self):
        if self.steps_done == 2:
            raise RuntimeError("a bug at step 3")
        return real(self)

    monkeypatch.setattr(ManifestRun, "step", buggy)
    store = RunStore(tmp_path / "store")
    result = run_experiment(blobs("engine", TRAINER, "{id: s0, seed: 0}"), store=store)
    (r,) = result.runs
    rec = store.get(r.run_id)
    assert r.status == rec.status == "failed" and "a bug at step 3" in rec.error
    log = [a for a in store.artifacts(rec.id) if a.name == "error.txt"]
    assert log and "RuntimeError: a bug at step 3" in log[0].path.read_text()
