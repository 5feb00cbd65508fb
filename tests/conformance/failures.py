"""List the ONNX node tests of implemented ops that fail on a backend, with a reason each.

    python -m tests.conformance.failures cpu            # every node test
    python -m tests.conformance.failures xla attention  # names matching a regex

This runs the same steps as ``test_onnx_node.py`` in one process (no pytest) and prints the
counts, then ``name | reason`` per failure: the candidates for ``xfails.py`` after a change.
"""

from __future__ import annotations

import collections
import os
import re
import sys
import time

import numpy as np

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


def reason_of(exc: BaseException) -> str:
    from caramba.errors import UnsupportedOperation
    from caramba.onnx.importer import ImportUnsupported

    text = str(exc)
    if isinstance(exc, ImportUnsupported):
        m = re.match(r"ONNX (\w+): (.*?)(?: \[node|$)", text.splitlines()[0])
        why = re.sub(r"input '[^']*'", "an input", m.group(2)) if m else text.splitlines()[0]
        return f"importer: {m.group(1) if m else '?'}: {why}"
    if isinstance(exc, UnsupportedOperation):
        dtypes = sorted(set(re.findall(r"does not take ([\w, ]+?) \(takes", text)))
        ops = sorted(set(re.findall(r"has no kernel for ([\w.]+)", text)))
        parts = []
        if dtypes:
            parts.append("does not take " + ", ".join(sorted({d.strip() for ds in dtypes for d in ds.split(",")})))
        if ops:
            parts.append("has no kernel for " + ", ".join(ops))
        return "refused at lowering: " + ("; ".join(parts) if parts else text.splitlines()[0][:120])
    if isinstance(exc, AssertionError):
        return "wrong result: " + " ".join(text.split())[:160]
    return f"{type(exc).__name__}: " + " ".join(text.split())[:160]


def run(backend: str, pattern: str = ".*") -> tuple[collections.Counter, list[tuple[str, str]]]:
    from onnx.backend.test.loader import load_node_model_tests

    from caramba.compute import new
    from caramba.onnx.backend import CarambaRep
    from caramba.onnx.importer import coverage

    from .test_onnx_node import check_node_case

    with np.errstate(all="ignore"):
        tests = load_node_model_tests()
    counts: collections.Counter = collections.Counter()
    failures = []
    for case in tests:
        if not re.search(pattern, case.name):
            continue
        missing_ops, missing_types = coverage(case.model)
        if missing_ops or missing_types:
            counts["skipped (op)" if missing_ops else "skipped (dtype)"] += 1
            continue
        runner = new(backend)
        try:
            with np.errstate(all="ignore"):
                check_node_case(runner, CarambaRep(case.model, backend), case)
            counts["passed"] += 1
        except Exception as exc:
            counts["failed"] += 1
            failures.append((case.name, reason_of(exc)))
        finally:
            runner.close()
    return counts, failures


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    pattern = sys.argv[2] if len(sys.argv) > 2 else ".*"
    t = time.perf_counter()
    counts, failures = run(backend, pattern)
    print(dict(counts), f"{time.perf_counter() - t:.0f} s")
    for name, why in failures:
        print(f"{name} | {why}")


if __name__ == "__main__":
    main()
