"""Lowering a topology to IR: IDs and origins survive, layers own parameters, errors point at lines."""

import pytest

from caramba.manifest import ManifestError, load_string
from caramba.manifest.lower import lower_topology
from caramba.manifest.schema import validate

MLP = """\
name: mlp
topology:
  inputs:
    x: {shape: [batch, 64]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: fc1, op: projection.linear, in: [x], config: {out_features: 32}}
    - {id: act, op: activation.gelu, in: [fc1]}
    - {id: fc2, op: projection.linear, in: [act], config: {out_features: 10}}
    - {id: loss, op: loss.cross_entropy, in: [fc2, label]}
  outputs: {logits: fc2, loss: loss}
"""


def lower(text, **kw):
    doc = load_string(text, "m.yml")
    return lower_topology(validate(doc).topology, doc, **kw)


def test_node_ids_params_and_origins_survive():
    low = lower(MLP, dims={"batch": 8})
    g = low.graph
    assert {"fc1", "act", "fc2", "loss"} <= {n.id for n in g.nodes} and g.node("loss").op == "train.loss.cross_entropy"
    assert g.node("fc1").op == "math.add" and g.node("fc1.matmul").op == "linalg.matmul"
    assert set(low.params) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    assert g.state["fc1.weight"].type.shape == (64, 32)
    assert low.params["fc1.weight"].init == "uniform" and low.params["fc1.bias"].init == "uniform"
    o = g.node("fc2.matmul").origin
    assert (o.file, o.line, o.col, o.path) == ("m.yml", 9, 7, "topology.nodes[2]")
    assert g.node("x").origin.line == 4
    assert g.type_of(g.outputs["logits"]).shape == (8, 10) and g.type_of(g.outputs["loss"]).shape == ()
    assert low.param_count() == 64 * 32 + 32 + 32 * 10 + 10


def test_symbolic_dims_come_from_dims_or_topology():
    low = lower(MLP.replace("  nodes:", "  dims: {batch: 3}\n  nodes:"))
    assert low.inputs["x"].shape == (3, 64)
    with pytest.raises(ManifestError, match="symbolic dimension 'batch' has no size") as e:
        lower(MLP)
    assert (e.value.line, e.value.path) == (4, "topology.inputs.x.shape[0]")


@pytest.mark.parametrize(
    "old, new, line, match",
    [
        ("op: activation.gelu", "op: activation.gelue", 8, r"unknown op 'activation.gelue'; did you mean 'activation.gelu'"),
        ("in: [fc1]}", "in: [fc1, x]}", 8, r"activation.gelu takes 1 input \(x\), got 2"),
        ("in: [act]", "in: [actt]", 9, r"input 'actt' of node 'fc2' is not an input.*did you mean 'act'"),
        ("{out_features: 10}", "{out_features: 10, in_features: 31}", 9, r"node 'fc2' \(projection.linear\): in_features is 31 but the input f64\[8,32\] has 32"),
        ("{out_features: 10}", "{out_feature: 10}", 9, r"unknown config key 'out_feature'.*did you mean 'out_features'"),
        ("{out_features: 10}", "{out_features: ten}", 9, r"config 'out_features' must be an int, got 'ten'"),
        ("{out_features: 10}", "{}", 9, r"missing required config 'out_features'"),
        ("id: act,", "id: fc1,", 8, r"duplicate node id 'fc1'"),
        ("loss: loss}", "loss: los}", 11, r"output 'loss' names 'los', which no node produces"),
        ("in: [fc2, label]", "in: [label, fc2]", 10, r"node 'loss' \(loss.cross_entropy\): train.loss.cross_entropy does not accept logits of dtype int64"),
    ],
)
def test_errors_point_at_the_manifest(old, new, line, match):
    text = MLP.replace(old, new)
    assert text != MLP
    with pytest.raises(ManifestError, match=match) as e:
        lower(text, dims={"batch": 8})
    assert e.value.file == "m.yml" and e.value.line == line, str(e.value)


def test_errors_inside_blocks_name_the_block_site():
    text = """\
topology:
  inputs: {x: {shape: [2, 8, 30]}}
  nodes:
    - {id: blk, op: block.transformer, in: [x], config: {d_model: 30, heads: 4}}
"""
    with pytest.raises(ManifestError, match=r"d_model 30 does not split into 4 heads") as e:
        lower(text)
    assert e.value.file.endswith("block/transformer.yml")
    assert any("in block 'blk' (block.transformer) at m.yml:4:7" in n for n in e.value.loc.notes)


def test_multi_output_nodes_publish_out_names():
    text = """\
topology:
  inputs: {x: {shape: [2, 6]}}
  nodes:
    - {id: parts, op: shape.split, in: [x], out: [a, b], config: {axis: 1, num: 2}}
    - {id: s, op: math.add, in: [a, b]}
"""
    low = lower(text)
    assert low.graph.type_of(low.graph.outputs["s"]).shape == (2, 3)
    with pytest.raises(ManifestError, match=r"produces 2 output\(s\), but `out` names 3"):
        lower(text.replace("out: [a, b]", "out: [a, b, c]"))


def test_tied_embeddings_share_one_parameter():
    text = """\
topology:
  inputs: {tokens: {shape: [2, 8], dtype: int64}}
  nodes:
    - {id: emb, op: embedding.token, in: [tokens], config: {vocab_size: 50, d_model: 16}}
    - {id: head, op: projection.tied, in: [emb], config: {tied_to: emb}}
"""
    low = lower(text)
    assert list(low.params) == ["emb.weight"] and low.param_count() == 800
    assert low.graph.type_of(low.graph.outputs["head"]).shape == (2, 8, 50)
    with pytest.raises(ManifestError, match="no parameter 'embb.weight'"):
        lower(text.replace("tied_to: emb", "tied_to: embb"))


def test_dropout_is_identity_when_evaluating_and_keyed_by_step_when_training():
    text = """\
topology:
  inputs: {x: {shape: [2, 6]}}
  nodes:
    - {id: drop, op: nn.dropout, in: [x], config: {rate: 0.5}}
    - {id: y, op: activation.relu, in: [drop]}
"""
    ev = lower(text)
    assert not any(n.op == "nn.dropout" for n in ev.graph.nodes)
    tr = lower(text, training=True)
    assert tr.graph.node("drop").op == "nn.dropout" and tr.graph.node("step").types[0].shape == ()
