"""The asset search path: the ``assets`` setting, CARAMBA_ASSET_PATH and an ``assets/`` folder
beside a manifest add a user's own assets (every kind); clashes and hostile files are errors."""

import os
from pathlib import Path

import pytest

from caramba.manifest import ManifestError
from caramba.manifest.compile import check
from caramba.manifest.loader import load_string
from caramba.manifest.registry import BUILTIN, MAX_ASSET_BYTES, builtin_registry, registry, registry_for

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "own_block"

OPERATION = """\
kind: operation
op: my.double_relu
description: "relu, spelled by a user"
ir: activation.relu
inputs: [x]
outputs: [y]
"""
OPTIMIZER = """\
kind: optimizer
op: my.plain_sgd
description: "SGD without momentum"
ir: train.optimizer.sgd
config:
  - {name: weight_decay, type: float, default: 0.0, range: "[0, inf)"}
"""
BLOCK = """\
kind: block
op: my.res
description: "x + linear(relu(x))"
inputs: [x]
outputs: [y]
config:
  - {name: width, type: int}
topology:
  nodes:
    - {id: act, op: my.double_relu, in: [x]}
    - {id: fc, op: projection.linear, in: [act], config: {out_features: "${config.width}"}}
    - {id: add, op: math.add, in: [x, fc]}
  outputs: {y: add}
"""
MODEL = """\
kind: model
op: my.tiny_model
description: "one residual block, then a head"
inputs: [x]
outputs: [logits]
config:
  - {name: width, type: int}
  - {name: classes, type: int}
topology:
  nodes:
    - {id: res, op: my.res, in: [x], config: {width: "${config.width}"}}
    - {id: head, op: projection.linear, in: [res], config: {out_features: "${config.classes}"}}
  outputs: {logits: head}
"""
TEMPLATE = """\
kind: manifest
op: my.template
description: "a manifest template of my own"
manifest:
  topology:
    inputs: {x: {shape: [2, 3]}}
    nodes:
      - {id: m, op: my.double_relu, in: [x]}
"""
MANIFEST = """\
topology:
  inputs:
    x: {shape: [batch, 3]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: net, op: my.tiny_model, in: [x], config: {width: 3, classes: 2}}
    - {id: loss, op: loss.cross_entropy, in: [net, label]}
  outputs: {loss: loss}
datasets:
  d: {source: generated, kind: blobs, n: 64, features: 3, classes: 2, feed: {label: y}}
trainer: {optimizer: {op: my.plain_sgd, weight_decay: 0.001}, batch_size: 8, steps: 2}
"""


def _folder(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text) if isinstance(text, bytes) else p.write_text(text)
    return root


ALL_KINDS = {"operation/act.yml": OPERATION, "optimizer/sgd.yml": OPTIMIZER, "block/res.yml": BLOCK,
             "model/tiny.yml": MODEL, "manifest/t.yml": TEMPLATE}


@pytest.fixture(autouse=True)
def _clean_path(monkeypatch, tmp_path):
    monkeypatch.delenv("CARAMBA_ASSET_PATH", raising=False)
    monkeypatch.delenv("CARAMBA_ASSETS", raising=False)
    monkeypatch.chdir(tmp_path)  # no caramba.yml here


def test_the_example_finds_its_block_in_the_assets_folder_beside_it():
    prep, low = check(EXAMPLE / "manifest.yml")
    assert {n.op for n in prep.manifest.topology.nodes} >= {"my.residual_mlp"}
    assert sorted(low.params) == sorted(f"{n}.{p}" for n in ("embed", "head", "res0.fc1", "res0.fc2", "res0.norm",
                                                             "res1.fc1", "res1.fc2", "res1.norm") for p in ("weight", "bias"))
    assert low.param_count() == 8674
    a = registry().get("my.residual_mlp")
    assert a.kind == "block" and a.source == str(EXAMPLE / "assets") and a.file.endswith("block/residual_mlp.yml")
    assert "my.residual_mlp" not in builtin_registry()  # the packaged registry is untouched


@pytest.mark.slow  # a few seconds: it trains (5 steps) and evaluates
def test_the_example_trains(tmp_path):
    from caramba.manifest.experiment import run_experiment
    from caramba.store import RunStore

    res = run_experiment(EXAMPLE / "manifest.yml", ["trainer.steps=5"], store=RunStore(tmp_path / "store"))
    assert res.ok, [r.error for r in res.runs]
    assert "test.accuracy" in res.runs[0].summary


def test_every_kind_from_the_environment_path(tmp_path, monkeypatch):
    folder = _folder(tmp_path / "mine", ALL_KINDS)
    monkeypatch.setenv("CARAMBA_ASSET_PATH", os.pathsep.join([str(folder), str(tmp_path / "mine")]))
    reg = registry()
    for op, kind in (("my.double_relu", "operation"), ("my.plain_sgd", "optimizer"), ("my.res", "block"),
                     ("my.tiny_model", "model"), ("my.template", "manifest")):
        assert reg.get(op).kind == kind and reg.get(op).source == str(folder)
    assert reg.get("block.mlp").source == BUILTIN
    prep, low = check(load_string(MANIFEST, "m.yml"))
    assert prep.optimizer[0].op == "my.plain_sgd" and prep.optimizer[1] == {"weight_decay": 0.001}
    assert "net.res.fc.weight" in low.params
    from caramba.manifest.registry import template_text

    check(template_text(reg.get("my.template")))


def test_the_assets_setting_takes_folders_from_the_config_files_folder(tmp_path):
    _folder(tmp_path / "lib", {"block/res.yml": BLOCK, "operation/act.yml": OPERATION})
    (tmp_path / "caramba.yml").write_text("assets: [lib]\n")
    (tmp_path / "sub").mkdir()
    os.chdir(tmp_path / "sub")  # the folder is taken from caramba.yml's folder, not the working one
    os.rename(tmp_path / "caramba.yml", tmp_path / "sub" / "caramba.yml")
    (tmp_path / "sub" / "caramba.yml").write_text("assets: [../lib]\n")
    assert registry().get("my.res").source == str(tmp_path / "lib")
    from caramba.config import settings

    assert settings().sources["assets"].endswith("caramba.yml")


def test_asset_list_shows_where_each_asset_comes_from(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from caramba.cli import app

    folder = _folder(tmp_path / "mine", ALL_KINDS)
    monkeypatch.setenv("CARAMBA_ASSET_PATH", str(folder))
    monkeypatch.setenv("COLUMNS", "400")
    r = CliRunner().invoke(app, ["asset", "list", "block"])
    assert r.exit_code == 0, r.output
    rows = {ln.split("│")[1].strip(): ln.split("│")[3].strip() for ln in r.output.splitlines() if ln.count("│") > 3}
    assert rows["my.res"] == str(folder) and rows["block.mlp"] == "builtin"
    r = CliRunner().invoke(app, ["asset", "list", "block", "--manifest", str(EXAMPLE / "manifest.yml")])
    assert r.exit_code == 0, r.output
    rows = {ln.split("│")[1].strip(): ln.split("│")[3].strip() for ln in r.output.splitlines() if ln.count("│") > 3}
    assert rows["my.residual_mlp"] == str(EXAMPLE / "assets") and rows["my.res"] == str(folder)
    r = CliRunner().invoke(app, ["asset", "show", "my.residual_mlp", "--manifest", str(EXAMPLE / "manifest.yml")])
    assert r.exit_code == 0 and "6 parameters (1,104 values)" in r.output, r.output


def test_a_clash_with_a_builtin_names_both_files(tmp_path):
    folder = _folder(tmp_path / "mine", {"block/mlp.yml": BLOCK.replace("my.res", "block.mlp"),
                                         "operation/act.yml": OPERATION})
    with pytest.raises(ManifestError, match=r"asset 'block.mlp' in .*mine/block/mlp.yml has the same ID as the "
                       r"builtin asset in caramba/assets/block/mlp.yml") as e:
        registry_for([folder])
    assert e.value.line == 2 and e.value.file.endswith("mine/block/mlp.yml")


def test_a_clash_between_two_folders_names_both_files(tmp_path, monkeypatch):
    a = _folder(tmp_path / "a", {"operation/act.yml": OPERATION})
    b = _folder(tmp_path / "b", {"operation/other.yml": OPERATION})
    monkeypatch.setenv("CARAMBA_ASSET_PATH", os.pathsep.join([str(a), str(b)]))
    with pytest.raises(ManifestError, match=r"'my.double_relu' in .*b/operation/other.yml has the same ID as the "
                       r"asset in .*a/operation/act.yml"):
        registry()
    c = _folder(tmp_path / "c", {"operation/x.yml": OPERATION, "operation/y.yml": OPERATION})
    with pytest.raises(ManifestError, match=r"c/operation/y.yml has the same ID as the asset in .*c/operation/x.yml"):
        registry_for([c])


@pytest.mark.parametrize("files, message, line", [
    ({"block/bad.yml": "kind: block\nop: my.x\n  description: [\n"}, "invalid YAML", 3),
    ({"block/bad.yml": BLOCK.replace("kind: block", "kind: model")}, "of kind model lives under block/", 1),
    ({"blocks/res.yml": BLOCK}, r"is in blocks/; .* \(did you mean 'block'\?\)", 1),
    ({"res.yml": BLOCK}, "is in the top of its asset folder", 1),
    ({"block/bad.yml": BLOCK.replace("kind: block", "kind: gadget")}, "asset kind must be one of", 1),
    ({"block/bad.yml": BLOCK + "extra_key: 1\n"}, "unknown asset key 'extra_key'", 14),
    ({"block/bad.yml": b"kind: block\nop: my.\xff\n"}, "is not UTF-8 text", 1),
    ({"block/big.yml": "# " + "x" * MAX_ASSET_BYTES + "\n"}, "bytes; the limit is", 1),
    ({"block/bad.yml": "- just\n- a list\n"}, "an asset file is a mapping", 1),
])
def test_hostile_asset_files_are_clear_errors_with_file_and_line(tmp_path, files, message, line):
    folder = _folder(tmp_path / "mine", files)
    with pytest.raises(ManifestError, match=message) as e:
        registry_for([folder])
    assert e.value.file is not None and str(folder) in str(Path(e.value.file).resolve()), str(e.value)
    assert e.value.line == line, str(e.value)


def test_symlinks_that_leave_the_folder_or_loop_are_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("kind: block\nop: the.secret\ndescription: do not show me\n")
    folder = _folder(tmp_path / "mine", {"operation/act.yml": OPERATION})
    (folder / "block").mkdir()
    (folder / "block" / "leak.yml").symlink_to(secret)
    with pytest.raises(ManifestError, match="leads outside its asset folder") as e:
        registry_for([folder])
    assert "do not show me" not in str(e.value)
    (folder / "block" / "leak.yml").unlink()
    (folder / "block" / "up").symlink_to(folder)
    with pytest.raises(ManifestError, match="symlink loop"):
        registry_for([folder])
    (folder / "block" / "up").unlink()
    (folder / "block" / "self.yml").symlink_to(folder / "block" / "self.yml")
    with pytest.raises(ManifestError, match="broken symlink or a symlink loop"):
        registry_for([folder])
    (folder / "block" / "self.yml").unlink()
    (folder / "operation" / "ok.yml").symlink_to(folder / "operation" / "act.yml")  # inside: read, a duplicate ID
    with pytest.raises(ManifestError, match="same ID"):
        registry_for([folder])
    (folder / "operation" / "ok.yml").unlink()
    os.mkfifo(folder / "block" / "pipe.yml")  # reading it would block for ever
    with pytest.raises(ManifestError, match="pipe.yml is not a regular file"):
        registry_for([folder])


def test_a_missing_folder_on_the_path_says_where_it_was_named(tmp_path, monkeypatch):
    monkeypatch.setenv("CARAMBA_ASSET_PATH", str(tmp_path / "nope"))
    with pytest.raises(ManifestError, match=r"asset folder .*nope \(from CARAMBA_ASSET_PATH\) does not exist"):
        registry()


def test_an_edited_asset_is_read_again(tmp_path):
    folder = _folder(tmp_path / "mine", {"operation/act.yml": OPERATION})
    assert registry_for([folder]).get("my.double_relu").description == "relu, spelled by a user"
    p = folder / "operation" / "act.yml"
    p.write_text(OPERATION.replace("spelled by a user", "edited!"))
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    assert registry_for([folder]).get("my.double_relu").description == "relu, edited!"


def test_a_manifest_without_an_assets_folder_does_not_see_anothers(tmp_path):
    _folder(tmp_path / "one", {"assets/operation/act.yml": OPERATION,
                               "m.yml": "topology:\n  inputs: {x: {shape: [2]}}\n  nodes:\n    - {id: a, op: my.double_relu, in: [x]}\n"})
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "m.yml").write_text((tmp_path / "one" / "m.yml").read_text())
    check(tmp_path / "one" / "m.yml")
    with pytest.raises(ManifestError, match="unknown op 'my.double_relu'"):
        check(tmp_path / "two" / "m.yml")


def test_under_data_roots_an_assets_folder_outside_them_is_refused(tmp_path):
    """A server checks a submission inside its data roots: an assets/ link out of them is refused."""
    from caramba.data.sources import data_roots

    outside = _folder(tmp_path / "elsewhere", {"operation/act.yml": OPERATION})
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "assets").symlink_to(outside)
    (sub / "m.yml").write_text("topology:\n  inputs: {x: {shape: [2]}}\n  nodes:\n    - {id: a, op: my.double_relu, in: [x]}\n")
    check(sub / "m.yml")  # on the command line the user's own link is fine
    with data_roots([sub]), pytest.raises(ManifestError, match="assets/ folder is outside the folders this server reads"):
        check(sub / "m.yml")


def test_a_submitted_manifest_cannot_reach_files_through_the_asset_path(tmp_path):
    """Over HTTP a manifest is staged alone in its own folder: no assets/ beside it, and its name
    cannot hold a folder, so a request adds no asset folder and reads no asset file."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from caramba.api import create_app
    from caramba.config import Settings

    app = create_app(Settings(store=str(tmp_path / "store"), api_token="t"), hosts=("testserver",))
    text = "topology:\n  inputs: {x: {shape: [2]}}\n  nodes:\n    - {id: a, op: my.double_relu, in: [x]}\n"
    _folder(tmp_path / "store" / "submissions", {"assets/operation/act.yml": OPERATION})  # a planted folder
    with TestClient(app, headers={"Authorization": "Bearer t"}) as client:
        r = client.post("/api/v1/manifests/validate", json={"manifest": text})
        assert r.status_code == 422 and "unknown op 'my.double_relu'" in r.json()["errors"][0]["message"]
        r = client.post("/api/v1/manifests/validate", json={"manifest": text, "name": "assets/../m.yml"})
        assert r.status_code == 422 and r.json()["type"] == "RequestValidationError"


def test_an_unknown_caramba_environment_variable_is_reported_with_a_suggestion(monkeypatch, capsys):
    from caramba import config

    monkeypatch.setenv("CARAMBA_BAKEND", "cpu")
    monkeypatch.setattr(config, "_WARNED", set())
    config.load_settings()
    config.load_settings()
    err = capsys.readouterr().err
    assert err.count("CARAMBA_BAKEND") == 1 and "did you mean 'CARAMBA_BACKEND'" in err
    monkeypatch.delenv("CARAMBA_BAKEND")
    monkeypatch.setenv("CARAMBA_ASSET_PATH", "")
    config.load_settings()
    assert capsys.readouterr().err == ""


def test_a_manifest_given_as_text_uses_the_assets_folder_of_its_root_only(tmp_path):
    _folder(tmp_path, {"assets/operation/act.yml": OPERATION})
    text = "topology:\n  inputs: {x: {shape: [2]}}\n  nodes:\n    - {id: a, op: my.double_relu, in: [x]}\n"
    assert load_string(text).assets == ""  # the working folder (tmp_path here) is not the manifest's
    with pytest.raises(ManifestError, match="unknown op 'my.double_relu'"):
        check(load_string(text))
    doc = load_string(text, root=tmp_path)
    assert doc.assets == str(tmp_path / "assets")
    check(doc)


def test_an_alias_bomb_in_an_asset_is_refused_quickly(tmp_path):
    body = "kind: operation\nop: my.bomb\ndescription: boom\nir: activation.relu\ninputs: [x]\nexample:\n"
    body += "  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    body += "".join(f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 9))
    folder = _folder(tmp_path / "mine", {"operation/bomb.yml": body})  # 10**9 values written out
    with pytest.raises(ManifestError, match="expands to more than 65536 values") as e:
        registry_for([folder])
    assert e.value.file.endswith("operation/bomb.yml") and 7 <= e.value.line <= 15


def test_a_user_blocks_include_resolves_in_its_own_folder(tmp_path, monkeypatch):
    """``topology: !include fragment.x`` in a user's block reads <its folder>/fragment/x.yml (it
    used to look in the packaged assets)."""
    fragment = "nodes:\n  - {id: fc, op: projection.linear, in: [x], config: {out_features: \"${config.width}\"}}\n" \
               "outputs: {y: fc}\n"
    block = BLOCK.split("topology:")[0] + "topology: !include fragment.my_fc\n"
    folder = _folder(tmp_path / "mine", {"operation/act.yml": OPERATION, "block/res.yml": block,
                                         "fragment/my_fc.yml": fragment})
    monkeypatch.setenv("CARAMBA_ASSET_PATH", str(folder))
    text = MANIFEST.replace("op: my.tiny_model", "op: my.res").replace("config: {width: 3, classes: 2}", "config: {width: 2}")
    text = text.replace("trainer: {optimizer: {op: my.plain_sgd, weight_decay: 0.001}, batch_size: 8, steps: 2}",
                        "trainer: {batch_size: 8, steps: 2}")
    _, low = check(load_string(text, "m.yml"))
    assert "net.fc.weight" in low.params
