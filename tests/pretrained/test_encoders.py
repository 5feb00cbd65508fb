"""GPT-2 (GPT2LMHeadModel) and BERT (BertModel) checkpoints in caramba compute what transformers does.

Tiny random checkpoints (tests/pretrained/ref_encoder.py) are opened with ``caramba.pretrained``
and compared with the transformers model over whole outputs (``hf.rel_err``): float64 to 1e-10
on cpu and xla, float32 to 2e-5, and a bfloat16 checkpoint upcast exactly into float64 to 1e-10.
BERT runs a padded batch (attention_mask zeros); a gradient of a tiny BERT is checked against
central finite differences.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import caramba.pretrained as pt
from caramba import autodiff, compute
from caramba.errors import CarambaError
from caramba.ir.graph import Value

from . import ref_encoder as ref  # skips the module without transformers / torch (hf.py)
from .gradcheck import check_directional
from .hf import rel_err

ARCHS = ("gpt2", "bert")
F64, F32 = 1e-10, 2e-5


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """(arch, dtype) -> (the transformers model in that dtype, its directory), built once."""
    made: dict[tuple[str, str], tuple] = {}

    def get(arch: str, dtype: str):
        if (arch, dtype) not in made:
            made[arch, dtype] = ref.make(arch, tmp_path_factory.mktemp(f"{arch}_{dtype}"), dtype)
        return made[arch, dtype]

    return get


def compare(arch: str, model, directory, dtype: str, backend: str) -> dict[str, float]:
    if backend not in compute.available():
        pytest.skip(f"backend {backend} is not installed")
    feed = ref.inputs(arch)
    want = ref.reference(arch, model, feed)
    got = pt.open(directory, dtype=dtype).forward(feed, backend=backend)
    assert set(want) <= set(got), (sorted(got), sorted(want))
    return {k: rel_err(got[k], want[k]) for k in want}


@pytest.mark.parametrize("backend", ["cpu", "xla"])
@pytest.mark.parametrize("arch", ARCHS)
def test_float64_matches_transformers(checkpoints, arch, backend):
    model, directory = checkpoints(arch, "float64")
    errs = compare(arch, model, directory, "float64", backend)
    assert max(errs.values()) <= F64, errs


@pytest.mark.parametrize("backend", ["cpu", "xla"])
@pytest.mark.parametrize("arch", ARCHS)
def test_float32_matches_transformers(checkpoints, arch, backend):
    model, directory = checkpoints(arch, "float32")
    errs = compare(arch, model, directory, "float32", backend)
    assert max(errs.values()) <= F32, errs


@pytest.mark.parametrize("arch", ARCHS)
def test_bfloat16_checkpoint_upcasts_exactly(checkpoints, arch):
    _, directory = checkpoints(arch, "bfloat16")
    errs = compare(arch, ref.reload(arch, directory, "float64"), directory, "float64", "cpu")
    assert max(errs.values()) <= F64, errs


def test_bert_padding_hides_padded_tokens(checkpoints):
    """Padded keys get no weight: changing the padded tokens changes no unpadded position, and a
    row padded entirely still matches transformers (which averages its keys uniformly)."""
    model, directory = checkpoints("bert", "float64")
    m = pt.open(directory, dtype="float64")
    feed = ref.inputs("bert", seed=1)
    feed["attention_mask"][2] = 0  # every key of row 2 padded
    other = {k: v.copy() for k, v in feed.items()}
    pad = feed["attention_mask"] == 0
    other["tokens"][pad] = (feed["tokens"][pad] + 1) % ref.VOCAB
    other["token_types"][pad] = 1 - feed["token_types"][pad]
    a, b = m.forward(feed), m.forward(other)
    keep = feed["attention_mask"][:2] == 1
    np.testing.assert_array_equal(a["hidden"][:2][keep], b["hidden"][:2][keep])
    np.testing.assert_array_equal(a["pooled"][:2], b["pooled"][:2])
    want = ref.reference("bert", model, feed)
    errs = {k: rel_err(a[k], want[k]) for k in want}
    assert max(errs.values()) <= F64, errs


@pytest.mark.parametrize("overrides", [
    dict(scale_attn_weights=False, activation_function="relu", n_inner=128, layer_norm_epsilon=1e-6),
    dict(activation_function="gelu"),
], ids=["unscaled-relu-inner128", "exact-gelu"])
def test_gpt2_config_variants(tmp_path, overrides):
    model, directory = ref.make("gpt2", tmp_path, "float64", seed=1, **overrides)
    errs = compare("gpt2", model, directory, "float64", "cpu")
    assert max(errs.values()) <= F64, errs


def test_gpt2_reorder_and_upcast_attn_in_float32(tmp_path):
    """The flag only makes transformers compute attention scores in float32: the same function."""
    model, directory = ref.make("gpt2", tmp_path, "float32", seed=2, reorder_and_upcast_attn=True)
    errs = compare("gpt2", model, directory, "float32", "cpu")
    assert max(errs.values()) <= F32, errs


@pytest.mark.parametrize("arch,key,value,words", [
    ("gpt2", "scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx"),
    ("gpt2", "add_cross_attention", True, "add_cross_attention"),
    ("gpt2", "tie_word_embeddings", False, "tie_word_embeddings"),
    ("gpt2", "activation_function", "gelu_fast", "gelu_fast"),
    ("gpt2", "n_inner", 100, "exact multiple"),
    ("bert", "is_decoder", True, "is_decoder"),
    ("bert", "position_embedding_type", "relative_key", "position_embedding_type"),
    ("bert", "hidden_act", "quick_gelu", "quick_gelu"),
    ("bert", "add_cross_attention", True, "add_cross_attention"),
])
def test_unsupported_configs_are_refused(checkpoints, tmp_path, arch, key, value, words):
    _, directory = checkpoints(arch, "float32")
    edited = tmp_path / "ckpt"
    edited.mkdir()
    (edited / "model.safetensors").symlink_to(directory / "model.safetensors")
    config = json.loads((directory / "config.json").read_text())
    (edited / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(CarambaError, match=words):
        pt.open(edited, dtype="float32").forward(ref.inputs(arch, batch=1, seq=4))


def test_bert_gradient_matches_finite_differences(checkpoints):
    """d<outputs, c>/d(parameter) from caramba's autodiff vs central differences, float64, on a
    few parameters of a tiny BERT (embeddings, attention, MLP, LayerNorm, pooler)."""
    _, directory = checkpoints("bert", "float64")
    m = pt.open(directory, dtype="float64")
    feed = ref.inputs("bert", batch=2, seq=6, seed=3)
    feed["attention_mask"][1, 4:] = 0
    low = m.lower(m.dims_for(feed))
    g, rng = low.graph, np.random.default_rng(0)
    names = ["model.pos_emb.weight", "model.layer_0.attn.k.weight", "model.layer_1.mlp.fc1.bias",
             "model.layer_0.ln1.weight", "model.pooler.weight"]
    cts = {}
    with g:
        total = None
        for out in ("hidden", "pooled"):
            y = Value(g, g.outputs[out])
            c = g.input(f"ct_{out}", y.shape, y.dtype)
            cts[f"ct_{out}"] = rng.standard_normal(y.shape)
            term = (y * c).sum()
            total = term if total is None else total + term
        g.output("L", total)
        for name, gr in zip(names, autodiff.grad(total, names), strict=True):
            g.output(f"grad:{name}", gr)
    check_directional(m, low.params, g, names, {**feed, **cts}, rng, directions=3)


def test_base_model_prefixes_are_either_form(tmp_path, checkpoints):
    """The same weights saved by the base model (GPT2Model: `h.0...`, no `transformer.` prefix) or
    with the prefix (BertForMaskedLM: `bert.embeddings...`, plus its MLM head) load alike."""
    from .hf import save

    model, directory = checkpoints("gpt2", "float64")
    feed = ref.inputs("gpt2")
    want = pt.open(directory, dtype="float64").forward(feed)["logits"]
    base = save(model.transformer, tmp_path / "gpt2_base", "float64")
    assert not any(k.startswith("transformer.") for k in pt.open(base, architecture="gpt2").checkpoint.tensors)
    np.testing.assert_array_equal(pt.open(base, architecture="gpt2").forward(feed)["logits"], want)

    bert, bdir = checkpoints("bert", "float64")
    mlm = ref.transformers.BertForMaskedLM(bert.config).to(ref.torch.float64).eval()
    mlm.bert.load_state_dict(bert.state_dict(), strict=False)  # the MLM head has no pooler: copy the encoder
    mdir = save(mlm, tmp_path / "bert_mlm", "float64")
    tensors = pt.open(bdir).checkpoint.tensors
    with pytest.raises(CarambaError, match=r"no tensor 'pooler\.dense\.weight' \(or 'bert\.pooler\.dense\.weight'\)"):
        pt.open(mdir).forward(ref.inputs("bert"))  # transformers' MLM saves no pooler: said plainly
    assert "pooler.dense.weight" in tensors
