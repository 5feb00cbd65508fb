"""The asset registry over HTTP: every asset lists and shows, with its schema and source."""

from __future__ import annotations


def test_every_asset_lists_and_shows(client):
    from caramba.manifest.registry import registry

    page = client.get("/api/v1/assets?limit=1000").json()
    assert page["total"] == len(registry()) == len(page["items"])
    for item in page["items"]:
        r = client.get(f"/api/v1/assets/{item['id']}")
        assert r.status_code == 200, item
        body = r.json()
        assert body["id"] == item["id"] and body["kind"] == item["kind"] and body["source"]


def test_filter_by_kind_and_text_and_page(client):
    ops = client.get("/api/v1/assets?kind=optimizer").json()["items"]
    assert ops and all(a["kind"] == "optimizer" for a in ops)
    assert any(a["id"] == "optimizer.adamw" for a in ops)
    found = client.get("/api/v1/assets?q=LINEAR").json()["items"]
    assert any(a["id"] == "projection.linear" for a in found)
    first = client.get("/api/v1/assets?limit=2").json()
    second = client.get("/api/v1/assets?limit=2&offset=2").json()
    assert len(first["items"]) == 2 and first["items"] != second["items"]
    assert client.get("/api/v1/assets?kind=nope").status_code == 422


def test_show_gives_ports_config_and_defaults(client):
    linear = client.get("/api/v1/assets/projection.linear").json()
    fields = {f["name"]: f for f in linear["config"]}
    assert "out_features" in fields and fields["out_features"]["required"] is True
    assert linear["inputs"] and linear["path"].endswith(".yml")
    r = client.get("/api/v1/assets/projection.lineer")
    assert r.status_code == 404 and "projection.linear" in r.json()["detail"]
