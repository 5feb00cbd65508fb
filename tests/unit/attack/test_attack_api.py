"""Hostile requests to the HTTP API's compare / tag / annotate / delete / export / generate and
listing endpoints: every one is answered 4xx with a JSON error (never a 500), nothing outside the
store is read or written, and a delete racing reads of the same run answers each request cleanly."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")

from caramba.store.runs import RunStore

TOKEN = "attack-token"
B = "/api/v1"


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def world(tmp_path):
    from fastapi.testclient import TestClient

    from caramba.api import create_app
    from caramba.config import Settings

    store = tmp_path / "store"
    runs = RunStore(store)
    ids = []
    for seed in (0, 1):
        rec = runs.create_run("sw", arm="a", target="cpu", run_name=f"s{seed}", seed=seed, config={"manifest": {}, "spec": {}})
        runs.start(rec.id)
        runs.log_rows(rec.id, [(i, "val", {"loss": 1.0 / i}) for i in (1, 2, 3)])
        runs.finish(rec.id)
        ids.append(rec.id)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    app = create_app(Settings(store=str(store), api_token=TOKEN), hosts=("testserver",))
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}, raise_server_exceptions=False) as c:
        yield c, store, ids, outside


def _cases(rid: str) -> list[tuple[str, str, dict]]:
    big = b'{"add": ["' + b"a" * (3 * 2**20) + b'"]}'
    return [
        ("get", f"{B}/compare", {"params": {"experiment": "sw", "metric": "\x00"}}),
        ("get", f"{B}/compare", {"params": {"experiment": "..", "metric": "val.loss"}}),
        ("get", f"{B}/compare", {"params": [("run", "../../outside")] * 3}),
        ("get", f"{B}/compare", {"params": [("run", "x")] * 5000}),
        ("get", f"{B}/compare", {"params": {"experiment": "sw", "mode": "weird"}}),
        ("get", f"{B}/compare", {"params": {"experiment": "%", "metric": "_"}}),
        ("get", f"{B}/compare/curves", {"params": [("run", rid), ("metric", "val.loss"), ("points", "-5")]}),
        ("get", f"{B}/compare/curves", {"params": [("run", rid), ("metric", "val.loss"), ("points", "9" * 30)]}),
        ("get", f"{B}/compare/curves", {"params": [("run", rid), ("metric", "é\u202e" * 100)]}),
        ("post", f"{B}/runs/{rid}/tags", {"json": {"add": ["a" * 100000], "remove": []}}),
        ("post", f"{B}/runs/{rid}/tags", {"json": {"add": ["x\x00y"]}}),
        ("post", f"{B}/runs/{rid}/tags", {"json": {"add": ["../../x"]}}),
        ("post", f"{B}/runs/{rid}/tags", {"json": {"add": ["t"] * 100000}}),
        ("post", f"{B}/runs/{rid}/tags", {"json": {"add": [1, None], "remove": {"a": 1}}}),
        ("post", f"{B}/runs/{rid}/tags", {"content": b"\xff\xfe", "headers": {"content-type": "application/json"}}),
        ("post", f"{B}/runs/{rid}/tags", {"content": b"add=x", "headers": {"content-type": "application/x-www-form-urlencoded"}}),
        ("post", f"{B}/runs/{rid}/tags", {"content": b"[" * 100000, "headers": {"content-type": "application/json"}}),
        ("post", f"{B}/runs/{rid}/tags", {"content": big, "headers": {"content-type": "application/json"}}),
        ("put", f"{B}/runs/{rid}/note", {"json": {"note": "x\x00\u202e" * 1000}}),
        ("put", f"{B}/runs/{rid}/note", {"json": {"note": 5}}),
        ("put", f"{B}/runs/{rid}/note", {"content": b"note", "headers": {"content-type": "text/plain"}}),
        ("put", f"{B}/runs/..%2F..%2Foutside/note", {"json": {"note": "x"}}),
        ("put", f"{B}/runs/%00/note", {"json": {"note": "x"}}),
        ("post", f"{B}/runs/%25/tags", {"json": {"add": ["x"]}}),
        ("post", f"{B}/runs/_/tags", {"json": {"add": ["x"]}}),
        ("get", f"{B}/runs/..%2F..%2Foutside%2Fsecret.txt/export", {}),
        ("get", f"{B}/runs/{rid}/export", {"params": {"format": "../../x"}}),
        ("get", f"{B}/runs/{rid}/export", {"params": {"format": "safetensors", "dtype": "int8"}}),
        ("get", f"{B}/runs/{rid}/export", {"params": {"format": "onnx"}}),
        ("get", f"{B}/runs/{rid}/artifacts/..%2F..%2F..%2Foutside%2Fsecret.txt", {}),
        ("get", f"{B}/runs/{rid}/artifacts/%2e%2e", {}),
        ("get", f"{B}/runs/{rid}/artifacts/%00", {}),
        ("post", f"{B}/generate", {"json": {"model": "../../outside", "prompt": "x"}}),
        ("post", f"{B}/generate", {"json": {"model": "/etc", "prompt": "x"}}),
        ("post", f"{B}/generate", {"json": {"model": rid, "prompt": "x", "max_new_tokens": -1}}),
        ("post", f"{B}/generate", {"json": {"model": rid, "prompt": "x", "max_new_tokens": 10**12}}),
        ("post", f"{B}/generate", {"json": {"model": rid, "prompt": "x" * 10**6}}),
        ("post", f"{B}/generate", {"json": {"model": "\x00", "prompt": "x"}}),
        ("post", f"{B}/generate", {"json": {"model": rid, "prompt": "x", "temperature": "nan"}}),
        ("post", f"{B}/generate", {"json": {"model": rid, "prompt": "x", "temperature": 1e308, "top_k": -5}}),
        ("post", f"{B}/generate", {"json": {"model": rid, "messages": [{"role": "user", "content": {"a": 1}}]}}),
        ("post", f"{B}/generate", {"json": {"model": rid, "prompt": "x"}}),  # a run without a checkpoint
        ("post", f"{B}/generate", {"content": b"model=x", "headers": {"content-type": "text/plain"}}),
        ("delete", f"{B}/runs/..", {}),
        ("delete", f"{B}/runs/{rid[:-1]}", {}),
        ("delete", f"{B}/runs/latest", {}),
        ("delete", f"{B}/runs/{rid}", {"params": {"reason": "a" * 3000}}),
        ("get", f"{B}/runs", {"params": {"limit": "-1"}}),
        ("get", f"{B}/runs", {"params": {"limit": "9" * 25}}),
        ("get", f"{B}/runs", {"params": {"offset": "-1"}}),
        ("get", f"{B}/notary/entries", {"params": {"limit": "-1"}}),
        ("get", f"{B}/notary/entries/..%2F..", {}),
        ("get", f"{B}/notary/entries/%00", {}),
    ]


def test_hostile_requests_are_never_5xx_are_json_and_touch_nothing_outside(world):
    c, _, ids, outside = world
    before_outside = _tree(outside)
    for method, url, kw in _cases(ids[0]):
        r = c.request(method.upper(), url, **kw)
        assert r.status_code < 500, (method, url, str(kw)[:80], r.status_code, r.text[:300])
        assert "top secret" not in r.text and "Traceback" not in r.text
        if 200 <= r.status_code < 300:  # only the harmless ones (an unknown query parameter is ignored)
            assert method == "get" and "curves" in url, (method, url, r.status_code)
        if r.status_code != 404 or r.headers.get("content-type", "").startswith("application/json"):
            assert r.headers.get("content-type", "").startswith("application/json"), (url, r.headers)
    assert _tree(outside) == before_outside
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert c.get(f"{B}/runs/{ids[0]}").status_code == 200  # the hostile deletes removed nothing


def test_unicode_tags_and_notes_round_trip_or_are_refused_cleanly(world):
    c, _, ids, _ = world
    r = c.put(f"{B}/runs/{ids[0]}/note", json={"note": "é😀\u202e 变"})
    assert r.status_code == 200 and r.json()["note"] == "é😀\u202e 变"
    r = c.post(f"{B}/runs/{ids[0]}/tags", json={"add": ["ok-1", "é"]})
    assert r.status_code == 422  # tags are a restricted alphabet
    r = c.post(f"{B}/runs/{ids[0]}/tags", json={"add": ["ok-1"], "remove": ["never-there"]})
    assert r.status_code == 200 and "ok-1" in r.json()["tags"]


def test_a_delete_racing_reads_of_the_same_run_never_500s(world):
    c, _, ids, _ = world
    victim, other = ids
    codes: list[int] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            for url in (f"{B}/runs/{victim}", f"{B}/runs/{victim}/metrics", f"{B}/runs/{victim}/artifacts",
                        f"{B}/compare?run={victim}&run={other}"):
                codes.append(c.get(url).status_code)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        d = c.delete(f"{B}/runs/{victim}", params={"reason": "race"})
        again = c.delete(f"{B}/runs/{victim}")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert d.status_code == 200, d.text
    assert again.status_code == 404
    assert codes and all(code in (200, 404, 422) for code in codes), sorted(set(codes))
    assert c.get(f"{B}/runs/{victim}").status_code == 404
    assert c.get(f"{B}/runs/{other}").status_code == 200


@pytest.mark.parametrize("damage", ["deep_tokenizer", "duplicate_tensor", "deep_config", "negative_dim"])
def test_a_hostile_model_folder_is_a_4xx_from_generate(tmp_path, damage):
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    import json
    import struct

    from fastapi.testclient import TestClient

    from caramba.api import create_app
    from caramba.config import Settings
    from caramba.text import train_bpe

    root = tmp_path / "models"
    d = root / "m"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "vocab_size": 300,
                                               "n_positions": 32, "n_embd": 16, "n_layer": 1, "n_head": 2}))
    train_bpe(["the cat sat\n"] * 10, vocab_size=300).save(d / "tokenizer.json")
    header = {"transformer.wte.weight": {"dtype": "F32", "shape": [300, 16], "data_offsets": [0, 19200]}}
    if damage == "negative_dim":
        header["transformer.wte.weight"]["shape"] = [-300, -16]
    raw = json.dumps(header).encode()
    if damage == "duplicate_tensor":
        raw = b"{" + raw[1:-1] + b"," + raw[1:-1] + b"}"
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 19200)
    if damage == "deep_tokenizer":
        (d / "tokenizer.json").write_text("[" * 100000 + "]" * 100000)
    if damage == "deep_config":
        (d / "config.json").write_text("[" * 100000 + "]" * 100000)
    app = create_app(Settings(store=str(tmp_path / "store"), api_token=TOKEN, serve_data_roots=str(root)),
                     hosts=("testserver",))
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}, raise_server_exceptions=False) as c:
        r = c.post(f"{B}/generate", json={"model": "./m", "prompt": "the cat", "max_new_tokens": 2})
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    assert "Traceback" not in r.text
