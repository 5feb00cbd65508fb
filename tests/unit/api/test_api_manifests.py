"""Manifest validation over HTTP: a malformed manifest is 422 with file, line, column and path."""

from __future__ import annotations


def _validate(client, text, **kw):
    return client.post("/api/v1/manifests/validate", json={"manifest": text, **kw})


def test_invalid_yaml_is_422_with_its_line_and_column(client):
    r = _validate(client, "name: demo\ntopology:\n  nodes: [\n", name="broken.yml")
    assert r.status_code == 422
    body = r.json()
    err = body["errors"][0]
    assert body["type"] == "ManifestError"
    assert err["file"] == "broken.yml" and err["line"] >= 3 and err["col"] >= 1
    assert "invalid YAML" in err["message"]
    assert body["detail"].startswith("broken.yml:")


def test_unknown_key_is_422_pointing_at_the_key(client):
    text = "name: demo\ntopology:\n  inputs: {x: {shape: [2, 3]}}\n  nodes: []\nbogus: 1\n"
    r = _validate(client, text)
    assert r.status_code == 422
    err = r.json()["errors"][0]
    assert err["line"] == 5 and err["col"] == 1
    assert err["path"] == "bogus" and "unknown key 'bogus'" in err["message"]


def test_wrong_type_deep_inside_is_located(client):
    text = "name: demo\ntopology:\n  inputs:\n    x: {shape: [2, -3]}\n  nodes: []\n"
    r = _validate(client, text)
    assert r.status_code == 422
    err = r.json()["errors"][0]
    assert err["line"] == 4 and err["path"].startswith("topology.inputs.x")


def test_include_cannot_leave_the_store_includes_folder(client):
    r = _validate(client, "name: demo\ntopology: !include etc.passwd\n")
    assert r.status_code == 422
    assert r.json()["errors"][0]["line"] == 2


def test_overrides_apply_like_set_and_bad_ones_are_located(client):
    r = _validate(client, "name: demo\n", overrides=["bogus.key=1"])
    assert r.status_code == 422
    assert "bogus" in r.json()["detail"]


def test_request_shape_errors_are_422_too(client):
    assert client.post("/api/v1/manifests/validate", json={}).status_code == 422
    assert client.post("/api/v1/manifests/validate", json={"manifest": 3}).status_code == 422
    assert client.post("/api/v1/manifests/validate", json={"manifest": "a: 1", "extra": 1}).status_code == 422
    r = client.post("/api/v1/manifests/validate", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422
