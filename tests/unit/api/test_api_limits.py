"""Request bodies are bounded: over the limit is 413, a body of undeclared size is 411."""

from __future__ import annotations


def test_body_over_the_limit_is_refused_before_it_is_read(store, token):
    from fastapi.testclient import TestClient

    from caramba.api import create_app
    from caramba.config import Settings

    app = create_app(Settings(store=str(store), api_token=token), max_body=1000, hosts=["testserver"])
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as c:
        r = c.post("/api/v1/manifests/validate", json={"manifest": "x" * 2000})
        assert r.status_code == 413 and "1000 bytes" in r.json()["detail"]
        small = c.post("/api/v1/manifests/validate", json={"manifest": "name: [\n"})
        assert small.status_code == 422


def test_chunked_body_without_length_is_refused(client):
    def chunks():
        yield b'{"manifest": '
        yield b'"name: x"}'

    r = client.post("/api/v1/manifests/validate", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 411


def test_manifest_text_has_its_own_cap_below_the_body_limit(client):
    from caramba.api.schemas import MAX_MANIFEST_CHARS

    r = client.post("/api/v1/manifests/validate", json={"manifest": "#" * (MAX_MANIFEST_CHARS + 1)})
    assert r.status_code in (413, 422)
