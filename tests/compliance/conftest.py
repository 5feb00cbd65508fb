"""Fixtures: one parameter per backend spec; one runner per backend spec and test module.

Every backend registered in ``caramba.compute.BACKENDS`` is a parameter. An unavailable
backend is skipped with the reason its build info gives (never silently passed). A backend
package may list extra configured variants to run the suite on, e.g.
``COMPLIANCE_SPECS = ("webgpu", "webgpu:precision=float32")`` in its ``__init__``; the
default is just its name.
"""

from __future__ import annotations

import importlib
import os

import pytest

from caramba.compute import BACKENDS, build_info, new


def _selected() -> set[str] | None:
    """``CARAMBA_COMPLIANCE_BACKENDS=cpu,xla`` limits the suite to those backends (and their
    variants); unset runs every registered backend."""
    raw = os.environ.get("CARAMBA_COMPLIANCE_BACKENDS", "").strip()
    if not raw:
        return None
    names = {n.strip() for n in raw.split(",") if n.strip()}
    unknown = names - set(BACKENDS)
    if unknown:
        raise ValueError(f"CARAMBA_COMPLIANCE_BACKENDS names unknown backends {sorted(unknown)}; registered: {sorted(BACKENDS)}")
    return names


def backend_params() -> list:
    params = []
    selected = _selected()
    for name, module in BACKENDS.items():
        if selected is not None and name not in selected:
            continue
        try:
            info = build_info(name)
        except Exception as exc:  # a broken build_info is a bug: make every test of it fail
            params.append(pytest.param(f"{name}!{type(exc).__name__}: {exc}", id=name))
            continue
        if not info.available:
            reason = f"backend {name} unavailable: {info.reason}"
            params.append(pytest.param(name, id=name, marks=pytest.mark.skip(reason=reason)))
            continue
        specs = getattr(importlib.import_module(module), "COMPLIANCE_SPECS", (name,))
        params.extend(pytest.param(spec, id=spec) for spec in specs)
    return params


BACKEND_PARAMS = backend_params()


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def backend(request) -> str:
    """A backend config string (``"cpu"``, ``"webgpu:precision=float32"``, ...)."""
    spec = request.param
    if "!" in spec:
        pytest.fail(f"build_info() of backend {spec.split('!')[0]} raised {spec.split('!', 1)[1]}")
    return spec


@pytest.fixture(scope="module")
def runner(backend):
    """A runner shared by a test module (compiled graphs are cached on it); closed at the end."""
    r = new(backend)
    yield r
    r.close()
    assert r.closed


@pytest.fixture
def fresh_runner(backend):
    """A runner of its own, for tests that close it or fill its state."""
    r = new(backend)
    yield r
    r.close()
