"""Hostile safetensors headers, config.json and tokenizer files: every one is a CarambaError that
names the file (and the tensor or field), never a traceback; chat templates run sandboxed and
bounded."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from caramba.compute.safetensors import CheckpointError, dumps, loads
from caramba.errors import CarambaError
from caramba.pretrained.checkpoint import CheckpointFormatError, HFCheckpoint


def _st(header: object = None, body: bytes = b"", raw: bytes | None = None) -> bytes:
    h = raw if raw is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + body


def _t(dtype: str, shape: object, offsets: object) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": offsets}


HOSTILE = [
    ("not_an_object", _st([1, 2]), "not an object|not a JSON object"),
    ("negative_dims", _st({"a": _t("F32", [-1, -1], [0, 4])}, b"\0" * 4), "'a'"),
    ("product_wraps_int64", _st({"a": _t("F32", [2**62, 4, 0], [0, 0])}), "'a'"),
    ("product_overflows", _st({"a": _t("F32", [2**32, 2**32], [0, 0])}), "'a'"),
    ("huge_dim", _st({"a": _t("F32", [10**30], [0, 0])}), "'a'"),
    ("shape_is_a_string", _st({"a": _t("U8", "12", [0, 2])}, b"\0" * 2), "'a'"),
    ("float_dim", _st({"a": _t("U8", [2.5], [0, 2])}, b"\0" * 2), "'a'"),
    ("bool_offsets", _st({"a": _t("U8", [1], [False, True])}, b"\0"), "'a'"),
    ("duplicate_name", _st(raw=b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                              b'"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', body=b"\0" * 4), "'a' twice"),
    ("overlapping", _st({"a": _t("F32", [2], [0, 8]), "b": _t("F32", [2], [4, 12])}, b"\0" * 12), "overlap"),
    ("out_of_range", _st({"a": _t("F32", [4], [0, 16])}, b"\0" * 8), "'a'"),
    ("dtype_mismatch", _st({"a": _t("F64", [2], [0, 8])}, b"\0" * 8), "'a'"),
    ("dtype_is_a_list", _st({"a": _t(["F32"], [1], [0, 4])}, b"\0" * 4), "'a'"),
    ("unknown_dtype", _st({"a": _t("F99", [1], [0, 4])}, b"\0" * 4), "'a'"),
    ("entry_not_a_dict", _st({"a": "x"}), "'a'"),
    ("deep_json", _st(raw=b"[" * 100000 + b"]" * 100000), "JSON"),
    ("header_longer_than_file", struct.pack("<Q", 2**63) + b"{}", "header"),
    ("not_utf8", _st(raw=b'{"\xff":1}'), "JSON"),
    ("too_short", b"\x01\x02", "short"),
]


@pytest.mark.parametrize("name,data,fragment", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_header_is_refused_by_both_readers(tmp_path, name, data, fragment):
    import re

    with pytest.raises(CheckpointError) as a:
        loads(data, f"{name}.safetensors")
    assert f"{name}.safetensors" in str(a.value) and re.search(fragment, str(a.value))
    p = tmp_path / f"{name}.safetensors"
    p.write_bytes(data)
    with pytest.raises(CheckpointFormatError) as b:
        HFCheckpoint.open(p)
    assert p.name in str(b.value)


def test_bad_metadata_is_refused_and_a_good_file_round_trips():
    with pytest.raises(CheckpointError, match="__metadata__"):
        loads(_st({"__metadata__": [1], "a": _t("F32", [1], [0, 4])}, b"\0" * 4))
    x = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "e": np.zeros((0, 5), np.int64)}
    out, meta = loads(dumps(x, {"format": "np"}))
    assert meta == {"format": "np"} and np.array_equal(out["w"], x["w"]) and out["e"].shape == (0, 5)


@pytest.fixture
def ckpt_dir(tmp_path) -> Path:
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    d = tmp_path / "ck"
    d.mkdir()
    save_file({"a": np.zeros(2, np.float32)}, str(d / "model.safetensors"))
    return d


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000, "[1]", "\udcff"])
def test_a_hostile_config_json_names_the_file(ckpt_dir, text):
    (ckpt_dir / "config.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(CheckpointFormatError, match="config.json"):
        HFCheckpoint.open(ckpt_dir)


@pytest.mark.parametrize("shard", ["../other/model.safetensors", "/etc/passwd", ["x"], "m.safetensors\x00", ".."])
def test_an_index_cannot_name_a_shard_outside_its_folder(ckpt_dir, shard):
    (ckpt_dir / "model.safetensors").rename(ckpt_dir / "m.safetensors")
    (ckpt_dir / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": shard}}))
    with pytest.raises(CheckpointFormatError, match="model.safetensors.index.json"):
        HFCheckpoint.open(ckpt_dir)


# ---- tokenizers and chat templates --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory) -> Path:
    pytest.importorskip("tokenizers")
    pytest.importorskip("jinja2")
    from caramba.text import train_bpe

    d = tmp_path_factory.mktemp("attack_tok")
    train_bpe(["hello world"] * 5, vocab_size=270).save(d / "tokenizer.json")
    return d


def _with_config(tok_dir: Path, tmp_path: Path, config: object) -> Path:
    import shutil

    d = tmp_path / "tok"
    shutil.copytree(tok_dir, d)
    (d / "tokenizer_config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return d


@pytest.mark.parametrize("name,target,text", [
    ("deep_tokenizer_json", "tokenizer.json", "[" * 100000 + "]" * 100000),
    ("deep_config", "tokenizer_config.json", '{"a":' * 100000 + "1" + "}" * 100000),
    ("config_is_a_list", "tokenizer_config.json", "[1]"),
    ("template_is_a_number", "tokenizer_config.json", '{"chat_template": 7}'),
    ("model_is_a_string", "tokenizer.json", '{"model": "BPE"}'),
])
def test_a_hostile_tokenizer_file_names_the_file(tok_dir, tmp_path, name, target, text):
    from caramba.text import load_tokenizer
    from caramba.text.tokenizer import TokenizerError

    d = _with_config(tok_dir, tmp_path, "{}")
    (d / target).write_text(text)
    with pytest.raises(TokenizerError, match=target.replace(".", r"\.")):
        load_tokenizer(d)


def test_named_templates_with_unhashable_names_are_skipped(tok_dir, tmp_path):
    from caramba.text import load_tokenizer

    d = _with_config(tok_dir, tmp_path, {"chat_template": [{"name": ["x"], "template": "x"},
                                                           {"name": "default", "template": "ok"}]})
    assert load_tokenizer(d).apply_chat_template([{"role": "user", "content": "hi"}]) == "ok"


HOSTILE_TEMPLATES = [
    ("huge_power", "{{ 10 ** 1000000000 }}", "over the chat template limits"),
    ("string_repeat", "{{ 'a' * 10000000000 }}", "over the chat template limits"),
    ("list_repeat", "{{ [1] * 10000000000 }}", "over the chat template limits"),
    ("nested_ranges", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
     "range\\(\\) items"),
    ("center_filter", "{{ 'a'|center(10000000000) }}", "over the chat template limits"),
    ("ljust_method", "{{ 'a'.ljust(10000000000) }}", "over the chat template limits"),
    ("percent_width", "{{ '%9999999999d' % 1 }}", "format width"),
    ("format_width", "{{ '{:9999999999}'.format(1) }}", "format width"),
    ("class_escape", "{{ ''.__class__.__mro__[1].__subclasses__() }}", "SecurityError"),
    ("globals_escape", "{{ cycler.__init__.__globals__ }}", "SecurityError"),
    ("zero_division", "{{ 1 / 0 }}", "ZeroDivisionError"),
    ("type_error", "{{ 1 + [] }}", "TypeError"),
    ("recursive_macro", "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "RecursionError"),
    ("deep_parens", "{{" + "(" * 2000 + "1" + ")" * 2000 + "}}", "cannot be compiled"),
    ("bad_syntax", "{% for %}", "not valid jinja"),
]


@pytest.mark.parametrize("name,template,fragment", HOSTILE_TEMPLATES, ids=[h[0] for h in HOSTILE_TEMPLATES])
def test_a_hostile_chat_template_is_a_tokenizer_error(tok_dir, tmp_path, name, template, fragment):
    from caramba.text import load_tokenizer
    from caramba.text.tokenizer import TokenizerError

    tok = load_tokenizer(_with_config(tok_dir, tmp_path, {"chat_template": template}))
    with pytest.raises(TokenizerError, match=fragment):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])


def test_an_ordinary_template_still_renders(tok_dir, tmp_path):
    from caramba.text import load_tokenizer

    t = ("{% for m in messages %}{{ m.role }}:{{ m.content|tojson }}{% endfor %}{{ range(3)|list }}"
         "{{ '%5s'|format('x') }}{{ '{:>4}'.format('y') }}{{ 2 ** 10 }}{{ '-' * 3 }}")
    tok = load_tokenizer(_with_config(tok_dir, tmp_path, {"chat_template": t}))
    assert tok.apply_chat_template([{"role": "user", "content": "hé"}]) == 'user:"hé"[0, 1, 2]    x   y1024---'


def test_every_error_here_is_a_caramba_error():
    assert issubclass(CheckpointError, CarambaError) and issubclass(CheckpointFormatError, CarambaError)
