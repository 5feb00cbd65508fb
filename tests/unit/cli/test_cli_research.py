"""`caramba research run|status|inspect` against a temporary store."""

from typer.testing import CliRunner

from caramba.cli import app
from caramba.run.plot import read_png_size

MANIFEST = """\
name: tiny
topology:
  inputs:
    x: {shape: [batch, 2]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: mlp, op: model.mlp_classifier, in: [x], config: {classes: 2, hidden: 8}}
    - {id: loss, op: loss.cross_entropy, in: [mlp, label]}
    - {id: accuracy, op: metric.accuracy, in: [mlp, label]}
datasets:
  xor: {source: generated, kind: xor, n: 200, feed: {label: y}}
trainer: {loss: loss, lr: 0.05, batch_size: 16, steps: 20, eval_every: 10}
metrics: [accuracy]
"""


def invoke(*args):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_run_status_inspect(tmp_path):
    m = tmp_path / "tiny.yml"
    m.write_text(MANIFEST)
    store = str(tmp_path / "store")
    r = invoke("research", "run", str(m), "--store", store, "--backend", "cpu:threads=1", "--set", "trainer.steps=12")
    assert r.exit_code == 0, r.output
    assert "12/12" in r.output and "samples/s" in r.output and "test.accuracy" in r.output
    assert "step     10  test" in r.output
    r = invoke("research", "status", "--store", store)
    assert r.exit_code == 0 and "tiny" in r.output and "finished" in r.output and "12/12" in r.output
    r = invoke("research", "status", "latest", "--store", store)
    assert r.exit_code == 0 and "accuracy" in r.output and "cpu:threads=1" in r.output
    png = tmp_path / "loss.png"
    r = invoke("research", "inspect", "latest", "--store", store, "--png", str(png))
    assert r.exit_code == 0, r.output
    for part in ("resolved manifest", "metrics", "IR", "train.loss.cross_entropy", "loss curve", "trainer.steps=12"):
        assert part in r.output, part
    assert read_png_size(png.read_bytes()) == (800, 480)


def test_a_failed_run_exits_nonzero_and_says_why(tmp_path):
    m = tmp_path / "bad.yml"
    m.write_text(MANIFEST.replace("lr: 0.05", "lr: 1.0e+300"))
    r = invoke("research", "run", str(m), "--store", str(tmp_path / "s"), "-q")
    assert r.exit_code == 1 and "failed" in r.output and "the loss became" in r.output


def test_settings_file_gives_the_store_and_default_backend(tmp_path):
    m = tmp_path / "tiny.yml"
    m.write_text(MANIFEST)
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"store: {tmp_path / 'from-config'}\nbackend: cpu:threads=1\n")
    r = invoke("research", "run", str(m), "--config", str(cfg), "-q", "--set", "trainer.steps=2")
    assert r.exit_code == 0, r.output
    assert str(tmp_path / "from-config") in r.output.replace("\n", "")
    r = invoke("research", "status", "latest", "--config", str(cfg))
    assert "cpu:threads=1" in r.output
