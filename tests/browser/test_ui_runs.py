"""The runs page in a real headless Chromium: the table of runs with parameter and metric
columns, sorting, filtering, selecting two runs and seeing both curves overlaid, tagging and
deleting from the page, and the tuner arms on the experiment page. Screenshot: runs.png."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

TUNER = {"metric": "val.loss", "arms": [{"id": "a", "set": {"trainer.lr": 0.01}}, {"id": "b", "set": {"trainer.lr": 0.1}}]}


def _sweep(root) -> dict[tuple[str, int], str]:
    from caramba.store.runs import RunStore

    store = RunStore(root)
    ids = {}
    for arm, base in (("a", 1.0), ("b", 0.3)):
        for seed in (0, 1):
            rec = store.create_run("sw", arm=arm, target="cpu", run_name=f"s{seed}", seed=seed,
                                   config={"manifest": {"tuner": TUNER}})
            store.start(rec.id)
            store.log_rows(rec.id, [(i, "val", {"loss": base + seed * 0.1 + 1 / i}) for i in range(1, 6)])
            store.finish(rec.id)
            ids[(arm, seed)] = rec.id
    return ids


def test_runs_table_sort_filter_overlay_tag_delete(page, login, tmp_path, artifacts):
    ids = _sweep(tmp_path / "store")
    page.goto(f"{login}/#/runs?experiment=sw")
    rows = page.locator("#runs-table tbody tr[data-run]")
    rows.first.wait_for()
    assert rows.count() == 4
    head = page.locator("#runs-table thead").inner_text()
    assert "trainer.lr" in head and "val.loss" in head and "final" in head and "best" in head
    assert "1. b" in page.locator("#runs-ranking").inner_text()

    page.click("th[data-col='f:val.loss']")  # ascending: the best run first
    assert rows.first.get_attribute("data-run") == ids[("b", 0)]
    page.click("th[data-col='f:val.loss']")
    assert rows.first.get_attribute("data-run") == ids[("a", 1)]

    page.fill("#runs-filter", "trainer.lr=0.1")
    page.wait_for_function("() => document.querySelectorAll('#runs-table tbody tr[data-run]').length === 2")
    page.fill("#runs-filter", "")

    page.check(f"input[data-run='{ids[('a', 0)]}']")
    page.check(f"input[data-run='{ids[('b', 1)]}']")
    chart = page.locator("#overlay-chart")
    chart.wait_for()
    page.wait_for_function("() => document.querySelectorAll('#overlay-chart path.series').length === 2")
    assert int(chart.get_attribute("data-points")) == 10
    page.fill("#overlay-smoothing", "0.6")  # smoothing redraws the same two lines, flatter
    page.wait_for_function("() => document.querySelectorAll('#overlay-chart path.series').length === 2")
    page.check("#overlay-chart .log-toggle input")
    page.select_option("#overlay-x", "seconds")  # a new chart on the wall-time axis keeps the log y axis
    page.wait_for_function("() => document.querySelector('#overlay-chart').textContent.includes('seconds since start')")
    assert page.is_checked("#overlay-chart .log-toggle input")
    page.screenshot(path=str(artifacts / "runs.png"), full_page=True)

    page.fill("#tag-input", "keep")
    page.click("#tag-add")
    page.locator(f"tr[data-run='{ids[('a', 0)]}'] .tag").wait_for()
    assert page.request.get(f"{login}/api/v1/runs/{ids[('b', 1)]}").json()["tags"] == ["keep"]

    page.once("dialog", lambda d: d.accept())
    page.click("#delete-runs")
    page.wait_for_function("() => document.querySelectorAll('#runs-table tbody tr[data-run]').length === 2")
    assert page.request.get(f"{login}/api/v1/runs/{ids[('a', 0)]}").status == 404

    page.goto(f"{login}/#/experiments/sw")
    arms = page.locator("#arms table.arms")
    arms.wait_for()
    assert "trainer.lr=0.01" in arms.inner_text() and "(n=" in arms.inner_text()
    assert page.js_errors == []
