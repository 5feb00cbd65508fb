"""The manifest loader: variables, includes, repeat, limits, and locations in every error."""

import pytest

from caramba.manifest import ManifestError, load, load_string
from caramba.manifest.loader import MAX_INCLUDES, parse_override


def test_whole_scalar_placeholder_keeps_its_type_and_mixed_strings_format():
    doc = load_string(
        "variables: {n: 128, lr: 3.0e-3, dims: [1, 2], on: true, name: mlp}\n"
        "a: ${n}\nb: '${lr}'\nc: ${dims}\nd: ${on}\ne: 'x_${name}_${n}'\nf: ${n * 4}\ng: ${n // 3}\nh: $${n}\n"
    )
    assert doc.data == {"a": 128, "b": 3e-3, "c": [1, 2], "d": True, "e": "x_mlp_128", "f": 512, "g": 42, "h": "${n}"}
    assert "variables" not in doc.data and doc.variables["n"] == 128


def test_variables_refer_to_each_other_in_any_order_and_nested_paths():
    doc = load_string("variables:\n  b: ${a.x}\n  a: {x: 3, l: [5, 6]}\nv: ${b}\nw: ${a.l.1}\n")
    assert doc.data == {"v": 3, "w": 6}


def test_undefined_variable_points_at_the_use_and_suggests():
    with pytest.raises(ManifestError) as e:
        load_string("variables: {hidden: 4}\nmodel:\n  width: ${hiden}\n", "m.yml")
    err = e.value
    assert (err.file, err.line, err.col) == ("m.yml", 3, 10)
    assert "undefined variable 'hiden'" in str(err) and "did you mean 'hidden'" in str(err)


def test_repeat_unrolls_with_all_bindings_and_splices():
    doc = load_string(
        "nodes:\n  - {id: first}\n  - repeat: 3\n    index: layer\n    offset: 10\n    template:\n"
        "      - {id: 'l${layer}', n: '${next_layer}', o: '${offset_layer}', no: '${next_offset_layer}'}\n"
        "  - {id: last}\n"
    )
    ids = [n["id"] for n in doc.data["nodes"]]
    assert ids == ["first", "l0", "l1", "l2", "last"]
    assert doc.data["nodes"][2] == {"id": "l1", "n": 2, "o": 11, "no": 12}
    loc = doc.loc(("nodes", 2, "id"))
    assert loc.line == 7 and any("layer=1" in n for n in loc.notes)


def test_default_index_is_i_and_mapping_template_gives_one_item_per_iteration():
    doc = load_string("xs:\n  - repeat: 2\n    template: {v: '${i}', w: '${next_i}'}\n")
    assert doc.data["xs"] == [{"v": 0, "w": 1}, {"v": 1, "w": 2}]


def test_repeat_limit_and_expansion_limit():
    with pytest.raises(ManifestError, match="repeat 4097 is over the limit of 4096") as e:
        load_string("xs:\n  - {repeat: 4097, template: [1]}\n")
    assert e.value.line == 2
    with pytest.raises(ManifestError, match="more than 65536 nodes"):
        load_string("xs:\n  - repeat: 4000\n    template:\n      - repeat: 4000\n        template: [1]\n")


def test_include_scalar_and_mapping_forms(tmp_path):
    (tmp_path / "blocks").mkdir()
    (tmp_path / "blocks" / "mlp.yml").write_text("width: ${include.width}\nact: ${act}\n")
    (tmp_path / "blocks" / "plain.yml").write_text("variables: {k: 7}\nk: ${k}\n")
    (tmp_path / "main.yml").write_text(
        "variables: {act: gelu}\n"
        "a: {include: blocks.mlp, variables: {width: 32}}\n"
        "b: !include blocks.plain\n"
    )
    doc = load(tmp_path / "main.yml")
    assert doc.data == {"a": {"width": 32, "act": "gelu"}, "b": {"k": 7}}
    loc = doc.loc(("a", "width"))
    assert loc.file.endswith("mlp.yml") and loc.line == 1 and any("included from" in n for n in loc.notes)


def test_include_cycle_is_rejected(tmp_path):
    (tmp_path / "a.yml").write_text("x: !include b\n")
    (tmp_path / "b.yml").write_text("y: !include a\n")
    (tmp_path / "main.yml").write_text("top: !include a\n")
    with pytest.raises(ManifestError, match=r"include cycle: a.yml -> b.yml -> a.yml") as e:
        load(tmp_path / "main.yml")
    assert e.value.file.endswith("b.yml") and e.value.line == 1


def test_include_cannot_escape_the_root(tmp_path):
    (tmp_path / "secret.yml").write_text("k: 1\n")
    root = tmp_path / "project"
    root.mkdir()
    (root / "link.yml").symlink_to(tmp_path / "secret.yml")
    (root / "main.yml").write_text("a: !include link\n")
    with pytest.raises(ManifestError, match="outside the manifest root"):
        load(root / "main.yml")
    with pytest.raises(ManifestError, match="dot path"):
        load_string("a: !include ../secret\n", root=root)


def test_include_limit(tmp_path):
    (tmp_path / "leaf.yml").write_text("v: 1\n")
    text = f"xs:\n  - repeat: {MAX_INCLUDES + 1}\n    template: [!include leaf]\n"
    with pytest.raises(ManifestError, match=f"more than {MAX_INCLUDES} includes"):
        load_string(text, root=tmp_path)


def test_bad_yaml_has_a_location():
    with pytest.raises(ManifestError) as e:
        load_string("a:\n  b: [1, 2\n  c: 3\n", "bad.yml")
    assert e.value.file == "bad.yml" and e.value.line is not None and "invalid YAML" in str(e.value)


@pytest.mark.parametrize(
    "text, match",
    [
        ("a: 1\na: 2\n", "duplicate key 'a'"),
        ("a: !secret x\n", "unsupported YAML tag"),
        ("a: &x [*x]\n", "recursive YAML"),
        ("a: ${1 / 0}\n", "division by zero"),
        ("a: '${x'\n", "unterminated"),
        ("a: '${__import__}'\n", "undefined variable"),
        ("a: \"${'s' * 3}\"\n", "unsupported expression"),
        ("- 1\n", "must be a mapping"),
        ("variables: {a: '${b}', b: '${a}'}\nx: ${a}\n", "refers to itself"),
        ("xs: [{repeat: -1, template: [1]}]\n", "non-negative"),
        ("xs: [{repeat: 2, template: [1], idx: j}]\n", "unknown key 'idx'.*did you mean.*'index'"),
    ],
)
def test_malformed_documents_raise_one_located_error(text, match):
    with pytest.raises(ManifestError, match=match) as e:
        load_string(text, "m.yml")
    assert e.value.file == "m.yml" and e.value.line >= 1


def test_keys_are_text_as_written_and_exponent_floats_are_numbers():
    assert load_string("on: 1\nno: 2\nlr: 1e-3\nx: 2E5\n").data == {"on": 1, "no": 2, "lr": 1e-3, "x": 2e5}


def test_overrides_change_variables_before_expansion_and_paths_after():
    text = "variables: {n: 4}\nmodel: {width: '${n}', depth: 2}\nxs: [{repeat: 2, template: {v: 0}}]\n"
    doc = load_string(text, overrides=["variables.n=16", "model.depth=3", "xs.1.v=9", "model.extra=[1, 2]"])
    assert doc.data["model"] == {"width": 16, "depth": 3, "extra": [1, 2]}
    assert doc.data["xs"] == [{"v": 0}, {"v": 9}]
    assert doc.loc(("model", "depth")).file == "--set"
    assert parse_override("trainer.lr=1e-3") == ("trainer.lr", 1e-3)
    with pytest.raises(ManifestError, match="PATH=VALUE"):
        parse_override("trainer.lr")
    with pytest.raises(ManifestError, match="not a mapping"):
        load_string(text, overrides={"model.width.x": 1})
