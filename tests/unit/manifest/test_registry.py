"""The asset registry: every packaged asset loads, lowers on its example and matches the IR."""

import pytest

import caramba.ir as ir
from caramba.ir.attrs import REQUIRED
from caramba.manifest import ManifestError
from caramba.manifest.compile import check
from caramba.manifest.lower import LAYERS, lower_example
from caramba.manifest.registry import KINDS, registry, template_text

REG = registry()


def test_every_kind_is_present():
    assert {a.kind for a in REG.list()} == set(KINDS)
    for op in ("projection.linear", "embedding.token", "attention.sdpa", "norm.layer", "block.mlp",
               "block.residual", "block.transformer", "block.conv", "model.mlp_classifier", "model.gpt_tiny",
               "model.gpt2_small", "model.cnn_classifier", "model.audio_classifier"):
        assert op in REG, op


@pytest.mark.parametrize("asset", [a for a in REG.list("operation") if a.ir], ids=lambda a: a.op)
def test_direct_ir_operations_match_their_opdef(asset):
    opdef = ir.get_op(asset.ir)
    attrs = {a.name: a for a in opdef.attrs}
    for c in asset.config:
        assert c.name in attrs, f"{asset.op} config '{c.name}' is not an attribute of {asset.ir}"
        assert (c.default is REQUIRED) == (attrs[c.name].default is REQUIRED), c.name
    lo, hi = asset.arity()
    want_lo, want_hi = (opdef.arity, opdef.arity) if isinstance(opdef.arity, int) else opdef.arity
    assert lo >= want_lo and (want_hi is None or hi <= want_hi)


@pytest.mark.parametrize("asset", REG.list("optimizer"), ids=lambda a: a.op)
def test_optimizers_match_their_update_op(asset):
    attrs = {a.name: a for a in ir.get_op(asset.ir).attrs}
    assert asset.ir.startswith("train.optimizer.")
    for c in asset.config:
        assert c.name in attrs and c.type == attrs[c.name].kind, (asset.op, c.name)
    assert set(asset.ir_attrs) <= set(attrs)


@pytest.mark.parametrize("asset", REG.list("manifest"), ids=lambda a: a.op)
def test_manifest_templates_are_valid_manifests(asset):
    prep, low = check(template_text(asset))
    assert prep.manifest.is_experiment and low.params


@pytest.mark.parametrize("asset", [a for a in REG.list("operation") if a.lowering], ids=lambda a: a.op)
def test_layer_operations_have_a_lowering(asset):
    assert asset.lowering in LAYERS


@pytest.mark.parametrize("asset", REG.list("block") + [a for a in REG.list("model") if a.op != "model.gpt2_small"],
                         ids=lambda a: a.op)
def test_blocks_and_models_lower_on_their_example(asset):
    low = lower_example(asset)
    ir.verify(low.graph)
    assert low.params and all(name.startswith(asset.op.rsplit(".", 1)[-1] + ".") for name in low.params)
    for node in low.graph.nodes:
        assert node.origin is not None and node.origin.line is not None, node.id


def test_gpt2_small_has_124m_parameters_in_12_layers():
    low = lower_example(REG.get("model.gpt2_small"))
    assert abs(low.param_count() - 124_439_808) <= 0.01 * 124e6
    assert low.param_count() == 124_439_808  # GPT-2 small with tied embeddings, exactly
    layers = {name.split(".")[1] for name in low.params if name.split(".")[1].startswith("h_")}
    assert len(layers) == 12
    assert low.graph.type_of(low.graph.outputs["gpt2_small"]).shape == (1, 1024, 50257)


def test_unknown_asset_suggests():
    with pytest.raises(KeyError, match="did you mean 'projection.linear'"):
        REG.get("projection.linaer")
    with pytest.raises(ManifestError, match="unknown asset kind"):
        REG.list("blocks")


def test_summary_lists_ports_and_typed_config():
    s = REG.get("projection.linear").summary()
    assert s["inputs"][0]["name"] == "x" and s["outputs"][0]["name"] == "y"
    cfg = {c["name"]: c for c in s["config"]}
    assert cfg["out_features"]["required"] and cfg["bias"]["default"] is True and cfg["in_features"]["type"] == "int?"


def test_the_lazy_index_says_what_each_packaged_file_says():
    """Packaged assets are indexed by their ``op:`` line and parsed on first use: every ID and
    kind in the index is what parsing the file gives, and nothing is parsed before it is used."""
    from caramba.manifest.registry import asset_display, asset_root, load_asset, load_registry

    root = asset_root()
    reg = load_registry(root)
    assert not any(reg.assets._entries[op].__class__.__name__ == "Asset" for op in reg)  # nothing parsed yet
    eager = {}
    for path in sorted(root.rglob("*.yml")):
        rel = path.relative_to(root)
        if rel.parts[0] != "fragment":
            a = load_asset(path, asset_display(path, root))
            eager[a.op] = (a.kind, rel.parts[0], a.text)
    assert sorted(eager) == sorted(reg)
    for op, (kind, folder, text) in eager.items():
        a = reg.get(op)
        assert (a.op, a.kind, a.text) == (op, kind, text) and kind == folder


def test_a_file_that_is_not_what_its_op_line_says_is_refused(tmp_path):
    """The index cannot disagree with the file: an ``op:`` line the YAML does not mean (inside a
    quoted string; the real key written quoted) fails when the asset is used, naming the file; a
    file whose kind is not its folder's too. A file without one plain ``op:`` line is parsed at
    once (two of them: its duplicate key is reported when the registry is loaded)."""
    from caramba.manifest.registry import load_registry

    body = "kind: operation\ndescription: d\nir: math.add\ninputs: [a, b]\n"
    ops = tmp_path / "a" / "operation"
    ops.mkdir(parents=True)
    (ops / "plain.yml").write_text("op: my.plain\n" + body)
    (ops / "quoted.yml").write_text('op: "my.quoted"\n' + body)
    (ops / "hidden.yml").write_text('"op": my.real\nkind: operation\nir: math.add\ndescription: "text\nop: my.fake\n more"\n')
    (ops / "misfiled.yml").write_text("op: my.misfiled\n" + body.replace("kind: operation", "kind: optimizer"))
    reg = load_registry(tmp_path / "a")
    assert reg.get("my.plain").op == "my.plain" and reg.get("my.quoted").op == "my.quoted"
    with pytest.raises(ManifestError, match="hidden.yml was indexed as 'my.fake' but its op is 'my.real'"):
        reg.get("my.fake")
    with pytest.raises(ManifestError, match="of kind optimizer lives under operation/"):
        reg.get("my.misfiled")
    twice = tmp_path / "b" / "operation"
    twice.mkdir(parents=True)
    (twice / "twice.yml").write_text("op: my.one\n" + body + "op: my.two\n")
    with pytest.raises(ManifestError, match="duplicate key 'op'"):
        load_registry(tmp_path / "b")
