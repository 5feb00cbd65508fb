"""`caramba export RUN --format safetensors`: the file loads into the equivalent ``torch.nn``
module with ``load_state_dict(strict=True)`` and that module computes caramba's outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch (test extra) is not installed")
safetensors_torch = pytest.importorskip("safetensors.torch", reason="safetensors (test extra) is not installed")

from caramba.export.inference import inference_model  # noqa: E402
from caramba.export.to_safetensors import export_safetensors  # noqa: E402

nn = torch.nn


class DigitsMLP(nn.Module):  # examples/digits_mlp.yml
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, 128), nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(nn.functional.gelu(self.fc1(x)))


class ConvBlock(nn.Module):  # block.conv: 3x3 conv (padding 1), relu, 2x2 max pool
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x):
        return nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)


class CNN(nn.Module):  # model.cnn_classifier (channels 16, classes 10)
    def __init__(self) -> None:
        super().__init__()
        self.block1, self.block2, self.head = ConvBlock(1, 16), ConvBlock(16, 32), nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.block2(self.block1(x)).mean(dim=(2, 3)))


class DigitsCNN(nn.Module):  # examples/digits_cnn.yml: the model node is `cnn`
    def __init__(self) -> None:
        super().__init__()
        self.cnn = CNN()

    def forward(self, x):
        return self.cnn(x)


def _digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.data / 16.0, d.target


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("example", "module", "shape"), [
    ("digits_mlp", DigitsMLP, (-1, 64)),
    ("digits_cnn", DigitsCNN, (-1, 1, 8, 8)),
])
def test_loads_into_torch_and_computes_caramba_outputs(example, module, shape, dtype, trained, store, tmp_path,
                                                       caramba_forward):
    run_id = trained(example)
    path = export_safetensors(run_id, tmp_path / "m.safetensors", store=store, dtype=dtype)
    state = safetensors_torch.load_file(str(path))
    m = module().to(getattr(torch, dtype))
    m.load_state_dict(state, strict=True)  # every tensor has its torch.nn name and shape; nothing extra
    x, y = _digits()
    x = x.astype(dtype)
    with torch.no_grad():
        got = m(torch.from_numpy(x.reshape(shape))).numpy()
    inf = inference_model(run_id, store, dtype=dtype)
    feed = "x" if example == "digits_mlp" else "image"
    want = caramba_forward(inf, {feed: x.reshape(shape)})["logits"]
    tol = 1e-10 if dtype == "float64" else 2e-5
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, float(np.abs(want).max())))
    # the same predictions, so the same accuracy
    assert np.mean(got.argmax(1) == y) == np.mean(want.argmax(1) == y)


def test_metadata_names_layouts_and_no_optimizer_state(trained, store, tmp_path):
    from safetensors import safe_open

    run_id = trained("digits_mlp")
    path = export_safetensors(run_id, tmp_path / "m.safetensors", store=store)
    with safe_open(str(path), "np") as f:
        meta = f.metadata()
        keys = set(f.keys())
        fc1 = f.get_tensor("fc1.weight")
    names = json.loads(meta["caramba.names"])
    assert names == {k: k for k in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")}
    assert keys == set(names.values())  # opt.adam.* state is not exported
    assert json.loads(meta["caramba.layouts"])["fc1.weight"] == "linear"
    assert meta["caramba.run"] == run_id and meta["format"] == "pt"
    from caramba.run.trained import load_trained

    ckpt = load_trained(run_id, store).params
    assert any(k.startswith("opt.") for k in ckpt)
    np.testing.assert_array_equal(fc1, ckpt["fc1.weight"].T)  # [out, in] as nn.Linear keeps it


@pytest.mark.slow
def test_gpt_linears_are_transposed_and_the_rest_kept(trained, store, tmp_path):
    from safetensors import safe_open

    from caramba.run.trained import load_trained

    run_id = trained("char_gpt")
    path = export_safetensors(run_id, tmp_path / "gpt.safetensors", store=store)
    ckpt = load_trained(run_id, store).params
    with safe_open(str(path), "np") as f:
        lay = json.loads(f.metadata()["caramba.layouts"])
        qkv = f.get_tensor("gpt.h_0.attn.qkv.weight")
        emb = f.get_tensor("gpt.tok_emb.weight")
    assert qkv.shape == (192, 64) and lay["gpt.h_0.attn.qkv.weight"] == "linear"
    np.testing.assert_array_equal(qkv, ckpt["gpt.h_0.attn.qkv.weight"].T)
    assert lay["gpt.tok_emb.weight"] == "as_stored"  # nn.Embedding: [vocab, dim] as caramba keeps it
    np.testing.assert_array_equal(emb, ckpt["gpt.tok_emb.weight"])
    assert lay["gpt.h_0.ln1.weight"] == "as_stored"
