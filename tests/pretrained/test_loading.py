"""Loading Hugging Face-format checkpoints: the from_safetensors section, the architecture
registry's bindings, dtype rules, shards, and every malformed checkpoint refused clearly.

These tests use a toy architecture entry over caramba's own model.gpt and checkpoints written
with NumPy, so they need neither transformers nor torch (tests/pretrained/test_*coders.py
compare real architectures with transformers)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import caramba.pretrained as pt
from caramba.errors import CarambaError
from caramba.manifest.compile import check, prepare
from caramba.manifest.errors import ManifestError
from caramba.manifest.registry import load_asset, registry
from caramba.train import safetensors as st

pytest.importorskip("safetensors")

ARCH = """\
kind: architecture
op: architecture.toy_gpt
description: "test entry: caramba's model.gpt under made-up checkpoint names"
architectures: [ToyGPTModel]
model: model.gpt
inputs:
  tokens: {shape: [batch, seq], dtype: int64}
variables:
  vocab_size: {config: vocab_size}
  context: {config: [max_positions, n_positions]}
  d_model: {config: n_embd}
  layers: {config: n_layer}
  heads: {config: n_head, default: {quotient: [{config: n_embd}, 8]}}
tensors:
  tok_emb.weight: wte
  pos_emb.weight: wpe
  "h_{n}.ln1.weight": "h.{n}.ln1.w"
  "h_{n}.ln1.bias": "h.{n}.ln1.b"
  "h_{n}.attn.qkv.weight": "h.{n}.qkv.w"
  "h_{n}.attn.qkv.bias": "h.{n}.qkv.b"
  "h_{n}.attn.out.weight": {tensor: "h.{n}.out.w", transpose: true}
  "h_{n}.attn.out.bias": "h.{n}.out.b"
  "h_{n}.ln2.weight": "h.{n}.ln2.w"
  "h_{n}.ln2.bias": "h.{n}.ln2.b"
  "h_{n}.mlp.fc1.weight": {tensor: "h.{n}.fc.w", slice_axis: 1, slice_start: 0}
  "h_{n}.mlp.fc1.bias": "h.{n}.fc1.b"
  "h_{n}.mlp.fc2.weight": {tensor: "h.{n}.fc.w", transpose: true, slice_axis: 1, slice_start: 128}
  "h_{n}.mlp.fc2.bias": "h.{n}.fc2.b"
  ln_f.weight: lnf.w
  ln_f.bias: lnf.b
ignore: ["*.inv_freq"]
"""
V, P, D, L, H = 64, 16, 32, 2, 4


@pytest.fixture
def toy_arch(tmp_path):
    path = tmp_path / "toy_gpt.yml"
    path.write_text(ARCH)
    asset = load_asset(path, "toy_gpt.yml")
    reg = registry()
    reg.assets[asset.op] = asset
    yield asset
    del reg.assets[asset.op]


def toy_tensors(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = {"wte": rng.normal(size=(V, D)), "wpe": rng.normal(size=(P, D)), "lnf.w": rng.normal(size=D),
         "lnf.b": rng.normal(size=D), "rotary.inv_freq": np.ones(4)}
    shapes = {"ln1.w": (D,), "ln1.b": (D,), "qkv.w": (D, 3 * D), "qkv.b": (3 * D,), "out.w": (D, D), "out.b": (D,),
              "ln2.w": (D,), "ln2.b": (D,), "fc.w": (D, 8 * D), "fc1.b": (4 * D,), "fc2.b": (D,)}
    for n in range(L):
        for k, shape in shapes.items():
            t[f"h.{n}.{k}"] = rng.normal(size=shape) * 0.1
    return t


def write(directory: Path, tensors: dict, dtype=np.float32, config: dict | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    st.save(directory / "model.safetensors", {k: v.astype(dtype) for k, v in tensors.items()})
    cfg = {"architectures": ["ToyGPTModel"], "vocab_size": V, "n_positions": P, "n_embd": D, "n_layer": L, "n_head": H}
    (directory / "config.json").write_text(json.dumps(config if config is not None else cfg))
    return directory


def test_variables_bindings_and_values(tmp_path, toy_arch):
    t = toy_tensors()
    m = pt.open(write(tmp_path / "ck", t), dtype="float64")
    assert m.architecture.op == "architecture.toy_gpt"
    assert m.variables == {"vocab_size": V, "context": P, "d_model": D, "layers": L, "heads": H}
    low = m.lower({"batch": 1, "seq": 4})
    values = m.read(low.params)
    assert set(values) == set(low.params)
    up = {k: v.astype(np.float32).astype(np.float64) for k, v in t.items()}  # stored float32, read as float64: exact
    np.testing.assert_array_equal(values["model.h_1.attn.out.weight"], up["h.1.out.w"].T)
    np.testing.assert_array_equal(values["model.h_0.mlp.fc1.weight"], up["h.0.fc.w"][:, : 4 * D])
    np.testing.assert_array_equal(values["model.h_0.mlp.fc2.weight"], up["h.0.fc.w"][:, 4 * D:].T)
    assert all(v.dtype == np.float64 and v.flags.c_contiguous for v in values.values())


def test_forward_cpu_matches_xla_and_float32(tmp_path, toy_arch):
    d = write(tmp_path / "ck", toy_tensors())
    ids = np.random.default_rng(1).integers(0, V, size=(2, 8))
    out = pt.open(d).forward({"tokens": ids})["logits"]
    assert out.shape == (2, 8, V) and out.dtype == np.float64
    pytest.importorskip("jax")
    xla = pt.open(d).forward({"tokens": ids}, backend="xla")["logits"]
    assert np.max(np.abs(xla - out)) <= 1e-12 * np.max(np.abs(out))
    f32 = pt.open(d, dtype="float32").forward({"tokens": ids})["logits"]
    assert f32.dtype == np.float32 and np.max(np.abs(f32 - out)) <= 1e-5 * np.max(np.abs(out))


def test_bfloat16_upcasts_exactly(tmp_path, toy_arch):
    t = toy_tensors()
    d = write(tmp_path / "ck", t, dtype=ml_dtypes.bfloat16)
    m = pt.open(d, dtype="float64")
    values = m.read(m.lower({"batch": 1, "seq": 4}).params)
    want = t["wte"].astype(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_array_equal(values["model.tok_emb.weight"], want)


def test_narrowing_needs_the_opt_in(tmp_path, toy_arch):
    d = write(tmp_path / "ck", toy_tensors(), dtype=np.float64)
    m = pt.open(d, dtype="float32")  # headers only: the cast is checked when the model is bound
    with pytest.raises(ManifestError, match=r"stored as float64; reading it as float32 would round it") as exc:
        m.lower({"batch": 1, "seq": 4}) and m.bindings(m.lower({"batch": 1, "seq": 4}).params)
    assert "allow_narrowing" in (exc.value.hint or "")
    m = pt.open(d, dtype="float32", allow_narrowing=True)
    vals = m.read(m.lower({"batch": 1, "seq": 4}).params)
    assert vals["model.tok_emb.weight"].dtype == np.float32


def manifest(tmp_path: Path, section: str, extra: str = "") -> Path:
    p = tmp_path / "m.yml"
    p.write_text(f"name: ft\ntopology:\n  from_safetensors: {section}\n{extra or '  dims: {batch: 1, seq: 8}'}\n")
    return p


def test_manifest_with_a_loss_node(tmp_path, toy_arch):
    write(tmp_path / "ck", toy_tensors())
    extra = ("  inputs: {y: {shape: [batch, seq], dtype: int64}}\n"
             "  dims: {batch: 2, seq: 8}\n"
             "  nodes: [{id: loss, op: loss.cross_entropy, in: [llm, y]}]\n"
             "  outputs: {logits: llm, loss: loss}\n")
    prep, low = check(manifest(tmp_path, "{source: ck, id: llm}", extra))
    assert set(low.graph.outputs) == {"logits", "loss"}
    assert "llm.h_0.attn.qkv.weight" in low.params and set(prep.manifest.topology.inputs) == {"tokens", "y"}


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda t: t.pop("h.1.ln2.b"), r"no tensor 'h\.1\.ln2\.b' for parameter 'model\.h_1\.ln2\.bias'"),
    (lambda t: t.__setitem__("wpe", np.zeros((P + 1, D))), r"tensor 'wpe' .*has shape \[17, 32\]; the parameter needs \[16, 32\]"),
    (lambda t: t.__setitem__("h.0.fc.w", np.zeros((D, 7 * D))), r"has shape \[32, 224\]; the slice from 128 along axis 1 for shape \[32, 128\] does not fit"),
    (lambda t: t.__setitem__("h.2.ln1.w", np.zeros(D)), r"tensor 'h\.2\.ln1\.w' is read by no parameter"),
])
def test_a_checkpoint_that_does_not_fit_is_named(tmp_path, toy_arch, mutate, message):
    t = toy_tensors()
    mutate(t)
    write(tmp_path / "ck", t)
    path = manifest(tmp_path, "{source: ck}")
    with pytest.raises(ManifestError, match=message) as exc:
        check(path)
    assert exc.value.loc.file.endswith("m.yml") and exc.value.loc.line == 3  # the from_safetensors line


def test_unknown_architecture_and_missing_config(tmp_path, toy_arch):
    d = write(tmp_path / "ck", toy_tensors(), config={"architectures": ["NoSuchModel"]})
    with pytest.raises(ManifestError, match=r"unknown architecture 'NoSuchModel'.*caramba asset list architecture"):
        prepare(manifest(tmp_path, "{source: ck}"))
    with pytest.raises(ManifestError, match=r"unknown architecture 'toy_gtp'; did you mean 'toy_gpt'"):
        prepare(manifest(tmp_path, "{source: ck, architecture: toy_gtp}"))
    (d / "config.json").unlink()
    with pytest.raises(ManifestError, match=r"names no architecture"):
        prepare(manifest(tmp_path, "{source: ck}"))
    with pytest.raises(ManifestError, match=r"has no config\.json"):
        prepare(manifest(tmp_path, "{source: ck, architecture: toy_gpt}"))
    (d / "config.json").write_text(json.dumps({"architectures": ["ToyGPTModel"], "vocab_size": V}))
    with pytest.raises(ManifestError, match=r"config\.json has no 'max_positions' or 'n_positions'") as exc:
        prepare(manifest(tmp_path, "{source: ck}"))
    assert "toy_gpt.yml" in str(exc.value)  # the entry's line, for the checkpoint of the manifest's section


def raw_file(path: Path, header: bytes, body: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(header)) + header + body)
    return path


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p.write_bytes(b"abc"), r"too short to be a safetensors file"),
    (lambda p: raw_file(p, b"{not json}"), r"header is not JSON"),
    (lambda p: raw_file(p, b"[1, 2]"), r"header is not a JSON object"),
    (lambda p: p.write_bytes(struct.pack("<Q", 10**9) + b"{}"), r"truncated or not a safetensors file"),
    (lambda p: raw_file(p, json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode(), b"\0" * 8),
     r"tensor 'a' lies at bytes 0\.\.16 but the data section has 8; the file is truncated"),
    (lambda p: raw_file(p, json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}).encode(), b"\0" * 16),
     r"has 12 bytes for F32\[4\], which needs 16"),
    (lambda p: raw_file(p, json.dumps({"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}).encode(), b"\0"),
     r"dtype 'Q7', which is not a safetensors dtype"),
    (lambda p: raw_file(p, json.dumps({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}).encode()),
     r"bad shape \[-1\]"),
    (lambda p: raw_file(p, json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode(), b"\0" * 12),
     r"overlap"),
])
def test_malformed_files_are_refused_before_reading(tmp_path, toy_arch, make, message):
    (tmp_path / "ck").mkdir()
    make(tmp_path / "ck" / "model.safetensors")
    (tmp_path / "ck" / "config.json").write_text(json.dumps({"architectures": ["ToyGPTModel"]}))
    with pytest.raises(ManifestError, match=message):
        prepare(manifest(tmp_path, "{source: ck}"))


def test_a_truncated_real_checkpoint(tmp_path, toy_arch):
    d = write(tmp_path / "ck", toy_tensors())
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(ManifestError, match=r"the file is truncated"):
        prepare(manifest(tmp_path, "{source: ck}"))


def shard(directory: Path, tensors: dict, parts: int = 2) -> dict[str, str]:
    names = sorted(tensors)
    weight_map = {}
    for i in range(parts):
        fname = f"model-{i + 1:05d}-of-{parts:05d}.safetensors"
        chunk = {n: tensors[n].astype(np.float32) for n in names[i::parts]}
        st.save(directory / fname, chunk)
        weight_map.update({n: fname for n in chunk})
    return weight_map


def test_sharded_checkpoints(tmp_path, toy_arch):
    t = toy_tensors()
    d = write(tmp_path / "single", t)
    sh = tmp_path / "sharded"
    sh.mkdir()
    weight_map = shard(sh, t)
    (sh / "config.json").write_text((d / "config.json").read_text())
    (sh / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    ids = np.arange(8).reshape(1, 8)
    a = pt.open(d).forward({"tokens": ids})["logits"]
    b = pt.open(sh).forward({"tokens": ids})["logits"]
    np.testing.assert_array_equal(a, b)
    assert len(pt.open(sh).checkpoint.files) == 2

    def index(wm):
        (sh / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))

    index({**weight_map, "wte": "../single/model.safetensors"})
    with pytest.raises(ManifestError, match=r"shard '\.\./single/model\.safetensors' is not a file name"):
        pt.open(sh)
    index({**weight_map, "wte": "model-00009-of-00009.safetensors"})
    with pytest.raises(ManifestError, match=r"shard model-00009-of-00009\.safetensors is missing"):
        pt.open(sh)
    wm = dict(weight_map)
    other = next(f for f in set(wm.values()) if f != wm["wte"])
    wm["wte"] = other
    index(wm)
    with pytest.raises(ManifestError, match=r"puts tensor 'wte' in .*, but it is in"):
        pt.open(sh)
    index({k: v for k, v in weight_map.items() if k != "wpe"})
    with pytest.raises(ManifestError, match=r"tensor 'wpe' .* is not in the weight_map"):
        pt.open(sh)
    index({})
    with pytest.raises(ManifestError, match=r"has no weight_map"):
        pt.open(sh)


def test_source_outside_the_data_roots_is_refused(tmp_path, toy_arch):
    from caramba.data.sources import data_roots

    write(tmp_path / "ck", toy_tensors())
    inside = tmp_path / "inside"
    inside.mkdir()
    p = manifest(inside, f"{{source: {tmp_path / 'ck'}}}")
    with data_roots([inside]), pytest.raises(ManifestError, match=r"outside the folders this server reads data from"):
        prepare(p)


def test_header_mutations_never_escape_as_other_errors(tmp_path, toy_arch):
    """A mutation fuzzer over a real checkpoint's first bytes: every outcome is a clean load or
    one CarambaError, never another exception or a hang."""
    d = write(tmp_path / "ck", toy_tensors())
    good = (d / "model.safetensors").read_bytes()
    rng = np.random.default_rng(7)
    (n,) = struct.unpack("<Q", good[:8])
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(150):
        data = bytearray(good)
        for _ in range(int(rng.integers(1, 4))):
            data[int(rng.integers(0, 8 + n))] = int(rng.integers(0, 256))
        if rng.random() < 0.2:
            data = data[: int(rng.integers(0, len(data)))]
        (d / "model.safetensors").write_bytes(bytes(data))
        try:
            m = pt.open(d)
            m.read(m.lower({"batch": 1, "seq": 2}).params)
            outcomes["ok"] += 1
        except CarambaError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == 150


def test_export_round_trips_through_the_bindings(tmp_path, toy_arch):
    from caramba.pretrained.export import export_hf

    t = toy_tensors()
    d = write(tmp_path / "ck", t)
    (d / "tokenizer.json").write_text("{}")
    m = pt.open(d, dtype="float64")
    low = m.lower({"batch": 1, "seq": 4})
    params = m.read(low.params)
    params = {k: v + 0.25 for k, v in params.items()}  # "trained"
    out = export_hf(m.prep, params, tmp_path / "out")
    assert (out / "tokenizer.json").is_file() and json.loads((out / "config.json").read_text())["torch_dtype"] == "float64"
    back = pt.open(out, dtype="float64")
    again = back.read(back.lower({"batch": 1, "seq": 4}).params)
    assert set(again) == set(params)
    for k in params:
        np.testing.assert_array_equal(again[k], params[k])
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "np") as f:
        assert f.metadata()["format"] == "pt" and "rotary.inv_freq" in f.keys()
        np.testing.assert_array_equal(f.get_tensor("rotary.inv_freq"), np.ones(4, np.float32))
    with pytest.raises(CarambaError, match="exists and is not an empty folder"):
        export_hf(m.prep, params, out)


FINETUNE = """\
name: toy-ft
topology:
  from_safetensors: {{source: ck, id: llm}}
  inputs: {{y: {{shape: [batch, seq], dtype: int64}}}}
  nodes: [{{id: loss, op: loss.cross_entropy, in: [llm, y]}}]
  outputs: {{logits: llm, loss: loss}}
model: {{lora: {{rank: 2, targets: ["llm.h_*.attn.qkv"]}}}}
datasets:
  text: {{source: text, path: {text}, context: 16, vocab_size: 64, feed: {{tokens: x, y: y}}, max_chars: 2000}}
trainer: {{loss: loss, optimizer: {{op: optimizer.adamw}}, lr: 1.0e-2, batch_size: 4, steps: 3}}
targets: [{{name: cpu, backend: cpu, runs: [{{id: s0, seed: 0}}]}}]
"""


def test_a_run_records_the_weights_it_starts_from(tmp_path, toy_arch):
    from caramba.errors import ConfigError
    from caramba.run.driver import ManifestRun, plan_from_spec
    from caramba.run.engine import plan_runs, run_spec

    text = tmp_path / "t.txt"
    text.write_text("".join(chr(48 + i % 40) for i in range(3000)))
    write(tmp_path / "ck", toy_tensors())
    (tmp_path / "ft.yml").write_text(FINETUNE.format(text=text))
    (plan,) = plan_runs(tmp_path / "ft.yml")
    spec = run_spec(plan, "r1", None)
    assert set(spec.config["weights_sha256"]) == {"model.safetensors", "config.json"}
    ManifestRun._check_weights(spec, plan_from_spec(spec).prep)  # unchanged: fine
    write(tmp_path / "ck", toy_tensors(seed=1))  # someone replaced the weights
    with pytest.raises(ConfigError, match=r"checkpoint file model\.safetensors changed since the run was recorded"):
        ManifestRun._check_weights(spec, plan_from_spec(spec).prep)


EXPRESSIONS = """\
kind: architecture
op: architecture.exprs
description: every expression form
architectures: [Exprs]
model: model.gpt
inputs: {tokens: {shape: [batch, seq], dtype: int64}}
variables:
  literal: 3
  first_present: {config: [missing, rope.theta], default: 1.0}
  default_used: {config: nope, default: {product: [2, {config: a}]}}
  null_is_absent: {config: nulled, default: 7}
  null_means_none: {config: nulled, default: 50.0, if_null: null}
  absent_default: {config: absent_cap, default: 50.0, if_null: null}
  total: {sum: [1, {config: a}, 0.5]}
  ratio: {quotient: [{config: a}, 3]}
  negated: {not: {config: flag}}
  same: {equals: [{config: a}, 6]}
  chosen: {select: [{config: flag}, {config: a}, {config: never_read}]}
  act: {lookup: [{config: act}, {gelu_new: activation.gelu_tanh, silu: activation.silu}]}
  act_default: {lookup: [{config: other_act}, {silu: activation.silu}], default: activation.relu}
tensors: {}
"""


@pytest.mark.parametrize(("change", "message"), [
    ({"a": 7}, r"7 is not an exact multiple of 3"),
    ({"act": "quick_gelu"}, r"'quick_gelu' is not supported here; supported: gelu_new, silu"),
    ({"a": "six"}, r"product needs numbers, got 'six'"),
])
def test_the_variables_language(tmp_path, change, message):
    from caramba.manifest.pretrained import compute_variables

    path = tmp_path / "exprs.yml"
    path.write_text(EXPRESSIONS)
    arch = load_asset(path, "exprs.yml")
    config = {"a": 6, "rope": {"theta": 500000.0}, "nulled": None, "flag": True, "act": "gelu_new", "other_act": "x"}
    v = compute_variables(arch, config)
    assert v == {"literal": 3, "first_present": 500000.0, "default_used": 12, "null_is_absent": 7,
                 "null_means_none": None, "absent_default": 50.0, "total": 7.5, "ratio": 2, "negated": False,
                 "same": True, "chosen": 6, "act": "activation.gelu_tanh", "act_default": "activation.relu"}
    with pytest.raises(ManifestError, match=message) as exc:
        compute_variables(arch, {**config, **change})
    assert "exprs.yml" in str(exc.value)


def test_model_inspect_cli(tmp_path, toy_arch):
    from typer.testing import CliRunner

    from caramba.cli import app

    t = toy_tensors()
    write(tmp_path / "ok", t)
    r = CliRunner().invoke(app, ["model", "inspect", str(tmp_path / "ok")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "maps through architecture.toy_gpt onto model.gpt" in r.output and "loads" in r.output
    assert "ignored (buffers, not parameters): rotary.inv_freq" in r.output
    t["h.9.extra"] = np.zeros(3)
    t.pop("lnf.b")
    write(tmp_path / "bad", t)
    r = CliRunner().invoke(app, ["model", "inspect", str(tmp_path / "bad")], env={"COLUMNS": "200"})
    assert r.exit_code == 1
    assert "unmapped tensor h.9.extra" in r.output and "no tensor 'lnf.b' for parameter 'model.ln_f.bias'" in r.output
    assert "does not load as it is" in r.output
