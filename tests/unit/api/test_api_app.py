"""The app: health, OpenAPI, the UI page and its no-CDN policy, backends."""

from __future__ import annotations

import re
from pathlib import Path

STATIC = Path(__file__).resolve().parents[3] / "src" / "caramba" / "api" / "static"


def test_health_says_version_and_auth(client):
    body = client.get("/api/v1/health").json()
    assert body["status"] == "ok" and body["auth"] is True and body["version"]


def test_openapi_spec_lists_the_api_and_its_token_scheme(client):
    spec = client.get("/api/v1/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    paths = spec["paths"]
    for p in ("/api/v1/health", "/api/v1/backends", "/api/v1/manifests/validate", "/api/v1/compile"):
        assert p in paths, sorted(paths)
    schemes = spec["components"]["securitySchemes"]
    assert any(s.get("scheme") == "bearer" for s in schemes.values())
    assert paths["/api/v1/compile"]["post"]["security"]


def test_ui_page_is_served_with_a_same_origin_policy(client):
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert '<script type="module" src="/static/js/app.js">' in r.text
    for asset in ("/static/js/app.js", "/static/js/chart.js", "/static/js/api.js", "/static/js/dom.js", "/static/app.css"):
        assert client.get(asset).status_code == 200, asset


def test_ui_loads_nothing_from_another_origin():
    # Every file the UI is made of refers only to this server: no CDN, no remote fonts.
    loads = re.compile(r"""(src|href)\s*=\s*["']\s*(https?:)?//|url\(\s*["']?(https?:)?//|import[^;]*from\s*["'](https?:)?//|fetch\(\s*["']https?:""")
    files = [p for p in STATIC.rglob("*") if p.is_file()]
    assert {p.suffix for p in files} >= {".html", ".js", ".css"}
    for p in files:
        text = p.read_text()
        assert not loads.search(text), f"{p.name} loads from another origin: {loads.search(text).group(0)}"


def test_no_swagger_page_since_it_would_load_a_cdn(client):
    assert client.get("/docs").status_code == 404


def test_backends_report_availability_and_build_info(client):
    from caramba.compute import BACKENDS

    listed = client.get("/api/v1/backends").json()
    assert [b["name"] for b in listed] == list(BACKENDS)
    cpu = client.get("/api/v1/backends/cpu").json()
    assert cpu["available"] is True and "numpy" in cpu["versions"]
    assert {o["name"] for o in cpu["options"]} >= {"threads"}
    for b in listed:
        assert b["available"] or b["reason"], b


def test_unknown_backend_is_404_with_the_valid_names(client):
    r = client.get("/api/v1/backends/cpx")
    assert r.status_code == 404
    assert "cpu" in r.json()["detail"]


def test_unknown_api_path_is_404(client):
    assert client.get("/api/v1/nope").status_code == 404


def test_method_not_allowed_lists_every_method_of_the_path(client):
    r = client.request("DELETE", "/api/v1/experiments")
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"
    r = client.request("PUT", "/api/v1/runs/some-run/artifacts/checkpoints/step10.safetensors")
    assert r.status_code == 405 and r.headers["allow"] == "GET"
    assert client.request("DELETE", "/api/v1/runs/some-run/pause").headers["allow"] == "POST"
