"""ONNX backend node tests through caramba's importer, on every available backend.

ONNX Runtime keeps a telemetry database under $HOME/.cache unless told not to. At the end of a
run, a per-backend count of passed / failed / xfailed / skipped node tests is printed (the table
in docs/conformance.md comes from it).
"""

from __future__ import annotations

import collections
import os

os.environ["ORT_DISABLE_TELEMETRY"] = "1"

_COUNTS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


def pytest_runtest_logreport(report):
    if "test_onnx_node.py::test_node[" not in report.nodeid:
        return
    backend = report.nodeid.split("[", 1)[1].split("-", 1)[0]
    if report.when == "call":
        outcome = "xfailed" if hasattr(report, "wasxfail") and report.skipped else report.outcome
        if outcome == "passed" and hasattr(report, "wasxfail"):
            outcome = "xpassed"
        _COUNTS[backend][outcome] += 1
    elif report.when == "setup" and report.skipped:
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
        kind = "skipped (op not in caramba)" if "op not in caramba" in reason else (
            "skipped (dtype not in caramba)" if "dtype not in caramba" in reason else "skipped (other)")
        _COUNTS[backend][kind] += 1


def pytest_terminal_summary(terminalreporter):
    if not _COUNTS:
        return
    cols = ["passed", "failed", "xfailed", "xpassed", "skipped (op not in caramba)", "skipped (dtype not in caramba)", "skipped (other)"]
    tr = terminalreporter
    tr.section("ONNX node tests through caramba")
    tr.write_line("backend | " + " | ".join(cols) + " | pass rate of implemented-op tests")
    for backend, c in sorted(_COUNTS.items()):
        implemented = c["passed"] + c["failed"] + c["xfailed"] + c["xpassed"] + c["skipped (dtype not in caramba)"]
        rate = f"{100.0 * (c['passed'] + c['xpassed']) / implemented:.1f}%" if implemented else "-"
        tr.write_line(f"{backend} | " + " | ".join(str(c[k]) for k in cols) + f" | {rate}")
