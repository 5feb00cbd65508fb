"""`caramba export RUN --format onnx`: ONNX Runtime reproduces caramba's outputs of the trained
model, at batch sizes other than the ones it was exported at, with no label input."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
ort = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")

from caramba.errors import CarambaError, ConfigError, GraphError  # noqa: E402
from caramba.export.inference import inference_model  # noqa: E402
from caramba.export.to_onnx import export_onnx, onnx_model  # noqa: E402

TOL = {"float64": 1e-12, "float32": 2e-5}


def _feeds(example: str, batch: int, dtype: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch)
    if example == "char_gpt":
        return {"x": rng.integers(0, 128, size=(batch, 64)).astype(np.int64)}
    from sklearn.datasets import load_digits

    x = (load_digits().data[:batch] / 16.0).astype(dtype)
    if example == "digits_cnn":
        return {"image": x.reshape(batch, 1, 8, 8)}
    return {"x": x}


def _session(path):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("example", ["digits_mlp", "digits_cnn",
                                     pytest.param("char_gpt", marks=pytest.mark.slow)])
def test_onnx_runtime_reproduces_caramba(example, dtype, trained, store, tmp_path, caramba_forward):
    run_id = trained(example)
    path = export_onnx(run_id, tmp_path / "model.onnx", store=store, dtype=dtype)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    sess = _session(path)
    inputs = sess.get_inputs()
    # no training-only inputs (labels) and no outputs that need them (loss, accuracy)
    assert [i.name for i in inputs] == list(_feeds(example, 1, dtype))
    assert [o.name for o in sess.get_outputs()] == ["logits"]
    assert inputs[0].shape[0] == "batch" and sess.get_outputs()[0].shape[0] == "batch"
    # the trained weights are initializers, not inputs
    inits = {t.name for t in model.graph.initializer}
    inf = inference_model(run_id, store, dtype=dtype)
    assert all(f"state.{p}" in inits for p in inf.params)
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["caramba.run"] == run_id and meta["caramba.dtype"] == dtype
    for batch in (1, 7, 37):
        feeds = _feeds(example, batch, dtype)
        want = caramba_forward(inf, feeds)["logits"]
        (got,) = sess.run(["logits"], feeds)
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape and got.shape[0] == batch
        scale = max(1.0, float(np.max(np.abs(want))))
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL[dtype] * scale)


def test_onnx_predictions_match_the_recorded_accuracy(trained, store, tmp_path):
    """The exported MLP classifies the digits the way the run's weights do (argmax over all 1,797)."""
    from sklearn.datasets import load_digits

    run_id = trained("digits_mlp")
    path = export_onnx(run_id, tmp_path / "mlp.onnx", store=store)
    d = load_digits()
    x = d.data / 16.0
    (logits,) = _session(path).run(["logits"], {"x": x})
    inf = inference_model(run_id, store)
    h = x @ inf.params["fc1.weight"] + inf.params["fc1.bias"]
    from scipy.special import erf

    h = 0.5 * h * (1 + erf(h / np.sqrt(2)))  # exact GELU, independently of caramba
    ref = h @ inf.params["fc2.weight"] + inf.params["fc2.bias"]
    np.testing.assert_allclose(logits, ref, rtol=1e-10, atol=1e-10)
    assert np.mean(np.argmax(logits, 1) == d.target) > 0.5  # 20 steps already learn most digits


def test_export_writes_default_name_and_into_a_folder(trained, store, tmp_path, monkeypatch):
    run_id = trained("digits_mlp")
    monkeypatch.chdir(tmp_path)
    assert export_onnx(run_id, store=store).name == f"{run_id}.onnx"
    (tmp_path / "d").mkdir()
    assert export_onnx(run_id, tmp_path / "d", store=store) == tmp_path / "d" / f"{run_id}.onnx"


def test_training_only_outputs_are_refused(trained, store):
    run_id = trained("digits_mlp")
    with pytest.raises(ConfigError, match="training-only"):
        inference_model(run_id, store, outputs=["accuracy"])
    with pytest.raises(ConfigError, match="not an export dtype"):
        inference_model(run_id, store, dtype="float16")


def test_a_model_that_mixes_the_batch_is_refused(store, tmp_path):
    """A batch mean bakes the batch size in: the export says so instead of writing a wrong model."""
    from caramba.run.engine import run_experiment

    text = """\
name: batch-mixer
topology:
  inputs:
    x: {shape: [batch, 4]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: fc, op: projection.linear, in: [x], config: {out_features: 3}}
    - {id: centered, op: reduce.mean, in: [fc], config: {axes: [0], keepdims: true}}
    - {id: out, op: math.sub, in: [fc, centered]}
    - {id: loss, op: loss.cross_entropy, in: [out, label]}
  outputs: {logits: out, loss: loss}
datasets:
  blobs: {source: generated, kind: blobs, n: 60, classes: 3, features: 4, split: {train: 0.8, val: 0.2, test: 0.0}, feed: {label: y}}
trainer: {loss: loss, optimizer: optimizer.sgd, lr: 0.1, batch_size: 8, steps: 2}
targets:
  - {name: cpu, backend: cpu, runs: [{id: s0, seed: 0}]}
"""
    m = tmp_path / "mixer.yml"
    m.write_text(text)
    try:
        run_id = run_experiment(m, store=store).runs[-1].run_id
    except CarambaError as exc:  # pragma: no cover - the manifest is meant to be valid
        pytest.fail(f"test manifest does not run: {exc}")
    inf = inference_model(run_id, store)
    with pytest.raises(GraphError, match="batch"):
        onnx_model(inf)
