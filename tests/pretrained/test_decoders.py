"""Llama, Mistral, Qwen2, Qwen3, Gemma and Gemma 2 checkpoints in caramba compute what transformers does.

Tiny random checkpoints (tests/pretrained/ref_decoder.py: what each one exercises) are opened
with ``caramba.pretrained`` and their logits compared with the transformers model's over the
whole output (``hf.rel_err``): float64 to 1e-10 on cpu and xla (transformers' float32 islands
patched, see ref_decoder), float32 to 2e-5, and a bfloat16 checkpoint upcast exactly into float64
to 1e-10. Config variants (old-style rope keys, rope types, windows) and refusals follow;
gradients of a tiny Llama and Gemma 2 are checked against central finite differences.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import caramba.pretrained as pt
from caramba import autodiff, compute
from caramba.errors import CarambaError
from caramba.ir.graph import Value

from . import ref_decoder as ref  # skips the module without transformers / torch (hf.py)
from .gradcheck import check_directional
from .hf import rel_err

F64, F32 = 1e-10, 2e-5


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """(family, dtype) -> (the transformers model in that dtype, its directory), built once."""
    made: dict[tuple[str, str], tuple] = {}

    def get(family: str, dtype: str):
        if (family, dtype) not in made:
            made[family, dtype] = ref.make(family, tmp_path_factory.mktemp(f"{family}_{dtype}"), dtype)
        return made[family, dtype]

    return get


def compare(model, directory, dtype: str, backend: str = "cpu", ids=None) -> float:
    ids = ref.tokens() if ids is None else ids
    want = ref.logits(model, ids)
    got = pt.open(directory, dtype=dtype).forward({"tokens": ids}, backend=backend)["logits"]
    return rel_err(got, want)


@pytest.mark.parametrize("backend", ["cpu", "xla"])
@pytest.mark.parametrize("family", ref.FAMILIES)
def test_float64_matches_transformers(checkpoints, family, backend):
    if backend not in compute.available():
        pytest.skip(f"backend {backend} is not installed")
    model, directory = checkpoints(family, "float64")
    err = compare(model, directory, "float64", backend)
    assert err <= F64, (family, backend, err)


@pytest.mark.parametrize("family", ref.FAMILIES)
def test_float32_matches_transformers(checkpoints, family):
    model, directory = checkpoints(family, "float32")
    err = compare(model, directory, "float32")
    assert err <= F32, (family, err)


@pytest.mark.parametrize("family", ref.FAMILIES)
def test_bfloat16_checkpoint_upcasts_exactly(checkpoints, family):
    _, directory = checkpoints(family, "bfloat16")
    err = compare(ref.reload(family, directory, "float64"), directory, "float64")
    assert err <= F64, (family, err)


def test_the_patched_float32_islands_matter(checkpoints):
    """Without ref_decoder's patches a float64 transformers Llama is off by ~1e-7: the islands
    are real, and the 1e-10 comparisons above are against the patched, float64 reference."""
    model, directory = checkpoints("llama", "float64")
    ids = ref.tokens()
    with ref.torch.no_grad():
        raw = model(input_ids=ref.torch.as_tensor(ids)).logits.numpy()
    got = pt.open(directory, dtype="float64").forward({"tokens": ids})["logits"]
    assert rel_err(got, ref.logits(model, ids)) <= F64 < 1e-9 < rel_err(raw, ref.logits(model, ids))


def test_sliding_window_keeps_window_keys(checkpoints):
    """Mistral's window W: a query sees its W most recent keys, itself included (transformers'
    ``kv_idx > q_idx - W``); W - 1 or W + 1 would give other logits."""
    model, directory = checkpoints("mistral", "float64")
    ids = ref.tokens()
    want = ref.logits(model, ids)
    window = model.config.sliding_window
    for w in (window - 1, window + 1):
        got = pt.open(directory, dtype="float64", variables={"window": w}).forward({"tokens": ids})["logits"]
        assert rel_err(got, want) > 1e-3, w


def _edited(directory, tmp_path, **config_changes):
    """A copy of a checkpoint directory (weights linked) whose config.json has some keys changed
    (a value None deletes the key)."""
    edited = tmp_path / "ckpt"
    edited.mkdir()
    (edited / "model.safetensors").symlink_to(directory / "model.safetensors")
    config = json.loads((directory / "config.json").read_text())
    for k, v in config_changes.items():
        if v is None:
            config.pop(k, None)
        else:
            config[k] = v
    (edited / "config.json").write_text(json.dumps(config))
    return edited


def test_older_config_json_rope_keys(checkpoints, tmp_path):
    """config.json as transformers 4 wrote it: top-level rope_theta and rope_scaling with the old
    key ``type`` (and no rope_parameters) gives the same model."""
    model, directory = checkpoints("llama", "float64")
    params = json.loads((directory / "config.json").read_text())["rope_parameters"]
    old = {k: v for k, v in params.items() if k not in ("rope_theta", "rope_type")}
    edited = _edited(directory, tmp_path, rope_parameters=None, rope_theta=params["rope_theta"],
                     rope_scaling={"type": params["rope_type"], **old})
    ids = ref.tokens()
    got = pt.open(edited, dtype="float64").forward({"tokens": ids})["logits"]
    assert rel_err(got, ref.logits(model, ids)) <= F64


@pytest.mark.parametrize("rope", [
    {"rope_type": "linear", "factor": 2.0},
    {"rope_type": "dynamic", "factor": 2.0},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
], ids=lambda r: r["rope_type"])
def test_llama_rope_scaling_types(tmp_path, rope):
    """Each Hugging Face rope type the layer accepts, against transformers (dynamic: a sequence
    past max_position_embeddings, so the frequencies are rescaled for it)."""
    seq = 12
    extra = {"max_position_embeddings": 8} if rope["rope_type"] == "dynamic" else {}
    model, directory = ref.make("llama", tmp_path, "float64", seed=1,
                                rope_parameters={"rope_theta": 10000.0, **rope}, **extra)
    err = compare(model, directory, "float64", ids=ref.tokens(seq=seq, seed=1))
    assert err <= F64, err


def test_qwen2_sliding_window_from_max_window_layers(tmp_path):
    """use_sliding_window: layers from max_window_layers on slide (layer 1 of 2 here)."""
    model, directory = ref.make("qwen2", tmp_path, "float64", seed=2, use_sliding_window=True, sliding_window=3,
                                max_window_layers=1)
    assert model.config.layer_types == ["full_attention", "sliding_attention"]
    assert compare(model, directory, "float64") <= F64


@pytest.mark.parametrize("family,key,value,words", [
    ("llama", "rope_parameters", {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0],
                                  "long_factor": [1.0]}, "longrope"),
    ("llama", "rope_parameters", {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
     "partial_rotary_factor"),
    ("llama", "hidden_act", "quick_gelu", "quick_gelu"),
    ("gemma2", "hidden_activation", "gelu_fast", "gelu_fast"),
])
def test_unsupported_configs_are_refused(checkpoints, tmp_path, family, key, value, words):
    _, directory = checkpoints(family, "float32")
    edited = _edited(directory, tmp_path, **{key: value})
    with pytest.raises(CarambaError, match=words):
        pt.open(edited, dtype="float32").forward({"tokens": ref.tokens(batch=1, seq=4)})


GRAD_PARAMS = {
    "llama": ["tok_emb.weight", "h_0.attn.q.weight", "h_0.attn.k.bias", "h_1.attn.v.weight", "h_0.attn.o.weight",
              "h_1.attn_norm.weight", "h_0.mlp.gate.weight", "h_1.mlp.down.bias", "norm.weight", "lm_head.weight"],
    "gemma2": ["tok_emb.weight", "h_0.attn.q.weight", "h_0.attn.k.weight", "h_1.attn.v.weight",
               "h_0.attn_out_norm.weight", "h_1.mlp_norm.weight", "h_0.mlp.up.weight", "norm.weight"],
}


@pytest.mark.parametrize("family", sorted(GRAD_PARAMS))
def test_gradient_matches_finite_differences(checkpoints, family):
    """d<logits, c>/d(parameter) from caramba's autodiff vs central differences, float64, on a
    few parameters of a tiny Llama (sdpa path: embedding, q/k/v/o, norms, gated MLP, untied head)
    and Gemma 2 (composed path: windows, soft-capped scores and logits, (1 + w) norms, tied head)."""
    _, directory = checkpoints(family, "float64")
    m = pt.open(directory, dtype="float64")
    ids = ref.tokens(batch=1, seq=7, seed=3)  # longer than the Gemma 2 window (4)
    feed = {"tokens": ids}
    low = m.lower(m.dims_for(feed))
    g, rng = low.graph, np.random.default_rng(0)
    names = [f"model.{p}" for p in GRAD_PARAMS[family]]
    with g:
        y = Value(g, g.outputs["logits"])
        c = g.input("ct", y.shape, y.dtype)
        total = (y * c).sum()
        g.output("L", total)
        for name, gr in zip(names, autodiff.grad(total, names), strict=True):
            g.output(f"grad:{name}", gr)
    cts = {"ct": rng.standard_normal(y.shape)}
    check_directional(m, low.params, g, names, {**feed, **cts}, rng, directions=2)
