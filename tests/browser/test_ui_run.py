"""The acceptance path in a real browser: load the UI, submit the example manifest, watch the
run complete and its loss chart render. Screenshots: test-artifacts/browser/run.png, dashboard.png."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits_mlp.yml"
RUN_TIMEOUT_MS = 240_000  # the example trains for seconds on the cpu backend; room for a slow CI


def test_submit_the_example_and_watch_it_finish(page, login, artifacts):
    page.set_input_files("#manifest-file", str(EXAMPLE))
    page.wait_for_function("() => document.querySelector('#manifest-text').value.includes('digits-mlp')")
    assert page.input_value("#manifest-name") == "digits_mlp.yml"
    page.click("#submit-button")
    link = page.locator("#submitted-runs a").first
    link.wait_for()
    run_id = link.inner_text()
    link.click()
    page.wait_for_function(f"() => location.hash === '#/runs/{run_id}'")
    # every progress the bar shows while the run trains (metrics rows move it between status events)
    page.evaluate("""() => {
        window.__progress = new Set();
        const seen = () => document.querySelectorAll('.run-head .progress').forEach((p) => window.__progress.add(p.textContent.trim()));
        new MutationObserver(seen).observe(document.querySelector('main'), {subtree: true, childList: true, characterData: true});
        seen();
    }""")

    # the run streams in while it trains, then the stream ends with the run finished
    page.locator(".run-head [data-status=finished]").wait_for(timeout=RUN_TIMEOUT_MS)
    shown = page.evaluate("() => [...window.__progress]")
    assert len(shown) >= 3 and "400/400" in shown, shown  # it advanced while the run trained
    page.locator("#run-charts[data-complete=true]").wait_for()
    chart = page.locator("#run-charts figure.loss-chart[data-metric=loss]")
    chart.wait_for()
    # every loss point the run recorded was streamed into the chart: none lost, none twice
    recorded = page.request.get(f"{login}/api/v1/runs/{run_id}/metrics?name=loss").json()["points"]
    train = [p for p in recorded if p["split"] == "train"]
    assert len(train) >= 20
    assert int(chart.get_attribute("data-points")) == len(recorded)
    line = chart.locator("path.series[data-series=train]")
    assert line.count() == 1
    assert line.get_attribute("d").count("L") == len(train) - 1
    assert chart.locator("path.series[data-series=test]").count() == 1
    page.locator("h2:text('IR graph') ~ .graph svg.ir-graph").wait_for()
    # the finished run offers its trained model for download (GET /runs/{id}/export)
    onnx = page.locator(".export-links a", has_text="ONNX")
    assert onnx.get_attribute("href") == f"/api/v1/runs/{run_id}/export?format=onnx"
    got = page.request.get(f"{login}/api/v1/runs/{run_id}/export?format=onnx")
    assert got.status == 200 and len(got.body()) > 1000, got.status
    page.screenshot(path=str(artifacts / "run.png"), full_page=True)

    page.click("a[data-nav=experiments]")
    compare = page.locator("#loss-chart")
    compare.wait_for()
    page.wait_for_function("() => Number(document.querySelector('#loss-chart').dataset.points) > 0")
    assert page.locator(f"tr[data-run='{run_id}'] [data-status=finished]").count() == 1
    page.screenshot(path=str(artifacts / "dashboard.png"), full_page=True)
    assert page.js_errors == []


def test_pages_fit_a_phone_screen(page, login, artifacts):
    """At 375 px nothing makes the page wider than the screen (wide tables scroll inside)."""
    page.set_viewport_size({"width": 375, "height": 740})
    for route in ("#/experiments", "#/runs", "#/backends", "#/assets", "#/compile"):
        page.goto(f"{login}/{route}")
        page.wait_for_load_state("networkidle")
        width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1] + 1, (route, width)
    page.screenshot(path=str(artifacts / "phone.png"), full_page=True)
    assert page.js_errors == []
