"""The ONNX backend node tests (``onnx.backend.test``, node tests only: generated in memory, no
network) imported with ``caramba.onnx.import_model`` and run on every available caramba backend.

A test whose ONNX ops caramba has no importer for is skipped ("op not in caramba"), as is one
using an element type caramba's IR lacks ("dtype not in caramba"). Every other test must pass,
or be listed in ``xfails.py`` with the reason; xfails are strict, so a test that starts passing
fails until it is taken off the list. ``CARAMBA_CONFORMANCE_BACKENDS=cpu,onnx`` limits the run. Outputs are checked by ONNX's own comparison (exact
shape and dtype, the test's rtol/atol).
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx.backend.test.loader import load_node_model_tests  # noqa: E402
from onnx.backend.test.runner import Runner, _normalize_tensor  # noqa: E402

from caramba.compute import BACKENDS, build_info, new  # noqa: E402
from caramba.onnx.backend import CarambaRep  # noqa: E402
from caramba.onnx.importer import coverage  # noqa: E402

from .xfails import XFAIL  # noqa: E402

pytestmark = pytest.mark.slow


@functools.cache
def cases() -> dict:
    with np.errstate(all="ignore"):
        return {t.name: t for t in load_node_model_tests()}


def _backends() -> list:
    wanted = [b.strip() for b in os.environ.get("CARAMBA_CONFORMANCE_BACKENDS", "").split(",") if b.strip()]
    unknown = set(wanted) - set(BACKENDS)
    if unknown:
        raise ValueError(f"CARAMBA_CONFORMANCE_BACKENDS names unknown backends {sorted(unknown)}; registered: {sorted(BACKENDS)}")
    return [name for name in (wanted or BACKENDS) if build_info(name).available]


def _xfail_reason(backend: str, name: str) -> str | None:
    return XFAIL.get(backend, {}).get(name) or XFAIL["*"].get(name)


def _params() -> list:
    params = []
    for name, case in cases().items():
        missing_ops, missing_types = coverage(case.model)
        for backend in _backends():
            marks = []
            if missing_ops:
                marks.append(pytest.mark.skip(reason=f"op not in caramba: {', '.join(sorted(missing_ops))}"))
            elif missing_types:
                marks.append(pytest.mark.skip(reason=f"dtype not in caramba: {', '.join(sorted(missing_types))}"))
            else:
                reason = _xfail_reason(backend, name)
                if reason:
                    marks.append(pytest.mark.xfail(reason=reason, strict=True))
            params.append(pytest.param(backend, name, id=f"{backend}-{name}", marks=marks))
    return params


_REPS: dict[str, CarambaRep] = {}


@pytest.mark.parametrize("backend, name", _params())
def test_node(backend: str, name: str) -> None:
    case = cases()[name]
    rep = _REPS.setdefault(name, CarambaRep(case.model, backend))
    runner = new(backend)
    try:
        check_node_case(runner, rep, case)
    finally:
        runner.close()


def check_node_case(runner, rep: CarambaRep, case) -> None:
    """Import ``case``'s model (through ``rep``), compile it on ``runner``, run every data set
    and compare with ONNX's own check (shape, dtype, the case's rtol/atol)."""
    for inputs, refs in case.data_sets:
        feeds = dict(zip(rep.input_names, [_normalize_tensor(v) for v in inputs], strict=True))
        graph, _ = rep.graph(feeds)
        exe = runner.compile(graph)
        outs = exe.run({k: runner.upload(feeds[k]) for k in exe.input_types})
        got = [outs[n].download() for n in rep.output_names]
        Runner.assert_similar_outputs([_normalize_tensor(r) for r in refs], got, rtol=case.rtol, atol=case.atol,
                                      model_dir=case.name)
