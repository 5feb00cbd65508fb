"""The manifest's ``model`` section: schema, located errors, LoRA adapters in the lowered graph,
the frozen set, and ``lora.merge``."""

from pathlib import Path

import numpy as np
import pytest

from caramba.errors import CarambaError
from caramba.manifest import ManifestError, lora
from caramba.manifest.compile import check
from caramba.manifest.layers import _project
from caramba.manifest.schema import LoraSpec

CHAR_GPT = Path(__file__).parents[3] / "examples" / "char_gpt.yml"

SMALL = """\
name: small
topology:
  inputs:
    x: {shape: [batch, 5, 8]}
    c: {shape: [batch, 3, 8]}
    label: {shape: [batch, 5], dtype: int64}
  nodes:
    - {id: fc, op: projection.linear, in: [x], config: {out_features: 8, bias: false}}
    - {id: attn, op: attention.sdpa, in: [fc], config: {heads: 2, bias: false}}
    - {id: cross, op: attention.sdpa, in: [attn, c], config: {heads: 2}}
    - {id: head, op: projection.linear, in: [cross], config: {out_features: 4}}
    - {id: loss, op: loss.cross_entropy, in: [head, label]}
  dims: {batch: 2}
model:
  freeze: ["fc.*"]
  lora:
    rank: 3
    alpha: 6.0
    targets: ["attn.*", "cross.q", "cross.out", "head"]
"""


def test_lora_adds_adapters_named_after_the_linear_with_peft_init():
    prep, low = check(SMALL)
    spec = prep.manifest.model.lora
    assert (spec.rank, spec.alpha, spec.dropout, spec.freeze_base, lora.scale(spec)) == (3, 6.0, 0.0, True, 2.0)
    adapters = {n: (p.shape, p.init, p.bound) for n, p in low.params.items() if lora.is_adapter(n)}
    b8 = 1 / np.sqrt(8)
    assert adapters == {
        "attn.qkv.lora_a": ((8, 3), "uniform", b8), "attn.qkv.lora_b": ((3, 24), "zeros", 0.0),
        "attn.out.lora_a": ((8, 3), "uniform", b8), "attn.out.lora_b": ((3, 8), "zeros", 0.0),
        "cross.q.lora_a": ((8, 3), "uniform", b8), "cross.q.lora_b": ((3, 8), "zeros", 0.0),
        "cross.out.lora_a": ((8, 3), "uniform", b8), "cross.out.lora_b": ((3, 8), "zeros", 0.0),
        "head.lora_a": ((8, 3), "uniform", b8), "head.lora_b": ((3, 4), "zeros", 0.0),
    }
    assert low.frozen == set(low.params) - set(adapters)  # freeze_base: everything but the adapters
    ids = {n.id: n for n in low.graph.nodes}
    # the result of each adapted linear: base + scale * ((x @ A) @ B), named like the plain layer
    assert ids["attn"].op == "math.add" and ids["attn.out.matmul"].op == "linalg.matmul"
    assert ids["head"].op == "math.add" and ids["head.lora.add"].op == "math.add"
    assert float(ids["head.lora_scale"].attrs["value"]) == 2.0
    assert "cross.kv.lora_a" not in low.params and "fc.lora_a" not in low.params


def test_without_a_model_section_the_graph_is_unchanged():
    plain = SMALL.split("model:")[0]
    _, a = check(plain)
    _, b = check(plain + "model: {freeze: ['fc.*']}\n")
    _, c = check(plain + "model: null\n")
    assert a.graph.as_text() == b.graph.as_text() == c.graph.as_text()
    assert a.frozen == c.frozen == frozenset() and b.frozen == {"fc.weight"}


def test_freeze_base_false_keeps_the_base_trainable_but_freeze_still_applies():
    _, low = check(SMALL.replace("    rank: 3\n", "    rank: 3\n    freeze_base: false\n"))
    assert low.frozen == {"fc.weight"}


def test_dropout_on_the_branch_only_while_training():
    text = SMALL.replace("    rank: 3\n", "    rank: 3\n    dropout: 0.25\n")
    prep, _ = check(text)
    train = prep.lower(training=True)
    drops = [n for n in train.graph.nodes if n.op == "nn.dropout"]
    assert sorted(n.id for n in drops) == ["attn.out.lora_dropout", "attn.qkv.lora_dropout", "cross.out.lora_dropout",
                                           "cross.q.lora_dropout", "head.lora_dropout"]
    assert len({n.attrs["seed"] for n in drops}) == 5 and all(n.attrs["rate"] == 0.25 for n in drops)
    assert not [n for n in prep.lower(training=False).graph.nodes if n.op == "nn.dropout"]


def test_project_keeps_its_signature():
    from caramba.ir.dtypes import DType
    from caramba.ir.graph import Graph
    from caramba.manifest.lower import LayerContext, _Lowering
    from caramba.manifest.registry import registry

    g = Graph("g")
    x = g.input("x", (2, 4), DType.float64)
    low = _Lowering(registry(), g, DType.float64, False, LoraSpec(rank=2, targets=["blk.proj"]))
    y = _project(LayerContext(low, "blk", "", None, None), x, 6, "proj", True, 0.02)
    assert y.shape == (2, 6) and sorted(low.params) == ["blk.proj.bias", "blk.proj.lora_a", "blk.proj.lora_b",
                                                         "blk.proj.weight"]


ERRORS = [
    # (what, replace, with, line, path, message)
    ("freeze matches nothing", '["fc.*"]', '["fc.*", "fcc.*"]', 15, "model.freeze[1]",
     "freeze pattern 'fcc.*' matches no parameter of the model"),
    ("target matches nothing", '"head"]', '"haed"]', 19, "model.lora.targets[3]",
     "LoRA target 'haed' matches no linear of the model"),
    ("a parameter is not a linear", '"head"]', '"head.weight"]', 19, "model.lora.targets[3]", "linears: attn.out"),
    ("rank 0", "rank: 3", "rank: 0", 17, "model.lora.rank", "greater than or equal to 1"),
    ("rank over the limit", "rank: 3", "rank: 4097", 17, "model.lora.rank", "less than or equal to 4096"),
    ("nan alpha", "alpha: 6.0", "alpha: .nan", 18, "model.lora.alpha", "finite number"),
    ("negative alpha", "alpha: 6.0", "alpha: -1.0", 18, "model.lora.alpha", "greater than 0"),
    ("alpha as a string", "alpha: 6.0", "alpha: '6'", 18, "model.lora.alpha", "valid number"),
    ("dropout 1", "rank: 3", "rank: 3\n    dropout: 1.0", 18, "model.lora.dropout", "less than 1"),
    ("no targets", 'targets: ["attn.*", "cross.q", "cross.out", "head"]', "targets: []", 19, "model.lora.targets",
     "at least 1 item"),
    ("unknown key", "rank: 3", "rnak: 3", 17, "model.lora.rnak", "unknown key 'rnak'; did you mean 'rank'"),
    ("unknown section key", "  freeze:", "  frezee:", 15, "model.frezee", "did you mean 'freeze'"),
    ("freeze_base not a bool", "rank: 3", "rank: 3\n    freeze_base: 1", 18, "model.lora.freeze_base", "valid boolean"),
]


@pytest.mark.parametrize("what, old, new, line, path, message", ERRORS, ids=[e[0] for e in ERRORS])
def test_mistakes_are_located_errors(what, old, new, line, path, message):
    text = SMALL.replace(old, new, 1)
    assert text != SMALL
    with pytest.raises(ManifestError) as e:
        check(text)
    assert message in str(e.value) and (e.value.line, e.value.path) == (line, path), str(e.value)


def test_a_trainer_needs_something_left_to_train():
    with pytest.raises(ManifestError, match="model.freeze leaves no parameter to train") as e:
        check(CHAR_GPT, ["model={freeze: ['gpt.*']}"])
    assert e.value.path == "model.freeze"
    with pytest.raises(ManifestError, match="match the LoRA adapters"):
        check(CHAR_GPT, ["model={freeze: ['gpt.*'], lora: {targets: ['*.fc2']}}"])
    _, low = check(CHAR_GPT, ["model={freeze: ['*.weight', '*.bias'], lora: {targets: ['*.fc2'], freeze_base: false}}"])
    assert set(low.params) - low.frozen == {f"gpt.h_{i}.mlp.fc2.lora_{x}" for i in (0, 1) for x in "ab"}


def test_everything_frozen_is_fine_without_a_trainer():
    _, low = check(SMALL.split("  lora:")[0].replace('["fc.*"]', '["*"]'))
    assert low.frozen == set(low.params)


def test_tuner_arms_see_the_model_section():
    tuner = "tuner={arms: [{id: ok, set: {model.lora.rank: 2}}, {id: bad, set: {model.lora.targets: ['*.qvk']}}]}"
    with pytest.raises(ManifestError) as e:
        check(CHAR_GPT, ["model={lora: {targets: ['*.attn.qkv']}}", tuner])
    msg = str(e.value)
    assert "LoRA target '*.qvk' matches no linear" in msg and "with tuner arm 'bad'" in msg, msg
    _, low = check(CHAR_GPT, ["model={lora: {targets: ['*.attn.qkv'], rank: 2}}", "variables.context=16"])
    assert low.params["gpt.h_1.attn.qkv.lora_b"].shape == (2, 192)


def test_gpt_tiny_linears_can_all_be_targeted():
    _, low = check(CHAR_GPT, ["model={freeze: ['gpt.tok_emb.*'], lora: {targets: ['*'], freeze_base: false}}"])
    linears = {n.rsplit(".", 1)[0] for n in low.params if n.endswith(".lora_a")}
    assert linears == {f"gpt.h_{i}.{s}" for i in (0, 1) for s in ("attn.qkv", "attn.out", "mlp.fc1", "mlp.fc2")}
    assert low.frozen == {"gpt.tok_emb.weight"}  # the tied LM head is not a linear of its own


def test_merge_folds_adapters_into_their_weights():
    rng = np.random.default_rng(0)
    spec = LoraSpec(rank=2, alpha=5.0, targets=["*"])
    params = {"a.weight": rng.normal(size=(4, 3)), "a.bias": rng.normal(size=3), "a.lora_a": rng.normal(size=(4, 2)),
              "a.lora_b": rng.normal(size=(2, 3)), "b.weight": rng.normal(size=(3, 3)).astype(np.float32)}
    out = lora.merge(params, spec)
    assert sorted(out) == ["a.bias", "a.weight", "b.weight"]
    np.testing.assert_allclose(out["a.weight"], params["a.weight"] + 2.5 * params["a.lora_a"] @ params["a.lora_b"],
                               rtol=0, atol=1e-14)
    assert out["b.weight"] is params["b.weight"] and out["a.bias"] is params["a.bias"]
    assert lora.merge({"w": np.ones(2)}, spec).keys() == {"w"}
    with pytest.raises(CarambaError, match="needs 'a.lora_b'"):
        lora.merge({k: v for k, v in params.items() if k != "a.lora_b"}, spec)
    with pytest.raises(CarambaError, match="has no 'a.lora_a'"):
        lora.merge({k: v for k, v in params.items() if k != "a.lora_a"}, spec)
    with pytest.raises(CarambaError, match="does not fit its weight"):
        lora.merge({**params, "a.lora_b": rng.normal(size=(2, 4))}, spec)
    assert lora.scale(LoraSpec(rank=4, targets=["x"])) == 1.0  # alpha defaults to rank
