"""Every call that is not a GET needs the token; GETs are open."""

from __future__ import annotations

import pytest

WRITE = {"POST", "PUT", "PATCH", "DELETE"}


def _operations(app):
    """(method, path, operation) for every operation in the OpenAPI spec."""
    return [(m.upper(), p, op) for p, item in app.openapi()["paths"].items() for m, op in item.items()]


def _write_routes(app):
    return [(m, p) for m, p, _ in _operations(app) if m in WRITE]


def _concrete(path: str) -> str:
    import re

    return re.sub(r"\{[^}]+\}", "x", path)


def test_there_are_state_changing_routes(app):
    assert ("POST", "/api/v1/manifests/validate") in _write_routes(app)


@pytest.mark.parametrize("kind", ["none", "wrong-bearer", "wrong-header", "basic"])
def test_every_state_changing_route_refuses_without_the_right_token(app, anon, token, kind):
    headers = {"none": {}, "wrong-bearer": {"Authorization": "Bearer wrong"}, "wrong-header": {"X-Caramba-Token": "wrong"},
               "basic": {"Authorization": f"Basic {token}"}}[kind]
    for method, path in _write_routes(app):
        r = anon.request(method, _concrete(path), json={}, headers=headers)
        assert r.status_code == 401, (method, path, r.status_code, r.text)
        assert r.headers.get("www-authenticate") == "Bearer"


def test_a_server_without_a_token_refuses_every_state_changing_call(store):
    from fastapi.testclient import TestClient

    from caramba.api import create_app
    from caramba.config import Settings

    app = create_app(Settings(store=str(store), api_token=""), hosts=["testserver"])
    with TestClient(app) as c:
        for method, path in _write_routes(app):
            for headers in ({}, {"Authorization": "Bearer "}, {"X-Caramba-Token": ""}):
                r = c.request(method, _concrete(path), json={}, headers=headers)
                assert r.status_code == 401, (method, path)
        assert "no api_token configured" in r.json()["detail"]
        assert c.get("/api/v1/health").json()["auth"] is False


def test_the_token_is_accepted_as_bearer_or_header(anon, token):
    body = {"manifest": "name: x\n"}
    for headers in ({"Authorization": f"Bearer {token}"}, {"X-Caramba-Token": token}):
        r = anon.post("/api/v1/manifests/validate", json=body, headers=headers)
        assert r.status_code != 401, r.text


def test_the_spec_says_which_calls_need_the_token(app):
    for method, path, op in _operations(app):
        assert bool(op.get("security")) == (method in WRITE), (method, path)


def test_gets_need_no_token(anon):
    assert anon.get("/api/v1/health").status_code == 200
    assert anon.get("/api/v1/backends").status_code == 200
