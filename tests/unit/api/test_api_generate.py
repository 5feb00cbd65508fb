"""POST /api/v1/generate: a model's continuation as server-sent events, from a checkpoint folder
under the server's data roots; bad requests are ordinary 4xx answers before any stream."""

from __future__ import annotations

import json

import pytest

from .conftest import API_TOKEN, TEST_HOSTS

pytest.importorskip("tokenizers")


def events(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.strip().split("\n\n"):
        kind = next((ln[7:] for ln in block.splitlines() if ln.startswith("event: ")), None)
        data = "\n".join(ln[6:] for ln in block.splitlines() if ln.startswith("data: "))
        if kind:
            out.append((kind, json.loads(data)))
    return out


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny random GPT-2-shaped checkpoint written by caramba's own format code, with a BPE
    tokenizer trained on a line of text (no transformers needed)."""
    import numpy as np
    from safetensors.numpy import save_file

    from caramba.text import train_bpe

    root = tmp_path_factory.mktemp("models")
    d = root / "tiny-gpt2"
    d.mkdir()
    rng = np.random.default_rng(0)
    V, P, D = 300, 32, 16
    t = {"transformer.wte.weight": (V, D), "transformer.wpe.weight": (P, D), "transformer.ln_f.weight": (D,),
         "transformer.ln_f.bias": (D,)}
    for i in range(2):
        p = f"transformer.h.{i}."
        t.update({p + "ln_1.weight": (D,), p + "ln_1.bias": (D,), p + "attn.c_attn.weight": (D, 3 * D),
                  p + "attn.c_attn.bias": (3 * D,), p + "attn.c_proj.weight": (D, D), p + "attn.c_proj.bias": (D,),
                  p + "ln_2.weight": (D,), p + "ln_2.bias": (D,), p + "mlp.c_fc.weight": (D, 4 * D),
                  p + "mlp.c_fc.bias": (4 * D,), p + "mlp.c_proj.weight": (4 * D, D), p + "mlp.c_proj.bias": (D,)})
    save_file({k: (rng.standard_normal(s) * 0.5).astype(np.float32) for k, s in t.items()}, str(d / "model.safetensors"),
              metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "vocab_size": V, "n_positions": P,
                                               "n_embd": D, "n_layer": 2, "n_head": 2}))
    train_bpe(["the cat sat on the mat\n" * 40], vocab_size=V).save(d / "tokenizer.json")
    return root, d


@pytest.fixture
def client_with_roots(store, checkpoint):
    from fastapi.testclient import TestClient

    from caramba.api import create_app
    from caramba.config import Settings

    root, _ = checkpoint
    app = create_app(Settings(store=str(store), api_token=API_TOKEN, serve_data_roots=str(root)), hosts=TEST_HOSTS)
    with TestClient(app, headers={"Authorization": f"Bearer {API_TOKEN}"}) as c:
        yield c


def test_a_greedy_continuation_streams_as_events(client_with_roots, checkpoint):
    import caramba.pretrained as pt
    from caramba.generate import Generator
    from caramba.text import load_tokenizer

    _, d = checkpoint
    body = {"model": "./tiny-gpt2", "prompt": "the cat", "max_new_tokens": 6}  # relative to the first data root
    r = client_with_roots.post("/api/v1/generate", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    ev = events(r.text)
    assert ev[0][0] == "start" and ev[0][1]["model"] == "tiny-gpt2" and ev[-1][0] == "end"
    tokens = [e["id"] for k, e in ev if k == "token" and e["id"] is not None]
    tok = load_tokenizer(d)
    ids = tok.encode("the cat")
    with Generator.from_pretrained(pt.open(d, dtype="float32"), capacity=len(ids) + 5) as gen:
        want = [int(s[0]) for s in gen.generate([ids], 6)]
    assert tokens == want[: len(tokens)] and ev[-1][1]["tokens"] == len(tokens)
    assert "".join(e["text"] for k, e in ev if k == "token") == tok.decode(tokens, skip_special_tokens=True)
    r = client_with_roots.post("/api/v1/generate", json={**body, "model": str(d), "temperature": 0.9, "seed": 3})
    assert r.status_code == 200 and events(r.text)[-1][0] == "end"


@pytest.mark.parametrize(("change", "status", "words"), [
    ({"model": "/etc"}, 422, "outside the folders this server reads data from"),
    ({"model": "../../../../etc"}, 422, "outside the folders this server reads data from"),
    ({"model": "~/models"}, 422, "outside the folders this server reads data from"),
    ({"model": "./nothing-here"}, 404, "no Hugging Face checkpoint folder"),
    ({"model": "no-such-run"}, 404, "no-such-run"),
    ({"top_p": 0.0}, 422, "top_p"),
    ({"temperature": -1.0}, 422, "temperature"),
    ({"max_new_tokens": 40}, 422, "cache positions"),
    ({"prompt": ""}, 422, "prompt"),
    ({"backend": "cpu; rm -rf /"}, 422, "backend"),
    ({"surprise": 1}, 422, "surprise"),
])
def test_bad_requests_are_answered_before_any_stream(client_with_roots, change, status, words):
    body = {"model": "./tiny-gpt2", "prompt": "the cat", "max_new_tokens": 4, **change}
    r = client_with_roots.post("/api/v1/generate", json=body)
    assert r.status_code == status, r.text
    assert words in r.text


def test_generation_needs_the_token(app):
    from fastapi.testclient import TestClient

    with TestClient(app) as c:
        r = c.post("/api/v1/generate", json={"model": "x", "prompt": "y"})
    assert r.status_code == 401


@pytest.mark.parametrize("model", ["0" * 5000, "a\x00b", "run id with spaces", "./" + "x" * 300])
def test_hostile_model_names_are_plain_4xx(client_with_roots, model):
    r = client_with_roots.post("/api/v1/generate", json={"model": model, "prompt": "the cat", "max_new_tokens": 2})
    assert r.status_code in (404, 422), r.text


def test_the_last_model_stays_loaded_for_the_next_request(client_with_roots, checkpoint, monkeypatch):
    import os

    import caramba.generate.source as source

    opened = []
    real = source.open_model
    monkeypatch.setattr(source, "open_model", lambda *a, **k: (opened.append(a[0]), real(*a, **k))[1])
    body = {"model": "./tiny-gpt2", "prompt": "the cat", "max_new_tokens": 4}
    first = [e for k, e in events(client_with_roots.post("/api/v1/generate", json=body).text) if k == "token"]
    second = [e for k, e in events(client_with_roots.post("/api/v1/generate", json=body).text) if k == "token"]
    assert first == second and len(opened) == 1  # the same tokens, from the model loaded once
    _, d = checkpoint
    st = os.stat(d / "model.safetensors")
    os.utime(d / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the files changed: reopen
    assert client_with_roots.post("/api/v1/generate", json=body).status_code == 200
    assert len(opened) == 2


def test_a_model_over_the_memory_limit_is_refused_before_the_stream(store, checkpoint):
    from fastapi.testclient import TestClient

    from caramba.api import create_app
    from caramba.config import Settings

    root, _ = checkpoint
    settings = Settings(store=str(store), api_token=API_TOKEN, serve_data_roots=str(root),
                        serve_generate_memory_mb=0.01)  # 10 KiB: less than the tiny model's weights
    app = create_app(settings, hosts=TEST_HOSTS)
    with TestClient(app, headers={"Authorization": f"Bearer {API_TOKEN}"}) as c:
        r = c.post("/api/v1/generate", json={"model": "./tiny-gpt2", "prompt": "the cat", "max_new_tokens": 4})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert "MiB of weights and KV caches" in r.text and "limit" in r.text
