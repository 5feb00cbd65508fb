"""The web UI in a real headless Chromium: pages render from the API, nothing errors in the
console, and what a researcher needs is on screen. Screenshots go to test-artifacts/browser/."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]

SMALL = """\
name: small
topology:
  inputs:
    x: {shape: [batch, 4]}
  dims: {batch: 2}
  nodes:
    - {id: fc, op: projection.linear, in: [x], config: {out_features: 3}}
    - {id: act, op: activation.gelu, in: [fc]}
"""


def _open(page, url: str) -> None:
    page.goto(url)
    page.wait_for_load_state("domcontentloaded")


def test_backends_page_lists_the_backends(page, live_server, artifacts):
    _open(page, f"{live_server}/#/backends")
    table = page.locator("table.backends")
    table.wait_for()
    assert table.locator("tbody tr").count() >= 1
    assert "cpu" in table.inner_text()
    page.screenshot(path=str(artifacts / "backends.png"), full_page=True)
    assert page.js_errors == []


def test_compile_page_draws_the_graph_before_and_after(page, login, artifacts):
    _open(page, f"{login}/#/compile")
    page.fill("#compile-text", SMALL)
    page.click("#compile-result >> xpath=.. >> button.primary")
    svg = page.locator(".graph-pane svg.ir-graph")
    svg.wait_for()
    assert svg.locator("g.node").count() >= 2
    assert page.locator("table.stages tbody tr").count() >= 3
    page.click(".graph .tabs button[data-which=before]")
    page.locator(".graph-pane svg.ir-graph g.node[data-id=fc]").wait_for()
    page.screenshot(path=str(artifacts / "compile.png"), full_page=True)
    assert page.js_errors == []


def test_a_malformed_manifest_shows_its_location(page, login):
    page.fill("#manifest-text", "name: demo\ntopology:\n  inputs: {x: {shape: [2]}}\n  nodes: []\nbogus: 1\n")
    page.click("#validate-button")
    err = page.locator("#submit-result .errors li.err")
    err.wait_for()
    assert err.get_attribute("data-line") == "5"
    assert "unknown key 'bogus'" in err.inner_text()
    assert page.js_errors == []


def test_asset_browser_shows_a_schema(page, live_server):
    _open(page, f"{live_server}/#/assets")
    page.fill("#asset-filter", "projection.linear")
    page.click("a[href='#/assets/projection.linear']")
    page.locator("h1 code").wait_for()
    assert page.locator("h1 code").inner_text() == "projection.linear"
    assert "out_features" in page.inner_text("main")
    assert page.js_errors == []


def test_ui_refuses_to_load_from_other_origins(page, live_server):
    # The page's policy is same-origin only: an injected remote script is blocked.
    _open(page, f"{live_server}/")
    blocked = page.evaluate("""() => new Promise((resolve) => {
        const s = document.createElement('script');
        s.src = 'https://cdn.example.invalid/x.js';
        s.onerror = () => resolve('blocked');
        s.onload = () => resolve('loaded');
        document.head.appendChild(s);
    })""")
    assert blocked == "blocked"
    assert not Path(ROOT / "src" / "caramba" / "api" / "static" / "vendor").exists()


TINY_ACTORS = """\
name: tiny-ui
topology:
  inputs:
    x: {shape: [batch, 2]}
    label: {shape: [batch], dtype: int64}
  nodes:
    - {id: fc, op: projection.linear, in: [x], config: {out_features: 2}}
    - {id: loss, op: loss.cross_entropy, in: [fc, label]}
  outputs: {logits: fc, loss: loss}
datasets:
  blobs: {source: generated, kind: blobs, n: 200, features: 2, classes: 2, feed: {label: y}}
trainer: {loss: loss, lr: 0.05, batch_size: 16, steps: 8, log_every: 1}
checkpoints: {every: 4}
targets: [{name: cpu, backend: cpu, runs: [{id: seed0, seed: 0}]}]
"""


def test_actor_run_evidence_models_and_notary_pages(page, login, artifacts):
    page.fill("#manifest-text", TINY_ACTORS)
    page.select_option("#manifest-executor", "actors")
    page.click("#submit-button")
    link = page.locator("#submitted-runs a").first
    link.wait_for(timeout=60_000)
    link.click()
    page.locator(".run-head [data-status=finished]").wait_for(timeout=120_000)
    page.locator("h2:has-text('Evidence') [data-status=VERIFIED]").wait_for()
    assert page.locator("table.entries tbody tr").count() >= 6
    page.screenshot(path=str(artifacts / "run-actors.png"), full_page=True)

    page.click("a[data-nav=models]")
    page.click("a[href='#/models/tiny-ui']")
    page.locator("table tbody tr").first.wait_for()
    page.click("table tbody tr a[href^='#/notary?entry=']")
    page.locator("#validity-result [data-status=VERIFIED]").wait_for()
    page.locator("#ledger-integrity [data-status=valid]").wait_for()
    page.screenshot(path=str(artifacts / "notary.png"), full_page=True)
    assert page.js_errors == []


def test_generate_page_sends_the_request_and_shows_the_refusal(page, login):
    """The Generate page posts to /api/v1/generate and shows the server's answer; this server has
    no data roots, so any checkpoint folder is refused (the streaming itself is tested through the
    API in tests/unit/api/test_api_generate.py)."""
    page.goto(f"{login}/#/generate")
    page.fill("#gen-model", "./some-checkpoint")
    page.fill("#gen-prompt", "the cat")
    page.click("#gen-go")
    err = page.locator(".errors")
    err.wait_for()
    assert "outside the folders this server reads data from" in err.inner_text()
    assert page.locator("a[data-nav=generate].on").count() == 1
    assert page.js_errors == []
