"""GET /api/v1/runs/{id}/export: the web UI's download of a trained model; hostile input is 4xx."""

from __future__ import annotations

import io

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")
ort = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")


@pytest.fixture(scope="module")
def client(store):
    from fastapi.testclient import TestClient

    from caramba.api import create_app
    from caramba.config import Settings

    app = create_app(Settings(store=str(store.root), api_token="t"), hosts=["testserver"])
    with TestClient(app) as c:
        yield c


def test_download_onnx_runs_in_onnx_runtime(trained, store, client, caramba_forward):
    from caramba.export.inference import inference_model

    run_id = trained("digits_mlp")
    r = client.get(f"/api/v1/runs/{run_id}/export", params={"format": "onnx", "dtype": "float32"})
    assert r.status_code == 200, r.text
    assert r.headers["x-caramba-run"] == run_id
    assert f'filename="{run_id}.onnx"' in r.headers["content-disposition"]
    sess = ort.InferenceSession(r.content, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((5, 64)).astype(np.float32)
    (got,) = sess.run(["logits"], {"x": x})
    want = caramba_forward(inference_model(run_id, store, dtype="float32"), {"x": x})["logits"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    again = client.get(f"/api/v1/runs/{run_id[:12]}/export", params={"dtype": "float32"})  # cached, same bytes
    assert again.status_code == 200 and again.content == r.content


def test_download_safetensors(trained, client):
    from safetensors.numpy import load

    run_id = trained("digits_mlp")
    r = client.get(f"/api/v1/runs/{run_id}/export", params={"format": "safetensors"})
    assert r.status_code == 200, r.text
    tensors = load(io.BytesIO(r.content).read())
    assert sorted(tensors) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    assert tensors["fc1.weight"].shape == (128, 64)


@pytest.mark.parametrize(("path", "params", "status"), [
    ("/api/v1/runs/no-such-run/export", {}, 404),
    ("/api/v1/runs/%00%2e%2e%2f/export", {}, 404),
    ("/api/v1/runs/" + "x" * 5000 + "/export", {}, 404),
    ("/api/v1/runs/latest/export", {"format": "pytorch"}, 422),
    ("/api/v1/runs/latest/export", {"dtype": "float16"}, 422),
    ("/api/v1/runs/latest/export", {"format": ""}, 422),
])
def test_bad_requests_are_4xx(trained, client, path, params, status):
    trained("digits_mlp")
    r = client.get(path, params=params)
    assert r.status_code == status, r.text
    assert "message" in r.json() or "detail" in r.json() or "errors" in r.json()


def test_a_run_without_checkpoint_is_422(store, client):
    rec = store.create_run("no-ckpt", target="cpu")
    r = client.get(f"/api/v1/runs/{rec.id}/export")
    assert r.status_code == 422, r.text
    assert "no checkpoint" in r.text
